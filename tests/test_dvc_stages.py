"""DVC stages in a fresh clone of this repository (no DVC cache or remote): `dvc repro profile@orin` reruns only the
Orin profiling stage (which, on a machine without an Orin, stops with a clear error and writes nothing) and leaves
every other stage's outputs untouched and up to date; `vxsynth slice` and `vxsynth reproduce` work from the committed
data, and the advice they give works there."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

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


def test_the_simx_stage_runs_only_for_itself_or_the_report_and_without_vortex_stops_writing_nothing(clone):
    """The simx stage (check 2 of the final pairs on SimX, data/simx) is upstream of the report only: no dry run of
    the other stages names it. Without a Vortex installation it stops with one line and writes nothing, as
    profile@orin does without an Orin; dvc.lock keeps no entry of it."""
    repo, env = clone
    for stage in ("profile@h200", "profile@cpu", "slice", "reconstruct"):
        out = _run(["dvc", "repro", "--dry", stage], repo, env).stdout
        assert "Running stage 'simx'" not in out, (stage, out)
    assert '"simx" -> "report"' in _run(["dvc", "dag", "--dot", "report"], repo, env).stdout
    made = [d for d in (repo / "data" / "slices", repo / "data" / "suite") if not d.exists()]
    for d in made:                                                       # its upstream outputs, here empty
        d.mkdir(parents=True)
    try:
        r = _run(["dvc", "repro", "--single-item", "simx"], repo, {**env, "VORTEX_HOME": str(repo / "no-vortex")})
    finally:
        for d in made:
            shutil.rmtree(d)
    err = [line for line in (r.stdout + r.stderr).splitlines() if line.startswith("error: ")]
    assert r.returncode != 0 and len(err) == 1 and "no-vortex does not exist" in err[0], r.stdout + r.stderr
    assert "Running stage 'simx'" in r.stdout and "Running stage 'report'" not in r.stdout
    assert not (repo / "data" / "simx").exists()
    assert "simx" not in yaml.safe_load((repo / "dvc.lock").read_text())["stages"]


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
    must hash to what the committed dvc.lock records, record by record, before any is reconstructed; the rerun is
    compared with what dvc.lock records of its reconstruction."""
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
    assert r.returncode in (0, 3), r.stderr[-3000:]
    v = json.loads((repo / "scratch" / "reproduce" / md5[:12] / "reproduce.json").read_text())
    assert v["md5"] == md5 and v["record_source"].startswith("regenerated") and v["revision"] == "workspace"
    assert (repo / "scratch" / "reproduce" / md5[:12] / "suite" / v["slice_id"] / "trail.parquet").exists()
    # compared with the reconstruction dvc.lock records, which a fresh clone holds as the committed H200 rebuild; when
    # that rebuild was made from other slice records (a change of conf/precision re-makes them: the check policy travels
    # in the record), there is nothing to compare and reproduce says why
    slices_of_rebuild = [d["md5"] for d in lock["stages"]["reconstruct"]["deps"] if d["path"] == "data/slices"][0]
    if slices_of_rebuild != want:
        assert v["compared"].startswith("that revision's recorded reconstruction was made from other slice records"), v
        assert v["match"] is None and "nothing to compare" in r.stdout + r.stderr, v
        return
    assert v["compared"].startswith("round 0 rerun here (without GPU steps) against round 0 of the reconstruction that "
                                    "revision recorded (bench/results/rebuild_h200_h/rebuild.tgz")
    assert v["match"] is True or (v["match"] is False and v["differs"] and r.returncode == 3), v
    said = {True: "verdict: match: round 0 rerun here", False: f"verdict: differs in {', '.join(v['differs'])}: round 0"}
    assert said[v["match"]] in r.stdout + r.stderr


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
    assert "(`git status data/recorded/h200` lists the edits)" in err[0]
    assert "`dvc pull`" not in err[0] and "`dvc fetch" not in err[0]                 # no remote here to fetch from


