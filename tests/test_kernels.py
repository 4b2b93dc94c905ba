"""Paired generation on CPU: for families x precision paths x strategies (strided mappings and odd shapes taken from
the real slices included), the Vortex candidate on the host executor matches torch; every Vortex candidate
cross-compiles for rv32imf; every CUDA candidate compiles with nvcc for sm_90."""

from __future__ import annotations

import re

import pytest

from tests.conftest import conf, runnable, slice_record
from tests.kernel_matrix import PROBLEMS, RACY, STRATEGIES, in_matrix
from vxsynth.checks.run import CheckEnv, run as run_checks
from vxsynth.kernels.candidate import make
from vxsynth.kernels.geometry import static_smem_bytes
from vxsynth.kernels.problem import from_dict
from vxsynth.kernels.strategy import Strategy
from vxsynth.targets import riscv
from vxsynth.targets.cuda import compile_cuda, nvcc
from vxsynth.targets.vortex_host import HostExecutor, VortexConfig, lmem_per_block

ENV = CheckEnv(HostExecutor(VortexConfig(max_blocks=6)), conf("precision"), cases=("normal", "near_zero", "large", "shifted"))


def _matrix():
    for name, (p, paths) in PROBLEMS.items():
        for prec in paths:
            for i, s in enumerate(STRATEGIES):
                if in_matrix(name, s) and runnable(p, s, prec):
                    yield pytest.param(p, prec, s, id=f"{name}-{prec}-s{i}")


@pytest.mark.parametrize("problem,precision,strategy", list(_matrix()))
def test_vortex_candidate_matches_torch(problem, precision, strategy, tmp_path):
    c = make(problem, strategy, precision, lmem_per_block(strategy.threads, VortexConfig()))
    rec = run_checks(c, "kernel-matrix", "t", ENV, tmp_path, None)["vortex_ref"]
    assert rec.verdict == "pass", rec.reason
    assert all(case["covered_fraction"] > 0 for case in rec.cases)


@pytest.mark.skipif(riscv.compiler() is None, reason="no riscv64-unknown-elf-gcc (install gcc-riscv64-unknown-elf)")
@pytest.mark.parametrize("problem,precision,strategy", list(_matrix()))
def test_vortex_candidate_cross_compiles_for_rv32imf(problem, precision, strategy, tmp_path):
    r = riscv.cross_compile(make(problem, strategy, precision, lmem_per_block(strategy.threads, VortexConfig())).vortex_source, tmp_path)
    assert r.ok, r.error
    assert r.fma > 0 and r.calls == ()  # fused multiply-adds on the F extension, no library calls


@pytest.mark.skipif(nvcc() is None, reason="nvcc not installed")
@pytest.mark.parametrize("problem,precision,strategy", list(_matrix()))
def test_cuda_candidate_compiles_for_sm90(problem, precision, strategy, tmp_path):
    r = compile_cuda(make(problem, strategy, precision), tmp_path)
    assert r.ok, r.error
    assert r.registers and r.spill_bytes == 0
    assert r.smem_bytes == static_smem_bytes(problem, strategy)    # what check() adds to the launch's dynamic bytes


def test_real_slice_shapes_odd_and_strided(h200_slices, tmp_path):
    """Real shapes: M=1 (Diffusion FiLM linear), the broadcast KV operand of Pi0's attention (batch stride 0), and the
    3-input-channel 7x7/2 conv of ACT, with a strided (uncoalesced on purpose) mapping."""
    for prefix, s in [("linear-fp32-1x4096x260", Strategy(block_m=16, block_n=64, thread_m=1, thread_n=4)),
                      ("matmul-bf16-8x51x256x355", Strategy(mapping="strided", block_k=8, thread_m=8, thread_n=2)),
                      ("conv2d-tf32-3to64k7x7i480x640s2", Strategy(mapping="strided"))]:
        rec = slice_record(h200_slices, prefix)
        c = make(rec.problem, s, rec.precision)
        r = run_checks(c, rec.slice_id, "t", ENV, tmp_path / prefix, None)["vortex_ref"]
        assert r.verdict == "pass", (prefix, r.reason)
        assert r.cases[0]["covered_fraction"] < 1.0 or prefix.startswith("linear")  # large grids run a window


