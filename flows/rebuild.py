"""Full suite rebuild as one Prefect flow run whose stages are the stage flows, as subflows: profile (configured
platforms) -> slice -> reconstruct -> report. Each stage skips what is up to date, so an interrupted rebuild redoes
only what is missing or stale.

A platform this machine cannot profile is skipped with its reason (its recorded profiles, if configured in
slicing.profiles, are used instead); GPU steps the machine cannot run are reported as skipped."""

from __future__ import annotations

import time
from collections import Counter

from prefect import flow, get_run_logger

from flows import dvc, plans
from flows.config import data_dir, load
from flows.profile import profile_flow
from flows.reconstruct import with_runner
from flows.report import report_flow
from flows.simx import checks_failed, checks_runner
from flows.slice import slice_flow
from vxsynth.errors import VxError
from vxsynth.profiling.platforms import check_platform
from vxsynth.reconstruct.setup import gpu_skipped


@flow(name="rebuild", log_prints=True)
def rebuild_flow(overrides: list[str]) -> dict:
    log = get_run_logger()
    t0 = time.perf_counter()
    cfg = plans.rebuild(overrides)
    profiled, skipped = [], {}
    for name in cfg["rebuild"]["platforms"]:
        try:
            check_platform(load([*overrides, f"platform={name}"])["platform"])
        except VxError as e:
            skipped[f"profile@{name}"] = str(e)
            log.info(f"profile@{name} skipped: {e}")
            continue
        profile_flow([*overrides, f"platform={name}", f"workload.preset={cfg['rebuild']['preset']}"])
        profiled.append(f"profile@{name}")
    slice_flow(overrides)
    if why := gpu_skipped(cfg):
        skipped["GPU steps (CUDA candidates, check 1/2, ncu signatures, D)"] = why
    results = with_runner(cfg)(overrides)
    failed = [r["slice_id"] for r in results if r["status"] == "failed"]
    simx = _simx_checks(cfg, overrides, skipped, log)
    ran = Counter(r["status"] for r in results if r["status"] != "failed")    # reconstructed, or start checked on CPU
    extra = {**{f"slices {status}": n for status, n in ran.items()}, "slices failed": ", ".join(failed) or "none",
             **({"final pairs checked on SimX": ", ".join(f"{r['slice_id']} {r['verdict']}" for r in simx)} if simx else {}),
             **{f"skipped {k}": v for k, v in skipped.items()}}
    html = report_flow(overrides, extra)
    if cfg["rebuild"]["dvc_commit"] and dvc.is_workspace():
        (data_dir(cfg) / "simx").mkdir(parents=True, exist_ok=True)   # the report's dep: empty when no SimX ran here
        checked = simx and not checks_failed(simx)
        dvc.commit([*profiled, "slice", "reconstruct", *(["simx"] if checked else []), "report"])
        log.info("dvc.lock updated")
    summary = {"report": html, "results": results, "simx_checks": simx, "skipped": skipped, "wall_s": time.perf_counter() - t0}
    log.info(f"rebuild finished in {summary['wall_s']:.0f} s: {len(results)} slices, {len(failed)} failed; skipped: {skipped or 'nothing'}")
    return summary


def _simx_checks(cfg: dict, overrides: list[str], skipped: dict, log) -> list[dict]:
    """Check 2 of every final pair on SimX (`simx.in_rebuild`: auto when an installation is found, true, false)."""
    what = "SimX checks of the final pairs"
    mode = cfg["simx"].get("in_rebuild", "auto")
    if mode in (False, "false"):
        skipped[what] = "disabled by simx.in_rebuild=false"
        return []
    if mode not in (True, "true"):
        try:
            plans.installation(cfg["simx"])          # looked for before the subflow, which would end Failed without one
        except VxError as e:
            skipped[what] = str(e)
            log.info(f"{what} skipped: {e}")
            return []
    return checks_runner(cfg)(overrides)
