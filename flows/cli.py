"""The `vxsynth` command line. Every command takes Hydra overrides (`key=value`) after its options."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import List, Optional

import typer

from vxsynth.errors import VxError

app = typer.Typer(add_completion=False, no_args_is_help=True, help=__doc__)


def _fail(e: Exception) -> None:
    typer.secho(f"error: {e}", err=True, fg=typer.colors.RED)
    raise typer.Exit(1)


def _api() -> str:
    """The project's Prefect API (started on demand and kept), once the command's input has been checked."""
    from flows import server

    return server.ensure()


server_app = typer.Typer(help="The project's local Prefect server (started on demand by flow commands, then kept).")
app.add_typer(server_app, name="server")


@server_app.command("status")
def server_status():
    """Where the flows report: PREFECT_API_URL, the kept local server, or none yet."""
    import os

    from flows import server

    s = server.running()
    typer.echo(f"PREFECT_API_URL={os.environ['PREFECT_API_URL']} (configured)" if os.environ.get("PREFECT_API_URL") else
               f"local server {s['url']} (pid {s['pid']}, PREFECT_HOME={server.home()})" if s else
               f"no local server running (PREFECT_HOME={server.home()}); the next flow command starts one")


@server_app.command("stop")
def server_stop():
    """Stop the kept local server (the next flow command starts it again)."""
    from flows import server

    s = server.stop()
    typer.echo(f"stopped {s['url']} (pid {s['pid']})" if s else "no local server was running")


def _failed(results: list[dict]) -> None:
    """Exit non-zero with one line per failed slice (the others ran)."""
    bad = [r for r in results if r["status"] == "failed"]
    for r in bad:
        typer.secho(f"error: slice {r['slice_id']} failed: {r['error']}", err=True, fg=typer.colors.RED)
    if bad:
        typer.secho(f"{len(bad)} of {len(results)} slices failed; the other {len(results) - len(bad)} ran", err=True)
        raise typer.Exit(1)


OVR = typer.Argument(None, help="Hydra overrides, e.g. platform=h200 workload=pi0")


@app.command()
def config(overrides: Optional[List[str]] = OVR, group: Optional[str] = typer.Option(None, help="print one group only")):
    """Print the composed config as JSON (what bare GPU hosts are given)."""
    from flows.config import load

    try:
        cfg = load(overrides or [])
    except VxError as e:
        _fail(e)
    typer.echo(json.dumps(cfg[group] if group else cfg, indent=1))


@app.command()
def profile(overrides: Optional[List[str]] = OVR):
    """Profile workloads on a platform: pass 1 (torch.profiler) and pass 2 (ncu)."""
    from flows import plans

    try:
        plans.profile(overrides or [])
        _api()
        from flows.profile import profile_flow

        for s in profile_flow(overrides or []):
            typer.echo(f"{s['platform']}/{s['workload']}: {s['op_calls']} op calls, {s['kernels']} kernel rows, "
                       f"{s['t_total_s']:.1f} s")
    except VxError as e:
        _fail(e)


@app.command("slice")
def slice_(overrides: Optional[List[str]] = OVR):
    """Slice profiles into the suite: ranking, families, precision paths, dedup, selection, provenance records."""
    from flows import plans

    try:
        plans.slice_(overrides or [])
        _api()
        from flows.slice import slice_flow

        ids = slice_flow(overrides or [])
    except VxError as e:
        _fail(e)
    typer.echo(f"{len(ids)} slices")


@app.command()
def slices(overrides: Optional[List[str]] = OVR):
    """List the suite's slices (data/slices/suite.parquet)."""
    from rich.console import Console
    from rich.table import Table

    from flows.config import data_dir, load
    from vxsynth.store import schemas
    from vxsynth.store.io import read_table

    try:
        suite = read_table(data_dir(load(overrides or [])) / "slices" / "suite.parquet", schemas.SUITE)
    except VxError as e:
        _fail(e)
    t = Table("slice", "precision", "models", "GPU share", "calls/inf", "hints", "main kernel")
    t.columns[0].no_wrap = True
    for r in suite.itertuples():
        t.add_row(r.slice_id, r.precision, r.models, f"{r.share:.1%}", str(r.calls_per_inference), r.hint_check, r.main_kernel[:60])
    Console(width=220).print(t)


