"""The structure-informed start on every main kernel of the committed H200 profiles (26 slices): the start mirrors
the reference's block tile, threads and stages where its name states them, or says why not; it is a valid strategy
on both targets; its CUDA half compiles for sm_90 without spills and its Vortex half for rv32imf."""

from __future__ import annotations

import functools
import math
from pathlib import Path

import pytest

from tests.conftest import conf, slice_record
from vxsynth.checks.run import CheckEnv, run as run_checks
from vxsynth.kernels.candidate import make
from vxsynth.kernels.geometry import static_smem_bytes
from vxsynth.kernels.strategy import SMEM_LIMIT
from vxsynth.reconstruct.loop import LoopEnv, pair, validator
from vxsynth.reconstruct.start import informed
from vxsynth.records import SliceRecord
from vxsynth.targets import riscv
from vxsynth.targets.cuda import compile_cuda, nvcc
from vxsynth.targets.vortex_host import HostExecutor, VortexConfig, lmem_per_block

VCFG = VortexConfig(max_blocks=6)
ENV = LoopEnv(CheckEnv(HostExecutor(VCFG), conf("precision")), [])
RULES = conf("start", "informed")
UNSTAGED = LoopEnv(CheckEnv(HostExecutor(VortexConfig(max_blocks=6, unstaged_fallback=True)), conf("precision")), [])


@functools.cache
def starts(slices: Path) -> tuple:
    """(record, informed start, its provenance, validator) of every slice of `slices`, made once per folder (about
    25 s for the suite's 26, which several test files read)."""
    out = []
    for path in sorted(slices.glob("*/slice.json")):
        rec = SliceRecord.load(path)
        valid = validator(rec.problem, rec.precision, ENV)
        out.append((rec, *informed(rec, RULES, valid), valid))
    return tuple(out)


def test_start_mirrors_the_reference_or_says_why(h200_slices):
    made = starts(h200_slices)
    assert len(made) == 26
    for rec, s, prov, valid in made:
        assert prov["kind"] == "informed" and valid(s) is None, rec.slice_id
        hints = rec.name_hints["parsed"]
        knobs = {k["knob"]: k for k in prov["knobs"]}
        for k in knobs.values():
            assert k["mirrored"] == (k["value"] == k["target"]) and (k["mirrored"] or k["why_not"]), (rec.slice_id, k)
        if hints.get("math"):   # the math unit is always mirrored where the precision path allows it
            assert s.tensor_core == (hints["math"] == "tensor" and rec.precision != "FP32"), rec.slice_id
        if s.tensor_core and rec.family == "conv2d":   # the mma.sync form on the convolutions measured nearer
            assert knobs["mma"]["target"] == "sync" and (s.mma == "sync" or knobs["mma"]["why_not"]), rec.slice_id
        else:
            assert s.mma == "wmma" and "mma" not in knobs, rec.slice_id
        if hints.get("warpgroups") or hints.get("grammar") == "nvjet":   # TMA-fed: synchronous staging
            assert knobs["stages"]["target"] == 1 == s.stages and "TMA" in knobs["stages"]["fact"], rec.slice_id
        elif hints.get("stages"):
            assert knobs["stages"]["target"] == min(hints["stages"], 6)
        main = next(k for k in rec.kernels if k["role"] == "main")
        if math.prod(main["block"]) <= 256:   # one Vortex core holds the block: threads are the reference's
            assert s.threads == math.prod(main["block"]) or knobs["threads"]["why_not"], rec.slice_id
        else:
            assert "Vortex" in knobs["threads"]["why_not"]
        assert prov["reconstructs"]["kernel"] == main["base"][:160]
        if rec.family in ("conv1d", "conv2d"):      # shared-memory padding only on the GEMM families
            assert not s.smem_pad, rec.slice_id
        # cuDNN's nhwckrsc kernels read NHWC activations and KRSC weights: so does the start (else the fact is named)
        nhwc = "nhwc" in (hints.get("layout") or "")
        assert s.layout == ("nhwc" if nhwc else "nchw"), rec.slice_id
        assert not any("layout" in m["what"] for m in prov["not_mirrored"]), rec.slice_id
        coal = rec.reference_signature["values"]["gld_coalescing"]   # measured: strided below half a sector
        gemm = rec.family in ("linear", "matmul")
        assert s.mapping == ("strided" if gemm and coal is not None and coal < 50 else "coalesced"), rec.slice_id


