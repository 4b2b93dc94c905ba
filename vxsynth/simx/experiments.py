"""Target-configuration experiments (decision applicability): run one candidate over a list of SimX
configurations and say whether the benchmark responds as the research question expects."""

from __future__ import annotations

import json
import math
from typing import Callable

import pandas as pd

from vxsynth.errors import VxError
from vxsynth.kernels.candidate import Candidate, make, vortex_lowering
from vxsynth.kernels.problem import Problem
from vxsynth.kernels.strategy import Strategy
from vxsynth.simx import build as B
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
    "lmem_log_size": ("cycles_per_block", -1, "more local memory lets the candidate keep more of the pair's staging "
                      "(operands read from local instead of global memory: fewer cycles per block)"),
    "lmem_fix": ("cycles_per_block", -1, "SimX with the local-memory fix keeps all of LOCAL_MEM_SIZE distinct: the "
                 "candidate keeps more of the pair's staging (fewer cycles per block)"),
}
# Knobs that change what local memory a configuration offers: each configuration runs the candidate generated for it.
PER_CONFIG = {"lmem_log_size", "lmem_fix"}
# Counters that count events (not rates): compared per block, so rows over different windows stay comparable.
COUNTS = {"memory_requests", "instrs", "cycles"}
STAGING = ("stage_a", "stage_b", "double_buffer")


def sweep_candidate(problem: Problem, precision: str, strategy: Strategy,
                    cores: list[VortexConfig]) -> tuple[Candidate, int]:
    """The one candidate of a slice's problem a sweep runs on every configuration (`cores`, local memory as measured): generated for the
    most restrictive one, and the blocks each launch holds, enough to fill the largest one's resident slots (else a
    parallelism knob has nothing to act on). VxError when a configuration cannot hold the strategy's block."""
    small = [v for v in cores if strategy.threads > v.warps * v.threads]
    if small:
        raise VxError(f"the slice's strategy has blocks of {strategy.threads} threads; a configuration with {small[0].warps} "
                      f"warps x {small[0].threads} threads holds fewer per core: sweep larger warps/threads")
    lmem = min(lmem_per_block(strategy.threads, v) for v in cores)
    c = make(problem, strategy, precision, lmem, drop_staging=True)
    return c, max(v.cores * resident_groups(strategy.threads, v) for v in cores)


def staging(c: Candidate) -> dict:
    """Which of the pair's staging (its CUDA half's) the Vortex half keeps or drops, and the local memory it uses:
    `same_as_pair` False means runs of `c` measure a variant of the pair's strategy, not the pair."""
    s = c.strategy
    vs, notes = vortex_lowering(c.problem, s, c.meta.get("lmem_per_block"), c.meta.get("drop_staging", False))
    knobs = [k for k in STAGING if getattr(s, k)]
    out = {"vortex_local_mem_bytes": c.meta["vortex_local_mem_bytes"], "lmem_per_block": c.meta.get("lmem_per_block"),
           "kept": [k for k in knobs if getattr(vs, k)], "dropped": [k for k in knobs if not getattr(vs, k)]}
    if s.stages > 1:
        out["ring"] = {"cuda": s.stages, "vortex": vs.stages}
    out["same_as_pair"] = not out["dropped"]
    if "staging" in notes:
        out["why"] = notes["staging"]
    return out


def common_windows(blocks: int, per_block: list[float], budget: float, together: int = 1) -> list[tuple[int, int]]:
    """One set of launch windows for every configuration of a sweep: sized by the costliest configuration's cycles
    per block (so none runs over the budget), so every row covers the same blocks."""
    return B.cycle_windows(blocks, max(per_block), budget, None, together)


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


def _nblocks(blocks: str) -> int:
    return sum(k for _, k in json.loads(blocks or "[]"))


def respond(df: pd.DataFrame, knob: str, min_change: float = 0.02) -> dict:
    """Does the counter the knob should move, and the cycles per block, respond across the sweep? Figures are per
    block (cycles, and event counts; rates as they are), and every row's windows are given: rows over different
    windows are named as such (their blocks differ: edge tiles, another part of the grid)."""
    ok = df[df["ok"]].copy()
    if len(ok) < 2:
        return {"knob": knob, "verdict": "not enough successful runs", "responds": False}
    ok["knob"] = [json.loads(c).get(knob) for c in ok["config"]]
    ok = ok.sort_values("knob", key=lambda s: s.astype(float))
    counter, sign, why = EXPECT[knob]
    n = [_nblocks(b) or 1 for b in ok["blocks"]]
    cyc = [c / k for c, k in zip(ok["cycles"].astype(float), n)]

    def value(sig: dict, k: int):
        v = sig.get("cycles" if counter == "cycles_per_block" else counter)
        return v / k if v is not None and (counter in COUNTS or counter == "cycles_per_block") else v

    vals = [value(json.loads(c), k) for c, k in zip(ok["counters"], n)]
    vals = [v for v in vals if v is not None]
    windows = [json.loads(b or "[]") for b in ok["blocks"]]
    same = all(w == windows[0] for w in windows)
    cyc_change = (cyc[-1] - cyc[0]) / cyc[0] if cyc[0] else 0.0
    moved = len(vals) >= 2 and (vals[-1] - vals[0]) * sign > 0
    monotone = len(vals) >= 2 and all((b - a) * sign >= -1e-9 for a, b in zip(vals, vals[1:]))
    responds = moved and monotone and -cyc_change >= min_change
    name = counter + ("/block" if counter in COUNTS else "")
    return {"knob": knob, "values": list(ok["knob"]), counter: vals, "cycles_per_block": cyc, "cycle_change": cyc_change,
            "same_windows": same, "windows": windows, "responds": bool(responds), "expectation": why,
            "verdict": (f"{knob} {ok['knob'].iloc[0]} -> {ok['knob'].iloc[-1]}: "
                        + ("" if counter == "cycles_per_block" else
                           f"{name} {_f(vals[0] if vals else None)} -> {_f(vals[-1] if vals else None)}, ")
                        + f"cycles per block {cyc_change:+.1%}"
                        + ("" if same else " (rows ran different windows: per-block figures over different blocks)")
                        + ": " + ("responds as expected" if responds else "does not respond as expected"))}


def _f(v) -> str:
    return "n/a" if v is None else f"{v:.4g}"
