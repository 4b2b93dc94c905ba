"""DVC stage isolation in a clone of this repository: `dvc repro profile@orin` reruns only the Orin profiling stage
(which, on a machine without an Orin, stops with a clear error and writes nothing), and leaves every other stage's
outputs untouched and up to date."""

from __future__ import annotations

import json
import os
import shutil
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


def _cli(repo: Path, env: dict, *args: str) -> subprocess.CompletedProcess:
    return _run([os.sys.executable, "-m", "flows.cli", *args], repo, env)


def test_reproduce_works_from_a_fresh_clone(clone):
    """No DVC cache or remote in a clone: the slice records are regenerated from the committed recorded profiles and
    must hash to what the committed dvc.lock records, record by record, before any is reconstructed."""
    import yaml

    repo, env = clone
    lock = yaml.safe_load((repo / "dvc.lock").read_text())
    want = [o["md5"] for o in lock["stages"]["slice"]["outs"] if o["path"] == "data/slices"][0]
    assert not (repo / ".dvc" / "cache" / "files" / "md5" / want[:2] / want[2:]).exists()   # in no cache here
    r = _cli(repo, env, "reproduce", "--list")
    assert r.returncode == 0, r.stderr[-2000:]
    listed = dict(line.split()[:2] for line in r.stdout.splitlines())
    assert len(listed) == 26 and "regenerated and verified against dvc.lock" in r.stderr
    manifest = repo / "scratch" / "regenerated" / "files" / "md5" / want[:2] / want[2:]
    entries = {e["relpath"]: e["md5"] for e in json.loads(manifest.read_text())}
    assert {f"{sid}/slice.json": md5 for md5, sid in listed.items()} == {k: v for k, v in entries.items() if k.endswith("slice.json")}
    md5 = next(m for m, sid in listed.items() if sid.startswith("linear-fp32-302x512x512-h200-cb"))
    r = _cli(repo, env, "reproduce", md5[:10], "loop.rounds=0", "gpu=false")
    assert r.returncode == 0, r.stderr[-3000:]
    v = json.loads((repo / "scratch" / "reproduce" / md5[:12] / "reproduce.json").read_text())
    assert v["md5"] == md5 and v["record_source"].startswith("regenerated") and v["revision"] == "workspace"
    assert (repo / "scratch" / "reproduce" / md5[:12] / "suite" / v["slice_id"] / "trail.parquet").exists()


def test_a_fresh_clone_refuses_profiles_that_are_not_the_locked_ones(clone):
    repo, env = clone
    shutil.rmtree(repo / "scratch" / "regenerated", ignore_errors=True)
    env_json = repo / "data" / "recorded" / "h200" / "act" / "env.json"
    env_json.write_text(env_json.read_text().replace("h200", "H200", 1))   # one changed byte in a recorded profile
    try:
        r = _cli(repo, env, "reproduce", "0123abcd")
    finally:
        subprocess.run(["git", "checkout", "--", str(env_json)], cwd=repo, check=True)
    err = [line for line in r.stderr.splitlines() if line.startswith("error: ")]
    assert r.returncode == 1 and len(err) == 1 and "are not the data/profiles/h200 dvc.lock was built from" in err[0], r.stderr[-2000:]
