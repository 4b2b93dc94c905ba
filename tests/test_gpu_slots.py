"""Slices dealt to GPU slots: the setting's forms, the per-GPU lease (threads and processes), and the reconstruct
flow running each slice's loop in its own child process on a leased slot, one slice per GPU at a time."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import threading
import time

import pytest

from tests.conftest import loop_result
from vxsynth.errors import VxError
from vxsynth.reconstruct import gpus as G


def test_slots_follow_the_setting_and_the_visible_devices(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    assert G.slots("auto", 2) == ["2", "3"]
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert G.slots("auto", 2) == ["0", "1"] and G.slots("auto", 0) == []
    assert G.slots([1], 2) == ["1"] and G.slots([0, 1], 0) == ["0", "1"]
    for bad, says in [("abc", "give auto or a list"), ([0, 0], "listed twice"), ([2], "sees 2 GPU"), ([-1], "give auto"),
                      ([], "give auto")]:
        with pytest.raises(VxError, match=says):
            G.slots(bad, 2)
    assert G.child_env("1")["CUDA_VISIBLE_DEVICES"] == "1"


def test_a_lease_holds_one_gpu_per_holder_across_threads_and_processes(tmp_path):
    held, lock = [], threading.Lock()

    def take(name):
        with G.lease(tmp_path, ["0", "1"], name, poll_s=0.05) as g:
            with lock:
                held.append((g, time.time(), "in"))
            time.sleep(0.4)
            with lock:
                held.append((g, time.time(), "out"))

    ts = [threading.Thread(target=take, args=(f"t{i}",)) for i in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    for g in ("0", "1"):                                   # on one GPU, holders one after another
        events = [e[2] for e in sorted(held) if e[0] == g]
        assert events == ["in", "out", "in", "out"]
    # another process holding GPU 0: a lease here gets GPU 1, and the lock file names that holder
    other = subprocess.Popen([sys.executable, "-c", "import time, pathlib; from vxsynth.reconstruct import gpus as G\n"
                              f"with G.lease(pathlib.Path({str(tmp_path)!r}), ['0'], 'other'):\n print('held', flush=True); time.sleep(30)"],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert other.stdout.readline().strip() == "held"
        assert json.loads((tmp_path / "gpu0.lock").read_text())["holder"] == "other"
        with G.lease(tmp_path, ["0", "1"], "here", poll_s=0.05) as g:
            assert g == "1"
    finally:
        other.kill()
        other.wait()


def test_the_flow_runs_one_slice_per_gpu_slot_each_in_its_own_process(tmp_path, prefect, h200_slices):
    from flows.reconstruct import reconstruct_flow

    data = tmp_path / "data"
    shutil.copytree(h200_slices, data / "slices")
    ids = ["linear-fp32-1x4096x260", "matmul-fp32-8x302x64x302", "linear-fp32-100x512x512"]
    out = reconstruct_flow([f"data_dir={data}", "gpu=false", "rebuild.gpus=[0,1]"], ids)
    assert [r["status"] for r in out] == ["start checked on CPU"] * 3, out     # no GPU: round 0 only
    assert {r["gpu"] for r in out} <= {"0", "1"}
    spans = sorted((r["gpu"], r["started"], r["ended"]) for r in out)
    for (g1, _, end), (g2, start, _) in zip(spans, spans[1:]):
        assert g1 != g2 or start >= end                       # a GPU's slices one after another
    for r in out:                                             # the child's loop wrote the slice's outputs
        d = data / "suite" / r["slice_id"]
        assert json.loads((d / "status.json").read_text())["gpu"] == r["gpu"]
        assert json.loads((d / "result.json").read_text())["slice_id"] == r["slice_id"]
    again = reconstruct_flow([f"data_dir={data}", "gpu=false", "rebuild.gpus=[0,1]"], ids)
    assert [r.get("started") for r in again] == [r["started"] for r in out]      # up to date: nothing run again


def test_one_runner_thread_per_gpu_slot():
    """A thread beyond the slots would only wait, holding its slice's writer lock (a slice starved a whole H200 run)."""
    from flows import config
    from flows.reconstruct import with_runner

    def threads(*o):
        return with_runner(config.load(["gpu=false", "rebuild.cpu_workers=5", *o])).task_runner._max_workers

    assert threads("rebuild.gpus=[0,1]") == 2 and threads("rebuild.gpus=[3]") == 1
    assert threads() == 5                                      # no GPU: the CPU-side fan-out


def test_a_loop_stopped_from_outside_says_so_and_that_it_resumes(tmp_path, monkeypatch):
    """A slice's child loop ended by SIGTERM (the rebuild's clean-up at a call's end) is reported as stopped from
    outside, with the resume; another failure keeps its exit status alone."""
    import tasks.reconstruct as R

    class Log:
        def info(self, line):
            pass

    for body, says, not_says in [("kill -TERM $$", "signal 15 (stopped from outside", None),
                                 ("echo boom >&2; exit 3", "exit status 3: boom", "stopped from outside")]:
        fake = tmp_path / "fake-python"
        fake.write_text(f"#!/bin/sh\n{body}\n")
        fake.chmod(0o755)
        monkeypatch.setattr(R.sys, "executable", str(fake))
        with pytest.raises(VxError, match=re.escape(says)) as e:
            R._in_child({}, tmp_path / "slice.json", tmp_path / "out", tmp_path / "work", "0", Log())
        assert not_says is None or not_says not in str(e.value)



def test_a_resumed_slice_counts_the_seconds_of_its_earlier_attempts(tmp_path, monkeypatch, h200_slices):
    """Per-slice seconds stay whole across cut and resumed device calls: an attempt that goes on with the slice's trail
    adds the earlier attempts' seconds (a cut one included); one that starts the trail afresh counts alone."""
    import tasks.reconstruct as R
    from flows import config

    class Log:
        def info(self, line):
            pass
        error = info

    calls = iter([("cut", 0.3), ("resumed", 0.2), ("fresh", 0.1)])

    def fake_loop(cfg, rec, out, work, log):
        kind, secs = next(calls)
        time.sleep(secs)
        if kind == "cut":
            raise VxError("loop on GPU 0 ended with signal 15")
        return loop_result(secs, secs + (1.0 if kind == "resumed" else 0.0))

    monkeypatch.setattr(R, "run_slice", fake_loop)
    monkeypatch.setattr(R, "no_pair", lambda res, out: None)
    slice_json = next(h200_slices.glob("linear-fp32-1x4096x260*/slice.json"))
    out = tmp_path / "suite" / "s"
    out.mkdir(parents=True)
    walls = []
    for budget in (10, 20, 30):           # each call's settings differ, so no attempt is up to date
        cfg = config.load(["gpu=false", f"loop.wall_s={budget}"])
        walls.append(R._run("s", slice_json, cfg, out, tmp_path / "work", Log(), None, None))
    cut, resumed, fresh = walls
    assert cut["status"] == "failed" and cut["wall_s_total"] == pytest.approx(cut["wall_s"]) and cut["wall_s"] >= 0.3
    assert resumed["wall_s_total"] == pytest.approx(cut["wall_s_total"] + resumed["wall_s"])
    assert fresh["wall_s_total"] == pytest.approx(fresh["wall_s"])                # a new trail: its own seconds only
    assert json.loads((out / "status.json").read_text())["wall_s_total"] == fresh["wall_s_total"]
