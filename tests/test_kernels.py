"""Paired generation on CPU: for families x precision paths x strategies (strided mappings and odd shapes taken from
the real slices included), the Vortex candidate on the host executor matches torch; every Vortex candidate
cross-compiles for rv32imf; every CUDA candidate compiles with nvcc for sm_90."""

from __future__ import annotations

import pytest

from tests.conftest import conf, runnable, slice_record
from tests.kernel_matrix import PROBLEMS, RACY, STRATEGIES, in_matrix
from vxsynth.checks.run import CheckEnv, run as run_checks
from vxsynth.kernels.candidate import make
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


def test_wgmma_rules_repair_and_vortex_lowering():
    """mma=wgmma runs where both operands are K-major, whole warpgroups tile the block and K tiles span 128-byte rows;
    elsewhere repair gives warp tiles. Its Vortex half is the same tiles through mma=sync's ring, K stepped down to
    the core's local memory, with the reason recorded."""
    from vxsynth.kernels.candidate import vortex_lowering
    from vxsynth.kernels.strategy import check, repair, wgmma_grid

    p = PROBLEMS["linear_skinny"][0]
    s = Strategy(tensor_core=True, mma="wgmma", block_m=64, block_n=128, block_k=64, thread_m=4, thread_n=8, stages=3, vector=8)
    assert check(p, s) is None and wgmma_grid(s) == (1, 2) and repair(p, s.with_(warps_m=2)) == s
    assert "K-major" in check(PROBLEMS["bmm_bcast"][0], s)                 # B contiguous along N
    assert repair(PROBLEMS["bmm_bcast"][0], s).mma == "tile"
    assert "multiple of 64" in check(p, s.with_(block_k=32))               # 64 bytes of BF16: half a swizzle row
    assert "stage ring" in check(p, s.with_(stages=1))
    v, notes = vortex_lowering(p, s, lmem_per_block(s.threads, VortexConfig()))
    assert v.mma == "sync" and v.block_k < s.block_k and "block_k" in notes and "wgmma" in notes["mma"]
    assert check(p, v) is None


