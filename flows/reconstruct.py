"""Reconstruct flow: the loop for every selected slice. GPU work is serialised (one GPU); without a GPU the
slices' CPU-side work (Vortex host runs) fans out over the flow's task runner (`rebuild.cpu_workers` threads, or a
Dask cluster at `rebuild.dask_address`)."""

from __future__ import annotations

from prefect import flow, get_run_logger
from prefect.task_runners import ThreadPoolTaskRunner

from flows import plans
from flows.config import ROOT, data_dir
from tasks.reconstruct import reconstruct_task
from vxsynth.errors import VxError
from vxsynth.reconstruct.setup import gpu_available


@flow(name="reconstruct", log_prints=True)
def reconstruct_flow(overrides: list[str], ids: list[str] | None = None) -> list[dict]:
    log = get_run_logger()
    cfg, recs = plans.reconstruct(overrides, ids)
    slices = data_dir(cfg) / "slices"
    gpu = cfg.get("gpu", "auto") in ("auto", True, "true") and gpu_available(cfg["platform"]) is None
    log.info(f"reconstructing {len(recs)} slices ({'GPU, one at a time' if gpu else 'no GPU: CPU-side checks in parallel'})")
    calls = [(r["slice_id"], str(slices / r["slice_id"] / "slice.json"), cfg, str(data_dir(cfg) / "suite" / r["slice_id"]),
              str(ROOT / "scratch" / "work" / r["slice_id"])) for r in recs]
    if gpu:
        out = [reconstruct_task(*c) for c in calls]
    else:
        out = [f.result() for f in [reconstruct_task.submit(*c) for c in calls]]
    for i, s in enumerate(out, 1):
        log.info(f"{i}/{len(out)} {s['slice_id']}: {s['status']}")
    return out


def with_runner(cfg: dict):
    """The reconstruct flow with its CPU-side fan-out on `rebuild.cpu_workers` threads, or on a Dask cluster spanning
    several machines (`rebuild.dask_address`, needs the `dask` extra: prefect-dask)."""
    r = cfg["rebuild"]
    if r.get("dask_address"):
        try:
            from prefect_dask import DaskTaskRunner
        except ImportError as e:
            raise VxError("rebuild.dask_address needs prefect-dask: pip install -e '.[dask]'") from e
        return reconstruct_flow.with_options(task_runner=DaskTaskRunner(address=r["dask_address"]))
    return reconstruct_flow.with_options(task_runner=ThreadPoolTaskRunner(max_workers=int(r["cpu_workers"])))
