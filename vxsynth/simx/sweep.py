"""SimX work per configuration and per slice, as the SimX flows run it (`flows/simx.py` chains these through the Prefect
tasks of `tasks/simx.py`): build SimX for a configuration and measure its local memory, run a candidate on one
configuration, check 2 of a slice's final pair, the candidate each configuration of a sweep runs, and the sweep's
summary (`<sweep>.json`) and per-slice index (`summary.json`, what the report shows)."""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import dataclass, replace
from pathlib import Path

import pandas as pd

from vxsynth.errors import VxError
from vxsynth.kernels.problem import Problem
from vxsynth.records import CheckRecord, SliceRecord
from vxsynth.simx import experiments
from vxsynth.simx.executor import SimxExecutor, cycles_per_block, instrs_per_block
from vxsynth.simx.final_check import check_final
from vxsynth.store.io import read_json, write_json


def build_config(inst, cfg: dict, cache: Path, budget: float, timeout_s: float) -> dict:
    """Build SimX for one configuration (cached) and measure its local memory; the core candidates fit."""
    ex = SimxExecutor(inst, cfg, cache, budget, timeout_s)
    return {"local_memory": ex.local_memory(), "vortex_config": ex.vortex_config()}


def run_config(inst, cfg: dict, cache: Path, candidate, inputs: dict, work: Path, budget: float, timeout_s: float,
               together: int, windows: list | None = None) -> dict:
    """Run `candidate` on one configuration with counters, over `windows` (else its own); what a sweep row needs."""
    r = SimxExecutor(inst, cfg, cache, budget, timeout_s).run(candidate, inputs, Path(work), counters=True,
                                                             together=together, windows=windows)
    return {"ok": r.ok, "error": r.error, "counters": r.counters, "blocks": r.blocks, "wall_s": r.wall_s,
            "covered_fraction": r.covered_fraction if r.ok else float("nan"), "api": inst.api}


def check_slice(rec: SliceRecord, s: dict, precision: dict, inst, suites: list[Path], cache: Path, out: Path,
                work: Path) -> dict:
    """Check 2 of one slice's final pair on the base configuration's SimX (`s`: conf/simx); a failure is that
    slice's only (verdict "error" with the reason)."""
    timeout = min(float(s["timeout_s"]), 2 * float(s["check_max_s"]))   # a check whose prediction was low stops there
    ex = SimxExecutor(inst, s["config"], cache, float(s["cycle_budget"]), timeout)
    try:
        return check_final(rec, suites, ex, precision, tuple(s["check_cases"]), out, work, float(s["check_max_s"]),
                           float(s["s_per_mcycle"]), s["shorten"], float(s["probe_s"]),
                           float(s.get("check_coverage", 0.0)))
    except (VxError, OSError) as e:
        return {"slice_id": rec.slice_id, "verdict": "error", "reason": f"{type(e).__name__}: {e}"}


def swept_knob(sweep: list[str]) -> str:
    """The knob a sweep varies (its last `knob=a,b,...` or `range(...)` override)."""
    return [o.split("=")[0] for o in sweep if "," in o or "range(" in o][-1]


def sweep_candidates(problem: Problem, precision: str, strategy, knob: str, base, cores: list) -> tuple[list, int]:
    """The candidate of a slice's problem each configuration runs (`cores`: their Vortex configurations, local memory as measured; `base`:
    the one check 2 runs on) and the blocks each launch holds. One candidate for every configuration, fitted to the
    most restrictive (the base's included), except in a local-memory sweep (`experiments.PER_CONFIG`): there each configuration runs the
    candidate generated for what it offers (the staging its local memory holds), else that sweep could not respond."""
    if knob not in experiments.PER_CONFIG:
        c, together = experiments.sweep_candidate(problem, precision, strategy, [base, *cores])
        return [c] * len(cores), together
    together = experiments.sweep_candidate(problem, precision, strategy, cores)[1]
    return [experiments.sweep_candidate(problem, precision, strategy, [v])[0] for v in cores], together


@dataclass
class SweepPlan:
    """What a sweep runs: each configuration's candidate and staging, the configuration each distinct candidate is
    checked on, the windows every configuration shares (sized by the costliest), and the verdict when there is nothing
    to run (a local-memory sweep whose configurations all run one candidate)."""
    configs: list[dict]
    knob: str
    candidates: list
    together: int
    staged: list[dict]
    to_check: dict            # vortex sha256 -> (configuration, candidate)
    per_block: list[float]
    windows: list
    budget: float             # simulated cycles per run the windows were sized for
    skipped: dict | None


