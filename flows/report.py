"""Report flow: suite table, evidence per slice, plots, Markdown + HTML + parquet under data/report, with the
committed H200 reconstructions beside the local run."""

from __future__ import annotations

import datetime

from prefect import flow

from flows import plans
from flows.config import ROOT, data_dir
from tasks.report import report_task
from vxsynth.store.lock import exclusive
from vxsynth.store.version import code_version

RECORDED = ROOT / "data" / "recorded" / "h200" / "reconstruct"
RECORDED_SIMX = ROOT / "data" / "recorded" / "simx"     # committed SimX sweeps (made with a real SimX build here)


def context(cfg: dict, extra: dict | None = None) -> dict:
    return {"generated": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "code version": code_version(), "measurement platform": cfg["platform"]["name"],
            "loop": f"{cfg['loop']['rounds']} rounds, threshold {cfg['loop']['threshold']}, order {cfg['loop']['order']}",
            **(extra or {})}


@flow(name="report", log_prints=True)
def report_flow(overrides: list[str], extra: dict | None = None) -> str:
    cfg = plans.report(overrides)
    d = data_dir(cfg)
    with exclusive(d / "report", "the report"):
        return report_task(str(d / "slices"), str(d / "suite"), [str(d / "simx"), str(RECORDED_SIMX)], str(d / "report"), context(cfg, extra),
                           str(RECORDED))
