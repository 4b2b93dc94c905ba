"""Profile-guided search: read the largest per-component gaps and pick the edit expected to move them toward the
reference, with some exploration; never repeat an attempt.

Each edit declares how it moves each component (+1 up, -1 down), from how GPUs work:
  staging in shared memory bypasses L1 (L1 hit rate down) and costs shared memory (occupancy down);
  larger block tiles raise reuse (intensity up) but give fewer blocks (SM throughput, occupancy down);
  larger thread tiles reuse registers (FMA pipe up, issue down) with fewer threads (occupancy down);
  the strided mapping breaks coalescing on purpose; vector loads improve it;
  double buffering overlaps loads (bandwidth, issue up) at the price of shared memory;
  tensor cores move work from the FMA pipe to the tensor pipe;
  an asynchronous stage ring (cp.async) takes global loads off the LSU path (L1 hit and coalescing unmeasured) and
  keeps more loads in flight (bandwidth up) for more shared memory (occupancy down);
  launch-time shared-memory padding lowers occupancy; a register cap (min_blocks) raises it;
  split-K spreads a tile's K loop over more blocks (bandwidth, SM and pipe activity up; halving it slows on purpose);
  mma.sync + ldmatrix issues fewer instructions per tensor-core step than WMMA, and warpgroup MMA (wgmma) fewer again
  (one instruction per 64 x N x K step of 128 threads); a swizzled ring saves its rows' padding (occupancy up) and
  its cp.async fill looks up fewer L2 sectors than a padded ring's (L2 hit rate down: 51% to 15% on an H100);
  the Tensor Memory Accelerator fills wgmma's ring with one thread's copies instead of every thread's cp.async
  (issue down, bandwidth up); blocks of a cluster share one operand's tile by multicast, so it crosses L2 once per
  cluster (fewer L2 hits);
  NHWC operands load as channel vectors.
An edit's score is sum_c(-gap_c * effect_c): positive when it moves components toward the reference.
"""

from __future__ import annotations

import math
from typing import Callable

from vxsynth.agent.base import Context, Proposal
from vxsynth.kernels.strategy import Strategy, one_block_registers, warp_grid

L1, L2, CO, TP, FP, IS, AI, BW, OC, SM = ("l1_hit_rate", "l2_hit_rate", "gld_coalescing", "tensor_pipe", "fma_pipe",
                                          "issue_active", "arith_intensity", "dram_bw", "achieved_occupancy", "sm_throughput")


def _edit(name: str, fn: Callable[[Strategy], Strategy | None], effects: dict[str, int]):
    return name, fn, effects


def _scale(field: str, f: float):
    def fn(s: Strategy):
        v = getattr(s, field)
        nv = int(v * f)
        return s.with_(**{field: nv}) if nv >= 1 and nv != v else None
    return fn


def _set(field: str, value):
    return lambda s: s.with_(**{field: value}) if getattr(s, field) != value else None


