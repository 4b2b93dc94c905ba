"""The persistent CUDA worker's protocol and fault handling, on this CPU machine (no CuPy here, so every job fails
the way a CUDA error does: a fatal reply, then a fresh worker)."""

from __future__ import annotations

import importlib.util
import os
import time

import pytest

from vxsynth.targets.gpu_worker import GpuPool, GpuWorker, visible

pytestmark = pytest.mark.skipif(importlib.util.find_spec("cupy") is not None, reason="CuPy here: see test_gpu.py")


def _job(tmp_path, a):
    return {"cubin": str(tmp_path / "k.cubin"), "kernel": "k", "grid": [1, 1, 1], "block": [32, 1, 1], "dtype": "float32",
            "out_elements": 4, "inputs": {"a": str(a)}, "output": str(tmp_path / "out.npy")}


def test_a_fatal_reply_replaces_the_worker(tmp_path):
    """The replacement starts within the faulting job's call (its recovery is that job's time, not the next's)."""
    w = GpuWorker()
    for n in (1, 2):
        r = w.run(_job(tmp_path, tmp_path / "missing.npy"), 60)
        assert not r["ok"] and "worker restarted" in r["error"] and w.starts == n + 1 and w.faults == n
        assert r["failure"] == "crash"
        assert w.p is not None and w.p.poll() is None
    w.close()


def test_a_hanging_job_gets_the_worker_killed_and_the_pool_goes_on(tmp_path):
    fifo = tmp_path / "a.npy"
    os.mkfifo(fifo)                     # reading it blocks forever: the job hangs
    pool = GpuPool(1)
    t = time.perf_counter()
    r = pool.run(_job(tmp_path, fifo), 3)
    assert not r["ok"] and "timed out after 3 s" in r["error"] and "process group killed" in r["error"]
    assert r["failure"] == "timeout"
    assert time.perf_counter() - t < 30
    r = pool.run(_job(tmp_path, tmp_path / "missing.npy"), 60)        # a fresh worker answers the next job
    assert not r["ok"] and "worker restarted" in r["error"] and r["failure"] == "crash"
    assert pool.stats() == {"workers": 1, "starts": 3, "faults": 2}
    pool.close()


def test_workers_name_the_process_s_own_gpus(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    assert visible(1) == "5"
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert visible(2) == "2"
