"""A checked CUDA launch is a value (`targets.launch.Launch`): `run_cuda` builds it, its result carries it, and its
JSON is the worker's job byte for byte. No GPU here: the worker's process and pool are stand-ins that record what
they were handed."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.conftest import conf, slice_record
from tests.kernel_matrix import PROBLEMS
from vxsynth.checks.run import CheckEnv, checked
from vxsynth.kernels import tensors as T
from vxsynth.kernels.candidate import make
from vxsynth.kernels.strategy import Strategy
from vxsynth.targets import jail, proc, sanitizer
from vxsynth.targets.cuda import run_cuda
from vxsynth.targets.launch import Launch
from vxsynth.targets.vortex_host import HostExecutor, VortexConfig, lmem_per_block

KINDS = {   # split-K into an fp32 output (zeroed first), into a 16-bit one (an fp32 workspace), no split
    "zero_output": ("linear_odd", "FP32", Strategy(block_m=32, block_n=32, block_k=8, thread_m=2, thread_n=2,
                                                   split_k=3)),
    "workspace": ("bmm_bcast", "BF16", Strategy(tensor_core=True, block_m=32, block_n=32, block_k=16, thread_m=2,
                                                thread_n=2, split_k=3)),
    "plain": ("linear_odd", "FP32", Strategy()),
}


def _candidate(kind: str):
    name, prec, s = KINDS[kind]
    return make(PROBLEMS[name][0], s, prec, lmem_per_block(s.threads, VortexConfig()))


def _inputs(c, seed: int = 0, case: str = "normal"):
    bufs = T.make_inputs(c.problem, seed, case, c.precision)
    return {k: T.to_numpy(v) for k, v in T.kernel_storages(c.problem, c.strategy.layout, bufs).items()}


class Pool:
    """A GPU pool that records the jobs it gets and fails them (no GPU), or (`zeros`) answers with a zero output."""

    def __init__(self, zeros: bool = False):
        self.jobs, self.zeros = [], zeros

    def run(self, job: dict, timeout_s: float) -> dict:
        self.jobs.append(json.dumps(job))
        if self.zeros:
            np.save(job["output"], np.zeros(job["out_elements"], np.float32))
            return {"ok": True, "kernel_us": [1.0]}
        return {"ok": False, "error": "no GPU here", "failure": "crash"}

    def close(self):
        pass


@pytest.mark.parametrize("kind", list(KINDS))
def test_run_cuda_hands_its_launch_on_and_the_worker_gets_its_json(kind, tmp_path, monkeypatch):
    """Through a fresh worker process (the job file on its command line) and through the pool (the job line): both
    the launch's JSON, which reads back as the same launch."""
    c = _candidate(kind)
    seen = []
    monkeypatch.setattr(proc, "run", lambda cmd, timeout_s, **kw: seen.append(cmd) or proc.ProcResult(
        False, 1, "", "no GPU here", 0.0, "exit status 1"))
    r = run_cuda(c, tmp_path / "k.cubin", _inputs(c), tmp_path / "one", repeat=3, flush_l2=True)
    job = tmp_path / "one" / "job.json"
    assert not r.ok and r.failure == "crash" and seen[0][-1] == str(job)
    assert job.read_text() == json.dumps(r.launch.to_dict())
    assert Launch.from_dict(json.loads(job.read_text())) == r.launch
    lc = c.meta["launch"]
    assert r.launch.to_dict() == {
        "cubin": str(tmp_path / "k.cubin"), "kernel": c.name, "grid": lc["grid"], "block": lc["block"],
        "smem_bytes": lc["smem_bytes"], "dtype": c.problem.dtype,
        "out_elements": c.meta["arg_layout"]["cuda"]["out"]["elements"],
        "inputs": {role: str(tmp_path / "one" / f"in_{role}.npy") for role in ("a", "b", "bias") if role in _inputs(c)},
        "output": str(tmp_path / "one" / "out.npy"), "repeat": 3, "flush_l2": True,
        **({"zero_output": True} if kind == "zero_output" else {}),
        **({"workspace_words": lc["workspace_words"]} if kind == "workspace" else {})}
    assert all(p.exists() for p in r.launch.inputs.values())
    pool = Pool()
    r2 = run_cuda(c, tmp_path / "k.cubin", _inputs(c), tmp_path / "pool", pool=pool)
    assert not r2.ok and pool.jobs == [(tmp_path / "pool" / "job.json").read_text()]
    assert Launch.from_dict(json.loads(pool.jobs[0])) == r2.launch and r2.launch.repeat == 1 and not r2.launch.flush_l2


