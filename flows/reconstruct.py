"""Reconstruct flow: the loop for every selected slice. GPU work is serialised (one GPU); without a GPU the
slices' CPU-side work (Vortex host runs) fans out over a thread pool."""

from __future__ import annotations

from prefect import flow, get_run_logger
from prefect.task_runners import ThreadPoolTaskRunner

from flows.config import ROOT, data_dir, load
from tasks.reconstruct import reconstruct_task
from vxsynth.reconstruct.setup import gpu_available, records_in


def run_slices(cfg: dict, ids: list[str] | None = None) -> list[dict]:
    log = get_run_logger()
    slices = data_dir(cfg) / "slices"
    recs = records_in(slices, ids or cfg["rebuild"]["slices"] or None)
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


@flow(name="reconstruct", log_prints=True, task_runner=ThreadPoolTaskRunner(max_workers=2))
def reconstruct_flow(overrides: list[str], ids: list[str] | None = None) -> list[dict]:
    return run_slices(load(overrides), ids)