def test_nhwc_kernels_read_the_transformed_operands(tmp_path, monkeypatch):
    """An NHWC strategy (16-byte channel copies, a tensor-core ring, split-K) computes the op when the checks hand it
    NHWC activations and KRSC weights, and fails when handed the op's own NCHW tensors: the layout is real."""
    from vxsynth.kernels import tensors as T

    p, _ = PROBLEMS["conv1d_k5"]
    s = Strategy(layout="nhwc", tensor_core=True, block_m=64, block_n=32, block_k=16, thread_m=4, thread_n=4,
                 stages=3, vector=4, split_k=2)
    c = make(p, s, "TF32_FP16", lmem_per_block(s.threads, VortexConfig()))
    assert c.meta["vector"] == {"a": 4, "b": 4}
    env = CheckEnv(HostExecutor(VortexConfig(max_blocks=6)), conf("precision"), cases=("normal", "shifted"))
    assert run_checks(c, "nhwc", "t", env, tmp_path / "nhwc", None)["vortex_ref"].verdict == "pass"
    monkeypatch.setattr(T, "kernel_storages", lambda p, layout, bufs: bufs)
    rec = run_checks(c, "nhwc", "t", env, tmp_path / "nchw", None)["vortex_ref"]
    assert rec.verdict == "fail" and "outside tolerance" in rec.reason


def _ring_steps():
    for name in ("conv2d_groups", "conv1d_k5", "conv2d_c3"):
        p, paths = PROBLEMS[name]
        for i, s in enumerate(STRATEGIES):
            if s.layout == "nhwc" and s.stages > 1 and in_matrix(name, s) and runnable(p, s, paths[-1]):
                yield pytest.param(name, paths[-1], s, id=f"{name}-{paths[-1]}-s{i}")