@pytest.mark.parametrize("prefix,want", [
    # xmma ffma tilesize32x32x8_stage3_warpsize1x2x1: 64 threads, the tile and a 3-slot cp.async ring
    ("linear-fp32-302x512x512-h200-6d8528", dict(block_m=32, block_n=32, block_k=8, threads=64, stages=3, tensor_core=False)),
    # CUTLASS simt 128x64_8x5 launched as C^T (grid 20 = 4 x 5 over N x M): the name's M runs along our N
    # (and 4 blocks along K: grid z 4 = split-K 4)
    ("linear-fp32-302x512x3200", dict(block_m=64, block_n=128, block_k=8, threads=128, stages=5, tensor_core=False,
                                      split_k=4)),
    # cuBLAS sgemm_largek (grid z 4, after a scal kernel zeroing C): split-K 4 with atomics into a zeroed output
    ("linear-fp32-100x512x512", dict(split_k=4)),
    # CUTLASS WMMA bf16 32x32_32x1: tensor cores, one stage (synchronous staging); its loads use 38% of each sector
    # (measured), so the threads take strided elements
    ("matmul-bf16-8x51x256x355", dict(block_m=32, block_n=32, tensor_core=True, stages=1, threads=128, mapping="strided")),
    # xmma tf32 conv tilesize128x64x32_stage5_warpsize2x2x1: tensor cores, 5 stages, 2 x 2 warps, NHWC operands
    # (in the mma.sync form: conv2d's tensor-core rule)
    ("conv2d-tf32-64to64k3x3i120x160", dict(block_m=128, block_n=64, tensor_core=True, stages=5, threads=128, warps_m=2,
                                            layout="nhwc", mma="sync")),
    # xmma nhwckrsc ..._alignc4: NHWC operands copied 4 channels (16 bytes) at a time, split-K 2 (grid z)
    ("conv1d-tf32-1024to1024k5l16", dict(layout="nhwc", vector=4, split_k=2, stages=5, tensor_core=True, mma="wmma")),
    # xmma indexed_wo_smem tilesize128x32x16_stage1_warpsize4x1x1 (ACT's 7x7 stem): A's fragments from global memory,
    # only the filters staged (the reference keeps 4 KB of shared memory), mma.sync on 4x1 warps
    ("conv2d-tf32-3to64k7x7i480x640s2", dict(block_m=128, block_n=32, block_k=16, tensor_core=True, mma="sync",
                                             stage_a=False, stage_b=True, stages=1, threads=128, warps_m=4)),
    # the fp32 stem of Pi0's vision tower is an nchw kernel: no layout change
    ("conv2d-fp32-3to1152k14x14", dict(layout="nchw", tensor_core=False)),
])
def test_start_of_named_references(h200_slices, prefix, want):
    rec = slice_record(h200_slices, prefix)
    s, prov = informed(rec, RULES, validator(rec.problem, rec.precision, ENV))
    assert {k: getattr(s, k) for k in want} == want
    assert all(k["fact"] for k in prov["knobs"])


def test_default_start_is_the_plain_strategy(h200_slices):
    from vxsynth.kernels.strategy import Strategy

    rec = slice_record(h200_slices, "linear-fp32-302x512x3200")
    s, prov = informed(rec, conf("start", "default"), lambda s: None)
    assert s == Strategy() and prov["kind"] == "default"


@pytest.mark.skipif(nvcc() is None or riscv.compiler() is None, reason="needs nvcc and riscv64-unknown-elf-gcc")
def test_every_start_compiles_for_sm90_and_rv32imf(h200_slices, tmp_path):
    for rec, s, prov, _ in starts(h200_slices):
        c = make(rec.problem, s, rec.precision, lmem_per_block(s.threads, VCFG))
        cr = compile_cuda(c, tmp_path / rec.slice_id / "cuda")
        # no spills unless asked: a register cap (min_blocks, to match the reference's blocks per SM) may spill
        assert cr.ok and (cr.spill_bytes == 0 or s.min_blocks), (rec.slice_id, cr.error, cr.spill_bytes)
        # the launch fits one block's shared memory: ptxas's static bytes (barriers, split-K flag) + the dynamic
        assert cr.smem_bytes == static_smem_bytes(rec.problem, s), (rec.slice_id, cr.smem_bytes)
        assert cr.smem_bytes + c.meta["launch"]["smem_bytes"] <= SMEM_LIMIT, rec.slice_id
        rv = riscv.cross_compile(c.vortex_source, tmp_path / rec.slice_id / "rv")
        assert rv.ok, (rec.slice_id, rv.error)


