"""Slice flow: profiles -> slice records + suite index (skipped when its inputs and dvc.yaml deps are unchanged)."""

from __future__ import annotations

from prefect import flow, get_run_logger

from flows import plans
from flows.config import data_dir
from tasks.caching import fresh, key, stale, stamp
from tasks.slicing import slice_task
from vxsynth.store.lock import exclusive

CFG_KEYS = ("slicing", "precision")   # the config the stage reads (its cache key; conf/ deps in dvc.yaml)

@flow(name="slice", log_prints=True)
def slice_flow(overrides: list[str]) -> list[str]:
    cfg, dirs, note = plans.slice_(overrides)
    if note:
        get_run_logger().info(note)
    out = data_dir(cfg) / "slices"
    k = key("slice", dirs, {c: cfg[c] for c in CFG_KEYS})
    with exclusive(out, "the slices"):
        ids = fresh(out, k)
        if ids is None:
            get_run_logger().info(f"slices: {stale(out, k)}")
            ids = slice_task([str(d) for d in dirs], str(out), cfg["slicing"], cfg["precision"])
            stamp(out, k, ids)
        else:
            get_run_logger().info("slices up to date")
    return ids