@pytest.mark.parametrize("name,precision,strategy", list(_ring_steps()))
def test_nhwc_rings_read_the_image_by_filter_tap_steps(name, precision, strategy, tmp_path):
    """A stage ring over NHWC channels whose K tiles stay within one filter tap reads the image and filters by steps
    (per-thread row offsets and tap masks set once per block, one add per K tile): the Vortex half, given the local
    memory to keep the CUDA ring, takes the same path and matches torch, with stride, padding, dilation, two images and
    two groups. Channels that are not a whole number of K tiles (3 input channels) keep the full decode."""
    p = PROBLEMS[name][0]
    cfg = VortexConfig(max_blocks=6, local_mem=1 << 20)
    c = make(p, strategy, precision, lmem_per_block(strategy.threads, cfg))
    assert "synchronous staging" not in c.meta["vortex_differs"].get("stages", "")    # the ring is kept
    assert ("iro_[l] + iko_" in c.vortex_source) == ((p.C // p.groups) % strategy.block_k == 0)
    assert ("iro_[l] + iko_" in c.cuda_source) == ((p.C // p.groups) % strategy.block_k == 0)
    env = CheckEnv(HostExecutor(cfg), conf("precision"), cases=("normal", "shifted"))
    rec = run_checks(c, "steps", "t", env, tmp_path, None)["vortex_ref"]
    assert rec.verdict == "pass", rec.reason


@pytest.mark.parametrize("problem,precision,strategy", list(_matrix()))
def test_vortex_kernels_have_no_thread_divergent_branches(problem, precision, strategy):
    """SimX aborts on divergent branches without the Vortex LLVM: edges are clamped and masked, never branched on.
    The only conditionals are K-tile prefetch tests, which are the same for every thread of a block."""
    import re

    body = make(problem, strategy, precision, lmem_per_block(strategy.threads, VortexConfig())).vortex_source
    body = body[body.index("static void kernel_body"):]
    conds = re.findall(r"\bif\s*\(([^)]*)\)", body)
    assert set(conds) <= {"kt + 1 < KT", "st < KT"} | {f"kt + {n} < KT" for n in range(2, 6)}, conds
    assert "?" not in body and "&&" not in body and "||" not in body
    for loop in re.findall(r"for \(int \w+ = [^;]+; \w+ < ([^;]+);", body):
        assert re.fullmatch(r"[A-Z_0-9]+|\d+|[A-Z_]+ - \d+", loop.strip()), loop   # trip counts are compile-time constants


RACY_BODY = """static void kernel_body(kernel_arg_t* arg) {
    out_t* C = (out_t*)(uintptr_t)arg->ptr[3];
    const int tid = threadIdx.x;
    const int lin = (int)(arg->block_start + blockIdx.x);
    float* s = (float*)__local_mem(THREADS * 4);
    const int left = vx_max(tid - 1, 0);
    float acc = 0.0f;
    for (int it = 0; it < 4; ++it) {
        s[tid] = (float)(it + 1);
        acc += s[left];              /* the left neighbour's value, read with no barrier after its write */
        __syncthreads();
    }
    C[lin * THREADS + tid] = acc;
}

int main()"""


def test_host_executor_runs_phases_both_ways_so_a_one_sided_race_shows(tmp_path):
    """Each thread reads its left neighbour's local-memory slot with no barrier after the write. Run barrier to
    barrier in thread order only, every read would see the new value (10 = 1+2+3+4); the executor reverses the order
    every other phase, where the read sees the old one (1+1+3+3 = 8). Thread 0 reads its own slot: 10."""
    import dataclasses

    import numpy as np

    from vxsynth.kernels import tensors as T

    c = make(from_dict({"kind": "gemm", "op": "addmm", "batch": 1, "M": 128, "N": 256, "K": 64, "a_strides": [0, 64, 1],
                        "b_strides": [0, 1, 64], "bias": True, "dtype": "float32"}),
             Strategy(block_m=16, block_n=32, thread_m=1, thread_n=2), "FP32")
    src = c.vortex_source
    racy = dataclasses.replace(c, vortex_source=src[:src.index("static void kernel_body")] + RACY_BODY
                               + src[src.index("int main()") + len("int main()"):])
    r = HostExecutor(VortexConfig(max_blocks=2), cache_dir=tmp_path / "vx").run(
        racy, T.vortex_inputs(c.problem, c.precision, T.make_inputs(c.problem, 1, "normal")), tmp_path / "run", full=False)
    assert r.ok, r.error
    out = r.output.reshape(-1, 256)                                # block lin wrote row lin, thread tid column tid
    for lin in (b for start, n in r.blocks for b in range(start, start + n)):
        assert out[lin, 0] == 10 and (out[lin, 1:] == 8).all(), (lin, np.unique(out[lin]))


def test_every_tile_chunk_is_copied_by_exactly_one_cuda_thread():
    """Each loader loop of the CUDA half, run for every thread of the block as emitted, hands every chunk of its tile
    to exactly one thread (duplicates are shared-memory write races that racecheck rejects: the H200 run found one
    with 256 threads for 64 chunks); over random repaired points of the optimizer's space on four problems."""
    import random
    import re

    from vxsynth.kernels.strategy import repair

    loop = re.compile(r"for \(int l = 0; l < (\d+); \+\+l\) \{ int e = (?:vx_min\(tid \+ l \* THREADS, (\d+)\)|"
                      r"tid \+ l \* THREADS;(?: if \(e >= (\d+)\) break;)?)")
    space, rng, uneven = conf("agent", "optuna")["space"], random.Random(1), 0
    for name in ("conv2d_c3", "conv1d_k5", "linear_odd", "bmm_bcast"):
        p, paths = PROBLEMS[name]
        points = [Strategy().with_(**RACY)] + [repair(p, Strategy().with_(**{k: rng.choice(v) for k, v in space.items()}))
                                               for _ in range(60)]
        for s in points:
            try:
                src = make(p, s, paths[0]).cuda_source
            except ValueError:                   # a point the emitters cannot implement: the loop never runs it
                continue
            threads = int(re.search(r"#define THREADS (\d+)", src)[1])
            for loads, clamp, stop in {m.groups() for m in loop.finditer(src)}:
                # a loop with neither clamp nor stop has chunks filling every pass
                chunks = int(stop) if stop else int(clamp) + 1 if clamp else int(loads) * threads
                copied = [e for t in range(threads) for l in range(int(loads))
                          if (e := min(t + l * threads, chunks - 1) if clamp else t + l * threads) < chunks]
                assert sorted(copied) == list(range(chunks)), (name, s, loads, chunks, threads)
                uneven += chunks % threads != 0
    assert uneven >= 10          # the case that raced is exercised


def test_repair_satisfies_the_rules_between_knobs_and_keeps_valid_strategies():
    """Random points of the optimizer's space, repaired, never break a rule between knobs (the direct form, rings,
    tensor-core staging, warps_m, unroll); a strategy that was already valid comes back unchanged."""
    import random

    from vxsynth.kernels.strategy import check, repair

    space = conf("agent", "optuna")["space"]
    rules = ("direct form", "asynchronous stages", "tensor cores read both", "tensor-core knobs", "unroll")
    rng = random.Random(0)
    for name in ("conv2d_c3", "conv1d_k5", "linear_odd", "bmm_bcast"):
        p = PROBLEMS[name][0]
        for _ in range(400):
            raw = Strategy(warps_m=rng.choice([0, 2])).with_(**{k: rng.choice(v) for k, v in space.items()})
            s = repair(p, raw)
            why = check(p, s) or ""
            assert not any(r in why for r in rules), (name, raw, why)
            if check(p, raw) is None:
                assert s == raw


def test_warp_tiles_need_a_grid_and_repair_gives_the_squarest():
    """mma=tile (each warp's fragments loaded once per K step) needs a warp grid; repair picks the squarest grid
    that tiles the block's fragments, or falls back to per-fragment mma.sync when none does. The emitted warp step
    loads PM_ A and PN_ B fragments and issues PM_ x PN_ fragment mmas from them."""
    from vxsynth.kernels.dialects import CUDA
    from vxsynth.kernels.emit import emit
    from vxsynth.kernels.strategy import check, repair, warp_grid

    p = PROBLEMS["linear_m1"][0]
    s = Strategy(tensor_core=True, mma="tile", block_m=64, block_n=64, block_k=16, thread_m=4, thread_n=8)  # 4 warps
    assert "needs a warp grid" in check(p, s)
    assert warp_grid(s) == 2 and repair(p, s) == s.with_(warps_m=2)     # 2 x 2 warps of 2 x 2 fragments
    wide = s.with_(block_m=16, thread_m=1)                               # 1 x 4 fragments on 4 warps: 1 x 1 each
    assert repair(p, wide).warps_m == 1
    lone = Strategy(tensor_core=True, mma="tile", block_m=16, block_n=16, thread_m=1, thread_n=4)  # 2 warps, 1 fragment
    assert warp_grid(lone) == 0 and repair(p, lone).mma == "sync"
    src = emit(p, repair(p, s), CUDA)
    assert "#define PM_ 2\n#define PN_ 2" in src.replace("    ", "")
    assert src.count("ldmatrix.sync") == 2 and src.count("mma.sync.aligned") == 2    # in loops over i, j and t


def test_swizzled_ring_is_a_bank_conflict_free_permutation():
    """smem_swizzle (RING_SWIZZLE as emitted) is the XOR of each element's 16-byte chunk with the row bits of its byte
    address (above the row, at least 128 bytes; masked to a row's chunks), computed from the row and column apart; it
    permutes an unpadded slot; for rows of 32 to 512 bytes, the same 16-byte chunk of any 8 consecutive rows (an
    ldmatrix) and 8 consecutive chunks of the slot (cp.async) hit 8 bank groups; it needs a tensor-core ring of
    mma=sync or tile, and repair drops it elsewhere."""
    from vxsynth.kernels.staging import RING_SWIZZLE, swizzle_bits
    from vxsynth.kernels.strategy import check, repair

    for eb in (2, 4):
        for row in (32, 64, 128, 256, 512):
            ld, rows = row // eb, 16
            src = RING_SWIZZLE.format(eb=eb, ch=16 // eb, **swizzle_bits(row, "a"), sb=0, mb=0)
            expr = re.search(r"#define SWA_\(r, c\) (.*)", src)[1].replace("LDA", str(ld))
            at = eval("lambda r, c: " + expr.replace("(r)", "r").replace("(c)", "c"))     # the C expression: integer ops
            shift, mask = max(7, row.bit_length() - 1), min(row, 128) // 16 - 1
            xor = lambda x: x ^ ((x * eb >> shift) & mask) * (16 // eb)   # noqa: E731
            assert all(at(x // ld, x % ld) == xor(x) for x in range(ld * rows))
            sw = lambda x: at(x // ld, x % ld)     # noqa: E731
            assert sorted(sw(x) for x in range(ld * rows)) == list(range(ld * rows))
            group = lambda x: sw(x) * eb // 16 % 8   # noqa: E731
            for c in range(ld * eb // 16):
                for r0 in range(0, rows - 7, 8):
                    assert len({group((r0 + i) * ld + c * 16 // eb) for i in range(8)}) == 8
            for x0 in range(0, ld * rows, 128 // eb):
                assert len({group(x0 + j * 16 // eb) for j in range(8)}) == 8
    p = PROBLEMS["linear_skinny"][0]
    s = Strategy(tensor_core=True, mma="sync", block_m=32, block_n=32, block_k=16, thread_m=2, thread_n=2, stages=4,
                 vector=2, smem_swizzle=True)
    assert check(p, s) is None and "ring" in check(p, s.with_(stages=1))
    assert not repair(p, s.with_(mma="wmma")).smem_swizzle and repair(p, s) == s


def test_unstaged_a_is_an_mma_sync_form_that_repair_keeps_and_vortex_runs_scalar():
    """mma.sync on a warp grid may load A's fragments from global memory (cuDNN's `indexed_wo_smem` kernels); WMMA,
    wgmma, rings and fragments dealt without a grid stage both operands, and repair stages A again only there. The
    Vortex half reads A from global memory too, on scalar FMA (the note says so), with only B's tile in local memory."""
    from vxsynth.kernels.strategy import check, repair

    p, _ = PROBLEMS["conv2d_c3"]
    s = Strategy(tensor_core=True, mma="sync", block_m=64, block_n=32, block_k=16, thread_m=4, thread_n=4, warps_m=2,
                 stage_a=False, double_buffer=True)
    assert check(p, s) is None and repair(p, s) == s
    tile = s.with_(mma="tile", warps_m=4, double_buffer=False)
    assert check(p, tile) is None and repair(p, tile) == tile
    for other in (s.with_(mma="wmma"), s.with_(stages=3, double_buffer=False), s.with_(warps_m=0)):
        assert "tensor cores read B" in check(p, other) or "asynchronous stages" in check(p, other)
        assert repair(p, other).stage_a and repair(p, other).stage_b
    assert "tensor cores read B" in check(p, s.with_(stage_b=False)) and repair(p, s.with_(stage_b=False)) == s
    c = make(p, s, "TF32_FP16", lmem_per_block(s.threads, VortexConfig()))
    assert "ga_(A, ab_[t / APN_][0], ah_[t / APN_][0]" in c.cuda_source and "As =" not in c.cuda_source
    assert "stage_a" in c.meta["vortex_differs"] and "ld_a(A, bz, m0 + ROW(i)" in c.vortex_source
    assert c.meta["vortex_local_mem_bytes"] == 2 * s.block_k * (s.block_n + 1) * 4     # B's two buffers only


@pytest.mark.parametrize("name", ["linear_m1", "conv2d_c3"])
def test_unstaged_a_reads_the_buffers_raw_bits(name):
    """The fragment loader hands mma.sync A's raw bits: a 16-bit buffer (`in_t` unsigned short) is read as it is, not
    converted to a bfloat16 value first (a bug only the H100 matrix caught: linear_m1 and bmm_bcast failed check 1)."""
    p, _ = PROBLEMS[name]
    s = STRATEGIES[46]
    c = make(p, s, "BF16" if p.dtype == "bfloat16" else "TF32_FP16", lmem_per_block(s.threads, VortexConfig()))
    loader = re.search(r"unsigned ga_\(const in_t\* (.)[^{]*\{(.*?)\n?\}", c.cuda_source, re.S)
    raw = ("__float_as_uint(" if p.dtype == "float32" else "(unsigned)(") + loader.group(1) + "["
    assert raw in loader.group(2) and "as_ushort" not in loader.group(2)
    assert ("typedef float in_t;" in c.cuda_source) == (p.dtype == "float32")
