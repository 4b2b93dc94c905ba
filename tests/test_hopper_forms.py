"""Hopper forms on CPU: warpgroup MMA (wgmma) from the 128-byte-swizzled ring, its descriptors, TMA fills, warp
specialization, clusters and pending wgmma groups: the rules between their knobs, what repair does, the Vortex half
each lowers to, and that each compiles for sm_90a with its instruction forms (no GPU needed)."""

from __future__ import annotations

import pytest

from tests.conftest import ROOT, runnable
from tests.kernel_matrix import PROBLEMS, STRATEGIES, in_matrix
from vxsynth.kernels.candidate import make
from vxsynth.kernels.strategy import Strategy
from vxsynth.targets.cuda import compile_cuda, nvcc
from vxsynth.targets.vortex_host import VortexConfig, lmem_per_block


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
    from vxsynth.kernels.geometry import static_smem_bytes
    from vxsynth.kernels.strategy import check, repair

    p = PROBLEMS["linear_skinny"][0]
    s = [x for x in STRATEGIES if x.warp_specialized and x.cluster == 1 and not x.wgmma_pending][-1]   # two consumer wgs
    assert s.warp_specialized and check(p, s) is None and repair(p, s) == s
    assert "both operands" in check(p, s.with_(tma=False)) and not repair(p, s.with_(tma=False)).warp_specialized
    conv = PROBLEMS["conv1d_k5"][0]
    t = next(x for x in STRATEGIES if x.tma and x.layout == "nhwc").with_(warp_specialized=True)  # the image by cp.async
    assert check(conv, t.with_(warp_specialized=False)) is None and "both operands" in check(conv, t)
    ceil = lambda n: -(-n // 128) * 128                                                  # noqa: E731
    assert static_smem_bytes(p, s) == ceil(16 * s.stages) and static_smem_bytes(p, s.with_(warp_specialized=False)) == ceil(8 * s.stages)
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
            "#define __shfl_sync(mask, v, lane) (v)",      # one thread stands for its warp here
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


def test_wgmma_k_loop_keeps_descriptor_math_off_the_fma_pipe(r19):
    """The warpgroup index broadcast from lane 0 lets nvcc keep the K loop's descriptor arithmetic on the uniform
    datapath: on two final pairs of the H100 rebuild r19 (fidelity_h100_r19), whose references keep their FMA pipe
    near idle and the finals do not, today's emitter puts at most half as many K-loop instructions on the FMA pipe as
    the saved kernel (bench/sass_mix.py: nvcc for sm_90a, cuobjdump -sass)."""
    import re
    import shutil
    import subprocess
    import sys

    if shutil.which("nvcc") is None:
        pytest.skip("no nvcc")
    for sid, rnd in (("linear-bf16-51x1024x2048-h200-50afe8", "r004"), ("conv2d-tf32-128to128k3x3i60x80-h200-00da6c", "r001")):
        p = subprocess.run([sys.executable, str(ROOT / "bench" / "sass_mix.py"), str(r19 / "cuda_first" / sid / "candidates" / rnd),
                            "--emit"], capture_output=True, text=True, cwd=ROOT, timeout=300)
        if p.returncode == 2 and "needs nvcc and cuobjdump" in p.stderr:
            pytest.skip("no cuobjdump (on PATH, or bundled with torch's triton)")
        assert p.returncode == 0, p.stderr
        saved, today = (int(x) for x in re.findall(r"\((\d+) on the FMA pipe", p.stdout))
        assert saved >= 19 and today <= saved // 2
