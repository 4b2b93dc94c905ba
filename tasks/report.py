"""Prefect task: build the suite report."""

from pathlib import Path

from prefect import get_run_logger, task

from vxsynth.report.build import build


@task(name="report")
def report_task(slices_dir: str, suite_dir: str, simx_dirs: list[str], out_dir: str, context: dict,
                recorded_dir: str | None = None) -> str:
    table = build(Path(slices_dir), Path(suite_dir), [Path(d) for d in simx_dirs], Path(out_dir), context,
                  Path(recorded_dir) if recorded_dir else None)
    get_run_logger().info(f"report: {len(table)} slices -> {out_dir}/index.html")
    return str(Path(out_dir) / "index.html")
