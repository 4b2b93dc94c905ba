"""The `vxsynth` command line. Every command takes Hydra overrides (`key=value`) after its options."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import List, Optional

import typer

ROOT = Path(__file__).resolve().parent.parent
os.environ.setdefault("PREFECT_HOME", str(ROOT / ".prefect"))

from vxsynth.errors import VxError  # noqa: E402

app = typer.Typer(add_completion=False, no_args_is_help=True, help=__doc__)


def _fail(e: Exception) -> None:
    typer.secho(f"error: {e}", err=True, fg=typer.colors.RED)
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
    from flows.profile import profile_flow

    try:
        for s in profile_flow(overrides or []):
            typer.echo(f"{s['platform']}/{s['workload']}: {s['op_calls']} op calls, {s['kernels']} kernel rows, "
                       f"{s['t_total_s']:.1f} s")
    except VxError as e:
        _fail(e)


@app.command("slice")
def slice_(overrides: Optional[List[str]] = OVR):
    """Slice profiles into the suite: ranking, families, precision paths, dedup, selection, provenance records."""
    from flows.slice import slice_flow

    try:
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
    for r in suite.itertuples():
        t.add_row(r.slice_id, r.precision, r.models, f"{r.share:.1%}", str(r.calls_per_inference), r.hint_check, r.main_kernel[:60])
    Console().print(t)


def main() -> None:  # pragma: no cover - console entry
    app()


if __name__ == "__main__":
    sys.exit(app())
