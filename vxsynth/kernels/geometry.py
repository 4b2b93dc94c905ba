"""The launch and tiling geometry of a strategy on a problem, shared by every dialect and by the strategy's own
rules (`strategy.check`): the GEMM view, K tiles, contiguous dimensions, tensor-core fragment shapes, stage-ring slot
layouts, shared/local memory per block, tiles and blocks, vector widths, split-K, the padded output of a dialect
without guarded stores, the kernel's name."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from vxsynth.kernels.dialects import CUDA, Dialect
from vxsynth.kernels.problem import Conv, Gemm, Problem, to_dict
from vxsynth.store.io import sha256_obj

if TYPE_CHECKING:
    from vxsynth.kernels.strategy import Strategy


def problem_mnk(p: Problem) -> tuple[int, int, int, int]:
    """The GEMM view (batch-or-groups, M, N, K) of a problem."""
    if isinstance(p, Gemm):
        return p.batch, p.M, p.N, p.K
    assert isinstance(p, Conv)
    return p.groups, p.N * p.P * p.Q, p.K // p.groups, (p.C // p.groups) * p.R * p.S


def k_tiles(p: Problem, s: Strategy) -> int:
    return -(-problem_mnk(p)[3] // s.block_k)


def fast_dims(p: Problem, s: Strategy) -> tuple[str, str]:
    """Contiguous dimension of A ("k" or "m") and of B ("k" or "n") in global memory as the kernel reads them."""
    if isinstance(p, Gemm):
        a = "k" if p.a_strides[2] == 1 else ("m" if p.a_strides[1] == 1 else "k")
        b = "n" if p.b_strides[2] == 1 else ("k" if p.b_strides[1] == 1 else "n")
        return a, b
    return ("k" if s.layout == "nhwc" else "m"), "k"


def elem_bytes(p: Problem) -> int:
    """Bytes of one stored element: 4 (fp32), 2 (BF16, FP16)."""
    return 4 if p.dtype == "float32" else 2


def tc_shape(dtype: str) -> tuple[int, int, int]:
    """WMMA fragment shape (m, n, k) for the precision path: TF32 m16n16k8, BF16/FP16 m16n16k16."""
    return (16, 16, 8) if dtype == "float32" else (16, 16, 16)


def ring_layout(p: Problem, s: Strategy, op: str) -> tuple[int, int]:
    """(rows, leading dimension) of one ring slot of an operand for asynchronous staging: the tile in the operand's
    global layout (contiguous dimension innermost), rows padded by 16 bytes against bank conflicts; wgmma's ring is
    unpadded (its 128-byte swizzle keeps the rows conflict-free, `staging.WGMMA_SWIZZLE`)."""
    fa, fb = fast_dims(p, s)
    fast = fa if op == "a" else fb
    ext = {"m": s.block_m, "n": s.block_n, "k": s.block_k}
    other = ({"a": "m", "b": "n"}[op] if fast == "k" else "k")
    pad = 0 if wgmma(s) or s.smem_swizzle else (4 if p.dtype == "float32" else 8)
    return ext[other], ext[fast] + pad


def ring_rows_bytes(p: Problem, s: Strategy) -> tuple[int, int]:
    """Bytes of one unpadded ring row of A and of B on the tensor cores (the contiguous extent of each tile)."""
    eb = elem_bytes(p)
    ext = {"m": s.block_m, "n": s.block_n, "k": s.block_k}
    fa, fb = fast_dims(p, s)
    return ext[fa] * eb, ext[fb] * eb


def wgmma(s: Strategy, tensor_cores: bool = True) -> bool:
    """The strategy runs Hopper warpgroup MMA (in a dialect with tensor cores)."""
    return s.tensor_core and s.mma == "wgmma" and tensor_cores


WGMMA_ALIGN = 1024      # a 128-byte swizzle atom (8 rows x 128 B) starts on a 1024-byte boundary


def tensor_maps(p: Problem, s: Strategy) -> tuple[dict, ...]:
    """The tensor maps a `tma` launch of `s` takes, one per operand the Tensor Memory Accelerator can fill (GEMM
    operands and convolution weights, K contiguous, row and batch strides whole 16-byte units; the im2col view of an
    image is not a tensor): {operand, dims (elements, innermost first), strides (bytes, of dims[1:]), box (one
    128-byte swizzle atom of K by the tile's rows, or by one cluster block's share of them)}. Empty where `s` is not
    wgmma. The launcher encodes them on the buffers it made (`targets.tensor_map`); the kernel addresses a box by
    (k, row[, batch])."""
    if not wgmma(s) or fast_dims(p, s) != ("k", "k"):
        return ()
    eb = elem_bytes(p)
    box_k = 128 // eb
    maps = []
    if isinstance(p, Gemm):
        for op, (sb, s_row, _), rows, box in (("a", p.a_strides, p.M, s.block_m),
                                              ("b", (p.b_strides[0], p.b_strides[2], 1), p.N, s.block_n)):
            dims, strides = [p.K, rows], [s_row * eb]
            if p.batch > 1 and sb:
                dims, strides = dims + [p.batch], strides + [sb * eb]
            maps.append({"operand": op, "dims": dims, "strides": strides, "box": [box_k, box]})
    elif not p.c_layout:        # weights: groups x (K/groups) rows of (C/groups) R S elements, one after another
        _, _, n, k = problem_mnk(p)
        maps.append({"operand": "b", "dims": [k, p.groups * n], "strides": [k * eb], "box": [box_k, s.block_n]})
    for m in maps:              # a cluster's blocks each load their share of the tile they share
        if s.cluster > 1 and m["operand"] == shared_operand(s):
            m["box"] = [box_k, m["box"][1] // s.cluster]
    return tuple(m for m in maps if all(x > 0 and x % 16 == 0 for x in m["strides"]) and m["box"][1] <= 256)


def shared_operand(s: Strategy) -> str:
    """The operand the blocks of a cluster share: consecutive blocks of raster row have one A tile, of col one B."""
    return "a" if s.raster == "row" else "b"


def tma_operands(p: Problem, s: Strategy, d: Dialect) -> tuple[str, ...]:
    """The operands whose ring slots the Tensor Memory Accelerator fills in dialect `d` (the others: cp.async)."""
    return tuple(m["operand"] for m in tensor_maps(p, s)) if s.tma and d.tma else ()


def smem_bytes(p: Problem, s: Strategy, tensor_cores: bool = True) -> int:
    """Shared/local memory one block's kernel declares (staging buffers, doubled with double buffering, `stages`
    ring slots for asynchronous staging, plus room to align wgmma's ring; C tile for WMMA); `smem_pad` is launch-time
    and not included.
    `tensor_cores=False` gives the scalar layout a dialect without tensor cores (Vortex) emits."""
    if s.conv_form == "direct":
        return 0
    tc = s.tensor_core and tensor_cores
    if s.stages > 1:
        eb = 4 if (p.dtype == "float32" or not tensor_cores) else 2
        a_rows, a_ld = ring_layout(p, s, "a")
        b_rows, b_ld = ring_layout(p, s, "b")
        total = (a_rows * a_ld + b_rows * b_ld) * eb * s.stages + (WGMMA_ALIGN if wgmma(s, tensor_cores) else 0)
    else:
        eb = 4 if (not tc or p.dtype == "float32") else 2
        pad = (4 if p.dtype == "float32" else 8) if tc else 1
        a = (s.block_m * (s.block_k + pad) if tc else s.block_k * (s.block_m + 1)) * eb if s.stage_a else 0
        b_tc = s.block_n * (s.block_k + pad) if s.mma != "wmma" else s.block_k * (s.block_n + pad)   # (n, k) rows
        b = (b_tc if tc else s.block_k * (s.block_n + 1)) * eb if s.stage_b else 0
        total = (a + b) * (2 if s.double_buffer else 1)
    if tc:
        total = max(total, s.block_m * (s.block_n + 4) * 4)
    return total


@dataclass(frozen=True)
class Geometry:
    """Derived launch and tiling geometry shared by both dialects."""
    batch: int
    M: int
    N: int
    K: int
    tiles_m: int
    tiles_n: int
    blocks: int
    kt: int
    a_fast: str     # contiguous dimension of A: "k" or "m"
    b_fast: str     # contiguous dimension of B: "k" or "n"
    out_fast: str   # contiguous dimension of the output: "n" (GEMM) or "m" (conv, NCHW)
    va: int         # effective vector width of A loads
    vb: int


def geometry(p: Problem, s: Strategy) -> Geometry:
    batch, M, N, K = problem_mnk(p)
    a_fast, b_fast = fast_dims(p, s)
    out_fast = "n" if isinstance(p, Gemm) else "m"
    va = _vec_ok(p, s, "a", a_fast, M, K)
    vb = _vec_ok(p, s, "b", b_fast, N, K)
    tiles_m, tiles_n = math.ceil(M / s.block_m), math.ceil(N / s.block_n)
    return Geometry(batch, M, N, K, tiles_m, tiles_n, tiles_m * tiles_n * batch, math.ceil(K / s.block_k),
                    a_fast, b_fast, out_fast, va, vb)


def _vec_ok(p: Problem, s: Strategy, op: str, fast: str, other: int, K: int) -> int:
    """Vector width usable for a staged operand: each vector lies wholly in or out of range and is aligned."""
    v = s.vector
    staged = s.stage_a if op == "a" else s.stage_b
    if v == 1 or not staged:
        return 1
    tile_fast = s.block_k if fast == "k" else (s.block_m if op == "a" else s.block_n)
    extent = K if fast == "k" else other
    if tile_fast % v or extent % v:
        return 1
    if isinstance(p, Conv):     # NCHW im2col reads A element by element; NHWC runs of v channels are contiguous
        return v if op == "b" or (s.layout == "nhwc" and (p.C // p.groups) % v == 0 and p.C % v == 0) else 1
    sb, s1, s2 = p.a_strides if op == "a" else p.b_strides   # A: (b, m, k); B: (b, k, n)
    fast_stride, others = {("a", "k"): (s2, (sb, s1)), ("a", "m"): (s1, (sb, s2)),
                           ("b", "n"): (s2, (sb, s1)), ("b", "k"): (s1, (sb, s2))}[(op, fast)]
    if fast_stride != 1 or any(x % v for x in others):
        return 1
    return v


def async_copy_error(p: Problem, s: Strategy, g: Geometry) -> str | None:
    """Why the asynchronous ring cannot copy this problem's tiles: copies are 4, 8 or 16 bytes, so 16-bit
    operands need aligned pairs (vector >= 2 on both operands' contiguous dimension)."""
    if s.stages > 1 and p.dtype != "float32" and min(g.va, g.vb) < 2:
        return "asynchronous copies of 16-bit operands need vector >= 2 with even, aligned contiguous extents"
    return None


def kernel_name(p: Problem, s: Strategy) -> str:
    return "vxk_" + sha256_obj({"p": to_dict(p), "s": s.to_dict()})[:10]


def uses_workspace(p: Problem, s: Strategy, d: Dialect) -> bool:
    """Split-K into a 16-bit output goes through an fp32 workspace (float atomics need an fp32 output)."""
    return k_splits(s, d) > 1 and p.dtype != "float32"


def static_smem_bytes(p: Problem, s: Strategy) -> int:
    """Static shared memory of the CUDA kernel, which the launch's dynamic memory comes on top of: the tma ring's
    mbarriers (one per slot, one more per slot that frees it when the block is warp-specialized) and the split-K
    arrival flag of a 16-bit output, rounded up to the 128-byte alignment of the dynamic region (as ptxas -v counts)."""
    raw = 8 * s.stages * (1 + s.warp_specialized) if s.tma else 0
    raw += 4 if uses_workspace(p, s, CUDA) else 0
    return -(-raw // 128) * 128


def workspace_words(p: Problem, s: Strategy) -> int:
    """32-bit words of the workspace a CUDA launch of `s` needs (0: none): every split's partial tile of every block,
    then one arrival counter per block."""
    if not uses_workspace(p, s, CUDA):
        return 0
    g = geometry(p, s)
    return s.split_k * g.blocks * s.block_m * s.block_n + g.blocks


def k_splits(s: Strategy, d: Dialect) -> int:
    """Blocks per output tile along K: split-K is a CUDA form (float atomics); Vortex runs the whole K per block."""
    return s.split_k if d.split_k else 1


def k_range(s: Strategy, d: Dialect) -> tuple[str, str]:
    """The block's K tiles [lo, hi): all of them, or its split's share."""
    return ("kt0", "kt1") if k_splits(s, d) > 1 else ("0", "KT")


def vortex_out_elements(p: Problem, s: Strategy) -> int:
    """Size of the padded output buffer a Vortex kernel writes (whole tiles)."""
    g = geometry(p, s)
    mp, np_ = g.tiles_m * s.block_m, g.tiles_n * s.block_n
    if isinstance(p, Gemm):
        return g.batch * mp * np_
    pq = p.P * p.Q
    nimg = math.ceil(mp / pq)
    return nimg * np_ * p.groups * pq
