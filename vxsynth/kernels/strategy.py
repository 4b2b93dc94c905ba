"""A strategy: one implementation of a slice, as plain data. Both emitters (CUDA, Vortex) read the same strategy.

Knobs
  block_m/n/k      block tile (outputs M x N per block, K step)
  thread_m/n       per-thread output tile (register reuse); threads = (block_m/thread_m) * (block_n/thread_n)
  stage_a/stage_b  stage that operand's tile in shared (CUDA) / local (Vortex) memory; else read it from global
                   (tensor cores: mma=sync/tile may load A's fragments straight from global memory through L1, the
                   `indexed_wo_smem` form of cuDNN's sm80 xmma kernels; B stays staged)
  double_buffer    software prefetch: load the next K tile into registers while computing the current one
  mapping          coalesced: neighbouring threads take neighbouring elements of the contiguous dimension;
                   strided: they take the other dimension (worse coalescing, on purpose when the reference has it);
                   swizzled: coalesced but XOR-permuted columns (changes shared-memory bank patterns)
  vector           elements each thread loads per step along the contiguous dimension (1, 2, 4; 8 for 16-bit
                   operands: 16-byte loads and copies)
  unroll           unroll factor of the inner K loop
  tensor_core      tensor cores on CUDA (BF16/FP16, TF32 paths; the form: mma); Vortex: scalar FMA on rounded inputs
  mma              tensor cores: the CUDA instruction form. wmma: the WMMA API (generic-address fragment loads,
                   TF32 as m16n8k4 steps); sync: `mma.sync` m16n8k8 (TF32) / m16n8k16 (BF16, FP16) with `ldmatrix`
                   fragment loads from shared memory, the HMMA/LDSM form of cuBLAS/cuDNN/CUTLASS kernels (inline PTX
                   from the sandbox's template allowlist; fp32 ring tiles go to the tensor cores unrounded, which
                   read their TF32 bits); tile: mma.sync on a warp tile (needs warps_m): each warp loads its A
                   fragments and B fragments once per K step and issues every mma of its fragments x fragments tile
                   from those registers, the register blocking of CUTLASS's warp-level GEMM (sync loads both operands
                   again for every fragment); wgmma: Hopper warpgroup MMA (`wgmma.mma_async` m64nNk16 BF16/FP16,
                   m64nNk8 TF32) reading both operands from the stage ring through shared-memory descriptors, the ring
                   in the 128-byte-swizzled K-major layout wgmma reads (no padding) and copied by cp.async (CUTLASS's
                   sm90 cp.async + GMMA mainloop); each 128-thread warpgroup computes 64 rows x block_n / wg_n columns
                   (see `wgmma_error`); Vortex: the same scalar FMA either way
  raster           order of blocks over the output tiles: row (N fastest) or col (M fastest)
  accumulate       accumulation type (fp32)
  conv_form        convolutions: implicit (im2col GEMM) or direct (nested channel/filter loops, no staging)
  stages           shared-memory pipeline depth. 1: loads go through registers (optionally double_buffer). 2-12: a
                   ring of `stages` tiles filled by asynchronous global->shared copies (CUDA `cp.async`, the LDGSTS
                   pattern of xmma/CUTLASS kernels: no LSU global loads), tiles kept in the operands' own layout
                   and precision; Vortex fills the same ring with plain loads, same loop order
  warps_m          tensor cores: warps along M of the block's warp grid (0: fragments dealt to warps in order);
                   warps that get no fragment still load tiles (a producer share, like warp-specialized kernels)
  smem_pad         extra dynamic shared memory per block at launch (bytes; CUDA): matches occupancy downwards
  min_blocks       __launch_bounds__ minimum resident blocks (0: none): caps registers to match occupancy upwards
  split_k          CUDA: split each output tile's K loop over this many blocks (implicit form). fp32 outputs: the
                   splits add their partial sums atomically into an output the launch zeroes first (cuBLAS's scal +
                   split-K pattern); 16-bit outputs: each split writes an fp32 partial tile to a workspace the
                   launch zeroes, and the split that arrives last adds them in split order and rounds once (serial
                   split-K without waiting). Vortex has no float atomics and runs the whole K per block
  smem_swizzle     tensor-core rings of mma=sync/tile: slot rows XOR-permuted in 16-byte chunks (the 32/64/128-byte
                   swizzles of xmma/CUTLASS layouts, `staging.RING_SWIZZLE`) instead of 16 bytes of padding per row:
                   cp.async writes and ldmatrix reads stay conflict-free in less shared memory (wgmma's ring is always
                   swizzled); Vortex keeps the unpadded ring unswizzled
  layout           convolutions, implicit form: the operand layout the kernel reads. nchw: the op's own tensors;
                   nhwc: activations NHWC and weights KRSC (K ordered filter tap, then channel), what cuDNN's
                   nhwckrsc kernels read after the op's layout-transform kernels, which stay outside the candidate:
                   the checks hand the kernel its operands in that layout (`tensors.kernel_storages`)
  tma              mma=wgmma: the ring slots of every operand a tensor map can describe (a plain matrix, or batch of
                   them, contiguous along K: GEMM operands, convolution weights; not the im2col view of an image)
                   are filled by the Tensor Memory Accelerator (`cp.async.bulk.tensor`, one thread issues one box
                   per 128-byte swizzle atom, an `mbarrier` per slot counts the bytes), as nvjet's and CUTLASS's sm90
                   kernels do; the maps are encoded by the project's launcher from the problem and the strategy
                   (`geometry.tensor_maps`). Vortex fills the same ring with plain loads
  warp_specialized tma filling both operands: a producer warpgroup (128 more threads per block) issues every slot's
                   copies and runs ahead of the consumers, which wait on the slot's mbarrier, compute and free the
                   slot on a second mbarrier (no block-wide barrier in the K loop; the epilogue synchronises the
                   consumers alone on a named barrier), the producer/consumer form of nvjet's and CUTLASS's sm90
                   warp-specialized kernels. Vortex has no producer: its threads fill the ring themselves
  cluster          tma: blocks launched as clusters of this many (1, 2, 4, 8) consecutive blocks along the raster's
                   fast dimension, which share one operand's tile (raster row: A, raster col: B): each block's copy
                   thread loads 1/cluster of that tile's rows and multicasts it to every block of the cluster
                   (`cp.async.bulk.tensor ... .multicast::cluster`), so the tile crosses L2 once per cluster, not once
                   per block, as nvjet's clustered kernels (..._4x1_...) do; a slot is refilled only after every block
                   of the cluster has freed it (a cluster barrier per K step, or warp-specialized, each consumer
                   warpgroup's arrival on every block's `empty_` mbarrier). Vortex has no clusters: each block loads
                   its whole tiles
  wgmma_pending    mma=wgmma: wgmma groups left in flight at the end of each K tile (0 or 1; `wgmma.wait_group`).
                   1: the tensor cores still work on tile kt while the warpgroup waits for tile kt+1 and issues it,
                   as CUTLASS's sm90 mainloops keep one MMA batch pending; a slot is refilled (or, warp-specialized,
                   freed) one tile later, so the plain ring prefetches stages - 2 tiles ahead and needs 3 slots.
                   Vortex has no asynchronous MMA: its scalar FMA is done with each tile
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, fields, replace
from typing import Callable

from vxsynth.kernels.geometry import (elem_bytes, fast_dims, k_tiles, problem_mnk, ring_rows_bytes, shared_operand, smem_bytes,
                                      static_smem_bytes, tc_shape, tensor_maps)
from vxsynth.kernels.problem import Conv, Gemm, Problem
from vxsynth.store.io import sha256_obj

MAPPINGS = ("coalesced", "strided", "swizzled")
CONV_FORMS = ("implicit", "direct")
LAYOUTS = ("nchw", "nhwc")
MMAS = ("wmma", "sync", "tile", "wgmma")
# Fields added after strategies were first recorded: left out of the plain-data form at their default, so hashes
# of earlier strategies stay the same.
_LATER = {"conv_form": "implicit", "stages": 1, "warps_m": 0, "smem_pad": 0, "min_blocks": 0, "split_k": 1,
          "layout": "nchw", "mma": "wmma", "smem_swizzle": False, "tma": False, "warp_specialized": False, "cluster": 1,
          "wgmma_pending": 0}
MAX_SPLIT = 16
MAX_STAGES = 12     # cuBLAS's sm90 kernels keep up to 15 K tiles in flight (nvjet ..._64x15_...)
PRODUCER_THREADS = 128      # the producer warpgroup of a warp-specialized block
SMEM_LIMIT = 227 * 1024      # shared memory one H200 block can have (static + dynamic)
RASTERS = ("row", "col")
CLUSTERS = (1, 2, 4, 8)     # portable cluster sizes (nvjet's names show 1x1 to 2x4)


@dataclass(frozen=True)
class Strategy:
    block_m: int = 64
    block_n: int = 64
    block_k: int = 16
    thread_m: int = 4
    thread_n: int = 4
    stage_a: bool = True
    stage_b: bool = True
    double_buffer: bool = False
    mapping: str = "coalesced"
    vector: int = 1
    unroll: int = 1
    tensor_core: bool = False
    raster: str = "row"
    accumulate: str = "fp32"
    conv_form: str = "implicit"
    stages: int = 1
    warps_m: int = 0
    smem_pad: int = 0
    min_blocks: int = 0
    split_k: int = 1
    layout: str = "nchw"
    mma: str = "wmma"
    smem_swizzle: bool = False
    tma: bool = False
    warp_specialized: bool = False
    cluster: int = 1
    wgmma_pending: int = 0

    @property
    def threads(self) -> int:
        """Threads that compute (the Vortex block; on CUDA the block less a warp-specialized producer)."""
        return (self.block_m // self.thread_m) * (self.block_n // self.thread_n)

    @property
    def cuda_threads(self) -> int:
        """Threads of a CUDA block: the computing threads and, warp-specialized, the producer warpgroup."""
        return self.threads + PRODUCER_THREADS * self.warp_specialized

    def to_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if _LATER.get(k, object()) != v}

    @classmethod
    def from_dict(cls, d: dict) -> "Strategy":
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})

    def hash(self) -> str:
        return sha256_obj(self.to_dict())[:12]

    def diff(self, other: "Strategy") -> dict:
        """Fields that differ: {field: [self value, other value]}."""
        a, b = asdict(self), asdict(other)
        return {k: [a[k], b[k]] for k in a if a[k] != b[k]}

    def with_(self, **kw) -> "Strategy":
        return replace(self, **kw)

    def __str__(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)


def repair(p: Problem, s: Strategy) -> Strategy:
    """The nearest strategy that satisfies `check`'s structural rules between knobs (not its size limits): the
    direct form is for convolutions and drops staging, double buffering, rings and tensor cores; rings and tensor
    cores stage both operands (mma.sync's A on a warp grid may stay in global memory), rings replace double
    buffering; warps_m needs tensor cores and a warp grid that tiles; unroll at most block_k; vector 8 is for 16-bit
    operands; split-K needs the implicit form, and at most one split per K tile; the NHWC layout is for implicit
    convolutions; the mma form is a tensor-core knob, mma=wgmma drops warps_m (or becomes mma=tile where wgmma cannot
    run), and mma=tile without a warp grid takes the squarest that tiles (else mma=sync); warp specialization needs
    tma on both operands; a cluster that cannot run (`cluster_error`) is 1."""
    kw: dict = {}
    if s.conv_form == "direct" and not isinstance(p, Conv):
        kw["conv_form"] = "implicit"
    elif s.conv_form == "direct":
        kw.update(stage_a=False, stage_b=False, double_buffer=False, tensor_core=False, stages=1, layout="nchw")
    if s.layout != "nchw" and not isinstance(p, Conv):
        kw["layout"] = "nchw"
    t = s.with_(**kw)
    if t.stages > 1:
        kw.update(stage_a=True, stage_b=True)
    elif t.tensor_core:             # B from shared memory; A too unless the final form may load it (`a_from_global`)
        kw["stage_b"] = True
    if t.stages > 1:
        kw["double_buffer"] = False
    if t.warps_m and (not t.tensor_core or (t.threads // 32) % t.warps_m):
        kw["warps_m"] = 0
    if t.mma != "wmma" and not t.tensor_core:
        kw["mma"] = "wmma"
    elif t.mma == "wgmma":          # its warpgroup grid is derived; where wgmma cannot run, warp tiles stand in
        kw.update(warps_m=0) if not wgmma_error(p, s.with_(**{**kw, "warps_m": 0})) else kw.update(mma="tile")
    if kw.get("mma", t.mma) == "tile" and not kw.get("warps_m", t.warps_m):
        grid = warp_grid(t)
        kw.update(warps_m=grid) if grid else kw.update(mma="sync")
    if t.smem_swizzle and not swizzle_ring(t.with_(mma=kw.get("mma", t.mma))):
        kw["smem_swizzle"] = False
    if t.tma and (kw.get("mma", t.mma) != "wgmma" or not tensor_maps(p, t)):
        kw["tma"] = False
    if t.warp_specialized and (not kw.get("tma", t.tma) or len(tensor_maps(p, t)) < 2):
        kw["warp_specialized"] = False
    if t.cluster > 1 and cluster_error(p, t.with_(**kw)):
        kw["cluster"] = 1
    if t.wgmma_pending and pending_error(t.with_(**kw)):
        kw["wgmma_pending"] = 0
    if t.unroll > t.block_k:
        kw["unroll"] = t.block_k
    if t.vector == 8 and p.dtype == "float32":      # 16 bytes are 4 fp32 elements
        kw["vector"] = 4
    if t.split_k > 1:
        kw["split_k"] = min(t.split_k, k_tiles(p, t), MAX_SPLIT) if split_k_ok(p, t) else 1
    if (u := s.with_(**kw)).tensor_core and not u.stage_a and not a_from_global(u):
        kw["stage_a"] = True
    return s.with_(**kw)


def cluster_error(p: Problem, s: Strategy) -> str | None:
    """Why `s` cannot run as clusters of `s.cluster` blocks, or None: the shared operand (A for raster row, B for
    raster col) is filled through its tensor map, whole clusters tile the raster's fast dimension (so a cluster never
    spans two rows of tiles, batches or splits), and each block's share of the tile is whole 8-row swizzle atoms."""
    if s.cluster not in CLUSTERS:
        return f"cluster={s.cluster}: need one of {CLUSTERS}"
    if s.cluster == 1:
        return None
    op = shared_operand(s)
    if not s.tma or op not in {m["operand"] for m in tensor_maps(p, s)}:
        return f"cluster: raster {s.raster} shares operand {op.upper()}, which needs tma and a tensor map"
    _, M, N, _ = problem_mnk(p)
    tiles = math.ceil(N / s.block_n) if s.raster == "row" else math.ceil(M / s.block_m)
    rows = s.block_m if op == "a" else s.block_n
    if tiles % s.cluster:
        return f"cluster={s.cluster} does not divide the {tiles} tiles along the raster's fast dimension"
    if rows % (8 * s.cluster):
        return f"cluster={s.cluster}: each block's share of the {rows}-row {op.upper()} tile must be whole 8-row atoms"
    return None