EDITS = [
    _edit("stage_a->off", _set("stage_a", False), {L1: +1, OC: +1, IS: +1, BW: -1}),
    _edit("stage_a->on", _set("stage_a", True), {L1: -1, OC: -1, IS: -1, BW: +1}),
    _edit("stage_b->off", _set("stage_b", False), {L1: +1, OC: +1, IS: +1, BW: -1}),
    _edit("stage_b->on", _set("stage_b", True), {L1: -1, OC: -1, IS: -1, BW: +1}),
    _edit("block_m*2", _scale("block_m", 2), {AI: +1, OC: -1, SM: -1, L2: +1}),
    _edit("block_m/2", _scale("block_m", 0.5), {AI: -1, OC: +1, SM: +1, L2: -1}),
    _edit("block_n*2", _scale("block_n", 2), {AI: +1, OC: -1, SM: -1, L2: +1}),
    _edit("block_n/2", _scale("block_n", 0.5), {AI: -1, OC: +1, SM: +1, L2: -1}),
    _edit("block_k*2", _scale("block_k", 2), {IS: +1, OC: -1, L1: -1}),
    _edit("block_k/2", _scale("block_k", 0.5), {IS: -1, OC: +1, L1: +1}),
    _edit("thread_m*2", _scale("thread_m", 2), {FP: +1, IS: -1, OC: -1, AI: +1}),
    _edit("thread_m/2", _scale("thread_m", 0.5), {FP: -1, IS: +1, OC: +1, AI: -1}),
    _edit("thread_n*2", _scale("thread_n", 2), {FP: +1, IS: -1, OC: -1, AI: +1}),
    _edit("thread_n/2", _scale("thread_n", 0.5), {FP: -1, IS: +1, OC: +1, AI: -1}),
    _edit("mapping->strided", _set("mapping", "strided"), {CO: -1, L1: +1, BW: -1, SM: -1}),
    _edit("mapping->coalesced", _set("mapping", "coalesced"), {CO: +1, L1: -1, BW: +1, SM: +1}),
    _edit("mapping->swizzled", _set("mapping", "swizzled"), {IS: -1, SM: +1}),
    _edit("vector*2", _scale("vector", 2), {CO: +1, IS: -1, BW: +1}),
    _edit("vector/2", _scale("vector", 0.5), {CO: -1, IS: +1, BW: -1}),
    _edit("double_buffer->on", _set("double_buffer", True), {BW: +1, IS: +1, OC: -1, SM: +1}),
    _edit("double_buffer->off", _set("double_buffer", False), {BW: -1, IS: -1, OC: +1, SM: -1}),
    _edit("unroll*2", _scale("unroll", 2), {IS: +1, FP: +1}),
    _edit("unroll/2", _scale("unroll", 0.5), {IS: -1, FP: -1}),
    _edit("tensor_core->on", _set("tensor_core", True), {TP: +1, FP: -1, BW: +1, SM: +1}),
    # without tensor cores their form and warp grid go too (mma=sync and warps_m are tensor-core knobs)
    _edit("tensor_core->off", lambda s: s.with_(tensor_core=False, mma="wmma", warps_m=0) if s.tensor_core else None,
          {TP: -1, FP: +1, BW: -1, SM: -1}),
    _edit("conv_form->direct", lambda s: s.with_(conv_form="direct", stage_a=False, stage_b=False, double_buffer=False,
                                                 tensor_core=False, mma="wmma", warps_m=0) if s.conv_form != "direct" else None,
          {L1: +1, OC: +1, IS: +1, BW: -1, TP: -1, FP: +1}),
    _edit("conv_form->implicit", lambda s: s.with_(conv_form="implicit", stage_a=True, stage_b=True)
          if s.conv_form == "direct" else None, {L1: -1, OC: -1, IS: -1, BW: +1}),
    _edit("stages->ring", lambda s: s.with_(stages=3, stage_a=True, stage_b=True, double_buffer=False)
          if s.stages == 1 and s.conv_form != "direct" else None, {BW: +1, IS: +1, OC: -1, L1: -1}),
    _edit("stages->sync", _set("stages", 1), {BW: -1, IS: -1, OC: +1, L1: +1}),
    _edit("stages+1", lambda s: s.with_(stages=s.stages + 1) if s.stages > 1 else None, {BW: +1, OC: -1}),
    _edit("stages-1", lambda s: s.with_(stages=s.stages - 1) if s.stages > 2 else None, {BW: -1, OC: +1}),
    _edit("split_k*2", _scale("split_k", 2), {BW: +1, SM: +1, TP: +1, FP: +1, IS: +1, L2: +1}),
    _edit("split_k/2", _scale("split_k", 0.5), {BW: -1, SM: -1, TP: -1, FP: -1, IS: -1, L2: -1}),
    _edit("mma->sync", lambda s: s.with_(mma="sync") if s.tensor_core and s.mma == "wmma" else None, {TP: +1, IS: -1, BW: +1}),
    _edit("mma->tile", lambda s: s.with_(mma="tile", warps_m=s.warps_m or warp_grid(s)) if s.tensor_core and s.mma != "tile"
          else None, {TP: +1, IS: -1}),
    _edit("tile->sync", lambda s: s.with_(mma="sync") if s.mma == "tile" else None, {TP: -1, IS: +1}),
    _edit("smem_swizzle->on", _set("smem_swizzle", True), {OC: +1, L2: -1}),
    _edit("smem_swizzle->off", _set("smem_swizzle", False), {OC: -1, L2: +1}),
    # warpgroup MMA (sm90): whole warpgroups, 64-row blocks, K tiles of a 128-byte swizzle row, a ring of 3 or more
    _edit("mma->wgmma", lambda s: s.with_(mma="wgmma", warps_m=0, block_m=max(64, s.block_m), block_k=max(64, s.block_k),
                                          stages=max(3, s.stages), double_buffer=False)
          if s.tensor_core and s.mma != "wgmma" else None, {TP: +1, IS: -1, BW: +1}),
    _edit("mma->wmma", _set("mma", "wmma"), {TP: -1, IS: +1, BW: -1}),
    _edit("tma->on", lambda s: s.with_(tma=True) if s.mma == "wgmma" and not s.tma else None, {IS: -1, BW: +1}),
    _edit("tma->off", lambda s: s.with_(tma=False, warp_specialized=False) if s.tma else None, {IS: +1, BW: -1}),
    # a producer warpgroup runs ahead of the computing ones: more tiles in flight, no block barrier per K tile
    _edit("warp_specialized->on", lambda s: s.with_(warp_specialized=True) if s.tma and not s.warp_specialized else None,
          {BW: +1, TP: +1}),
    _edit("warp_specialized->off", _set("warp_specialized", False), {BW: -1, TP: -1}),
    _edit("cluster*2", lambda s: _scale("cluster", 2)(s) if s.tma and s.cluster < 8 else None, {L2: -1}),
    _edit("cluster/2", _scale("cluster", 0.5), {L2: +1}),
    # the tensor cores keep working on one K tile while the warpgroup waits for and issues the next
    _edit("wgmma_pending->1", lambda s: s.with_(wgmma_pending=1) if s.mma == "wgmma" and not s.wgmma_pending else None,
          {TP: +1, BW: +1}),
    _edit("wgmma_pending->0", _set("wgmma_pending", 0), {TP: -1, BW: -1}),
    _edit("layout->nhwc", lambda s: s.with_(layout="nhwc", vector=max(s.vector, 4)) if s.layout != "nhwc" else None,
          {CO: +1, IS: -1, BW: +1, AI: +1}),
    _edit("layout->nchw", _set("layout", "nchw"), {CO: -1, IS: +1, BW: -1, AI: -1}),
    _edit("smem_pad+16K", lambda s: s.with_(smem_pad=s.smem_pad + 16384), {OC: -1, SM: -1}),
    _edit("smem_pad->0", lambda s: s.with_(smem_pad=0) if s.smem_pad else None, {OC: +1, SM: +1}),
    _edit("min_blocks->off", _set("min_blocks", 0), {OC: -1, FP: +1}),
    # ptxas takes one block's registers and loads the next K steps' mma.sync fragments ahead of the current MMAs
    _edit("registers->one block", one_block_registers, {TP: +1, IS: +1}),
    _edit("raster->col", _set("raster", "col"), {L2: +1}),
    _edit("raster->row", _set("raster", "row"), {L2: -1}),
]