@app.command("reconstruct")
def reconstruct_(overrides: Optional[List[str]] = OVR,
                 slice_ids: Optional[List[str]] = typer.Option(None, "--slice", help="slice id or unique prefix (repeatable)")):
    """Run the reconstruction loop for the suite's slices (or the given ones)."""
    from flows import plans

    try:
        plans.reconstruct(overrides or [], slice_ids)
        _api()
        from flows.reconstruct import reconstruct_flow

        results = reconstruct_flow(overrides or [], slice_ids)
    except VxError as e:
        _fail(e)
    for r in results:
        if r["status"] != "failed":
            typer.echo(_ran(r))
    _failed(results)


@app.command()
def report(overrides: Optional[List[str]] = OVR):
    """Build the suite report (Markdown, HTML, parquet, plots) under data/report."""
    from flows import plans

    try:
        plans.report(overrides or [])
        _api()
        from flows.report import report_flow

        typer.echo(report_flow(overrides or []))
    except VxError as e:
        _fail(e)


@app.command()
def rebuild(overrides: Optional[List[str]] = OVR):
    """Full suite rebuild as one flow run: profile -> slice -> reconstruct -> report."""
    from flows import plans

    try:
        plans.rebuild(overrides or [])
        _api()
        from flows.rebuild import rebuild_flow

        s = rebuild_flow(overrides or [])
    except VxError as e:
        _fail(e)
    _summary(s)
    _failed(s["results"])


@app.command()
def demo(overrides: Optional[List[str]] = OVR):
    """The main job at demo scale on embedded defaults (`suite=demo`): minutes on a machine without a GPU; on an
    H200 host the full loop (CUDA candidates, both checks, ncu signatures, D) runs on the demo slices."""
    overrides = list(overrides or [])
    if not any(o.startswith("platform=") for o in overrides):
        overrides.append(f"platform={_local_platform()}")
    rebuild(["suite=demo", *overrides])


def _local_platform() -> str:
    """h200, h100 or orin when this machine has that GPU, else cpu."""
    from vxsynth.profiling.platforms import cuda

    if (c := cuda()) is not None:
        name = c.get_device_name(0).lower()
        for platform in ("h200", "h100", "orin"):
            if platform in name:
                return platform
    return "cpu"


check_app = typer.Typer(help="Output checks: replay a recorded check.")
app.add_typer(check_app, name="check")


@check_app.command("replay")
def check_replay(check_id: str, overrides: Optional[List[str]] = OVR):
    """Rerun a recorded check (same sources, seeds, cases, tolerance) and say whether the verdict reproduces."""
    from flows.config import ROOT, data_dir, load
    from vxsynth.checks.replay import find, replay
    from vxsynth.reconstruct.setup import loop_env

    try:
        cfg = load(overrides or [])
        path = find(data_dir(cfg) / "suite", check_id)
        env, _ = loop_env(cfg, cfg["platform"], ROOT / "scratch" / "replay")
        r = replay(path, env.checks, ROOT / "scratch" / "replay" / path.stem)
    except VxError as e:
        _fail(e)
    typer.echo(json.dumps(r, indent=1, default=str))
    raise typer.Exit(0 if r["reproduced"] else 3)


