"""Parse SimX `PERF:` output (vortex.md section 6) into counters and a Vortex-side signature.

Three documented formats: v3 (`sw/runtime/common/perf.cpp`: `key=value` lines per class), late v2
(`runtime/stub/perf.cpp`: the same helpers with v2 line variants) and v2.1/v2.2 (`runtime/stub/utils.cpp`: one
quantity per line, `IPC=%f`). The final `PERF: instrs=..., cycles=..., IPC=...` line is required; a negative or
garbled value means the run failed (issue #249 shows `instrs=-4995072469926809587`).
"""

from __future__ import annotations

import re

from vxsynth.errors import VxError

FINAL = re.compile(r"^PERF: instrs=(-?\d+), cycles=(-?\d+), IPC=(-?[\d.]+)\s*$")
CORE_FINAL = re.compile(r"^PERF: core(\d+): instrs=(-?\d+), cycles=(-?\d+), IPC=(-?[\d.]+)\s*$")
KV = re.compile(r"(\w+)=(-?[\d.]+)%?(?:\s*\((?:(\w+)=)?(-?[\d.]+)%?\))?")
# v2.2 one-quantity lines: "PERF: [core%d: ]<name words>=<value> [(<label>=<pct>%)]" and "... latency=%d cycles"
V22 = re.compile(r"^PERF: (?:core(\d+): )?([a-z0-9 ]+?)=(-?\d+)(?: cycles)?(?: \((?:([a-z ]+)=)?(-?\d+)%\))?(?: \(.*\))?\s*$")


class PerfError(VxError):
    """SimX printed no usable counters: the run failed."""


def _num(s: str) -> float | int:
    v = float(s) if "." in s else int(s)
    if v < 0:
        raise PerfError(f"negative counter value {s}: the SimX run failed")
    return v


def detect_format(text: str) -> str:
    lines = [l for l in text.splitlines() if l.startswith("PERF:")]
    if any(re.match(r"PERF: (core\d+: )?(scheduler|stalls|inst_mix|branches|memory|dcache|l2cache|lmem|coalescer|tcu): ", l) for l in lines):
        if any("warp_efficiency=" in l or "roofline:" in l or "ifetch_latency=" in l for l in lines):
            return "v2-late"
        return "v3"
    return "v2.2"


def parse(text: str) -> dict:
    """Counters from one SimX run's output: {'format', 'instrs', 'cycles', 'ipc', 'per_core', <unit>: {...}}."""
    lines = [l.strip() for l in text.splitlines() if l.strip().startswith("PERF:")]
    finals = [FINAL.match(l) for l in lines]
    finals = [m for m in finals if m]
    if not finals:
        raise PerfError("no `PERF: instrs=..., cycles=..., IPC=...` line: the SimX run failed or PERF_ENABLE was off")
    m = finals[-1]
    out: dict = {"format": detect_format(text), "instrs": _num(m[1]), "cycles": _num(m[2]), "ipc": _num(m[3]),
                 "per_core": {}, "disabled": []}
    if out["cycles"] == 0:
        raise PerfError("zero cycles: the kernel did not run")
    if "TCU not supported" in text:
        out["disabled"].append("tcu")
    for l in lines:
        if FINAL.match(l):
            continue
        if cm := CORE_FINAL.match(l):
            out["per_core"][int(cm[1])] = {"instrs": _num(cm[2]), "cycles": _num(cm[3]), "ipc": _num(cm[4])}
            continue
        body = re.sub(r"^PERF: (core\d+: )?", "", l)
        if body.endswith("disabled") or "not supported" in body:
            out["disabled"].append(body.split(":")[0].strip())
            continue
        if out["format"] == "v2.2":
            _v22_line(l, out)
        else:
            _kv_line(body, out)
    return out


def _kv_line(body: str, out: dict) -> None:
    """v3 / late-v2: `<unit>: k=v, k=v (label=N%)` (per-core lines aggregate by summing counts)."""
    if ":" not in body:
        raise PerfError(f"garbled PERF line: {body!r}")
    unit, rest = body.split(":", 1)
    unit = unit.strip().replace(" ", "_")
    d = out.setdefault(unit, {})
    found = False
    for k, v, label, pct in KV.findall(rest):
        found = True
        val = _num(v)
        d[k] = d.get(k, 0) + val if isinstance(val, int) and k in d else val
        if pct:
            d[f"{k}_{label or 'pct'}"] = _num(pct)
    if not found:
        raise PerfError(f"garbled PERF line: {body!r}")


