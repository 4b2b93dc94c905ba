"""Target-configuration experiments (decision applicability): run one candidate over a list of SimX
configurations and say whether the benchmark responds as the research question expects."""

from __future__ import annotations

import json
import math
from typing import Callable

import pandas as pd

from vxsynth.errors import VxError
from vxsynth.kernels.candidate import Candidate, make
from vxsynth.kernels.problem import from_dict
from vxsynth.kernels.strategy import Strategy
from vxsynth.simx.build import config_id
from vxsynth.targets.vortex_host import VortexConfig, lmem_per_block, resident_groups

# knob -> (counter expected to move, direction with the knob, why it should)
EXPECT = {
    "dcache_size": ("dcache_hit_rate", +1, "a larger data cache should raise the hit rate and cut cycles"),
    "l2": ("memory_requests", -1, "enabling L2 should serve misses before memory (fewer memory requests and cycles)"),
    "l2_size": ("l2_hit_rate", +1, "a larger L2 should raise its hit rate"),
    "warps": ("ipc", +1, "more warps hide more latency"),
    "threads": ("ipc", +1, "wider warps issue more work per instruction"),
    "cores": ("ipc", +1, "more cores run more blocks at once"),
    "lmem_log_size": ("ipc", +1, "more local memory lets more groups reside per core"),
}


def sweep_candidate(record: dict, strategy: Strategy, cores: list[VortexConfig]) -> tuple[Candidate, int]:
    """The one candidate a sweep runs on every configuration (`cores`, local memory as measured): generated for the
    most restrictive one, and the blocks each launch holds, enough to fill the largest one's resident slots (else a
    parallelism knob has nothing to act on). VxError when a configuration cannot hold the strategy's block."""
    small = [v for v in cores if strategy.threads > v.warps * v.threads]
    if small:
        raise VxError(f"the slice's strategy has blocks of {strategy.threads} threads; a configuration with {small[0].warps} "
                      f"warps x {small[0].threads} threads holds fewer per core: sweep larger warps/threads")
    lmem = min(lmem_per_block(strategy.threads, v) for v in cores)
    c = make(from_dict(record["problem"]), strategy, record["precision"], lmem, drop_staging=True)
    return c, max(v.cores * resident_groups(strategy.threads, v) for v in cores)


def run(configs: list[dict], run_one: Callable[[dict], dict], slice_id: str, candidate: str) -> pd.DataFrame:
    """One row per configuration: counters, cycles, ok/error (run_one returns a VortexRun-like dict)."""
    rows = []
    for cfg in configs:
        r = run_one(cfg)
        sig = (r.get("counters") or {}).get("signature", {})
        rows.append({"slice_id": slice_id, "candidate": candidate, "config_id": config_id(cfg),
                     "config": json.dumps(cfg, sort_keys=True), "perf_class": "merged", "api": r.get("api", ""),
                     "ok": bool(r.get("ok")), "error": r.get("error", ""), "instrs": int(sig.get("instrs") or 0),
                     "cycles": int(sig.get("cycles") or 0), "ipc": float(sig.get("ipc") or math.nan),
                     "counters": json.dumps(sig, sort_keys=True, default=str),
                     "covered_fraction": float(r.get("covered_fraction", math.nan)), "blocks": json.dumps(r.get("blocks", []))})
    return pd.DataFrame(rows)


def respond(df: pd.DataFrame, knob: str, min_change: float = 0.02) -> dict:
    """Does the counter the knob should move, and the cycle count, respond across the sweep?"""
    ok = df[df["ok"]].copy()
    if len(ok) < 2:
        return {"knob": knob, "verdict": "not enough successful runs", "responds": False}
    ok["knob"] = [json.loads(c).get(knob) for c in ok["config"]]
    ok = ok.sort_values("knob", key=lambda s: s.astype(float))
    counter, sign, why = EXPECT[knob]
    vals = [json.loads(c).get(counter) for c in ok["counters"]]
    vals = [v for v in vals if v is not None]
    cyc = list(ok["cycles"].astype(float))
    cyc_change = (cyc[-1] - cyc[0]) / cyc[0] if cyc[0] else 0.0
    moved = len(vals) >= 2 and (vals[-1] - vals[0]) * sign > 0
    monotone = len(vals) >= 2 and all((b - a) * sign >= -1e-9 for a, b in zip(vals, vals[1:]))
    responds = moved and monotone and -cyc_change >= min_change
    return {"knob": knob, "values": list(ok["knob"]), counter: vals, "cycles": cyc, "cycle_change": cyc_change,
            "responds": bool(responds), "expectation": why,
            "verdict": (f"{knob} {ok['knob'].iloc[0]} -> {ok['knob'].iloc[-1]}: {counter} "
                        f"{_f(vals[0] if vals else None)} -> {_f(vals[-1] if vals else None)}, cycles {cyc_change:+.1%}: "
                        + ("responds as expected" if responds else "does not respond as expected"))}


def _f(v) -> str:
    return "n/a" if v is None else f"{v:.4g}"
