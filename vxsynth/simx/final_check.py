"""Check 2 of a slice's final pair on the real SimX: the reconstruction's final strategy, generated for the SimX
configuration's measured local memory, run for the check's input cases at once (one simulator process per case),
its windows sized by the cycle budget. The summary says what was covered and what it cost."""

from __future__ import annotations

import os
from pathlib import Path

from vxsynth.checks import run as checks
from vxsynth.kernels.candidate import Candidate
from vxsynth.kernels.strategy import Strategy
from vxsynth.simx.build import config_id
from vxsynth.simx.executor import SimxExecutor
from vxsynth.simx.experiments import sweep_candidate
from vxsynth.store.io import read_json, write_json


def final_strategy(slice_id: str, suites: list[Path]) -> tuple[Strategy, str]:
    """The final strategy of the slice's reconstruction (the first suite folder that has one), else the default."""
    for s in suites:
        if (Path(s) / slice_id / "result.json").exists():
            return Strategy.from_dict(read_json(Path(s) / slice_id / "result.json")["final"]["strategy"]), str(Path(s) / slice_id)
    return Strategy(), "default strategy (no reconstruction)"


def check2(c: Candidate, ex: SimxExecutor, sid: str, tolerances: dict, cases: tuple, work: Path, records: Path) -> dict:
    """Check 2 of `c` on `ex`'s SimX for the input `cases`, the cases' simulator runs at once; one record per
    candidate source, configuration and cases (a second call reads it, once every case's run completed)."""
    if old := _recorded(checks.record_path(records, sid, _tag(c, ex, cases), "vortex_ref")):
        return old
    env = checks.CheckEnv(ex, tolerances, cases=cases, vortex_parallel=min(len(cases), os.cpu_count() or 1))
    return checks.run(c, sid, _tag(c, ex, cases), env, work, records)["vortex_ref"]


def predicted_s(c: Candidate, ex: SimxExecutor, s_per_mcycle: float) -> tuple[float, float]:
    """Predicted wall seconds of one case's SimX run of `c` (its windows' cycles at `s_per_mcycle`; the cases run at
    once), and the cycles per block behind it (measured once the candidate has run here, else the cost model's)."""
    wins, per_block = ex.windows(c)
    return sum(k for _, k in wins) * per_block * s_per_mcycle / 1e6, per_block


def _tag(c: Candidate, ex: SimxExecutor, cases: tuple) -> str:
    """One check record per candidate source, configuration and input cases."""
    return f"simx-{c.vortex_sha256[:10]}-{config_id(ex.target)}" + ("" if cases == checks.CASES else f"-{len(cases)}cases")


def _recorded(path: Path) -> dict | None:
    """A check record whose simulator runs all completed (one cut short, killed or timed out, is run again)."""
    old = read_json(path) if path.exists() else None
    return old if old and all(e.get("vortex_windows") for e in old["cases"]) else None


def check_final(record: dict, suites: list[Path], ex: SimxExecutor, tolerances: dict, cases: tuple, out: Path,
                work: Path, max_s: float, s_per_mcycle: float) -> dict:
    """Check the slice's final pair on SimX; writes and returns out/check.json. A check predicted to take longer
    than `max_s` (one block of a large-K, register-spilling tile can take a quarter of an hour) is not run, and one
    whose runs outlast the executor's timeout is stopped there: the summary says so and what it would take. The
    prediction runs at this host's measured SimX speed once runs were measured here, else at `s_per_mcycle`."""
    sid = record["slice_id"]
    strategy, origin = final_strategy(sid, suites)
    c, _ = sweep_candidate(record, strategy, [ex.vortex_config()])
    speed, speed_from = ex.seconds_per_mcycle(s_per_mcycle)
    need, per_block = predicted_s(c, ex, speed)

    def not_run(reason: str) -> dict:
        summary = {"slice_id": sid, "strategy_from": origin, "strategy": strategy.to_dict(), "candidate": c.name,
                   "vortex_sha256": c.vortex_sha256, "config": ex.target, "verdict": "not run", "blocks": c.meta["blocks"],
                   "predicted_s": need, "cycles_per_block": per_block, "reason": reason}
        write_json(out / "check.json", summary)
        return summary

    if need > max_s and not _recorded(checks.record_path(out / "checks", sid, _tag(c, ex, cases), "vortex_ref")):   # a finished check is kept
        return not_run(f"one case needs about {need:.0f} s on this SimX ({per_block / 1e6:.0f} M cycles for one block of "
                       f"{c.strategy.threads} threads at {speed:.2g} s per million cycles, {speed_from}), over simx.check_max_s="
                       f"{max_s:g}; give a larger simx.check_max_s to run it")
    rec = check2(c, ex, sid, tolerances, cases, work, out / "checks")
    if any(w in rec["reason"] for w in ("timed out", "vx_ready_wait")):   # the cost model was low for this candidate:
                                                                          # the run timeout (ours, or the driver's) bounds it
        return not_run(f"did not finish within the {ex.timeout_s:.0f} s run timeout (predicted {need:.0f} s): {rec['reason']}")
    runs = [e for e in rec["cases"] if e.get("vortex_cycles")]
    cycles = sum(e["vortex_cycles"]["cycles"] for e in runs)
    blocks = sum(e["vortex_cycles"]["blocks"] for e in runs)
    wall = max((e.get("vortex_s", 0.0) for e in rec["cases"]), default=0.0)      # the cases ran at once
    summary = {"slice_id": sid, "strategy_from": origin, "strategy": strategy.to_dict(), "candidate": c.name,
               "vortex_sha256": c.vortex_sha256, "config": ex.target, "api": ex.inst.api, "installation": str(ex.inst.root),
               "verdict": rec["verdict"], "reason": rec["reason"], "check_id": rec["check_id"], "cases": [
                   {k: e.get(k) for k in ("case", "covered_fraction", "vortex_windows", "vortex_s", "vortex_cycles")}
                   for e in rec["cases"]],
               "covered_fraction": min((e.get("covered_fraction", 0.0) for e in rec["cases"]), default=0.0),
               "blocks": c.meta["blocks"], "vortex_differs": c.meta["vortex_differs"],
               "cost": {"cycle_budget": ex.budget, "cycles_per_block": {"predicted": ex.predicted(c),
                                                                        "measured": cycles / blocks if blocks else None},
                        "wall_s": wall, "predicted_s": need, "predicted_at_s_per_mcycle": {"value": speed, "from": speed_from},
                        "s_per_million_cycles": (sum(e.get("vortex_s", 0.0) for e in runs) / cycles * 1e6
                                                                 if cycles else None),
                        "cases_at_once": min(len(cases), os.cpu_count() or 1)}}
    write_json(out / "check.json", summary)
    return summary
