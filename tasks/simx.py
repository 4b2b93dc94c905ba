"""Prefect tasks of the SimX flows (flows/simx.py): one SimX build, one configuration's run, one slice's check 2 on
SimX; thin wrappers of vxsynth.simx.sweep (`cache`: the folder of SimX builds, one per configuration)."""

from __future__ import annotations

from pathlib import Path

from prefect import task

from vxsynth.records import SliceRecord
from vxsynth.simx import sweep


@task(name="simx-build", task_run_name="simx build {cfg}")
def simx_build(inst, cfg: dict, cache: str, budget: float, timeout_s: float) -> dict:
    """Build SimX for one configuration (cached) and measure its local memory."""
    return sweep.build_config(inst, cfg, Path(cache), budget, timeout_s)


@task(name="simx-run", task_run_name="simx {cfg}")
def simx_run(inst, cfg: dict, cache: str, candidate, inputs: dict, work: str, budget: float, timeout_s: float,
             together: int, windows: list | None = None) -> dict:
    """Run the candidate on one configuration with counters over the sweep's windows."""
    return sweep.run_config(inst, cfg, Path(cache), candidate, inputs, Path(work), budget, timeout_s, together, windows)


@task(name="simx-check", task_run_name="simx check {rec.slice_id}")
def simx_check(rec: SliceRecord, cfg: dict, inst, suites: list[str], cache: str, out: str, work: str) -> dict:
    """Check 2 of one slice's final pair on the base configuration's SimX; a failure is that slice's only."""
    return sweep.check_slice(rec, cfg["simx"], cfg["precision"], inst, [Path(p) for p in suites], Path(cache),
                             Path(out), Path(work))
