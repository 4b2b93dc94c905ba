"""Slice flow: profiles -> slice records + suite index."""

from __future__ import annotations

from pathlib import Path

from prefect import flow

from flows.config import ROOT, data_dir, load
from tasks.slicing import slice_task


def profile_dirs(cfg: dict) -> list[Path]:
    """Profile directories to slice: `slicing.profiles` if given (each a platform dir or a workload dir), else
    every workload under data/profiles/<platform> for `slicing.platforms`."""
    s = cfg["slicing"]
    roots = [Path(p) if Path(p).is_absolute() else ROOT / p for p in s["profiles"]] or \
            [data_dir(cfg) / "profiles" / p for p in s["platforms"]]
    dirs: list[Path] = []
    for r in roots:
        dirs += [r] if (r / "op_calls.parquet").exists() else sorted(d for d in r.glob("*/") if (d / "op_calls.parquet").exists())
    return dirs


@flow(name="slice", log_prints=True)
def slice_flow(overrides: list[str]) -> list[str]:
    cfg = load(overrides)
    return slice_task([str(d) for d in profile_dirs(cfg)], str(data_dir(cfg) / "slices"), cfg["slicing"], cfg["precision"])
