"""A candidate: one strategy emitted as a CUDA kernel and a Vortex kernel, plus the host-side argument layout.

Everything is plain data: strategy and sources are hashed and saved with every attempt.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from vxsynth.kernels.dialects import CUDA, VORTEX, VORTEX_API
from vxsynth.kernels.emit import emit
from vxsynth.kernels.geometry import (geometry, kernel_name, smem_bytes, tc_shape, tensor_maps, vortex_out_elements,
                                      workspace_words)
from vxsynth.kernels.problem import Conv, Gemm, Problem, to_dict
from vxsynth.kernels.strategy import Strategy, wgmma_error
from vxsynth.kernels.tensors import storage_sizes
from vxsynth.store.io import sha256_text, write_json, write_text

ROLES = ("a", "b", "bias", "out")


@dataclass(frozen=True)
class Candidate:
    problem: Problem
    strategy: Strategy
    precision: str
    cuda_source: str
    vortex_source: str
    meta: dict = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.meta["kernel_name"]

    @property
    def cuda_sha256(self) -> str:
        return sha256_text(self.cuda_source)

    @property
    def vortex_sha256(self) -> str:
        return sha256_text(self.vortex_source)

    def save(self, folder: Path) -> None:
        write_text(folder / "kernel.cu", self.cuda_source)
        write_text(folder / "kernel_vx.c", self.vortex_source)
        write_json(folder / "candidate.json", {"problem": to_dict(self.problem), "strategy": self.strategy.to_dict(),
                                               "precision": self.precision, "meta": self.meta,
                                               "cuda_sha256": self.cuda_sha256, "vortex_sha256": self.vortex_sha256})


def load(folder: Path) -> Candidate:
    """A candidate saved by `Candidate.save` (its own sources, not regenerated)."""
    from vxsynth.kernels.problem import from_dict
    from vxsynth.store.io import read_json

    meta = read_json(folder / "candidate.json")
    return Candidate(from_dict(meta["problem"]), Strategy.from_dict(meta["strategy"]), meta["precision"],
                     (folder / "kernel.cu").read_text(), (folder / "kernel_vx.c").read_text(), meta["meta"])


def vortex_lowering(problem: Problem, s: Strategy, lmem_per_block: int | None,
                    drop_staging: bool = False) -> tuple[Strategy, dict]:
    """The strategy the Vortex half is emitted from, and what differs from the CUDA half and why. The stage ring
    keeps its depth while it fits the core's local-memory share per block (`lmem_per_block`), else the deepest
    ring that fits, else synchronous staging of the same tiles; tensor-core tiles that fit at no depth step K in
    halves down to one MMA step (wgmma's swizzle-row K tiles halve first, at full depth). With `drop_staging` (a
    simulator whose usable local memory is smaller than the reconstruction's core: SimX), tiles that still do not
    fit lose the register prefetch, then B's staging, then A's (those operands are read from global memory)."""
    notes = {}
    if s.stages > 1:
        notes["stages"] = "plain loads fill the same ring (no asynchronous copy unit)"
    if s.smem_pad:
        notes["smem_pad"] = "CUDA launch-time shared memory (occupancy); Vortex local memory is not padded"
    if s.min_blocks:
        notes["min_blocks"] = "register cap of the CUDA compiler; no Vortex equivalent"
    if s.warps_m:
        notes["warps_m"] = "tensor-core warp layout; Vortex runs scalar FMA"
    if s.mma == "tile":
        notes["mma"] = "warp-tile register blocking of mma.sync fragments; Vortex reuses operands in its thread tile"
    if s.smem_swizzle:
        notes["smem_swizzle"] = ("CUDA shared-memory bank layout of the ring; Vortex keeps the same unpadded ring "
                                 "unswizzled")
    if s.mma == "wgmma":
        notes["mma"] = ("Hopper warpgroup MMA (wgmma) from a 128-byte-swizzled ring through shared-memory descriptors; "
                        "Vortex runs scalar FMA from the same tiles in an unswizzled ring")
    if s.tma:
        notes["tma"] = ("the Tensor Memory Accelerator fills the CUDA ring from tensor maps (one thread, mbarrier "
                        "byte counts); Vortex threads load the same tiles into the same ring")
    if s.warp_specialized:
        notes["warp_specialized"] = ("a CUDA producer warpgroup fills the ring while the consumer warpgroups compute "
                                     "(mbarriers, no block barrier in the K loop); Vortex threads fill and compute in turn")
    if s.cluster > 1:
        notes["cluster"] = (f"clusters of {s.cluster} CUDA blocks share one tile through TMA multicast; each Vortex "
                            "block loads its whole tiles")
    if s.wgmma_pending:
        notes["wgmma_pending"] = ("CUDA leaves one wgmma group in flight per K tile and refills its slot a tile later; "
                                  "Vortex's scalar FMA finishes each tile before the next")
    v = s
    if s.tensor_core and not s.stage_a:     # the scalar form of the same loads: A from global, B from the staged tile
        notes["stage_a"] = ("mma.sync loads A's fragments from global memory; Vortex threads load A's elements of their "
                            "thread tiles from global memory (scalar FMA)")
        v = _scalar(v)
    if s.mma == "wgmma":        # the form and its swizzled ring are CUDA's: Vortex stages the tiles as mma=sync does
        v = v.with_(mma="sync", tma=False, warp_specialized=False, cluster=1, wgmma_pending=0)
        v = _finer_k(problem, v, lmem_per_block)
        if v.block_k != s.block_k:
            notes["block_k"] = (f"wgmma's 128-byte swizzle rows need K tiles of {s.block_k}; Vortex steps K by "
                                f"{v.block_k} over the same M x N tiles ({lmem_per_block} B of local memory per block)")
    if s.split_k > 1:
        how = "float atomics" if problem.dtype == "float32" else "an fp32 workspace and atomic arrival counters"
        notes["split_k"] = f"split-K {s.split_k} adds partial sums through {how}; Vortex runs the whole K per block"
        v = v.with_(split_k=1)
    if s.stages > 1 and lmem_per_block is not None:
        while v.stages > 1 and smem_bytes(problem, v, tensor_cores=False) > lmem_per_block:
            v = v.with_(stages=v.stages - 1)
        if v.stages != s.stages:
            notes["stages"] = (f"{s.stages}-slot ring needs {smem_bytes(problem, s, tensor_cores=False)} B of local memory, "
                               f"the core has {lmem_per_block} B per block: Vortex uses "
                               + (f"a {v.stages}-slot ring" if v.stages > 1 else "synchronous staging of the same tiles"))
    if v.smem_swizzle and v.stages == 1:      # the swizzle lays out a ring: synchronous staging pads its one tile
        v = v.with_(smem_swizzle=False)
    if s.tensor_core and s.mma != "wgmma":
        k0 = v.block_k      # xmma's 128x64x32 tiles outgrow the core's local memory at any depth: Vortex steps K finer
        v = _finer_k(problem, v, lmem_per_block)
        if v.block_k != k0:
            notes["block_k"] = (f"tensor-core K tiles of {s.block_k}; Vortex steps K by {v.block_k} over the same M x N "
                                f"tiles ({lmem_per_block} B of local memory per block)")
    if drop_staging and lmem_per_block is not None and (need := smem_bytes(problem, v, tensor_cores=False)) > lmem_per_block:
        dropped = []
        if v.tensor_core:   # the Vortex half is scalar FMA either way; unstaged operands rule out the WMMA layout
            v = _scalar(v)
        for knob in ("double_buffer", "stage_b", "stage_a"):
            if getattr(v, knob) and smem_bytes(problem, v, tensor_cores=False) > lmem_per_block:
                v = v.with_(**{knob: False})
                dropped.append(knob)
        notes["staging"] = (f"tiles need {need} B of local memory, the core has {lmem_per_block} B per block: Vortex "
                            f"drops {', '.join(dropped)} (now {smem_bytes(problem, v, tensor_cores=False)} B)")
    return v, notes


def _scalar(v: Strategy) -> Strategy:
    """`v` on scalar FMA: without tensor cores and what only they use (warp grid, MMA form, ring swizzle)."""
    return v.with_(tensor_core=False, warps_m=0, mma="wmma", smem_swizzle=False)


def _finer_k(problem: Problem, v: Strategy, lmem_per_block: int | None) -> Strategy:
    """`v` with its K tiles halved, down to one MMA step, until its Vortex tiles fit `lmem_per_block` (None: as is)."""
    while (lmem_per_block is not None and v.block_k > tc_shape(problem.dtype)[2]
           and smem_bytes(problem, v, tensor_cores=False) > lmem_per_block):
        v = v.with_(block_k=v.block_k // 2, unroll=min(v.unroll, v.block_k // 2))
    return v


def _tc_math(dtype: str, mma: str) -> str:
    if mma == "wgmma":
        return "wgmma tensor cores " + {"float32": "tf32 m64nNk8", "bfloat16": "bf16 m64nNk16", "float16": "fp16 m64nNk16"}[dtype]
    if mma != "wmma":
        return ("mma.sync tensor cores " + {"float32": "tf32 m16n8k8", "bfloat16": "bf16 m16n8k16", "float16": "fp16 m16n8k16"}[dtype]
                + ", ldmatrix" + (", warp tiles" if mma == "tile" else ""))
    return "WMMA tensor cores " + {"float32": "tf32 m16n16k8", "bfloat16": "bf16 m16n16k16", "float16": "fp16 m16n16k16"}[dtype]


def make(problem: Problem, strategy: Strategy, precision: str, lmem_per_block: int | None = None,
         drop_staging: bool = False) -> Candidate:
    """Emit both halves of one strategy and describe how the host lays out their arguments. `lmem_per_block`: the
    Vortex core's local memory per resident block, which bounds the Vortex stage ring (None: no bound);
    `drop_staging`: see `vortex_lowering`."""
    g = geometry(problem, strategy)
    vs, vortex_notes = vortex_lowering(problem, strategy, lmem_per_block, drop_staging)
    tc = strategy.tensor_core
    sizes = storage_sizes(problem)
    out_exact = math.prod(problem.out_shape)
    meta = {
        "kernel_name": kernel_name(problem, strategy),
        "launch": {"grid": [g.blocks * strategy.split_k, 1, 1], "block": [strategy.cuda_threads, 1, 1],
                   "smem_bytes": smem_bytes(problem, strategy) + strategy.smem_pad,    # dynamic shared memory
                   **({"zero_output": True} if strategy.split_k > 1 and problem.dtype == "float32" else {}),  # adds into zeros
                   **({"workspace_words": ws} if (ws := workspace_words(problem, strategy)) else {}),     # zeroed, 5th arg
                   **({"tensor_maps": list(tensor_maps(problem, strategy))} if strategy.tma else {})},  # last args
        "vortex_local_mem_bytes": smem_bytes(problem, vs, tensor_cores=False),
        "vortex_differs": vortex_notes,
        "lmem_per_block": lmem_per_block, **({"drop_staging": True} if drop_staging else {}),
        "blocks": g.blocks, "tiles": [g.tiles_m, g.tiles_n, g.batch],
        "vector": {"a": g.va, "b": g.vb},
        "arg_layout": {
            "order": list(ROLES),
            "cuda": {r: {"elements": sizes.get(r, 0) if r != "out" else out_exact, "dtype": problem.dtype} for r in ROLES},
            "vortex": {**{r: {"elements": sizes.get(r, 0), "dtype": "float32"} for r in ("a", "b", "bias")},
                       "out": {"elements": vortex_out_elements(problem, strategy), "dtype": "float32", "padded": True}},
            "struct": "kernel_arg_t {grid_dim[3], block_dim[3], block_start, reserved, ptr[4]: a, b, bias, out}",
        },
        "vortex_api": VORTEX_API,
        "vortex_math": ("fp32 FMA (exact path)" if precision == "FP32" else
                        f"scalar fp32 FMA on inputs rounded to {'fp16' if precision == 'TF32_FP16' else 'bf16'}"
                        + (" (tensor-core strategy: no TCU in the pinned Vortex API)" if tc else "")),
        "cuda_math": (_tc_math(problem.dtype, strategy.mma) if tc else "CUDA-core fp32 FMA"),
    }
    return Candidate(problem, strategy, precision, emit(problem, strategy, CUDA), emit(problem, vs, VORTEX), meta)


def twin(c: Candidate) -> Candidate | None:
    """The candidate that `c`'s strategy generates for its problem and precision (None: it generates none)."""
    try:
        return make(c.problem, c.strategy, c.precision, c.meta.get("lmem_per_block"), c.meta.get("drop_staging", False))
    except ValueError:
        return None


def source_kind(c: Candidate) -> str:
    """"generated" when both sources are exactly what the candidate's strategy generates, else "free-form" (edited
    or written by hand or by a model: the strategy then only describes it, and the compile checks that its CUDA half
    has the instruction forms of the strategy's own kernel: `objcheck.strategy_forms`)."""
    g = twin(c)
    return "generated" if g is not None and (g.cuda_sha256, g.vortex_sha256) == (c.cuda_sha256, c.vortex_sha256) else "free-form"


def covered_mask(problem: Problem, strategy: Strategy, blocks: list[int]):
    """Boolean mask over the exact output: elements that the given linear block ids compute."""
    import numpy as np

    g = geometry(problem, strategy)
    gm = np.zeros((g.batch, g.M, g.N), dtype=bool)
    per = g.tiles_m * g.tiles_n
    for lin in blocks:
        bz, rr = divmod(lin, per)
        if strategy.raster == "row":
            tm, tn = divmod(rr, g.tiles_n)
        else:
            tn, tm = divmod(rr, g.tiles_m)
        gm[bz, tm * strategy.block_m:(tm + 1) * strategy.block_m, tn * strategy.block_n:(tn + 1) * strategy.block_n] = True
    if isinstance(problem, Gemm):
        return gm
    assert isinstance(problem, Conv)
    pq = problem.P * problem.Q
    # GEMM view (group, m = (n, p, q), co) -> NCHW (n, group * Kg + co, p, q)
    m = gm.reshape(problem.groups, problem.N, pq, g.N).transpose(1, 0, 3, 2)
    return m.reshape(problem.N, problem.K, problem.P, problem.Q)


def from_vortex_output(problem: Problem, strategy: Strategy, padded):
    """The exact output tensor (numpy, float32) from a Vortex padded output buffer."""
    g = geometry(problem, strategy)
    mp, np_ = g.tiles_m * strategy.block_m, g.tiles_n * strategy.block_n
    if isinstance(problem, Gemm):
        return padded.reshape(g.batch, mp, np_)[:, : g.M, : g.N]
    pq = problem.P * problem.Q
    nimg = math.ceil(mp / pq)
    y = padded.reshape(nimg, problem.groups, np_, pq)[: problem.N, :, : g.N, :]
    return y.reshape(problem.N, problem.K, problem.P, problem.Q)
