"""Prefect task: slice profiles into the suite's records."""

from pathlib import Path

from prefect import get_run_logger, task

from vxsynth.slicing.stage import run


@task(name="slice")
def slice_task(profile_dirs: list[str], out_dir: str, slicing_cfg: dict, tolerances: dict) -> list[str]:
    log = get_run_logger()
    suite = run([Path(p) for p in profile_dirs], Path(out_dir), slicing_cfg, tolerances, log=log.info)
    return list(suite["slice_id"])