@app.command()
def reproduce(hash_prefix: str = typer.Argument("", help="DVC md5 of a slice record (a unique prefix is enough)"),
              overrides: Optional[List[str]] = OVR, list_: bool = typer.Option(False, "--list", help="list known slice hashes")):
    """Find a slice by DVC hash (any commit), restore it, rerun its reconstruction in scratch/, compare with the record.
    On a fresh clone (no DVC cache or remote) the slice records are regenerated from the committed profiles first."""
    from flows.config import ROOT, load
    from flows.reproduce import locate, make_known
    from flows import dvc_lookup as L

    try:
        if list_:
            why = make_known(ROOT)
            found = L.all_slices(ROOT)
            for s in found:
                typer.echo(f"{s['md5']}  {s['slice_id']}  ({s['revision'][:12]})")
            typer.echo(f"{len(found)} slice hashes from dvc.lock in the workspace and git history; records from the DVC "
                       "cache, a remote or regenerated from the committed profiles", err=True)
            for w in why[:3]:
                typer.echo(f"not listed: {w}", err=True)
            if len(why) > 3:
                typer.echo(f"not listed: {len(why) - 3} more earlier revisions, for the same kind of reason", err=True)
            if not found:
                raise VxError("no slice hashes are known here: this is not a DVC workspace with a slice stage in dvc.lock "
                              "(or its data cannot be fetched or regenerated); run `vxsynth slice` then `dvc commit slice`")
            return
        if not hash_prefix:
            raise VxError("give a slice hash (or prefix); `vxsynth reproduce --list` lists them")
        load(overrides or [])
        locate(hash_prefix, ROOT)
        _api()
        from flows.reproduce import reproduce_flow

        v = reproduce_flow(hash_prefix, overrides or [])
    except VxError as e:
        _fail(e)
    typer.echo(json.dumps(v, indent=1, default=str))
    raise typer.Exit(0 if v.get("match") is not False else 3)


@app.command()
def schedule(overrides: Optional[List[str]] = OVR,
             cron: Optional[str] = typer.Option(None, help='cron expression, e.g. "0 2 * * *" (none: run on demand)'),
             name: str = typer.Option("nightly", help="deployment name"),
             pool: str = typer.Option("h200", help="work pool (one per platform: h200, orin, cpu)"),
             flow: str = typer.Option("rebuild", help="rebuild or profile"),
             list_: bool = typer.Option(False, "--list", help="list registered deployments"),
             remove: Optional[str] = typer.Option(None, help="delete this deployment")):
    """Register, list or remove a (scheduled) suite rebuild on the Prefect API (PREFECT_API_URL, else the local one)."""
    from flows import schedule as S

    try:
        if not (list_ or remove):
            S.check(flow, overrides or [], cron)
        url = _api()
        if list_:
            for d in S.listing():
                typer.echo(f"{d['name']}  pool={d['pool']}  cron={','.join(d['schedules']) or '-'}  {d['parameters']}")
        elif remove:
            S.remove(remove)
            typer.echo(f"removed {remove}")
        else:
            dep = S.create(name, pool, flow, overrides or [], cron)
            typer.echo(f"deployment {flow}/{name} ({dep}) on pool {pool}" + (f", cron {cron}" if cron else ", on demand")
                       + f"; run workers with `PREFECT_API_URL={url} prefect worker start --pool {pool}`")
    except VxError as e:
        _fail(e)


export_app = typer.Typer(help="Exports of recorded results.")
app.add_typer(export_app, name="export")


@export_app.command("trajectories")
def export_trajectories(overrides: Optional[List[str]] = OVR,
                        suite: Optional[str] = typer.Option(None, help="suite directory (default: <data_dir>/suite; "
                                                            "the committed H200 ones: data/recorded/h200/reconstruct)"),
                        slices: Optional[str] = typer.Option(None, help="the slice records the trails were made from (their "
                                                             "md5 is the provenance; default with no --suite: <data_dir>/slices)"),
                        out: Optional[str] = typer.Option(None, help="output directory (default: <data_dir>/export)")):
    """Revision trails as agent-training trajectories: one record per round (state, action, outcome, reward), as
    trajectories.parquet and trajectories.jsonl, with each trail's provenance."""
    from flows.config import data_dir, load
    from vxsynth.export.trajectories import export

    try:
        d = data_dir(load(overrides or []))
        src = Path(suite) if suite else d / "suite"
        if not any(src.glob("*/trail.parquet")):
            raise VxError(f"no revision trails under {src}; run `vxsynth reconstruct` or give --suite")
        recs = Path(slices) if slices else None if suite else d / "slices"
        df = export(src, recs, Path(out) if out else d / "export")
    except VxError as e:
        _fail(e)
    typer.echo(f"{len(df)} rounds of {df['slice_id'].nunique()} trails -> {Path(out) if out else d / 'export'}/trajectories.{{parquet,jsonl}}")


simx_app = typer.Typer(help="SimX target: detect the Vortex installation, run configuration sweeps.")
app.add_typer(simx_app, name="simx")