def test_wgmma_ring_is_a_bank_conflict_free_permutation():
    """The swizzled ring slot (SWZ_ as emitted) is a permutation of the tile, and the 16-byte chunks that eight
    consecutive threads copy (chunk c of rows r..r+7, or chunks 0-7 of one row) land in eight different bank groups."""
    from vxsynth.kernels.staging import WGMMA_SWIZZLE

    for eb, rows in ((2, 64), (4, 128)):
        ka, ch = 128 // eb, 16 // eb
        assert f"#define KA_ {ka}\n#define CH_ {ch}" in WGMMA_SWIZZLE.format(ka=ka, ch=ch)
        swz = lambda r, k: (k // ka) * rows * ka + r * ka + (((k % ka) // ch) ^ (r & 7)) * ch + k % ch   # noqa: E731
        bk = 2 * ka
        assert sorted(swz(r, k) for r in range(rows) for k in range(bk)) == list(range(rows * bk))
        group = lambda r, k: swz(r, k) * eb // 16 % 8   # noqa: E731
        for r0 in range(0, rows, 8):
            for c in range(ka // ch):
                assert len({group(r0 + i, c * ch) for i in range(8)}) == 8
                assert len({group(r0 + c, j * ch) for j in range(8)}) == 8


@pytest.mark.skipif(nvcc() is None, reason="nvcc not installed")
def test_wgmma_kernel_compiles_for_sm90a_with_its_forms(tmp_path):
    """The wgmma kernel compiles for sm_90a without spills: one m64nN instruction per K step on each warpgroup's
    columns, the async-proxy fence after the copies land, and a PTX whose forms tell it from a warp-tile kernel."""
    from vxsynth.targets import objcheck
    from vxsynth.targets.sandbox import default_policy

    p = PROBLEMS["linear_skinny"][0]
    s = Strategy(tensor_core=True, mma="wgmma", block_m=64, block_n=128, block_k=64, thread_m=4, thread_n=8, stages=3, vector=8)
    ptx = {}
    for name, st in (("wgmma", s), ("tile", s.with_(mma="tile", warps_m=2))):
        r = compile_cuda(make(p, st, "BF16"), tmp_path / name)
        assert r.ok and r.spill_bytes == 0, r.error
        ptx[name] = next((tmp_path / name).rglob("*.ptx")).read_text()
    assert "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16" in ptx["wgmma"]
    assert "fence.proxy.async" in ptx["wgmma"] and "wgmma" not in ptx["tile"]
    diff = objcheck.strategy_forms(ptx["wgmma"], ptx["tile"], default_policy()["objects"]["cuda_ptx"]["strategy_forms"])
    assert any("wgmma tensor-core math" in d for d in diff) and any("mma.sync" in d for d in diff)


def test_warp_specialized_rules_launch_and_vortex_lowering():
    """warp_specialized needs TMA on both operands (the producer issues every copy): a convolution, whose image is no
    tensor map, or a ring without tma is refused and repaired to the plain form. The CUDA block is the computing
    threads and a 128-thread producer warpgroup, with a second mbarrier per slot; the Vortex half has no producer."""
    from vxsynth.kernels.candidate import vortex_lowering
    from vxsynth.kernels.strategy import check, repair, tma_barrier_bytes

    p = PROBLEMS["linear_skinny"][0]
    s = [x for x in STRATEGIES if x.warp_specialized and x.cluster == 1 and not x.wgmma_pending][-1]   # two consumer wgs
    assert s.warp_specialized and check(p, s) is None and repair(p, s) == s
    assert "both operands" in check(p, s.with_(tma=False)) and not repair(p, s.with_(tma=False)).warp_specialized
    conv = PROBLEMS["conv1d_k5"][0]
    t = next(x for x in STRATEGIES if x.tma and x.layout == "nhwc").with_(warp_specialized=True)  # the image by cp.async
    assert check(conv, t.with_(warp_specialized=False)) is None and "both operands" in check(conv, t)
    assert tma_barrier_bytes(s) == 16 * s.stages and tma_barrier_bytes(s.with_(warp_specialized=False)) == 8 * s.stages
    c = make(p, s, "BF16", lmem_per_block(s.threads, VortexConfig()))
    assert c.meta["launch"]["block"] == [s.threads + 128, 1, 1] and "warp_specialized" in c.meta["vortex_differs"]
    v, _ = vortex_lowering(p, s, lmem_per_block(s.threads, VortexConfig()))
    assert not (v.warp_specialized or v.tma) and v.threads == s.threads
    assert "THREADS" in c.vortex_source and "mbarrier" not in c.vortex_source


@pytest.mark.skipif(nvcc() is None, reason="nvcc not installed")
def test_warp_specialized_kernel_compiles_for_sm90a_with_its_forms(tmp_path):
    """The warp-specialized kernel compiles for sm_90a without spills for 384 threads; its K loop has no block-wide
    barrier (one bar.sync 0, after the mbarriers' set-up, against one per K tile and one after the loop in the same
    strategy without a producer), the consumers free slots with mbarrier arrivals and meet on named barrier 1, and
    the object check tells the form from the plain TMA kernel."""
    import re

    from vxsynth.targets import objcheck
    from vxsynth.targets.sandbox import default_policy

    p = PROBLEMS["linear_skinny"][0]
    s = [x for x in STRATEGIES if x.warp_specialized and x.cluster == 1 and not x.wgmma_pending][-1]   # two consumer wgs
    ptx = {}
    for name, st in (("ws", s), ("tma", s.with_(warp_specialized=False))):
        r = compile_cuda(make(p, st, "BF16"), tmp_path / name)
        assert r.ok and r.spill_bytes == 0, r.error
        ptx[name] = next((tmp_path / name).rglob("*.ptx")).read_text()
    block0 = {k: len(re.findall(r"\b(bar|barrier)\.sync\s+0;", v)) for k, v in ptx.items()}
    assert block0["ws"] == 1 and block0["tma"] >= 3, block0
    assert ".maxntid 384" in ptx["ws"] and re.search(r"barrier\.sync\s+1, 256;", ptx["ws"])
    assert "mbarrier.arrive.shared::cta.b64" in ptx["ws"] and "mbarrier.arrive.shared::cta.b64" not in ptx["tma"]
    diff = objcheck.strategy_forms(ptx["ws"], ptx["tma"], default_policy()["objects"]["cuda_ptx"]["strategy_forms"])
    assert any("named barrier" in d for d in diff)


def test_cluster_rules_tensor_maps_and_vortex_lowering():
    """Clusters share the operand along the raster's fast dimension (row: A, col: B), which needs its tensor map,
    whole clusters of tiles along that dimension and 8-row shares; the shared map's box is one block's share; the
    Vortex half is exactly the unclustered strategy's (each Vortex block loads its whole tiles), the reason recorded."""
    from vxsynth.kernels.candidate import vortex_lowering
    from vxsynth.kernels.geometry import tensor_maps
    from vxsynth.kernels.strategy import check, repair

    p = PROBLEMS["linear_skinny"][0]                      # N 96: 6 tiles of 16
    s = next(x for x in STRATEGIES if x.cluster == 2 and not x.warp_specialized and x.raster == "row")
    assert check(p, s) is None and repair(p, s) == s
    assert "needs tma" in check(p, s.with_(tma=False, mma="sync"))
    assert "does not divide the 6 tiles" in check(p, s.with_(cluster=4))
    conv = next(x for x in STRATEGIES if x.tma and x.layout == "nhwc").with_(cluster=2)    # the image: no tensor map
    assert "shares operand A, which needs tma" in check(PROBLEMS["conv1d_k5"][0], conv)
    assert "cluster=3" in check(p, s.with_(cluster=3)) and repair(p, s.with_(cluster=4)).cluster == 1
    boxes = {m["operand"]: m["box"] for m in tensor_maps(p, s)}
    assert boxes == {"a": [64, 32], "b": [64, 16]}        # A's 64 rows in shares of 32, B whole
    tall = PROBLEMS["bmm_tall"][0]
    col = next(x for x in STRATEGIES if x.cluster == 4)
    assert check(tall, col) is None and {m["operand"]: m["box"] for m in tensor_maps(tall, col)}["b"] == [64, 8]
    assert "8-row atoms" in check(tall, col.with_(block_n=16, thread_n=2))
    lmem = lmem_per_block(s.threads, VortexConfig())
    for st in (s, col):
        pr = p if st is s else tall
        v, notes = vortex_lowering(pr, st, lmem)
        assert v == vortex_lowering(pr, st.with_(cluster=1), lmem)[0] and "cluster" in notes
        assert make(pr, st, "BF16", lmem).vortex_source == make(pr, st.with_(cluster=1), "BF16", lmem).vortex_source


@pytest.mark.skipif(nvcc() is None, reason="nvcc not installed")
def test_cluster_kernels_compile_for_sm90a_with_their_forms(tmp_path):
    """Cluster kernels compile for sm_90a without spills with their cluster shape in the PTX (.reqnctapercluster), the
    shared operand's copies multicast, an execution-only cluster barrier per K tile and a full one after the loop (plain
    ring) or remote slot frees through mapa and a producer that waits for the last frees (warp-specialized), and the
    object check tells them from the same strategy without clusters."""
    import re

    from vxsynth.kernels.problem import Gemm
    from vxsynth.targets import objcheck
    from vxsynth.targets.sandbox import default_policy

    p = Gemm("addmm", 1, 51, 96, 1024, (0, 1024, 1), (0, 1, 1024), True, "bfloat16")    # more K tiles than slots
    ptx, src = {}, {}
    for s in [x for x in STRATEGIES if x.cluster > 1 and x.raster == "row"]:
        for name, st in ((f"c{s.warp_specialized}", s), (f"u{s.warp_specialized}", s.with_(cluster=1))):
            c = make(p, st, "BF16")
            src[name] = c.cuda_source
            r = compile_cuda(c, tmp_path / name)
            assert r.ok and r.spill_bytes == 0, r.error
            ptx[name] = next((tmp_path / name).rglob("*.ptx")).read_text()
    for ws in (False, True):
        c, u = ptx[f"c{ws}"], ptx[f"u{ws}"]
        assert ".reqnctapercluster 2, 1, 1" in c and ".reqnctapercluster" not in u
        assert ".multicast::cluster" in c and ".multicast::cluster" not in u
        assert ("mapa.shared::cluster" in c) == ws and "mapa" not in u
        arrives = re.findall(r"barrier\.cluster\.arrive(\.relaxed)?", c)   # set-up (+ the K loop's, + the tail's)
        assert arrives == ([""] if ws else ["", ".relaxed", ""]), arrives
        if ws:    # the producer leaves once the last slots are free in every block
            drain = "for (int kt = vx_max(0, KT - 4); kt < KT; ++kt)"
            assert drain in src["cTrue"] and drain not in src["uTrue"]
        diff = objcheck.strategy_forms(c, u, default_policy()["objects"]["cuda_ptx"]["strategy_forms"])
        assert diff == ["does not match its strategy: this kernel has TMA multicast to a cluster, its strategy none"]


def test_wgmma_pending_rules_and_vortex_lowering():
    """wgmma_pending leaves one wgmma group in flight: it needs mma=wgmma and, in a plain ring, 3 slots (2 when
    warp-specialized); repair drops it elsewhere; the plain ring fills stages-2 tiles ahead; the Vortex half is exactly
    the strategy's without it (its scalar FMA finishes each tile), the reason recorded."""
    from vxsynth.kernels.candidate import vortex_lowering
    from vxsynth.kernels.strategy import check, repair

    p = PROBLEMS["linear_skinny"][0]
    plain = next(x for x in STRATEGIES if x.wgmma_pending and x.tma and not x.warp_specialized)
    ws = next(x for x in STRATEGIES if x.wgmma_pending and x.warp_specialized and x.cluster == 1)
    assert check(p, plain) is None and check(p, ws) is None and ws.stages == 2
    assert "stages >= 3" in check(p, plain.with_(stages=2)) and repair(p, plain.with_(stages=2)).wgmma_pending == 0
    sync = plain.with_(mma="sync", tma=False)
    assert "needs mma=wgmma" in check(p, sync) and repair(p, sync).wgmma_pending == 0
    assert "need 0 or 1" in check(p, plain.with_(wgmma_pending=2))
    src = make(p, plain, "BF16").cuda_source
    assert "for (int st = 0; st < 1; ++st)" in src and "wgmma.wait_group.sync.aligned 1;" in src
    assert "for (int st = 0; st < 2; ++st)" in make(p, plain.with_(wgmma_pending=0), "BF16").cuda_source
    lmem = lmem_per_block(plain.threads, VortexConfig())
    for st in (plain, ws):
        v, notes = vortex_lowering(p, st, lmem)
        assert v == vortex_lowering(p, st.with_(wgmma_pending=0), lmem)[0] and "wgmma_pending" in notes
        assert make(p, st, "BF16", lmem).vortex_source == make(p, st.with_(wgmma_pending=0), "BF16", lmem).vortex_source


@pytest.mark.skipif(nvcc() is None, reason="nvcc not installed")
def test_wgmma_pending_kernels_compile_for_sm90a_with_one_group_in_flight(tmp_path):
    """With wgmma_pending the K loop waits for all but one wgmma group and the loop's end for the last, and ptxas
    keeps that group in flight (it neither injects a wait of its own, C7517, nor serialises the wgmmas, C7515) in the
    cp.async and TMA rings, warp-specialized and in clusters, with split-K's run-time K ranges too; the sandbox's checks
    pass and nothing spills."""
    import re
    import subprocess

    cases = [(n, p, s, "TF32_FP16" if p.dtype == "float32" else "BF16") for n, (p, _) in PROBLEMS.items()
             for s in STRATEGIES if s.wgmma_pending and in_matrix(n, s) and n in ("linear_skinny", "conv1d_k5", "bmm_tall")]
    cases = [x for x in cases if runnable(*x[1:])]
    assert len(cases) == 4, [(n, str(s)) for n, _, s, _ in cases]
    tall = PROBLEMS["bmm_tall"][0]          # run-time K ranges (split-K) with a producer and a cluster
    cases += [("bmm_tall-split", tall, s.with_(split_k=2), "BF16") for s in STRATEGIES if s.wgmma_pending and s.cluster > 1]
    for name, p, st, prec in cases:
        c = make(p, st, prec)
        work = tmp_path / f"{name}-{st.hash()}"
        r = compile_cuda(c, work)
        assert r.ok and r.spill_bytes == 0, r.error
        ptx = next(work.rglob("*.ptx")).read_text()
        waits = re.findall(r"wgmma\.wait_group\.sync\.aligned (\d)", ptx)
        assert waits and waits[-1] == "0" and set(waits[:-1]) == {"1"}, (name, waits)
        info = subprocess.run(["nvcc", "-cubin", "-arch=sm_90a", "-O3", "-std=c++17", "-Xptxas", "-v", "-o",
                               str(work / "v.cubin"), str(work / "kernel.cu")], capture_output=True, text=True).stderr
        assert "are serialized" not in info and "wait is injected" not in info, (name, info)


def test_swizzled_ring_is_a_bank_conflict_free_permutation():
    """smem_swizzle (RING_SWIZZLE as emitted) permutes an unpadded slot; for rows of 32 to 256 bytes, the same 16-byte
    chunk of any 8 consecutive rows (an ldmatrix) and 8 consecutive chunks of the slot (cp.async) hit 8 bank groups;
    it needs a tensor-core ring of mma=sync or tile, and repair drops it elsewhere."""
    import re

    from vxsynth.kernels.staging import RING_SWIZZLE, swizzle_bits
    from vxsynth.kernels.strategy import check, repair

    for eb in (2, 4):
        for row in (32, 64, 128, 256, 512):
            src = RING_SWIZZLE.format(eb=eb, ch=16 // eb, **swizzle_bits(row, "a"), sb=0, mb=0)
            expr = re.search(r"#define SWA_\(x\) (.*)", src)[1]
            sw = eval("lambda x: " + expr.replace("(x)", "x"))     # the C expression: integer ops only
            ld, rows = row // eb, 16
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


def test_wgmma_descriptors_advanced_by_offsets_equal_the_slots_addresses(tmp_path):
    """The emitted K-step descriptors (the block's first one plus DOFF_ of the slot and the K step) equal the descriptor
    of &AS(slot, wm_*64, kk) / &BS(slot, kk, wn_*WN_) converted anew, for every slot, K step and warpgroup: the
    emitted macros and statements compiled on the host, in a shared window whose dynamic memory starts off alignment."""
    import re
    import shutil
    import subprocess

    from vxsynth.kernels.dialects import CUDA
    from vxsynth.kernels.emit import emit
    from vxsynth.kernels.problem import Gemm
    from vxsynth.kernels.strategy import wgmma_grid

    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        pytest.skip("no host C++ compiler")
    macros = ("#define DLO_", "#define DESC_", "#define DOFF_", "#define SWZ_", "#define AS(", "#define BS(")
    for dtype, bm, bn, bk, tm, tn, stages in (("bfloat16", 128, 64, 128, 8, 4, 3), ("bfloat16", 64, 256, 64, 4, 16, 5),
                                              ("float32", 64, 64, 32, 4, 4, 4), ("float32", 128, 128, 64, 4, 8, 2)):
        p = Gemm("mm", 1, bm, bn, 4 * bk, (0, 4 * bk, 1), (0, 1, 4 * bk), False, dtype)
        s = Strategy(tensor_core=True, mma="wgmma", block_m=bm, block_n=bn, block_k=bk, thread_m=tm, thread_n=tn,
                     stages=stages, vector=4)
        lines = [x.strip() for x in emit(p, s, CUDA).replace("\\\n", " ").splitlines()]
        pick = lambda pat: [x for x in lines if re.match(pat, x)]   # noqa: E731
        step = pick(r"const unsigned long long d[ab]_ = ")
        assert len(step) == 2 and all("DOFF_" in x for x in step)
        slot = re.search(r"DOFF_\((.*?), SWZ_", step[0])[1]
        wg_m, wg_n = wgmma_grid(s)
        body = "\n".join([
            "#include <cstdio>", "#include <cstdint>", "typedef uint16_t __nv_bfloat16;",
            "static char window_[1 << 18] __attribute__((aligned(1024)));",
            "#define __cvta_generic_to_shared(p) ((unsigned long)((const char*)(p) - window_))",
            *pick(r"#define \w+ "), *[x for x in lines if x.startswith(macros)], *pick(r"typedef \w+ (in_t|sm_t);"),
            "int main() {", "unsigned char* smem_raw = (unsigned char*)window_ + 1024 + 48;", *pick(r"sm_t\* [AB]s = "),
            "int bad = 0;",
            f"for (int tid = 0; tid < {128 * wg_m * wg_n}; tid += 128) for (int kt = 0; kt < {2 * stages}; ++kt) {{",
            "const int kt0 = 0; (void)kt0;", *pick(r"const int wg_ = "), *pick(r"const unsigned dla_ = "),
            f"for (int kk = 0; kk < BK; kk += {8 if dtype == 'float32' else 16}) {{", *step,
            f"bad += da_ != DESC_(DLO_(&AS({slot}, wm_ * 64, kk))) || db_ != DESC_(DLO_(&BS({slot}, kk, wn_ * WN_)));",
            "}}", 'printf("%d\\n", bad); return bad != 0; }'])
        (tmp_path / "d.cc").write_text(body)
        subprocess.run([cxx, "-O1", "-w", "-o", str(tmp_path / "d"), str(tmp_path / "d.cc")], check=True)
        out = subprocess.run([str(tmp_path / "d")], capture_output=True, text=True)
        assert out.returncode == 0 and out.stdout.strip() == "0", (dtype, bm, bn, bk, out.stdout)


def test_wgmma_operands_read_as_the_ptx_layout_defines_give_the_product():
    """The ring as the emitted SWZ_ fills it, read through descriptors at &AS(buf, wm_*64, kk) / &BS(buf, kk, wn_*WN_)
    the way the PTX ISA defines a K-major 128-byte-swizzled operand (8-row groups SBO = 1024 B apart, rows 128 B apart,
    16-byte chunk bits 4-6 XORed with address bits 7-9), and scattered through the m64nN accumulator layout the
    epilogue assumes (CUTLASS's CLayout_64xN), is A times B^T: for BF16 and TF32, two K atoms, warpgroups along M and N."""
    import re

    import numpy as np

    from vxsynth.kernels.dialects import CUDA
    from vxsynth.kernels.emit import emit
    from vxsynth.kernels.problem import Gemm
    from vxsynth.kernels.strategy import wgmma_grid

    rng = np.random.default_rng(7)
    for dtype, bm, bn, bk, tm, tn in (("bfloat16", 128, 64, 128, 8, 4), ("bfloat16", 64, 128, 64, 4, 8),
                                      ("float32", 64, 64, 64, 4, 4), ("float32", 128, 128, 32, 4, 8)):
        p = Gemm("mm", 1, bm, bn, bk, (0, bk, 1), (0, 1, bk), False, dtype)
        s = Strategy(tensor_core=True, mma="wgmma", block_m=bm, block_n=bn, block_k=bk, thread_m=tm, thread_n=tn, stages=2,
                     vector=4)
        src = emit(p, s, CUDA)
        consts = dict(re.findall(r"#define (KA_|CH_) (\d+)", src))
        swz_c = re.search(r"#define SWZ_\(r, k, R\) (.*)", src)[1]
        swz = eval("lambda r, k, R: " + swz_c.replace("/", "//").replace("KA_", consts["KA_"]).replace("CH_", consts["CH_"]))
        eb, kstep = (4, 8) if dtype == "float32" else (2, 16)
        a, b = rng.integers(-4, 5, (bm, bk)), rng.integers(-4, 5, (bn, bk))
        base_a, base_b = 3 * 1024, 3 * 1024 + bm * bk * eb           # 1024-aligned slots
        mem = {base_a + swz(m, k, bm) * eb: a[m, k] for m in range(bm) for k in range(bk)}
        mem |= {base_b + swz(n, k, bn) * eb: b[n, k] for n in range(bn) for k in range(bk)}

        def read(start, rows):       # one K step of a K-major SW128 operand from its descriptor's start address
            at = lambda r, k: start + (r // 8) * 1024 + (r % 8) * 128 + k * eb   # noqa: E731
            return np.array([[mem[(x := at(r, k)) ^ (((x >> 7) & 7) << 4)] for k in range(kstep)] for r in range(rows)])

        wg_m, wg_n = wgmma_grid(s)
        wn = bn // wg_n
        c = np.zeros((bm, bn))
        for wg in range(wg_m * wg_n):
            wm_, wn_ = wg // wg_n, wg % wg_n
            d = sum(read(base_a + swz(wm_ * 64, kk, bm) * eb, 64) @ read(base_b + swz(wn_ * wn, kk, bn) * eb, wn).T
                    for kk in range(0, bk, kstep))
            for wl in range(128):     # thread (t0, t1, warp): value v at row t1 + 16 warp + 8 v1, column 2 t0 + v0 + 8 v2
                t0, t1, w = wl % 4, wl // 4 % 8, wl // 32
                regs = [d[t1 + 16 * w + 8 * (v // 2 % 2), 2 * t0 + v % 2 + 8 * (v // 4)] for v in range(wn // 2)]
                r0, c0 = wm_ * 64 + w * 16 + (wl & 31) // 4, wn_ * wn + (wl & 3) * 2      # the emitted r0_, c0_
                for i in range(wn // 8):
                    c[r0, c0 + i * 8], c[r0, c0 + i * 8 + 1] = regs[4 * i], regs[4 * i + 1]
                    c[r0 + 8, c0 + i * 8], c[r0 + 8, c0 + i * 8 + 1] = regs[4 * i + 2], regs[4 * i + 3]
        assert "r0_ = wm_ * 64 + (wl_ / 32) * 16 + (wl_ & 31) / 4" in src and "c0_ = wn_ * WN_ + (wl_ & 3) * 2" in src
        assert np.array_equal(c, a @ b.T), (dtype, bm, bn, bk)
