"""Where the speed probe steps after its depth sweep (`speed._leads`, `speed.neighbours`), on the real slices under
timing models (CPU): from the fastest variant, from the fastest issuing the reference's MMA instructions, and from the
variant nearest the reference; and the one-block register neighbour of HMMA warp tiles."""

from __future__ import annotations

import pytest

from tests.test_speed_probe import _tensor_core_starts
from vxsynth.kernels.strategy import Strategy
from vxsynth.reconstruct import speed
from vxsynth.targets.cuda import nvcc


def test_the_probe_steps_from_the_fastest_of_the_references_instructions_too(h200_slices):
    """conv1d 1024->1024 L16's reference is an xmma sm80 kernel (HMMA). Where wgmma variants run fastest, the probe
    also steps from the fastest mma.sync/WMMA variant: its one-knob neighbours are timed, so an HMMA form faster than
    the depth sweep's (here: 32-row block tiles, which no wgmma variant has) is found (on the H100 rebuilds wgmma
    finals of HMMA references ran about 0.6x the tensor-pipe cycles per FLOP, bench/results/fidelity_h100_r20/
    grid_busy.txt). A CUDA-core reference steps from the fastest alone."""
    rec, start, valid = next(r for r in _tensor_core_starts(h200_slices)
                             if r[0].slice_id.startswith("conv1d-tf32-1024to1024k5l16"))
    assert speed.reference_family(rec) == "HMMA"
    ev = lambda s: (5.0 if s.mma == "wgmma" else 12.0 if s.block_m == 32 else 20.0) / s.split_k ** 0.1   # noqa: E731
    res = speed.probe(rec, start, valid, lambda ss: [speed.Timed(s, ev(s)) for s in ss])
    timed = [Strategy.from_dict(v["strategy"]) for v in res["variants"]]
    hmma = [s for s in timed if speed.mma_family(s) == "HMMA"]
    sweep = speed.sweep_depth(rec.problem, start, valid, int(rec.environment.get("sm_count") or 0), speed.cluster_target(rec),
                              speed.reference_footprint(rec).blocks)
    best_swept = min((s for s in sweep if speed.mma_family(s) == "HMMA"), key=ev)
    assert set(speed.neighbours(rec.problem, best_swept, valid, sweep)) <= set(timed)
    assert min(map(ev, hmma)) < ev(best_swept)                                     # a faster HMMA form found
    assert min(map(ev, timed)) == 5.0 / 16 ** 0.1                                  # the fastest still leads


def test_hmma_tiles_step_to_one_blocks_registers_which_loads_fragments_ahead(h200_slices, tmp_path):
    """On the slices whose references are xmma sm80 HMMA kernels (128 threads, 119-168 registers, one block per SM),
    every warp-tile (mma=tile) variant of the depth sweep without a register cap has among its neighbours the same
    tile with its K steps unrolled under one block's register budget, which the profile-guided edit also reaches;
    compiled for sm_90a (bench/sass_mix.py: nvcc, cuobjdump), ptxas gives conv1d 1024 k5's tile more registers that way
    and issues each ldmatrix at least twice as far ahead of its first use (median over the K loop)."""
    import statistics
    from bench.sass_mix import cuobjdump, load_use, mix
    from vxsynth.agent.profile_guided import EDITS
    from vxsynth.kernels.candidate import make
    from vxsynth.kernels.strategy import one_block_registers

    edit = next(fn for name, fn, _ in EDITS if name == "registers->one block")
    seen, sass = 0, None
    for rec, start, valid in _tensor_core_starts(h200_slices):
        if speed.reference_family(rec) != "HMMA":
            continue
        depth = speed.sweep_depth(rec.problem, start, valid, 132)
        for s in [s for s in depth if s.mma == "tile" and not s.min_blocks]:
            v = one_block_registers(s)
            assert v.min_blocks == 1 and v.unroll == min(8, s.block_k) and valid(v) is None, rec.slice_id
            assert v in speed.neighbours(rec.problem, s, valid, depth) and edit(s) == v
            seen += 1
            if sass is None and rec.slice_id.startswith("conv1d-tf32-1024to1024k5l16"):
                sass = (rec, s, v)
    assert seen >= 20 and sass is not None
    assert one_block_registers(sass[2]) is None and one_block_registers(sass[1].with_(mma="wgmma")) is None
    if nvcc() is None or cuobjdump() is None:
        pytest.skip("no nvcc or cuobjdump")
    rec, plain, one = sass
    (_, loop0, regs0), (_, loop1, regs1) = (mix(make(rec.problem, x, rec.precision).cuda_source, tmp_path, tag)
                                            for tag, x in (("plain", plain), ("one", one)))
    assert int(regs1) > int(regs0)
    assert statistics.median(load_use(loop1)) >= 2 * statistics.median(load_use(loop0))


