"""Scheduled rebuilds: Prefect deployments of the rebuild (or profile) flow on a work pool per platform."""

from __future__ import annotations

import asyncio
import datetime

from flows.config import ROOT
from vxsynth.errors import VxError

FLOWS = {"rebuild": "flows/rebuild.py:rebuild_flow", "profile": "flows/profile.py:profile_flow"}


def check(flow: str, overrides: list[str], cron: str | None) -> None:
    """A deployment's input, answered before any Prefect API is started or touched: the flow, its settings as its runs
    will check them (less what only the worker's machine can tell) and the cron expression."""
    from flows import plans

    if flow not in FLOWS:
        raise VxError(f"--flow {flow!r}: choose one of {sorted(FLOWS)}")
    if cron is not None:        # before the settings, whose checks take seconds
        from cronsim import CronSim, CronSimError
        try:
            CronSim(cron, datetime.datetime.now())
        except CronSimError as e:
            raise VxError(f"--cron {cron!r} is not a cron expression ({e}); e.g. \"0 2 * * *\" for 02:00 daily") from e
    {"rebuild": plans.rebuild_settings, "profile": plans.profile_settings}[flow](overrides)


async def _ensure_pool(name: str) -> None:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.exceptions import ObjectNotFound

    async with get_client() as c:
        try:
            await c.read_work_pool(name)
        except ObjectNotFound:
            await c.create_work_pool(WorkPoolCreate(name=name, type="process"))


def create(name: str, pool: str, flow: str, overrides: list[str], cron: str | None) -> str:
    """Register (or update) deployment `<flow>/<name>`, its input checked by `check` before (the CLI does so before
    it starts the API); a cron expression makes it a scheduled run."""
    from prefect import Flow

    asyncio.run(_ensure_pool(pool))
    f = Flow.from_source(source=str(ROOT), entrypoint=FLOWS[flow])
    dep_id = f.deploy(name=name, work_pool_name=pool, cron=cron, parameters={"overrides": list(overrides)},
                      print_next_steps=False, ignore_warnings=True)
    return str(dep_id)


def listing() -> list[dict]:
    from prefect.client.orchestration import get_client

    async def go():
        async with get_client() as c:
            out = []
            for d in await c.read_deployments():
                flow = await c.read_flow(d.flow_id)
                out.append({"name": f"{flow.name}/{d.name}", "pool": d.work_pool_name,
                            "schedules": [getattr(s.schedule, "cron", str(s.schedule)) for s in d.schedules],
                            "parameters": d.parameters})
            return out
    return asyncio.run(go())


def remove(name: str) -> None:
    """Delete deployment `<flow>/<name>` (or `<name>` when unique)."""
    from prefect.client.orchestration import get_client

    async def go():
        async with get_client() as c:
            for d in await c.read_deployments():
                flow = await c.read_flow(d.flow_id)
                if name in (d.name, f"{flow.name}/{d.name}"):
                    await c.delete_deployment(d.id)
                    return True
            return False
    if not asyncio.run(go()):
        raise VxError(f"no deployment named {name!r}; see `vxsynth schedule --list`")