class ProfileGuided:
    name = "profile_guided"

    def __init__(self, explore: float = 0.15):
        self.explore = explore

    def options(self, ctx: Context, steps: int = 1) -> list[tuple[float, str, Strategy, dict]]:
        """Every untried valid edit (or pair of edits) of the current strategy with its score."""
        edits = EDITS if steps == 1 else [
            (f"{n1}+{n2}", (lambda s, f1=f1, f2=f2: (lambda t: f2(t) if t is not None else None)(f1(s))),
             {c: e1.get(c, 0) + e2.get(c, 0) for c in set(e1) | set(e2)})
            for i, (n1, f1, e1) in enumerate(EDITS) for (n2, f2, e2) in EDITS[i + 1:] if n1.split("->")[0].split("*")[0].split("/")[0]
            != n2.split("->")[0].split("*")[0].split("/")[0]]
        out = []
        for name, fn, effects in edits:
            s = fn(ctx.current)
            if s is None or s.hash() in ctx.tried or ctx.valid(s):
                continue
            if ctx.order == "vortex_first" and "tensor_core" in name:
                continue  # edits start from the Vortex implementation, which has no tensor cores
            score = sum(-g * effects.get(c, 0) for c, g in ctx.gaps.items() if not math.isnan(g))
            out.append((score, name, s, effects))
        return sorted(out, key=lambda t: (-t[0], t[1]))

    def propose(self, ctx: Context) -> Proposal | None:
        opts = self.options(ctx) or self.options(ctx, steps=2)  # pairs once every single edit was tried
        if not opts:
            return None
        explore = ctx.rng.random() < self.explore
        top = opts[: max(1, len(opts) // 2)]  # explore among the better half
        score, name, s, effects = top[ctx.rng.randrange(len(top))] if explore else opts[0]
        targets = sorted(((c, g) for c, g in ctx.gaps.items() if not math.isnan(g) and effects.get(c)),
                         key=lambda cg: -abs(cg[1]))[:3]
        why = ("exploration" if explore else
               "targets " + ", ".join(f"{c} ({'above' if g > 0 else 'below'} reference by {abs(g):.3f})" for c, g in targets))
        return Proposal(s, ctx.current.diff(s), name, f"{why}; score {score:+.3f}")