@pytest.mark.skipif(riscv.compiler() is None, reason="needs riscv64-unknown-elf-gcc")
def test_every_start_lowers_for_simx_local_memory(h200_slices, tmp_path):
    """The rebuild checks every final pair on SimX, whose core keeps 4 KB of local memory distinct: each start's
    Vortex half is generated for it (tensor-core starts with a warp grid were refused: their warp layout outlived the
    dropped tensor cores) and cross-compiles for rv32imf."""
    from vxsynth.kernels.candidate import vortex_lowering
    from vxsynth.simx.experiments import sweep_candidate

    simx = VortexConfig(local_mem=4096)
    lowered = 0
    for rec, s, prov, _ in starts(h200_slices):
        c, _ = sweep_candidate(rec.problem, rec.precision, s, [simx])
        v, _ = vortex_lowering(c.problem, s, c.meta["lmem_per_block"], drop_staging=True)
        assert c.meta["lmem_per_block"] <= 4096 and (v.tensor_core or not v.warps_m), rec.slice_id
        lowered += "staging" in c.meta["vortex_differs"]
        rv = riscv.cross_compile(c.vortex_source, tmp_path / rec.slice_id)
        assert rv.ok, (rec.slice_id, rv.error)
    assert lowered >= 5       # starts whose tiles outgrow 4 KB lose staging there


@pytest.mark.parametrize("prefix", ["linear-fp32-302x512x512-h200-6d8528", "conv2d-tf32-512to512k3x3i15x20", "conv1d-tf32-1024to1024k5l16",
                                    "linear-bf16-51x1024x2048", "matmul-bf16-8x51x355x256", "conv2d-tf32-3to64k7x7"])
def test_start_matches_torch_on_the_vortex_host_executor(h200_slices, prefix, tmp_path):
    """Stage rings, tensor-core strategies and launch knobs of real starts compute the op (Vortex half vs torch)."""
    rec = slice_record(h200_slices, prefix)
    s, prov = informed(rec, RULES, validator(rec.problem, rec.precision, ENV))
    c = make(rec.problem, s, rec.precision, lmem_per_block(s.threads, VCFG))
    r = run_checks(c, rec.slice_id, "t", ENV.checks, tmp_path, None)["vortex_ref"]
    assert r.verdict == "pass", r.reason


@pytest.mark.parametrize("prefix,k_tile", [("conv1d-tf32-1024to1024k5l16", 64), ("conv2d-tf32-64to64k3x3i120x160", 32)])
def test_start_takes_the_references_k_tile_and_vortex_steps_k_finer(h200_slices, prefix, k_tile, tmp_path):
    """cuDNN's K tile does not fit the Vortex core's local memory even as one synchronous stage: the start takes it,
    the CUDA half keeps it (and compiles), the Vortex half steps K finer over the same M x N tiles, says so, keeps its
    staging and computes the op; target.unstaged_fallback then has nothing to drop. The same ring swizzled pairs too
    (as mma.sync where the start is WMMA; the Vortex half's one synchronous tile is padded, not swizzled)."""
    rec = slice_record(h200_slices, prefix)
    problem = rec.problem
    s, prov = informed(rec, RULES, validator(problem, rec.precision, ENV))
    assert s.block_k == k_tile and s.tensor_core
    assert all(k["mirrored"] for k in prov["knobs"] if k["knob"] == "block_k")
    assert informed(rec, RULES, validator(problem, rec.precision, UNSTAGED))[0] == s
    c = pair(problem, s, rec.precision, ENV.checks.vortex.cfg)
    assert f"#define BK {k_tile}" in c.cuda_source and f"#define BK {k_tile}" not in c.vortex_source
    assert "steps K by" in c.meta["vortex_differs"]["block_k"] and "staging" not in c.meta["vortex_differs"]
    if nvcc() is not None:
        cr = compile_cuda(c, tmp_path / "cuda")
        assert cr.ok and cr.spill_bytes == 0, cr.error
    for name, t in (("vx", s), ("vx-swizzled", s.with_(mma="sync" if s.mma == "wmma" else s.mma, smem_swizzle=True))):
        c = pair(problem, t, rec.precision, ENV.checks.vortex.cfg)
        r = run_checks(c, rec.slice_id, "t", ENV.checks, tmp_path / name, None)["vortex_ref"]
        assert r.verdict == "pass", (name, r.reason)