@simx_app.command("detect")
def simx_detect(overrides: Optional[List[str]] = OVR):
    """Find the Vortex installation (simx.home or VORTEX_HOME): what it is and why, whether its compiler builds a
    kernel, whether SimX can be rebuilt per configuration, and the local memory the base configuration keeps
    distinct (measured once: the first call builds SimX for the base configuration)."""
    from flows import plans
    from flows.config import ROOT, load
    from vxsynth.simx.executor import SimxExecutor

    try:
        s = load(overrides or [])["simx"]
        inst = plans.installation(s)
        typer.echo(f"Vortex {inst.api} at {inst.root} (sources {inst.source}); evidence: {inst.evidence}")
        typer.echo(f"kernel compiler {inst.compiler_kind}: {inst.compiler[0]} (builds a kernel)")
        typer.echo("SimX rebuilds per configuration" if not inst.cannot_rebuild else
                   f"SimX cannot be rebuilt per configuration: missing {', '.join(inst.cannot_rebuild)}")
        lm = SimxExecutor(inst, s["config"], ROOT / "scratch" / "simx-cache").local_memory()
        typer.echo(f"local memory: {lm['usable']} of {lm['declared']} B keep distinct contents (probe, base configuration)")
    except VxError as e:
        _fail(e)


@simx_app.command("sweep")
def simx_sweep(slice_id: str = typer.Option(..., "--slice", help="slice id or unique prefix"),
               sweep: str = typer.Option("dcache", help="a sweep from conf/simx (dcache, l2, l2_size, warps, threads, cores, lmem)"),
               overrides: Optional[List[str]] = OVR):
    """Run the slice's Vortex candidate over a sweep of SimX configurations; report whether it responds."""
    from flows import plans

    try:
        plans.simx(overrides or [], slice_id, sweep)
        _api()
        from flows.simx import simx_flow

        typer.echo(simx_flow(overrides or [], slice_id, sweep)["verdict"])
    except VxError as e:
        _fail(e)


@simx_app.command("check")
def simx_check(slice_ids: Optional[List[str]] = typer.Option(None, "--slice", help="slice id or unique prefix (repeat; "
                                                             "default: rebuild.slices, else the whole suite)"),
               overrides: Optional[List[str]] = OVR):
    """Check 2 of each slice's final pair (its reconstruction, else the committed H200 one) on the real SimX:
    verdict, covered fraction and cost per slice in data/simx/<slice>/check.json; the report shows them. A check
    predicted over simx.check_max_s is not run (said per slice). Exit 1 when a check fails."""
    from flows import plans

    try:
        plans.simx_checks(overrides or [], slice_ids or None)
        _api()
        from flows.config import load
        from flows.simx import checks_failed, checks_runner

        out = checks_runner(load(overrides or []))(overrides or [], slice_ids or None)
    except VxError as e:
        _fail(e)
    for r in out:
        typer.echo(f"{r['slice_id']}: {r['verdict']} ({r['reason'][:200]})")
    raise typer.Exit(1 if checks_failed(out) else 0)


def _ran(r: dict) -> str:
    """What ran for a slice that did not fail: the loop with D, or (no GPU) round 0's CPU-side check only."""
    if r["status"] == "reconstructed":
        d = f"D {r['D_initial']} -> {r['D_final']}" if r.get("D_initial") is not None else "D not measured"
        return f"{r['slice_id']}: reconstructed ({d})"
    return (f"{r['slice_id']}: {r['status']}: round 0 only, {r.get('check2', 'its Vortex half vs the reference op')}; "
            f"no GPU here, so no CUDA run, check 1, signature or D")


def _summary(s: dict) -> None:
    for r in s["results"]:
        if r["status"] != "failed":
            typer.echo(f"  {_ran(r)}")
    for r in s.get("simx_checks", []):
        typer.echo(f"  {r['slice_id']}: check 2 on SimX {r['verdict']} ({r['reason'][:120]})")
    for k, v in s["skipped"].items():
        typer.echo(f"  skipped {k}: {v}")
    typer.echo(f"report: {s['report']}  ({s['wall_s']:.0f} s)")


if __name__ == "__main__":
    sys.exit(app())
