"""`vxsynth demo` (CPU platform) fanned out over a real Dask cluster on loopback: a `dask scheduler` and two
`dask worker` processes, the rebuild in a clone of this repository with its DVC commit on, each slice's loop in a
child process on a GPU slot of the workers' shared host (`rebuild.gpus=[0,1]`, gpu=false: no GPU is used). The worker
running the demo's longest slice is killed mid-slice: the slice is redone on the other worker, its orphaned loop ends,
and the outputs and dvc.lock are whole afterwards."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.conftest import RECORDED, ROOT

pytestmark = pytest.mark.slow

DASK = str(Path(sys.executable).parent / "dask")
KILLED = "conv2d-tf32-512to512k3x3i15x20"      # the demo's longest slice (8 s here): its worker is killed during it
STARTED = re.compile(r"\[([\w.-]+)\] on GPU (\d+)")
LOOPING = re.compile(rf"\[{KILLED}[\w.-]*\] GPU steps skipped")   # logged by the task, then by its child's loop


def _wait(pred, timeout: float, what: str):
    t = time.time()
    while not (got := pred()):
        assert time.time() - t < timeout, f"no {what} within {timeout:.0f} s"
        time.sleep(0.2)
    return got


def _loops(repo: Path, sid: str = "") -> set[int]:
    """Pids of slice loops (`python -m vxsynth.reconstruct`) writing into `repo` (slices starting with `sid`)."""
    pids = set()
    for p in Path("/proc").glob("[0-9]*"):
        try:
            cmd = (p / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"vxsynth.reconstruct" in cmd and any(a.startswith(str(repo / "data" / "suite" / sid).encode()) for a in cmd):
            pids.add(int(p.name))
    return pids


def _stop(proc: subprocess.Popen) -> None:
    for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        try:
            proc.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


def _tracked(suite: Path) -> dict[str, bytes]:
    """The files of data/suite that DVC tracks (not the locks and stamps .dvcignore names)."""
    return {str(p.relative_to(suite)): p.read_bytes() for p in sorted(suite.rglob("*"))
            if p.is_file() and not p.name.startswith(".")}


def test_demo_rebuild_over_a_dask_cluster_survives_a_killed_worker(tmp_path, prefect):
    repo = tmp_path / "repo"
    r = subprocess.run(["git", "clone", "-q", str(ROOT), str(repo)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    for w in (p for p in RECORDED.iterdir() if (p / "op_calls.parquet").exists()):   # dvc.lock's data/profiles/h200
        shutil.copytree(w, repo / "data" / "profiles" / "h200" / w.name)
    env = {**os.environ, "VXSYNTH_ROOT": str(repo), "PYTHONUNBUFFERED": "1"}
    procs, logs = {}, {}

    def start(name: str, cmd: list[str], cwd: Path = tmp_path) -> None:
        logs[name] = tmp_path / f"{name}.log"
        with open(logs[name], "w") as out:
            procs[name] = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                           stdin=subprocess.DEVNULL, start_new_session=True)

    sched = tmp_path / "scheduler.json"
    try:
        start("scheduler", [DASK, "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
                            "--scheduler-file", str(sched)])
        addr = _wait(lambda: sched.exists() and json.loads(sched.read_text() or "{}").get("address"), 60, "scheduler")
        for w in ("w0", "w1"):                     # no nanny: a killed worker stays dead, as a lost host would
            start(w, [DASK, "worker", addr, "--name", w, "--nthreads", "1", "--no-nanny", "--host", "127.0.0.1",
                      "--no-dashboard", "--local-directory", str(tmp_path / w)])
        start("rebuild", [sys.executable, "-m", "flows.cli", "demo", f"rebuild.dask_address={addr}",
                          "rebuild.dvc_commit=true", "rebuild.gpus=[0,1]", "gpu=false",
                          f"simx.home={tmp_path / 'no-vortex'}"], cwd=ROOT)
        for w in ("w0", "w1"):                     # both up long before profiling and slicing are done
            _wait(lambda: "Registered to" in logs[w].read_text(), 120, f"worker {w}")
        victim = _wait(lambda: next((w for w in ("w0", "w1") if len(LOOPING.findall(logs[w].read_text())) >= 2), None),
                       600, f"loop of {KILLED}")
        orphans = _loops(repo, KILLED)
        spread = {w: STARTED.findall(logs[w].read_text()) for w in ("w0", "w1")}
        assert orphans and all(spread.values()), spread                # both workers took slices
        os.killpg(procs[victim].pid, signal.SIGKILL)              # the worker and its threads, mid-loop
        killed_at = time.time()
        procs[victim].wait()
        _wait(lambda: not orphans & _loops(repo, KILLED) or None, 5, "end of the killed worker's orphaned loop")
        try:
            rc = procs["rebuild"].wait(600)
        except subprocess.TimeoutExpired:
            rc = None
        out = logs["rebuild"].read_text()
        assert rc == 0, out[-4000:]
    finally:
        for name in ("rebuild", "w0", "w1", "scheduler"):
            if name in procs:
                _stop(procs[name])
        for pid in _loops(repo):
            os.kill(pid, signal.SIGKILL)

    survivor = ({"w0", "w1"} - {victim}).pop()
    starts = {w: Counter(sid for sid, _ in STARTED.findall(logs[w].read_text())) for w in ("w0", "w1")}
    suite = repo / "data" / "suite"
    sids = sorted(p.name for p in suite.iterdir() if p.is_dir())
    killed = next(s for s in sids if s.startswith(KILLED))
    assert len(sids) == 5, sids
    assert starts[victim][killed] == 1 and starts[survivor][killed] == 1, starts   # redone on the other worker
    assert all(starts[victim][s] + starts[survivor][s] == 1 for s in sids if s != killed), starts   # none done twice
    status = {s: json.loads((suite / s / "status.json").read_text()) for s in sids}
    assert all(st["status"] != "failed" and (suite / s / ".stamp.json").exists() and (suite / s / "result.json").exists()
               for s, st in status.items()), status
    assert status[killed]["started"] > killed_at
    spans = sorted((st["host"], st["gpu"], st["started"], st["ended"]) for st in status.values())
    for (h1, g1, _, end), (h2, g2, start_, _) in zip(spans, spans[1:]):
        assert (h1, g1) != (h2, g2) or start_ >= end                # one host's GPU slot: one slice at a time
    assert not [p for p in (repo / "data").rglob("*.tmp")] and (repo / "data" / "report" / "index.html").exists()

    def dvc(*args):
        return subprocess.run(["dvc", *args], cwd=repo, env=env, capture_output=True, text=True, timeout=300)
    r = dvc("status", "profile@cpu", "slice", "reconstruct", "report")
    assert r.returncode == 0 and "up to date" in r.stdout, r.stdout + r.stderr
    before = _tracked(suite)                        # dvc.lock's data/suite comes back whole from the cache
    shutil.rmtree(suite)
    r = dvc("checkout", "reconstruct")
    assert r.returncode == 0 and _tracked(suite) == before, r.stdout + r.stderr