def plan(rec: SliceRecord, strategy, knob: str, base: dict, configs: list[dict], built: list[dict],
         executor) -> SweepPlan:
    """The sweep of `configs` over the base configuration `base` (`built`: build_config of base, then of each);
    `executor(conf)` makes a SimxExecutor for a configuration."""
    cands, together = sweep_candidates(rec.problem, rec.precision, strategy, knob, built[0]["vortex_config"],
                                       [b["vortex_config"] for b in built[1:]])
    to_check: dict = {}
    for conf, c in zip(configs if knob in experiments.PER_CONFIG else [base], cands):
        to_check.setdefault(c.vortex_sha256, (conf, c))      # each distinct candidate on the first configuration it runs
    staged = [experiments.staging(c) for c in cands]
    per_block = [executor(conf).expected(c) for conf, c in zip(configs, cands)]
    budget = executor(base).budget
    wins = experiments.common_windows(cands[0].meta["blocks"], per_block, budget, together)
    one = knob in experiments.PER_CONFIG and len({c.vortex_sha256 for c in cands}) == 1
    return SweepPlan(configs, knob, cands, together, staged, to_check, per_block, wins, budget,
                     not_applicable(knob, staged) if one else None)


def conclude(p: SweepPlan, results: list[dict], slice_id: str) -> tuple[pd.DataFrame, dict]:
    """The sweep's table (one row per configuration, counters summed over the shared windows) and its verdict."""
    it = iter(results)
    df = experiments.run(p.configs, lambda _: next(it), slice_id, p.candidates[0].name)
    return df, experiments.respond(df, p.knob)


def merged_check(checked: dict[str, CheckRecord]) -> CheckRecord:
    """Check 2 of a sweep: the one candidate's, else the first failing of several (the reason lists them all)."""
    chk = next(iter(checked.values()))
    if len(checked) > 1:
        bad = [v for v in checked.values() if not v.passed]
        chk = replace(bad[0] if bad else chk, reason="; ".join(f"{v.check_id}: {v.verdict}" for v in checked.values()))
    return chk


def not_applicable(knob: str, staged: list[dict]) -> dict:
    """The verdict of a local-memory sweep whose configurations all run the same candidate."""
    return {"knob": knob, "responds": False, "applicable": False,
            "verdict": (f"not applicable: every local-memory size runs the same candidate (its "
                        f"{staged[0]['vortex_local_mem_bytes']} B of tiles per block fit the smallest): local "
                        "memory has nothing to act on for this strategy")}


def summary(rec: SliceRecord, sweep: str, inst, verdict: dict, origin: str, chk: CheckRecord, p: SweepPlan, built: list[dict],
            results: list[dict]) -> dict:
    """`<sweep>.json`: the verdict, check 2, what each configuration ran (its staging, windows, cycles) and the cost."""
    configs, cands, staged, per_block, wins, together = p.configs, p.candidates, p.staged, p.per_block, p.windows, p.together
    ok = [r for r in results if r["ok"]]
    varied = sorted({k for conf in configs for k in conf if len({json.dumps(x.get(k)) for x in configs}) > 1})
    rows = []
    for conf, c, st, r in itertools.zip_longest(configs, cands, staged, results):
        n = sum(k for _, k in r["blocks"]) if r and r["ok"] else 0
        cyc = (r["counters"]["signature"]["cycles"] if r and r["ok"] else None)
        rows.append({"config": {k: conf.get(k) for k in varied}, "ok": bool(r and r["ok"]),
                     "error": (r or {}).get("error", "not run") if not (r and r["ok"]) else "",
                     "candidate": c.name, "vortex_local_mem_bytes": st["vortex_local_mem_bytes"], "staging": st,
                     "windows": r["blocks"] if r and r["ok"] else [], "blocks": n, "cycles": cyc,
                     "cycles_per_block": cyc / n if cyc and n else None})
    return {"slice_id": rec.slice_id, "sweep": sweep, "api": inst.api, "installation": str(inst.root), **verdict,
            "strategy_from": origin,
            "check2": {"verdict": chk.verdict, "check_id": chk.check_id, "reason": chk.reason},
            "vortex_differs": cands[0].meta["vortex_differs"], "local_memory": [b["local_memory"] for b in built[1:]],
            "vortex_local_mem_bytes": staged[0]["vortex_local_mem_bytes"], "staging": staged[0],
            "runs_the_pair": all(st["same_as_pair"] for st in staged), "windows": [list(w) for w in wins],
            "rows": rows,
            "cost": {"predicted_per_block": {"instrs": instrs_per_block(cands[0]), "cycles": cycles_per_block(cands[0])},
                     "expected_per_block_per_config": per_block,
                     "cycle_budget": p.budget, "blocks_per_launch_at_least": together,
                     "windows": [list(w) for w in wins],
                     "covered_fraction": ok[0]["covered_fraction"] if ok else math.nan,
                     "wall_s_per_config": [r["wall_s"] for r in results]}}


def write_index(out: Path, summary: dict) -> None:
    """summary.json: every sweep run for the slice, with one line per verdict (what the report shows)."""
    path = out / "summary.json"
    old = read_json(path) if path.exists() else {}
    sweeps = {**old.get("sweeps", {}), summary["sweep"]: summary}
    write_json(path, {"slice_id": summary["slice_id"], "sweeps": sweeps,
                      "verdict": "; ".join(f"[{k}] {v['verdict']} (check 2 on SimX: {v['check2']['verdict']}"
                                           + ("" if v.get("runs_the_pair", True) else
                                              "; ran a variant of the pair that drops "
                                              + ", ".join(v.get("staging", {}).get("dropped", [])) or "staging")
                                           + ")" for k, v in sorted(sweeps.items()))})
