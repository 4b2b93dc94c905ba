"""compute-sanitizer on a CUDA candidate's launch (the `launch.Launch` the checks ran): memcheck (out-of-bounds and
misaligned accesses) and racecheck (shared-memory hazards, e.g. a missing __syncthreads). Run on every revision the
loop is about to keep; any error rejects it."""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

from vxsynth.targets import proc
from vxsynth.targets.launch import Launch

TOOLS = ("memcheck", "racecheck")


def available() -> bool:
    return shutil.which("compute-sanitizer") is not None


def run(job: Path, tool: str, timeout_s: float = 300) -> dict:
    """{tool, ok, errors, summary} for one tool on the launch in the job file `job` (`Launch.write`)."""
    r = proc.run(["compute-sanitizer", "--tool", tool, "--error-exitcode", "9", sys.executable, "-m",
                  "vxsynth.targets.cuda_worker", str(job)], timeout_s)
    text = r.stdout + r.stderr
    m = re.search(r"(ERROR|RACECHECK) SUMMARY: (\d+) (errors|hazards)", text)
    errors = int(m[2]) if m else None
    ok = r.ok and errors == 0
    first = next((line.strip() for line in text.splitlines() if line.startswith("=========") and
                  ("Invalid" in line or "hazard" in line.lower() or "Error" in line)), "")
    return {"tool": tool, "ok": ok, "errors": errors, "summary": m.group(0) if m else (r.error or "no summary"),
            "first": first[:200]}


def check(launch: Launch, workdir: Path, tools=TOOLS) -> tuple[bool, list[dict]]:
    """Every tool on `launch`, its job file written to `workdir` (`job.json`): (all clean, the result of each)."""
    job = launch.write(workdir / "job.json")
    results = [run(job, t) for t in tools]
    return all(r["ok"] for r in results), results
