"""Prefect task: profile one workload on one platform."""

from pathlib import Path

from prefect import get_run_logger, task

from vxsynth.profiling.stage import profile_workload


@task(name="profile-workload", task_run_name="profile {wcfg[name]} on {pcfg[name]}")
def profile_workload_task(pcfg: dict, wcfg: dict, out_dir: str) -> dict:
    log = get_run_logger()
    return profile_workload(pcfg, wcfg, Path(out_dir), log=log.info)