def pending_error(s: Strategy) -> str | None:
    """Why `s` cannot leave `s.wgmma_pending` wgmma groups in flight, or None: 0 or 1, with mma=wgmma, and a plain ring
    of at least 3 slots (the slot being computed, the one still read by the pending group, one being filled); a
    warp-specialized ring's consumers free the pending group's slot one tile later, which 2 slots allow."""
    if s.wgmma_pending not in (0, 1):
        return f"wgmma_pending={s.wgmma_pending}: need 0 or 1"
    if s.wgmma_pending and s.mma != "wgmma":
        return "wgmma_pending leaves wgmma groups in flight: it needs mma=wgmma"
    if s.wgmma_pending and not s.warp_specialized and s.stages < 3:
        return "wgmma_pending=1 refills a slot one tile later: a plain ring needs stages >= 3"
    return None


def warp_grid(s: Strategy) -> int:
    """warps_m of the squarest warp grid that tiles the block's 16 x 16 tensor-core fragments (0: none does)."""
    warps, fr_m, fr_n = s.threads // 32, s.block_m // 16, s.block_n // 16
    grids = [wm for wm in range(1, warps + 1) if warps % wm == 0 and fr_m % wm == 0 and fr_n % (warps // wm) == 0]
    return min(grids, key=lambda wm: (abs(math.log2((fr_m // wm) / (fr_n // (warps // wm)))), wm), default=0)


def one_block_registers(s: Strategy) -> Strategy | None:
    """An mma.sync form (sync, tile) with its K steps unrolled (up to 8) and `__launch_bounds__(threads, 1)`, or
    None: with no minimum of resident blocks ptxas keeps such a kernel near 128 registers and loads each ldmatrix
    fragment just before its MMA; with one block's budget it takes as many registers as xmma's kernels (164 against
    168 on conv2d 64->64's 128x64x32 tile) and issues the next K steps' fragments ahead of the current MMAs, as xmma's
    register-double-buffered warp loop does (`bench/sass_mix.py`: ldmatrix to first use)."""
    if not s.tensor_core or s.mma not in ("sync", "tile") or s.min_blocks:
        return None
    return s.with_(min_blocks=1, unroll=min(8, s.block_k))


def a_from_global(s: Strategy) -> bool:
    """`s` may leave A unstaged and load its fragments from global memory: mma.sync or warp tiles on a warp grid
    (each thread's A rows are fixed), with no ring (cuDNN's `indexed_wo_smem` form)."""
    return s.tensor_core and s.mma in ("sync", "tile") and s.stages == 1 and bool(s.warps_m)


def swizzle_ring(s: Strategy) -> bool:
    """`s` has a ring that smem_swizzle can lay out: the tensor-core ring of mma=sync or mma=tile."""
    return s.tensor_core and s.stages > 1 and s.mma in ("sync", "tile")


def wgmma_grid(s: Strategy) -> tuple[int, int]:
    """(warpgroups along M, along N) of a wgmma block: 64 rows per warpgroup, the rest of the warpgroups along N."""
    wg_m = max(1, s.block_m // 64)
    return wg_m, max(1, s.threads // 128 // wg_m)


def wgmma_error(p: Problem, s: Strategy) -> str | None:
    """Why mma=wgmma cannot run `s` on `p`, or None: the ring (stages > 1) holds both operands K-major (contiguous along
    K in global memory) in 128-byte swizzle atoms (block_k spans whole 128-byte rows), whole warpgroups tile the
    block (block_m a multiple of 64, 128 threads per warpgroup, each warpgroup's columns a multiple of 8 up to 256),
    no warps_m (the warpgroup grid is derived)."""
    eb = elem_bytes(p)
    wg_m, wg_n = wgmma_grid(s)
    if not s.tensor_core or s.stages < 2:
        return "wgmma reads its operands from the stage ring: tensor_core and stages >= 2"
    if fast_dims(p, s) != ("k", "k"):
        return "wgmma reads both operands K-major: their global layouts must be contiguous along K"
    if s.block_k * eb % 128:
        return f"wgmma's 128-byte swizzle atoms need block_k a multiple of {128 // eb}"
    if s.block_m % 64 or s.threads % 128 or (s.threads // 128) % wg_m:
        return "wgmma needs block_m a multiple of 64 and 128 threads per warpgroup, a whole number per 64 rows"
    if s.block_n % (8 * wg_n) or s.block_n // wg_n > 256:
        return f"wgmma: {wg_n} warpgroups along N need block_n / {wg_n} a multiple of 8, at most 256"
    if s.warps_m:
        return "wgmma derives its warpgroup grid: warps_m must be 0"
    return None


def wgmma_variant(p: Problem, s: Strategy, valid: Callable[[Strategy], str | None] | None = None) -> Strategy | None:
    """The nearest mma=wgmma strategy to tensor-core strategy `s` that `valid` admits (default: `check`), or None:
    block_m a multiple of 64, K tiles of at least one 128-byte swizzle row, a ring of at least 3 slots filled by
    16-byte copies, the thread tile nearest `s`'s that gives whole warpgroups; `s`'s launch-time padding kept where
    it still fits, else dropped."""
    valid = valid or (lambda v: check(p, v))
    eb = elem_bytes(p)
    t = s.with_(mma="wgmma", warps_m=0, block_m=max(64, s.block_m), block_k=max(s.block_k, 128 // eb),
                stages=max(3, s.stages), double_buffer=False, vector=max(s.vector, 16 // eb), stage_a=True,
                stage_b=True)
    tiles = sorted(((tm, tn) for tm in (1, 2, 4, 8, 16) for tn in (1, 2, 4, 8, 16)),
                   key=lambda x: (abs(math.log2(x[0] / t.thread_m)) + abs(math.log2(x[1] / t.thread_n)), x))
    for tm, tn in tiles:
        v = t.with_(thread_m=tm, thread_n=tn)
        for w in dict.fromkeys((v, v.with_(smem_pad=0))):
            if valid(w) is None:
                return w
    return None


def split_k_ok(p: Problem, s: Strategy) -> bool:
    """Split-K divides the implicit (GEMM) form's K loop; the direct form has no K tiles."""
    return s.conv_form == "implicit"


def check(p: Problem, s: Strategy, *, max_threads: int = 1024, tensor_ok: bool = True) -> str | None:
    """Why `s` cannot implement `p` within these limits, or None when it can."""
    if s.mapping not in MAPPINGS:
        return f"mapping {s.mapping!r} not in {MAPPINGS}"
    if s.raster not in RASTERS:
        return f"raster {s.raster!r} not in {RASTERS}"
    if s.accumulate != "fp32":
        return "only fp32 accumulation is implemented"
    if s.conv_form not in CONV_FORMS:
        return f"conv_form {s.conv_form!r} not in {CONV_FORMS}"
    if s.conv_form == "direct" and (not isinstance(p, Conv) or s.stage_a or s.stage_b or s.double_buffer or s.tensor_core):
        return "the direct form is for convolutions, without staging, double buffering or tensor cores"
    if s.layout not in LAYOUTS:
        return f"layout {s.layout!r} not in {LAYOUTS}"
    if s.layout != "nchw" and (not isinstance(p, Conv) or s.conv_form != "implicit"):
        return "the NHWC layout is for convolutions in the implicit form"
    if s.mma not in MMAS:
        return f"mma {s.mma!r} not in {MMAS}"
    for name in ("block_m", "block_n", "block_k", "thread_m", "thread_n"):
        v = getattr(s, name)
        if v < 1 or v & (v - 1):
            return f"{name}={v} must be a power of two"
    if s.block_m % s.thread_m or s.block_n % s.thread_n:
        return "block tile must be a multiple of the thread tile"
    if s.threads % 32 or not 32 <= s.threads <= max_threads:
        return f"{s.threads} threads per block: need a multiple of 32 in [32, {max_threads}]"
    if s.vector not in ((1, 2, 4) if p.dtype == "float32" else (1, 2, 4, 8)) or s.unroll not in (1, 2, 4, 8) or s.unroll > s.block_k:
        return "vector must be 1, 2 or 4 (8 for 16-bit operands) and unroll 1, 2, 4 or 8 (at most block_k)"
    if s.thread_m * s.thread_n > (256 if s.tensor_core else 64):
        return "thread tile above 64 outputs (256 with tensor cores: the accumulators live in fragments) would spill"
    if not 1 <= s.stages <= MAX_STAGES:
        return f"stages={s.stages}: need 1 to {MAX_STAGES}"
    if s.stages > 1 and (not (s.stage_a and s.stage_b) or s.double_buffer or s.conv_form == "direct"):
        return "asynchronous stages stage both operands and replace double_buffer"
    if not 1 <= s.split_k <= MAX_SPLIT:
        return f"split_k={s.split_k}: need 1 to {MAX_SPLIT}"
    if s.split_k > 1 and not split_k_ok(p, s):
        return "split_k needs the implicit form (the direct form has no K tiles to divide)"
    if s.split_k > k_tiles(p, s):
        return f"split_k={s.split_k} exceeds the {k_tiles(p, s)} K tiles"
    if s.smem_pad < 0 or s.min_blocks < 0 or s.warps_m < 0:
        return "smem_pad, min_blocks and warps_m cannot be negative"
    if s.tensor_core:
        if not tensor_ok:
            return "the precision path has no tensor-core form here"
        fm, fn, fk = tc_shape(p.dtype)
        if not s.stage_b or not (s.stage_a or a_from_global(s)):
            return ("tensor cores read B from shared memory (stage_b), and A too (stage_a) unless mma.sync loads A's "
                    "fragments from global memory (mma=sync or tile on a warp grid, warps_m, stages 1)")
        if s.block_m % fm or s.block_n % fn or s.block_k % fk:
            return f"tensor-core tiles need block_m, block_n multiples of 16 and block_k a multiple of {fk}"
        warps, fr_m, fr_n = s.threads // 32, s.block_m // fm, s.block_n // fn
        if s.warps_m:
            if warps % s.warps_m or fr_m % s.warps_m or fr_n % (warps // s.warps_m):
                return f"warp grid {s.warps_m}x{warps // max(1, s.warps_m)} does not tile {fr_m}x{fr_n} fragments"
        elif s.mma == "tile":
            return "mma=tile needs a warp grid (warps_m)"
        if s.mma == "wgmma" and (why := wgmma_error(p, s)):
            return why
    elif s.warps_m or s.mma != "wmma":
        return "warps_m and mma are tensor-core knobs"
    if s.smem_swizzle:
        if not swizzle_ring(s):
            return "smem_swizzle is a layout of the tensor-core ring of mma=sync or mma=tile"
        if min(ring_rows_bytes(p, s)) < 32:
            return "smem_swizzle needs ring rows of at least 32 bytes (two 16-byte chunks)"
    if s.tma:
        if s.mma != "wgmma":
            return "tma fills wgmma's swizzled ring: it needs mma=wgmma"
        if not tensor_maps(p, s):
            return "tma: no operand of this problem is a matrix a tensor map can describe (16-byte strides, K contiguous)"
    if s.warp_specialized:
        if not s.tma or len(tensor_maps(p, s)) < 2:
            return "warp_specialized: the producer fills both operands through tensor maps (tma, K-contiguous A and B)"
        if s.cuda_threads > 1024:
            return f"warp_specialized: {s.threads} threads and the {PRODUCER_THREADS}-thread producer exceed a CUDA block's 1024"
    if why := cluster_error(p, s):
        return why
    if why := pending_error(s):
        return why
    total = smem_bytes(p, s) + s.smem_pad + static_smem_bytes(p, s)
    if total > SMEM_LIMIT:
        return f"{total} bytes of shared memory exceed {SMEM_LIMIT}"
    return None