def _v22_line(line: str, out: dict) -> None:
    m = V22.match(line)
    if not m:
        raise PerfError(f"garbled PERF line: {line!r}")
    words = m[2].split()
    unit = words[0] if words[0] in ("icache", "dcache", "l2cache", "l3cache", "lmem", "coalescer", "memory", "scheduler") else "core"
    key = "_".join(words[1:] if unit != "core" else words)
    d = out.setdefault(unit, {})
    val = _num(m[3])
    d[key] = d.get(key, 0) + val if key in d else val
    if m[5] is not None:
        d[f"{key}_{(m[4] or 'pct').replace(' ', '_')}"] = _num(m[5])


WINDOW = re.compile(r"^VXSYNTH-WINDOW (\d+) (\d+)\s*$", re.M)
_RATE = ("ratio", "utilization", "pct", "latency", "lat", "ipc", "occupancy", "efficiency")


def per_window(text: str) -> list[tuple[int, int, dict]]:
    """(first block, blocks, counters) of each launch window of one driver run: SimX resets its counters at every
    launch, so the driver dumps them after each window (between VXSYNTH-WINDOW markers; VXSYNTH-END ends the last)."""
    marks = list(WINDOW.finditer(text))
    if not marks:
        raise PerfError("no VXSYNTH-WINDOW marker: the driver dumped no per-window counters")
    out = []
    for i, m in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else text.find("VXSYNTH-END", m.end())
        out.append((int(m[1]), int(m[2]), parse(text[m.end(): end if end >= 0 else len(text)])))
    return out


def aggregate(parts: list[dict]) -> dict:
    """Counters of several windows as one run: counts summed, rates and latencies weighted by each window's cycles,
    IPC recomputed."""
    if len(parts) == 1:
        return parts[0]
    cyc = [p["cycles"] for p in parts]
    total = {"format": parts[0]["format"], "instrs": sum(p["instrs"] for p in parts), "cycles": sum(cyc),
             "per_core": {}, "disabled": sorted({d for p in parts for d in p["disabled"]}), "windows": len(parts)}
    total["ipc"] = total["instrs"] / total["cycles"]
    for core in {c for p in parts for c in p["per_core"]}:
        i = sum(p["per_core"].get(core, {}).get("instrs", 0) for p in parts)
        c = sum(p["per_core"].get(core, {}).get("cycles", 0) for p in parts)
        total["per_core"][core] = {"instrs": i, "cycles": c, "ipc": i / c if c else 0.0}
    for unit in {u for p in parts for u, v in p.items() if isinstance(v, dict) and u != "per_core"}:
        keys = {k for p in parts for k in p.get(unit, {})}
        total[unit] = {}
        for k in keys:
            vals = [(p.get(unit, {}).get(k), w) for p, w in zip(parts, cyc)]
            vals = [(v, w) for v, w in vals if isinstance(v, (int, float))]
            if any(t in k for t in _RATE):
                total[unit][k] = sum(v * w for v, w in vals) / max(1, sum(w for _, w in vals))
            else:
                total[unit][k] = sum(v for v, _ in vals)
    return total


def _hit(d: dict, reads: str, misses: str) -> float | None:
    r, x = d.get(reads), d.get(misses)
    return None if not r else 100.0 * (1 - x / r)


def vortex_signature(c: dict) -> dict:
    """The Vortex-side signature: cache hit rates, coalescer misses, memory requests and latency, IPC, stalls,
    instruction mix; tensor-core counters where the TCU is enabled, "not applicable" otherwise."""
    dc, l2, mem = c.get("dcache", {}), c.get("l2cache", {}), c.get("memory", {})
    sig = {
        "ipc": c["ipc"], "cycles": c["cycles"], "instrs": c["instrs"],
        "dcache_hit_rate": _hit(dc, "reqs", "miss_r") if "reqs" in dc else _hit(dc, "reads", "read_misses"),
        "l2_hit_rate": (None if "l2cache" in c.get("disabled", []) else
                        (_hit(l2, "reqs", "miss_r") if "reqs" in l2 else _hit(l2, "reads", "read_misses"))),
        "coalescer_misses": c.get("coalescer", {}).get("misses"),
        "memory_requests": mem.get("reqs", mem.get("requests")),
        "memory_latency": mem.get("lat", mem.get("latency")),
        "stalls": c.get("stalls") or {k: v for k, v in c.get("core", {}).items() if "stalls" in k},
        "instruction_mix": c.get("inst_mix", {}),
        "tcu": c["tcu"] if "tcu" in c else "not applicable",
    }
    return sig
