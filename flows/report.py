"""Report flow: suite table, evidence per slice, plots, Markdown + HTML + parquet under data/report."""

from __future__ import annotations

import datetime

from prefect import flow

from flows.config import data_dir, load
from tasks.report import report_task
from vxsynth.store.version import code_version


def context(cfg: dict, extra: dict | None = None) -> dict:
    return {"generated": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "code version": code_version(), "measurement platform": cfg["platform"]["name"],
            "loop": f"{cfg['loop']['rounds']} rounds, threshold {cfg['loop']['threshold']}, order {cfg['loop']['order']}",
            **(extra or {})}


@flow(name="report", log_prints=True)
def report_flow(overrides: list[str], extra: dict | None = None) -> str:
    cfg = load(overrides)
    d = data_dir(cfg)
    return report_task(str(d / "slices"), str(d / "suite"), str(d / "simx"), str(d / "report"), context(cfg, extra))
