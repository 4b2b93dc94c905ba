"""Full suite rebuild as one Prefect flow run: profile (configured platforms) -> slice -> reconstruct -> report.

A platform this machine cannot profile is skipped with its reason (its recorded profiles, if configured in
slicing.profiles, are used instead); GPU steps the machine cannot run are reported as skipped."""

from __future__ import annotations

import time

from prefect import flow, get_run_logger
from prefect.task_runners import ThreadPoolTaskRunner

from flows import dvc
from flows.config import data_dir, load
from flows.reconstruct import run_slices
from flows.report import context
from flows.slice import profile_dirs
from tasks.caching import fresh, key, stamp
from tasks.profiling import profile_workload_task
from tasks.report import report_task
from tasks.slicing import slice_task
from vxsynth.errors import VxError
from vxsynth.profiling.platforms import check_platform
from vxsynth.reconstruct.setup import gpu_available
from vxsynth.workloads.spec import WorkloadSpec


def _profile(cfg: dict, overrides: list[str], log) -> tuple[list[str], dict]:
    done, skipped = [], {}
    for name in cfg["rebuild"]["platforms"]:
        pcfg = load([*overrides, f"platform={name}"])["platform"]
        try:
            check_platform(pcfg)
        except VxError as e:
            skipped[f"profile@{name}"] = str(e)
            log.info(f"profile@{name} skipped: {e}")
            continue
        for w in cfg["workloads"]:
            wcfg = load([*overrides, f"workload={w}", f"workload.preset={cfg['rebuild']['preset']}"])["workload"]
            out = data_dir(cfg) / "profiles" / name / WorkloadSpec.from_config(wcfg).label
            k = key([], {"platform": pcfg, "workload": wcfg})
            if fresh(out, k) is None:
                stamp(out, k, profile_workload_task(pcfg, wcfg, str(out)))
            else:
                log.info(f"profile {name}/{out.name} up to date")
        done.append(f"profile@{name}")
    return done, skipped


@flow(name="rebuild", log_prints=True)
def rebuild_flow(overrides: list[str]) -> dict:
    log = get_run_logger()
    t0 = time.perf_counter()
    cfg = load(overrides)
    profiled, skipped = _profile(cfg, overrides, log)
    dirs = profile_dirs(cfg)
    slices = data_dir(cfg) / "slices"
    k = key(dirs, {"slicing": cfg["slicing"], "precision": cfg["precision"]})
    if fresh(slices, k) is None:
        stamp(slices, k, slice_task([str(d) for d in dirs], str(slices), cfg["slicing"], cfg["precision"]))
    else:
        log.info("slices up to date")
    why = gpu_available(cfg["platform"]) if cfg.get("gpu", "auto") in ("auto", True, "true") else "disabled by gpu=false"
    if why:
        skipped["GPU steps (CUDA candidates, check 1/2, ncu signatures, D)"] = why
    results = run_slices(cfg)
    failed = [r["slice_id"] for r in results if r["status"] == "failed"]
    extra = {"slices reconstructed": len(results) - len(failed), "slices failed": ", ".join(failed) or "none",
             **{f"skipped {k_}": v for k_, v in skipped.items()}}
    html = report_task(str(slices), str(data_dir(cfg) / "suite"), str(data_dir(cfg) / "simx"),
                       str(data_dir(cfg) / "report"), context(cfg, extra))
    if cfg["rebuild"]["dvc_commit"] and dvc.is_workspace():
        dvc.commit([*profiled, "slice", "reconstruct", "report"])
        log.info("dvc.lock updated")
    summary = {"report": html, "results": results, "skipped": skipped, "wall_s": time.perf_counter() - t0}
    log.info(f"rebuild finished in {summary['wall_s']:.0f} s: {len(results)} slices, {len(failed)} failed; skipped: {skipped or 'nothing'}")
    return summary


def with_workers(n: int, dask_address: str | None = None):
    """The rebuild flow with its CPU-side fan-out on a thread pool of `n` workers, or on a Dask cluster spanning
    several machines (`rebuild.dask_address`, needs the `dask` extra: prefect-dask)."""
    if dask_address:
        try:
            from prefect_dask import DaskTaskRunner
        except ImportError as e:
            raise VxError("rebuild.dask_address needs prefect-dask: pip install -e '.[dask]'") from e
        return rebuild_flow.with_options(task_runner=DaskTaskRunner(address=dask_address))
    return rebuild_flow.with_options(task_runner=ThreadPoolTaskRunner(max_workers=n))
