"""Profile flow: both profiling passes for every configured workload on one platform; a workload whose profile is
up to date (same dvc.yaml deps, same config) is not profiled again."""

from __future__ import annotations

from prefect import flow, get_run_logger

from flows import plans
from flows.config import data_dir
from tasks.caching import fresh, key, stale, stamp
from tasks.profiling import profile_workload_task
from vxsynth.store.lock import exclusive
from vxsynth.workloads.spec import WorkloadSpec

CFG_KEYS = ("platform", "workload")   # the config the stage reads (its cache key; conf/ deps in dvc.yaml)


@flow(name="profile", log_prints=True)
def profile_flow(overrides: list[str]) -> list[dict]:
    log = get_run_logger()
    cfg, wcfgs = plans.profile(overrides)
    pcfg = cfg["platform"]
    out = []
    for w in wcfgs:
        d = data_dir(cfg) / "profiles" / pcfg["name"] / WorkloadSpec.from_config(w).label
        k = key("profile", [], {"platform": pcfg, "workload": w}, item=pcfg["name"])
        with exclusive(d, f"profile {pcfg['name']}/{d.name}"):
            done = fresh(d, k)
            if done is None:
                log.info(f"profile {pcfg['name']}/{d.name}: {stale(d, k)}")
                done = profile_workload_task(pcfg, w, str(d))
                stamp(d, k, done)
            else:
                log.info(f"profile {pcfg['name']}/{d.name} up to date")
        out.append(done)
    return out
