"""GPU tests (run on the H200: `pytest -o addopts= -m gpu tests/test_gpu.py`)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from tests.conftest import conf, runnable, slice_record
from tests.kernel_matrix import CLUSTER_ONLY, PROBLEMS, RACY, STRATEGIES, in_matrix
from vxsynth.checks.run import CheckEnv, checked, run as run_checks
from vxsynth.kernels.candidate import make
from vxsynth.kernels.strategy import Strategy
from vxsynth.records import SliceRecord
from vxsynth.targets.vortex_host import HostExecutor, VortexConfig, lmem_per_block

pytestmark = pytest.mark.gpu


def _env(cuda=True, max_blocks=6):
    return CheckEnv(HostExecutor(VortexConfig(max_blocks=max_blocks)), conf("precision"), cuda=cuda, device="cuda",
                    precision_flags={"cuda.matmul.allow_tf32": False, "cudnn.allow_tf32": True})


CHUNKS = 4        # each problem's strategies in this many tests, so that pytest-xdist spreads the matrix over workers


def _todo(name: str, sync: bool, chunk: int) -> list:
    """The (precision, index, strategy) of chunk `chunk` of the matrix on `name`: the mma.sync/wgmma forms (warp tiles
    included) or all others, where the strategy is runnable."""
    p, paths = PROBLEMS[name]
    return [(prec, i, s) for prec in paths for i, s in enumerate(STRATEGIES)
            if i % CHUNKS == chunk and (s.mma != "wmma") == sync and in_matrix(name, s) and runnable(p, s, prec)]


def _matrix_passes(name: str, sync: bool, chunk: int, tmp_path) -> None:
    """Every runnable strategy of the chunk passes both checks on `name`; the whole matrix runs at least 3 on it (none
    with tensor cores on an FP32-only problem, none without them on a problem for the cluster strategies)."""
    p, paths = PROBLEMS[name]
    total = sum(len(_todo(name, sync, k)) for k in range(CHUNKS))
    none = all(pr == "FP32" for pr in paths) if sync else name in CLUSTER_ONLY
    assert total == 0 if none else total >= 3
    env = _env()
    for prec, i, s in _todo(name, sync, chunk):
        recs = run_checks(make(p, s, prec, lmem_per_block(s.threads, VortexConfig())), name, f"s{i}", env, tmp_path / f"{prec}{i}", tmp_path / "records")
        assert recs["check1"].verdict == "pass", (prec, s, recs["check1"].reason)
        assert recs["check2"].verdict == "pass", (prec, s, recs["check2"].reason)


@pytest.mark.parametrize("chunk", range(CHUNKS))
@pytest.mark.parametrize("name", list(PROBLEMS))
def test_cuda_candidates_match_torch_on_h200(name, chunk, tmp_path):
    _matrix_passes(name, False, chunk, tmp_path)


@pytest.mark.parametrize("chunk", range(CHUNKS))
@pytest.mark.parametrize("name", list(PROBLEMS))
def test_mma_sync_candidates_match_torch_on_h200(name, chunk, tmp_path):
    """The mma.sync + ldmatrix forms (every fragment layout: ldmatrix, .trans, scalar loads; per fragment and on warp
    tiles) and Hopper warpgroup MMA (wgmma from the swizzled ring: one and two warpgroups along M or N, split-K into
    BF16, NHWC TF32) against torch."""
    _matrix_passes(name, True, chunk, tmp_path)


@pytest.mark.parametrize("double_buffer", [False, True])
def test_unstaged_a_on_the_real_stem(double_buffer, h200_slices, tmp_path):
    """ACT's 7x7 stem in its informed start's form (`tests/test_start.py`): mma.sync on 4x1 warps loading A's
    fragments from global memory (NHWC, the im2col decode per element), the filters staged, with and without
    register-prefetched B; both checks pass on the real slice."""
    rec = slice_record(h200_slices, "conv2d-tf32-3to64k7x7i480x640s2")
    s = Strategy(block_m=128, block_n=32, block_k=16, thread_m=4, thread_n=8, stage_a=False, vector=4, tensor_core=True,
                 warps_m=4, min_blocks=4, layout="nhwc", mma="sync", double_buffer=double_buffer)
    recs = run_checks(make(rec.problem, s, rec.precision, lmem_per_block(s.threads, VortexConfig())), rec.slice_id, "gpu",
                      _env(), tmp_path, tmp_path / "records")
    assert recs["check1"].verdict == "pass", recs["check1"].reason
    assert recs["check2"].verdict == "pass", recs["check2"].reason


@pytest.mark.parametrize("prefix", ["linear-fp32-302x512x3200", "conv2d-tf32-512to512k3x3i15x20", "matmul-bf16-8x51x256x355"])
def test_check1_and_check2_on_real_slices(prefix, h200_slices, tmp_path):
    rec = slice_record(h200_slices, prefix)
    c = make(rec.problem, Strategy(tensor_core=rec.precision != "FP32"), rec.precision)
    recs = run_checks(c, rec.slice_id, "gpu", _env(), tmp_path, tmp_path / "records")
    assert recs["check1"].verdict == "pass", recs["check1"].reason
    assert recs["check2"].verdict == "pass", recs["check2"].reason
    assert 0 < recs["check2"].cases[0]["covered_fraction"] <= 1


def test_threads_past_a_tile_leave_shared_memory_race_free(h200_slices, tmp_path):
    from vxsynth.targets import sanitizer

    rec = slice_record(h200_slices, "conv2d-fp32-3to1152k14x14")
    c = make(rec.problem, Strategy().with_(**RACY), rec.precision)
    done = checked(c, rec.slice_id, "gpu", _env(), tmp_path, tmp_path / "records")
    assert done.records["check1"].verdict == "pass", done.records["check1"].reason
    ok, results = sanitizer.check(done.launch, tmp_path / "sanitizer")
    assert ok, results


@pytest.mark.parametrize("prefix,fill", [(p, f) for p in ["linear-bf16-51x1024x4096", "conv1d-tf32-1024to1024k5l16"]
                                          for f in ["cp.async", "tma"]]
                         + [("linear-bf16-51x1024x4096", f) for f in ["tma-ws", "tma-cluster", "tma-ws-cluster",
                                                                      "tma-pending", "tma-ws-cluster-pending"]]
                         + [("conv1d-tf32-1024to1024k5l16", "cp.async-pending")])
def test_wgmma_on_real_slices(prefix, fill, h200_slices, tmp_path):
    """Warpgroup MMA from the swizzled ring on Pi0's skinny BF16 linear (K 4096: 64 K tiles, two warpgroups along N)
    and a Diffusion TF32 conv1d read as NHWC, the ring filled by cp.async or by TMA (both operands of the linear, the
    conv's weights), and on the linear by a TMA producer warpgroup (warp_specialized) and in clusters of 4 blocks that
    share A's tile by multicast (its reference runs in clusters of 4), and with one wgmma group left pending per K
    tile: both checks pass and compute-sanitizer finds nothing."""
    from vxsynth.kernels.strategy import check, wgmma_variant
    from vxsynth.targets import sanitizer

    rec = slice_record(h200_slices, prefix)
    p = rec.problem
    near = Strategy(tensor_core=True, mma="sync", block_m=64, block_n=128, block_k=64, thread_m=4, thread_n=8, stages=4,
                    vector=8 if p.dtype == "bfloat16" else 4, layout="nhwc" if p.kind == "conv" else "nchw")
    s = wgmma_variant(p, near)
    assert s is not None and s.mma == "wgmma"
    s = s.with_(tma="tma" in fill, warp_specialized="ws" in fill, cluster=4 if "cluster" in fill else 1,
                wgmma_pending=int("pending" in fill))
    assert check(p, s) is None and s.cuda_threads == s.threads + 128 * s.warp_specialized
    c = make(p, s, rec.precision, lmem_per_block(s.threads, VortexConfig()))
    done = checked(c, rec.slice_id, "wgmma", _env(), tmp_path, tmp_path / "records")
    assert done.records["check1"].verdict == "pass", done.records["check1"].reason
    assert done.records["check2"].verdict == "pass", done.records["check2"].reason
    if sanitizer.available():
        ok, results = sanitizer.check(done.launch, tmp_path / "sanitizer")
        assert ok, results


def test_replacement_entry_inside_act_on_h200(h200_slices, tmp_path):
    from vxsynth.dispatch.replace import Replacement, Route, slice_signature
    from vxsynth.dispatch.runners import cuda_runner
    from vxsynth.targets.cuda import compile_cuda
    from vxsynth.workloads.builders import build_policy, make_batch, run_inference
    from vxsynth.workloads.spec import WorkloadSpec

    recs = [SliceRecord.load(p) for p in h200_slices.glob("linear-fp32-302x*/slice.json")]
    assert recs
    routes = []
    for rec in recs:
        c = make(rec.problem, Strategy(), rec.precision)
        cr = compile_cuda(c, tmp_path / rec.slice_id)
        assert cr.ok, cr.error
        occ = [o for o in rec.occurrences if o["workload"] == "act"][0]
        routes.append(Route(rec.slice_id, slice_signature(rec.op_call), cuda_runner(c, cr.cubin, rec.op_call["op"]),
                            c.name, occ["calls_per_inference"]))
    spec = WorkloadSpec.from_config(conf("workload", "act"))
    policy, _ = build_policy(spec, "cuda")
    batch = make_batch(spec, "cuda")
    ref = run_inference(policy, batch)
    rep = Replacement(routes)
    with rep.active(), torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        out = run_inference(policy, batch)
        torch.cuda.synchronize()
    kernels = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    assert rep.prove(1, kernels) == []
    assert sum(r.dispatched for r in routes) > 0
    assert torch.allclose(out, ref, atol=1e-3, rtol=1e-3), (out - ref).abs().max()


def test_reference_and_candidate_share_one_harness(h200_slices, tmp_path):
    """The reference op and a candidate are measured through the same harness (inputs, warm-up, NVTX range, ncu
    settings); the reference three times in one harness process, its spread and noise recorded."""
    from vxsynth.signature import measure
    from vxsynth.signature.distance import distance

    rec = slice_record(h200_slices, "linear-fp32-302x512x512-h200-6d8528")
    pcfg = conf("platform", "h200")
    ref = measure.reference(rec, pcfg, tmp_path / "ref", repeats=3)
    assert ref.ok, ref.error
    assert ref.settings["repeats"] == 3 and ref.settings["replay_main_kernel_matches"]
    assert ref.settings["repeats_in"] == "one harness process" and len(ref.kernels_seen) % 3 == 0
    assert 0 <= ref.settings["noise_D"] < 0.05 and set(ref.settings["spread"]) == set(pcfg["components"])
    p = rec.problem
    c = make(p, Strategy(), rec.precision, lmem_per_block(256, VortexConfig()))
    done = checked(c, "harness", "r000", _env(), tmp_path / "c", tmp_path / "records")
    assert done.records["check1"].verdict == "pass", done.records["check1"].reason
    m = measure.candidate(c, done.launch, rec, pcfg, tmp_path / "cand")
    assert m.ok, m.error
    assert m.kernel.startswith(c.name) and len(m.kernels_seen) == 1          # only the candidate, inside the range
    common = (set(m.settings) & set(ref.settings)) - {"replay_main_kernel_matches"}
    assert {"harness", "warmup", "nvtx_range", "inputs", "cache_control", "clock_control"} <= common
    assert all(m.settings[k] == ref.settings[k] for k in common)
    assert 0 < distance(m.values, ref.values, tuple(pcfg["components"])).D < 1


FAULTS = {   # CUDA-side edits of the default candidate (check 2 unaffected), and the verdict each must get
    "hang": ({"body": "while (((volatile const float*)A)[0] == ((volatile const float*)A)[0]) { }"}, "crashed", "timed out"),
    "illegal_address": ({"body": "if (tid == 0) C[(size_t)1 << 34] = 1.0f;"}, "crashed", "worker restarted"),
    "past_output": ({"body": "C[P_B * C_SB + tid] = 0.0f;"}, "rejected", "guard zone"),
    "nan_writer": ({"replace": [["] = v;", "] = (m == 7 && n == 3) ? __int_as_float(0x7fc00000) : v;"]]}, "rejected",
                   "outside tolerance"),
}


def test_a_batch_isolates_faulty_candidates(h200_slices, tmp_path):
    """A batch mixing good candidates with a hanging one, an illegal-address writer, a writer past its output and a
    NaN writer: the bad ones lose only themselves (with their reasons), the good ones get the verdicts and D they
    get alone (within the reference's noise), the persistent worker still serves jobs, nothing compiles twice."""
    from vxsynth.checks.gates import attack
    from vxsynth.reconstruct.loop import LoopConfig, LoopEnv, evaluate_batch
    from vxsynth.signature import measure
    from vxsynth.targets.cuda import compile_cuda
    from vxsynth.targets.gpu_worker import GpuPool
    from vxsynth.trail import TrailRow

    rec = slice_record(h200_slices, "linear-fp32-302x512x512-h200-6d8528")
    pcfg, p = conf("platform", "h200"), rec.problem
    pool = GpuPool(torch.cuda.device_count())
    chk = _env()
    chk.pool, chk.compile_cache, chk.timeout_s = pool, tmp_path / "cubins", 15
    env = LoopEnv(chk, conf("sandbox")["rules"], component_set=tuple(pcfg["components"]),
                  measure=lambda c, launch, r, f, at: measure.candidate(c, launch, r, pcfg, at / "ncu"),
                  measure_batch=lambda b, r, at: measure.candidates(b, r, pcfg, at / "ncu-batch"))
    ref = measure.reference(rec, pcfg, tmp_path / "ref", repeats=3)
    good = [Strategy(), Strategy(block_m=32, block_n=32, thread_m=2, thread_n=2),
            Strategy(block_m=32, block_n=64, block_k=8, thread_m=4, thread_n=2, mapping="strided")]
    base = make(p, Strategy(), rec.precision, lmem_per_block(256, VortexConfig()))
    bad = {k: attack(base, {"side": "cuda", **edit}, "") for k, (edit, _, _) in FAULTS.items()}
    items = [(i + 1, s, {}, f"good{i}", "", None) for i, s in enumerate(good)]
    items += [(len(items) + j + 1, Strategy(), {}, k, "", (c.cuda_source, c.vortex_source)) for j, (k, c) in enumerate(bad.items())]
    parent = TrailRow.parent_with(10.0)
    cfg = LoopConfig(sanitize=False, batch=len(items))
    rows = {r.edit: r for r in evaluate_batch(rec, items, 0, env, cfg, "t", tmp_path / "batch", tmp_path / "wb",
                                                  ref.values, parent)}
    seen = {k: (r.decision, r.reason[:300]) for k, r in rows.items()}
    for k, (_, decision, why) in FAULTS.items():
        assert rows[k].decision == decision and why in rows[k].reason, (k, seen)
    assert pool.stats()["starts"] >= 3 and pool.stats()["faults"] >= 2          # replaced after the hang and the trap
    assert sorted(r.decision for k, r in rows.items() if k.startswith("good")) == ["kept", "reverted", "reverted"]
    for i, s in enumerate(good):
        alone = evaluate_batch(rec, [(1, s, {}, "alone", "", None)], 0, env, cfg, "t", tmp_path / f"alone{i}",
                                tmp_path / f"wa{i}", ref.values, parent)[0]
        assert alone.check1 == rows[f"good{i}"].check1 == "pass" and alone.check2 == "pass"
        assert abs(alone.D - rows[f"good{i}"].D) <= max(0.01, 3 * ref.settings["noise_D"]), (s, alone.D, rows[f"good{i}"].D)
    again = compile_cuda(base, tmp_path / "again", cache=tmp_path / "cubins")
    assert again.ok and again.wall_s == 0.0 and again.cubin.parent.parent == tmp_path / "cubins"
    pool.close()


def test_split_k_into_a_bf16_output_on_a_real_slice(h200_slices, tmp_path):
    """Split-K into a 16-bit output (fp32 partial tiles in a zeroed workspace, the last split adds them) on Pi0's
    skinny BF16 linear (M 51, K 4096): both checks pass, compute-sanitizer finds nothing, ncu measures the candidate
    alone through the harness (the workspace's zeroing stays outside), and the speed probe's timers (events, and ncu
    for its finalists) find it faster than the same tile unsplit (16 output tiles cannot stream the weights on one SM
    each)."""
    from vxsynth.reconstruct import probe_timers, speed
    from vxsynth.signature import measure
    from vxsynth.targets import sanitizer
    from vxsynth.targets.gpu_worker import GpuPool

    rec = slice_record(h200_slices, "linear-bf16-51x1024x4096")
    p, pcfg = rec.problem, conf("platform", "h200")
    base = Strategy(tensor_core=True, mma="sync", block_m=32, block_n=64, block_k=32, thread_m=2, thread_n=4, stages=3,
                    vector=4)
    split = base.with_(split_k=8)
    c = make(p, split, "BF16", lmem_per_block(split.threads, VortexConfig()))
    assert c.meta["launch"]["workspace_words"] > 0 and "zero_output" not in c.meta["launch"]
    done = checked(c, rec.slice_id, "split", _env(), tmp_path / "split", tmp_path / "records")
    assert done.records["check1"].verdict == "pass", done.records["check1"].reason
    assert done.records["check2"].verdict == "pass", done.records["check2"].reason
    assert done.launch.workspace_words == c.meta["launch"]["workspace_words"] and not done.launch.zero_output
    if sanitizer.available():
        ok, results = sanitizer.check(done.launch, tmp_path / "sanitizer")
        assert ok, results
    m = measure.candidate(c, done.launch, rec, pcfg, tmp_path / "ncu")
    assert m.ok, m.error
    assert m.kernel.startswith(c.name) and len(m.kernels_seen) == 1
    chk = _env()
    chk.pool = GpuPool(1)
    pair_of = lambda s: make(p, s, "BF16", lmem_per_block(s.threads, VortexConfig()))     # noqa: E731
    timed = probe_timers.cuda_timer(p, pair_of, chk, tmp_path / "probe")([base, split])
    ncu_us = [speed.ncu_us(m.metrics) for m in probe_timers.ncu_timer(rec, pair_of, chk, pcfg, tmp_path / "probe-ncu")([base, split])]
    chk.pool.close()
    assert all(t.us for t in timed), [t.error for t in timed]
    assert timed[1].us < timed[0].us, [t.us for t in timed]
    # ncu's duration of the same launches: the same order, and no launch overhead (events count about 1.7 us of it)
    assert all(ncu_us) and ncu_us[1] < ncu_us[0] and all(n < t.us for n, t in zip(ncu_us, timed)), (ncu_us, timed)


def test_the_measured_launch_is_judged_like_a_checked_one(h200_slices, tmp_path):
    """Issue 39 hole 1: a kernel that computes when checked and skips its work on the measurement's inputs (it
    recognises their first value) passes both checks, but the harness judges the measured launch's output: the
    measurement fails as a wrong output. The same kernel reading its output's guard word (what tells a checked launch
    apart when only the checks guard the output) is measured and right: the measured buffers are the checks'."""
    import struct

    from vxsynth.kernels import tensors as T
    from vxsynth.signature import measure

    rec = slice_record(h200_slices, "linear-fp32-302x512x512-h200-6d8528")
    p, pcfg = rec.problem, conf("platform", "h200")
    good = make(p, Strategy(), rec.precision, lmem_per_block(256, VortexConfig()))
    a0 = struct.unpack("<I", struct.pack("<f", float(T.make_inputs(p, 0)["a"][0])))[0]
    anchor = "const int tid = threadIdx.x;"
    for name, guard, wrong in (("fingerprint", f"__float_as_uint(A[0]) == {a0}u", True),
                               ("guard_word", "__float_as_uint(C[P_M * P_N]) != 0x7FA5C3E1u", False)):
        c = dataclasses.replace(good, cuda_source=good.cuda_source.replace(anchor, f"{anchor}\n    if ({guard}) return;", 1))
        done = checked(c, "measured", name, _env(), tmp_path / name, tmp_path / "records")
        assert done.records["check1"].verdict == "pass", (name, done.records["check1"].reason)
        m = measure.candidate(c, done.launch, rec, pcfg, tmp_path / f"ncu-{name}")
        assert m.wrong_output == wrong and m.ok != wrong, (name, m.error)