@pytest.mark.skipif(jail.available() is not None, reason=str(jail.available()))
def test_the_checks_hand_on_the_launch_of_their_last_case(tmp_path):
    """`checks.checked` carries the launch its last case ran (the normal case: the inputs the files hold)."""
    c = _candidate("plain")
    pool = Pool(zeros=True)
    env = CheckEnv(HostExecutor(VortexConfig()), conf("precision"), cuda=True, cases=("large", "normal"), pool=pool)
    done = checked(c, "s", "t", env, tmp_path, None, seed=5, cubin=tmp_path / "k.cubin")
    assert len(pool.jobs) == 2 and "cuda" not in done.failures and done.records["check1"].verdict == "fail"
    assert done.launch == Launch.from_dict(json.loads(pool.jobs[-1]))
    assert (tmp_path / "cuda" / "job.json").read_text() == json.dumps(done.launch.to_dict())
    for role, f in done.launch.inputs.items():
        assert np.array_equal(np.load(f), _inputs(c, 6, "normal")[role])


def test_compute_sanitizer_runs_the_launch_it_is_given(tmp_path, monkeypatch):
    c = _candidate("workspace")
    launch = run_cuda(c, tmp_path / "k.cubin", _inputs(c), tmp_path / "c", pool=Pool()).launch
    seen = []
    monkeypatch.setattr(proc, "run", lambda cmd, timeout_s, **kw: seen.append(cmd) or proc.ProcResult(
        True, 0, "========= ERROR SUMMARY: 0 errors", "", 0.0))
    ok, results = sanitizer.check(launch, tmp_path / "s")
    assert ok and [r["tool"] for r in results] == list(sanitizer.TOOLS)
    assert {cmd[-1] for cmd in seen} == {str(tmp_path / "s" / "job.json")}
    assert Launch.from_dict(json.loads((tmp_path / "s" / "job.json").read_text())) == launch


def test_the_harness_measures_the_kernel_of_the_launch_it_is_given(h200_slices, tmp_path, monkeypatch):
    """`measure.candidate` takes the cubin and geometry of the launch it is given into the harness's input."""
    from vxsynth.signature import measure

    rec = slice_record(h200_slices, "linear-fp32-302x512x512-h200-6d8528")
    c = make(rec.problem, Strategy(split_k=2), rec.precision, lmem_per_block(256, VortexConfig()))
    launch = run_cuda(c, tmp_path / "k.cubin", {}, tmp_path / "c", pool=Pool()).launch
    seen = {}
    monkeypatch.setattr(measure, "ncu_signature", lambda pcfg, target, workdir, regex, nvtx, pick: seen.update(
        target=target) or measure.Measurement(False, error="no GPU here"))
    assert not measure.candidate(c, launch, rec, conf("platform", "h200"), tmp_path / "ncu").ok
    spec = json.loads((tmp_path / "ncu" / "harness.json").read_text())
    assert seen["target"][-1] == str(tmp_path / "ncu" / "harness.json")
    keys = ("cubin", "kernel", "grid", "block", "smem_bytes", "zero_output", "workspace_words")
    assert {k: spec[k] for k in keys} == {
        "cubin": str(tmp_path / "k.cubin"), "kernel": c.name, "grid": c.meta["launch"]["grid"],
        "block": c.meta["launch"]["block"], "smem_bytes": c.meta["launch"]["smem_bytes"],
        "zero_output": bool(c.meta["launch"].get("zero_output")), "workspace_words": launch.workspace_words}


@pytest.mark.parametrize("where", ["isolated", "workload"])
def test_the_loop_measures_the_launch_it_is_given_where_the_config_says(where, h200_slices, tmp_path, monkeypatch):
    """`loop_env` on a GPU host (forced here): `loop.measure_in` picks the harness or the running workload, and either
    way the candidate's own launch (its cubin) is what gets measured, in the evaluation's work folder."""
    from flows.config import load
    from vxsynth.reconstruct import setup
    from vxsynth.signature import in_workload, measure

    monkeypatch.setattr(setup, "gpu_skipped", lambda cfg: None)
    monkeypatch.setattr(setup, "GpuPool", lambda n: Pool())
    monkeypatch.setattr(jail, "available", lambda: None)
    seen = {}
    monkeypatch.setattr(measure, "candidate", lambda c, launch, rec, pcfg, at: seen.update(
        how="harness", cubin=launch.cubin, at=at) or measure.Measurement(False, error="no GPU here"))
    monkeypatch.setattr(in_workload, "candidate", lambda rec, folder, cubin, kernel, pcfg, at: seen.update(
        how="workload", cubin=cubin, at=at, kernel=kernel) or measure.Measurement(False, error="no GPU here"))
    env, why = setup.loop_env(load(["platform=h200", f"loop.measure_in={where}"]), conf("platform", "h200"), tmp_path / "w")
    assert why is None and env.measured_with["measured_in"] == where
    rec = slice_record(h200_slices, "linear-fp32-302x512x512-h200-6d8528")
    c = make(rec.problem, Strategy(), rec.precision, lmem_per_block(256, VortexConfig()))
    launch = run_cuda(c, tmp_path / "k.cubin", {}, tmp_path / "c", pool=Pool()).launch
    env.measure(c, launch, rec, tmp_path / "cand", tmp_path / "e")
    assert seen["how"] == {"isolated": "harness", "workload": "workload"}[where] and seen["cubin"] == tmp_path / "k.cubin"
    assert seen["at"] == tmp_path / "e" / {"isolated": "ncu", "workload": "ncu-workload"}[where]
    assert seen.get("kernel", c.name) == c.name


