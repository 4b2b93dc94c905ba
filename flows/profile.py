"""Profile flow: both profiling passes for every configured workload on one platform."""

from __future__ import annotations

from prefect import flow

from flows.config import data_dir, load
from tasks.profiling import profile_workload_task
from vxsynth.profiling.platforms import check_platform
from vxsynth.workloads.spec import WorkloadSpec


def workload_configs(overrides: list[str]) -> tuple[dict, list[dict]]:
    """The composed config and one workload config per profiled workload (all of `workloads` unless one is named)."""
    cfg = load(overrides)
    if any(o.split("=")[0].lstrip("+") == "workload" for o in overrides):
        return cfg, [cfg["workload"]]
    extra = [o for o in overrides if o.startswith("workload.")]
    return cfg, [load([*extra, f"workload={w}", *[o for o in overrides if not o.startswith("workload")]])["workload"]
                 for w in cfg["workloads"]]


@flow(name="profile", log_prints=True)
def profile_flow(overrides: list[str]) -> list[dict]:
    cfg, wcfgs = workload_configs(overrides)
    pcfg = cfg["platform"]
    check_platform(pcfg)  # before anything is written
    root = data_dir(cfg) / "profiles" / pcfg["name"]
    return [profile_workload_task(pcfg, w, str(root / WorkloadSpec.from_config(w).label)) for w in wcfgs]
