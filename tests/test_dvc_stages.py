"""DVC stage isolation in a clone of this repository: `dvc repro profile@orin` reruns only the Orin profiling stage
(which, on a machine without an Orin, stops with a clear error and writes nothing), and leaves every other stage's
outputs untouched and up to date."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import ROOT


def _run(cmd: list[str], cwd: Path, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="module")
def clone(tmp_path_factory, prefect):
    repo = tmp_path_factory.mktemp("clone") / "repo"
    r = subprocess.run(["git", "clone", "-q", str(ROOT), str(repo)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    env = {**os.environ, "PREFECT_HOME": str(repo / ".prefect"), "PATH": f"{Path(os.sys.executable).parent}:{os.environ['PATH']}"}
    return repo, env


def test_dry_run_of_profile_orin_names_only_that_stage(clone):
    repo, env = clone
    out = _run(["dvc", "repro", "--dry", "profile@orin"], repo, env).stdout
    assert [l for l in out.splitlines() if l.startswith("Running stage")] == ["Running stage 'profile@orin':"]


def test_profile_orin_reruns_alone_and_leaves_other_stages_up_to_date(clone):
    repo, env = clone
    r = _run(["dvc", "repro", "profile@cpu"], repo, env)                   # a real stage: tiny policies on the cpu platform
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    cpu = repo / "data" / "profiles" / "cpu"
    before = {p: p.stat().st_mtime_ns for p in cpu.rglob("*") if p.is_file()}
    assert any(p.name == "op_calls.parquet" for p in before) and "profile@cpu" not in _run(["dvc", "status", "profile@cpu"], repo, env).stdout
    r = _run(["dvc", "repro", "profile@orin"], repo, env)
    import torch
    if torch.cuda.is_available() and "orin" in torch.cuda.get_device_name(0).lower():
        pytest.skip("this machine is an Orin")
    assert r.returncode != 0 and "platform 'orin' needs an NVIDIA GPU" in r.stdout + r.stderr
    assert "Running stage 'profile@orin'" in r.stdout and "Running stage 'profile@cpu'" not in r.stdout
    assert not (repo / "data" / "profiles" / "orin").exists()
    assert {p: p.stat().st_mtime_ns for p in cpu.rglob("*") if p.is_file()} == before
    status = _run(["dvc", "status", "profile@cpu"], repo, env).stdout
    assert "profile@cpu" not in status                                   # still up to date