def test_a_tma_launch_carries_its_tensor_maps_and_each_fits_only_its_own_buffer(tmp_path):
    """`tma`: the launch hands the launcher one map per operand, which `tensor_map.error` admits on a buffer of the
    operand's own size and refuses one element short, misaligned, or with a box that is not one swizzle row."""
    from vxsynth.kernels.problem import Gemm
    from vxsynth.targets import tensor_map

    p = Gemm("bmm", 4, 51, 40, 64, (51 * 64, 64, 1), (40 * 64, 1, 64), False, "bfloat16")
    s = Strategy(tensor_core=True, mma="wgmma", tma=True, block_m=64, block_n=64, block_k=64, thread_m=4, thread_n=4,
                 stages=3, vector=8)
    c = make(p, s, "BF16", lmem_per_block(s.threads, VortexConfig()))
    launch = run_cuda(c, tmp_path / "k.cubin", {}, tmp_path / "c", pool=Pool()).launch
    assert [m["operand"] for m in launch.tensor_maps] == ["a", "b"] and Launch.from_dict(launch.to_dict()) == launch
    a, b = launch.tensor_maps
    assert a == {"operand": "a", "dims": [64, 51, 4], "strides": [128, 51 * 128], "box": [64, 64]}
    assert b == {"operand": "b", "dims": [64, 40, 4], "strides": [128, 40 * 128], "box": [64, 64]}
    assert tensor_map.error(a, "bfloat16", 1 << 20, p.a_extent() * 2) is None
    assert "reaches" in tensor_map.error(a, "bfloat16", 1 << 20, p.a_extent() * 2 - 2)
    assert "reaches" in tensor_map.error(a, "bfloat16", (1 << 20) + 2, p.a_extent() * 2)
    assert "box" in tensor_map.error({**a, "box": [32, 64]}, "bfloat16", 1 << 20, p.a_extent() * 2)
    assert "strides" in tensor_map.error({**a, "strides": [120, 51 * 128]}, "bfloat16", 1 << 20, p.a_extent() * 2)
    assert "tensor_maps" not in make(p, s.with_(tma=False), "BF16").meta["launch"]


def test_the_in_workload_launcher_sizes_a_view_by_its_strides(tmp_path):
    """The dispatch runner hands `tensor_map.error` the bytes a view spans by its own strides: a slice of a wider
    matrix (rows 96 elements apart, 64 used) is admitted, where its numel's bytes would refuse the map; a broadcast
    batch (stride 0) spans one matrix."""
    import torch

    from vxsynth.dispatch.runners import operand_buffers, span_bytes
    from vxsynth.kernels.problem import Gemm
    from vxsynth.targets import tensor_map

    p = Gemm("bmm", 1, 51, 40, 64, (51 * 96, 96, 1), (40 * 64, 1, 64), False, "bfloat16")
    s = Strategy(tensor_core=True, mma="wgmma", tma=True, block_m=64, block_n=64, block_k=64, thread_m=4, thread_n=4,
                 stages=3, vector=8)
    launch = run_cuda(make(p, s, "BF16", lmem_per_block(s.threads, VortexConfig())), tmp_path / "k.cubin", {},
                      tmp_path / "c", pool=Pool()).launch
    a = next(m for m in launch.tensor_maps if m["operand"] == "a")
    view = torch.zeros(51, 96, dtype=torch.bfloat16)[:, :64]
    assert view.stride() == (96, 1) and span_bytes(view) == p.a_extent() * 2 == (50 * 96 + 64) * 2
    address, nbytes = operand_buffers(view, torch.zeros(64, 40, dtype=torch.bfloat16))["a"]
    assert address == view.data_ptr() and nbytes == span_bytes(view)
    assert tensor_map.error(a, "bfloat16", 1 << 20, nbytes) is None
    assert "reaches" in tensor_map.error(a, "bfloat16", 1 << 20, view.numel() * view.element_size())
    kv = torch.zeros(1, 51, 64).expand(8, 51, 64)
    assert span_bytes(kv) == 51 * 64 * 4 < kv.numel() * 4 and span_bytes(torch.zeros(0, 3)) == 0
