"""Reconstruct flow: the loop for every selected slice. With GPUs, slices are dealt to GPU slots (`rebuild.gpus`:
every visible GPU, or a list): one slice per GPU at a time, each slice's loop in a child process that sees its GPU
alone, a slot held through a lock file under scratch/gpus/<host> (`vxsynth.reconstruct.gpus`). Without a GPU the
slices' CPU-side work (Vortex host runs) fans out over the flow's task runner (`rebuild.cpu_workers` threads). On a
Dask cluster (`rebuild.dask_address`) each slice runs on a worker, with the GPU slots of that worker's host."""

from __future__ import annotations

from prefect import flow, get_run_logger
from prefect.task_runners import ThreadPoolTaskRunner

from flows import plans
from flows.config import ROOT, data_dir
from tasks.reconstruct import gpu_slots, reconstruct_task
from vxsynth.errors import VxError

GPU_LOCKS = ROOT / "scratch" / "gpus"


@flow(name="reconstruct", log_prints=True)
def reconstruct_flow(overrides: list[str], ids: list[str] | None = None) -> list[dict]:
    log = get_run_logger()
    cfg, recs = plans.reconstruct(overrides, ids)
    slices = data_dir(cfg) / "slices"
    dask = cfg["rebuild"].get("dask_address")
    gpus = [] if dask else gpu_slots(cfg)                # on a Dask cluster each worker finds its own host's GPUs
    log.info(f"reconstructing {len(recs)} slices (" + (f"on the Dask cluster at {dask}, on each worker host's GPUs" if dask
                                                       else f"one per GPU at a time on GPUs {', '.join(gpus)}" if gpus
                                                       else "no GPU: CPU-side checks in parallel") + ")")
    calls = [(r.slice_id, str(slices / r.slice_id / "slice.json"), cfg, str(data_dir(cfg) / "suite" / r.slice_id),
              str(ROOT / "scratch" / "work" / r.slice_id), str(GPU_LOCKS)) for r in recs]
    out = [f.result() for f in [reconstruct_task.submit(*c) for c in calls]]   # a slice waits for a free GPU slot
    for i, s in enumerate(out, 1):
        log.info(f"{i}/{len(out)} {s['slice_id']}: {s['status']}")
    return out


def with_runner(cfg: dict):
    """The reconstruct flow with its fan-out on one thread per GPU slot (`rebuild.cpu_workers` threads without), or on a
    Dask cluster spanning several machines (`rebuild.dask_address`, needs the `dask` extra: prefect-dask)."""
    r = cfg["rebuild"]
    if r.get("dask_address"):
        try:
            from prefect_dask import DaskTaskRunner
        except ImportError as e:
            raise VxError("rebuild.dask_address needs prefect-dask: pip install -e '.[dask]'") from e
        return reconstruct_flow.with_options(task_runner=DaskTaskRunner(address=r["dask_address"]))
    # one thread per GPU slot: a thread waiting for a slot would hold its slice's writer lock meanwhile, and lose the
    # free slot to the thread that just released it (seen on the H200: a slice starved for a whole run)
    return reconstruct_flow.with_options(task_runner=ThreadPoolTaskRunner(max_workers=len(gpu_slots(cfg))
                                                                          or int(r["cpu_workers"])))