def test_slice_on_a_fresh_clone_takes_the_committed_profiles_and_a_damaged_record_is_repaired_as_advised(clone):
    """`vxsynth slice` as the README gives it: with data/profiles empty, it slices the committed profiles
    (one line says so) into the records dvc.lock holds. A damaged record stops `vxsynth reconstruct` with one line
    whose advice, run as given, regenerates it here (no DVC cache or remote in a clone: no `dvc checkout`)."""
    import re
    import shlex

    from flows.dvc_lookup import path_md5, stage_out

    repo, env = clone
    want = stage_out(yaml.safe_load((repo / "dvc.lock").read_text()), "slice", "data/slices")
    r = _cli(repo, env, "slice")
    out = r.stdout + r.stderr
    assert r.returncode == 0 and out.count("holds no profiles: slicing the committed ones in data/recorded/h200") == 1, out[-3000:]
    assert path_md5(repo / "data" / "slices")[0] == want
    rec = repo / "data" / "slices" / "linear-fp32-1x4096x260-h200-4da0e5" / "slice.json"
    good = rec.read_bytes()
    rec.write_bytes(good[:200])                                           # a truncated record
    r = _cli(repo, env, "reconstruct", "loop.rounds=0", "gpu=false")
    err = [line for line in r.stderr.splitlines() if line.startswith("error: ")]
    assert r.returncode == 1 and len(err) == 1 and "not valid JSON" in err[0], r.stderr[-2000:]
    [advice] = re.findall(r"`([^`]+)`", err[0])
    assert advice == "vxsynth slice"
    r = _cli(repo, env, *shlex.split(advice)[1:])                         # run as given
    assert r.returncode == 0 and "its files changed since it was stamped" in r.stdout + r.stderr, r.stderr[-2000:]
    assert rec.read_bytes() == good and path_md5(repo / "data" / "slices")[0] == want


def test_a_revision_that_recorded_no_reconstruction_is_said_to_have_nothing_to_compare(tmp_path):
    from flows.reproduce import _recorded, compare
    from flows.dvc_lookup import Found

    (tmp_path / "bench").symlink_to(ROOT / "bench")                    # the committed rebuilds, none of this record
    lock = {"stages": {"slice": {"outs": [{"path": "data/slices", "md5": "0" * 32 + ".dir"}]}}}
    files, why = _recorded(tmp_path, Found("0" * 32, "linear-fp32-302x512x512-h200-cbeaff", "0123abcd", lock))
    assert files == {} and why == "that revision recorded no reconstruction, and no committed rebuild holds this slice record"
    assert compare(files, tmp_path, False, why) == {"match": None, "compared": why}


def test_the_md5_computed_without_dvc_is_dvcs_own(tmp_path):
    """`path_md5` (stage cache keys, stamps, regenerated slice records) hashes as DVC does, this project's .dvcignore
    included: folders with __pycache__, a stage stamp and a per-output lock, a single file, the committed profiles."""
    from dvc.repo import Repo
    from dvc_data.hashfile.build import build

    from vxsynth.store.version import path_md5

    subprocess.run(["dvc", "init", "--no-scm", "-q"], cwd=tmp_path, check=True)
    shutil.copyfile(ROOT / ".dvcignore", tmp_path / ".dvcignore")
    out = tmp_path / "data" / "out"
    for rel, text in [("a/x.json", "{}"), ("a/__pycache__/m.cpython-312.pyc", "pyc"), (".stamp.json", "{}"),
                      (".x.lock", ""), ("b.txt", "b\r\n"), ("a/.hidden", "h")]:
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_text(text)
    shutil.copytree(ROOT / "vxsynth" / "kernels", tmp_path / "kernels")
    for repo_root, paths in [(tmp_path, [out, out / "b.txt", tmp_path / "kernels"]),
                             (ROOT, [ROOT / "data" / "recorded" / "h200", ROOT / "dvc.yaml"])]:
        with Repo(str(repo_root)) as repo:
            for p in paths:
                _, _, obj = build(repo.cache.local, str(p), repo.cache.local.fs, "md5", ignore=repo.dvcignore, dry_run=True)
                assert path_md5(p)[0] == obj.hash_info.value, p