def test_a_wgmma_lead_steps_to_the_hmma_tile_as_xmma_runs_it(h200_slices):
    """r30 (H100, conv1d 1024->1024 L16, an sm80 HMMA reference on 64 blocks): the nearest variant was a wgmma kernel
    at the reference's tile and grid (64x32x64, split-K 2), and the warp-tile kernels timed there ran 1.8x the
    reference with K steps rolled (each ldmatrix just before its MMA, one warp per SM quarter). From such a lead the
    probe also times the warp tile with its K steps unrolled under one block's registers, as xmma runs it."""
    from vxsynth.kernels.strategy import one_block_registers, repair

    rec, start, valid = next(r for r in _tensor_core_starts(h200_slices)
                             if r[0].slice_id.startswith("conv1d-tf32-1024to1024k5l16"))
    lead = Strategy(tensor_core=True, mma="wgmma", layout="nhwc", block_m=64, block_n=32, block_k=64, thread_m=4,
                    thread_n=4, stages=8, split_k=2, vector=4, tma=True, wgmma_pending=1)
    assert valid(lead) is None
    near = speed.neighbours(rec.problem, lead, valid, [])
    tile = repair(rec.problem, lead.with_(mma="tile"))
    assert tile in near and one_block_registers(tile) in near
    assert (tile.block_m, tile.block_n, tile.split_k) == (64, 32, 2) and one_block_registers(tile).unroll == 8


def test_on_the_references_grid_the_rolled_warp_tiles_run_slow(r30):
    """bench/probe_grid.py on r30's probes (H100): conv1d 1024->1024's warp-tile kernels fed by a cp.async ring run at
    most the reference's time on some grid but 1.8x or slower on its own 64 blocks (swizzled: 2.2x or slower),
    while a wgmma kernel comes within 1.2x there; no form is faster on the reference's grid than anywhere."""
    import json
    import sys

    from tests.conftest import ROOT

    sys.path.insert(0, str(ROOT / "bench"))
    import probe_grid

    for sid in ("conv1d-tf32-1024to1024k5l16-h200-424588", "conv1d-tf32-1024to1024k5l32-h200-becff6"):
        forms = probe_grid.by_form(json.loads((r30 / "cuda_first" / sid / "speed_probe.json").read_text()))
        assert forms["tile+cp.async"][0][0] >= 1.8 and forms["tile+cp.async"][1] <= 1.0
        assert forms["tile+cp.async-swizzled"][0][0] >= 2.2 and forms["tile+cp.async-swizzled"][1] <= 0.85
        assert forms["wgmma+cp.async"][0][0] <= 1.1
        assert all(not on or on[0] >= best for on, best in forms.values())


def test_the_probe_steps_from_the_variant_nearest_the_reference_too(h200_slices):
    """conv1d 2048->2048's reference is an sm90 warpgroup kernel on 64 blocks (one per output tile, no split). Where
    split-K variants run fastest but on four times the SMs (r23 on the H100: 0.63x at D 0.119 against 1.45x at D
    0.063 on the reference's grid), the probe also steps from the variant nearest the reference (time, busy SMs,
    FLOPs): the same tile on half the threads, one warpgroup of m64n32 instead of two of m64n16, is timed, then that
    one with a wgmma group pending, and under the H100's times of those (emit_speed_h100_c2048.txt: 1.57x two
    warpgroups, 1.35x one, 1.15x one with a group pending) the last is the nearest the probe reports."""
    rec, start, valid = next(r for r in _tensor_core_starts(h200_slices)
                             if r[0].slice_id.startswith("conv1d-tf32-2048to2048k5l16"))
    ref = speed.reference_us(rec)
    assert speed.reference_family(rec) == "HGMMA" and speed.reference_footprint(rec).blocks == 64

    def ev(s):
        if s.split_k > 1:
            return 0.6 * ref
        if s.mma != "wgmma":
            return 3.0 * ref
        if s.threads == 128:
            return (1.15 if s.wgmma_pending else 1.35) * ref
        return 1.57 * ref
    res = speed.probe(rec, start, valid, lambda ss: [speed.Timed(s, ev(s)) for s in ss])
    timed = [Strategy.from_dict(v["strategy"]) for v in res["variants"]]
    one_wg = [s for s in timed if s.mma == "wgmma" and s.threads == 128 and s.split_k == 1]
    assert one_wg and any(not s.wgmma_pending for s in one_wg)
    near = Strategy.from_dict(res["nearest"]["strategy"])
    assert near in one_wg and near.wgmma_pending == 1 and res["nearest"]["blocks"] == 64
    assert res["fastest"]["ratio"] == pytest.approx(0.6)
