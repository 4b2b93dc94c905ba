"""The speed probe: how fast the kernel space runs a slice, before any search.

A short search over the knobs that set a kernel's speed around a start strategy: split-K x ring depth, then steps to
the neighbours of the fastest, and of the fastest issuing the reference's MMA instructions (tensor-core form, NHWC
layout of convolutions, K tile, split, ring depth, block tile) while one improves. Every variant the validator
admits is compiled and launched on the slice's inputs, event-timed with L2 overwritten before each launch (as ncu's
cache control does), and set against the reference kernel's time. A few finalists are chosen nearest the reference
in time, in the SMs their grids keep busy and in the FLOPs they execute (`distance`: a slow reference is matched by
a slow variant as well as a fast one by a fast variant), with the nearest of each form (MMA form x load path,
`finalists`), and measured as the reference's signature: the start takes the finalist of lowest signature distance,
one issuing the reference's tensor-core instructions (HMMA or HGMMA) unless another is nearer by more than the
loop's keep threshold, and of those that threshold cannot tell apart the one nearest the reference's time (without a
signature: such a variant where one runs within FAMILY_SPAN of the reference's time); the bench reports the fastest.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from vxsynth.kernels.geometry import geometry
from vxsynth.kernels.problem import Conv, Problem
from vxsynth.kernels.strategy import MAX_STAGES, MMAS, Strategy, one_block_registers, repair, swizzle_ring, wgmma_variant
from vxsynth.metrics.components import DURATION, flops as measured_flops
from vxsynth.reconstruct.settings import LoopConfig
from vxsynth.reconstruct.start import cluster_target, warpgroup_kernel
from vxsynth.records import SliceRecord

if TYPE_CHECKING:
    from vxsynth.signature.measure import Measurement

SPLITS = (1, 2, 4, 8, 16)
FINALISTS = 3                             # the fastest and the nearest few by event time, measured again by ncu
RING = ((1, None), (3, 4), (4, 4), (8, 4))   # (stages, vector): a ring copies 16-byte runs
PROBE_REPEAT = 10
ROUNDS = 3                                # neighbourhood steps after the depth sweep
FAMILY_SPAN = 1.5                         # the start keeps to the reference's MMA instructions within this time factor
FAMILY_D = LoopConfig.threshold           # ... or, ranked by signature, within this D (default: the loop's keep threshold)
TIME_TIE = math.log(1.05)                 # ncu times within 5% of each other are equally near the reference's
GRID_SIZE, SM_COUNT = "launch__grid_size", "launch__sm_count"     # ncu launch metrics (components.LAUNCH)


@dataclass(frozen=True)
class Timed:
    strategy: Strategy
    us: float | None          # median kernel time; None when it did not compile or run
    error: str = ""
    ncu_us: float | None = None   # ncu's gpu__time_duration in the signature harness (finalists only)
    D: float | None = None        # the signature distance of that ncu measurement from the reference's (finalists only)
    signature: dict | None = None # that measurement's component values and NaN reasons (finalists only)

    def ratio(self, ref_us: float | None) -> float | None:
        return self.us / ref_us if self.us and ref_us else None


def ncu_us(metrics: dict | None) -> float | None:
    """The kernel duration (us) in a measurement's ncu metrics, None when they have none."""
    d = (metrics or {}).get(DURATION)
    return float(d) / 1000.0 if d else None


def reference_ncu_us(record: SliceRecord) -> float | None:
    """The reference main kernel's ncu duration in its recorded signature (cache flushed, as candidates are
    measured), None when the signature has none."""
    return ncu_us(record.reference_signature.get("raw_metrics"))


def reference_us(record: SliceRecord, measured: dict | None = None) -> float | None:
    """The reference main kernel's recorded time (profiling pass 1), None when the slice recorded none. With
    `measured` (the reference's measurement on this GPU) it is scaled by the ratio of that measurement's ncu duration
    to the record's, so the event-timed variants are set against the reference as it runs on this GPU."""
    main = record.main
    us = float(main["gpu_time_us"]) if main and main.get("gpu_time_us") else None
    here, there = ncu_us((measured or {}).get("metrics")), reference_ncu_us(record)
    return us * here / there if us and here and there else us


def mma_family(s: Strategy) -> str:
    """The instructions a strategy's math issues: HGMMA (warpgroup MMA), HMMA (WMMA, mma.sync), FFMA."""
    return ("HGMMA" if s.mma == "wgmma" else "HMMA") if s.tensor_core else "FFMA"


def reference_family(record: SliceRecord) -> str | None:
    """The tensor-core instructions the reference kernel issues, read off its name: HGMMA for sm90 warpgroup kernels
    (nvjet, xmma with warp groups), HMMA for tensor-core kernels of earlier architectures (sm75-sm87: cutlass, xmma);
    None where the name does not say (CUDA-core kernels, sm90 names without warp groups)."""
    h = record.name_hints.get("parsed", {})
    if h.get("math") != "tensor" or not h.get("arch"):
        return None
    if h["arch"] >= 90:
        return "HGMMA" if warpgroup_kernel(h) else None
    return "HMMA"


@dataclass(frozen=True)
class Footprint:
    """What the start matches of the reference kernel beside its time: its blocks, the GPU's SMs (0: unknown) and
    the FLOPs it executes, padding included (0: unknown)."""
    blocks: int
    sms: int
    flops: float = 0.0

    def busy(self, blocks: int) -> int:
        """The SMs a grid of `blocks` keeps busy: the block scheduler deals blocks to idle SMs first."""
        return min(blocks, self.sms) if self.sms else blocks


def _flops(metrics: dict, chip: str | None) -> float:
    f = measured_flops(metrics, chip) if chip else math.nan
    return f if f > 0 else 0.0          # NaN (no counter) or none: unknown


def reference_footprint(record: SliceRecord, measured: dict | None = None) -> Footprint | None:
    """The reference kernel's footprint: from its ncu measurement on this GPU (`measured`: its metrics and settings;
    a card's library may launch another kernel than the recorded one: cuBLAS on an H100 runs other nvjet tiles for
    Pi0's BF16 linears than on the H200), else from the recorded launch and signature; None when neither gives a
    grid."""
    m = (measured or {}).get("metrics") or {}
    sms = int(m.get(SM_COUNT) or record.environment.get("sm_count") or 0)
    if m.get(GRID_SIZE):
        return Footprint(int(m[GRID_SIZE]), sms, _flops(m, (measured.get("settings") or {}).get("chip")))
    main, sig = record.main, record.reference_signature
    if main and main.get("grid"):
        return Footprint(math.prod(main["grid"]), sms,
                         _flops(sig.get("raw_metrics") or {}, (sig.get("measured_with") or {}).get("chip")))
    return None


def blocks(problem: Problem, s: Strategy) -> int:
    """The blocks a strategy's main kernel launches (split-K included)."""
    return geometry(problem, s).blocks * s.split_k


def flops(problem: Problem, s: Strategy) -> float:
    """The FLOPs a strategy's kernel executes, on tensor or CUDA cores: whole block tiles, K to whole K tiles (the
    emitted kernels compute a tile's padding; measured within 3% on the first H100 rebuild's final pairs)."""
    g = geometry(problem, s)
    return 2.0 * g.batch * g.tiles_m * s.block_m * g.tiles_n * s.block_n * g.kt * s.block_k


def distance(problem: Problem, s: Strategy, ratio: float, ref: Footprint | None) -> float:
    """How far strategy `s`, at `ratio` of the reference's time, runs from the reference: |log time ratio| + |log ratio of the SMs the grids keep busy| +
    |log FLOP ratio| (where the reference's FLOPs are known). Four components are rates per active SM (ncu's
    pct_of_peak_sustained_active: tensor pipe, FMA pipe, issue active, occupancy): pipe activity goes as
    FLOPs / (busy SMs x time), so padded tiles raise it and the same work on twice the SMs halves it (in the first
    H100 rebuild that model gave the final pairs' tensor-pipe ratio within a median 6%, `bench/grid_busy.py`); the
    FLOPs also set arithmetic intensity."""
    d = abs(math.log(ratio))
    if ref is None:
        return d
    d += abs(math.log(ref.busy(blocks(problem, s)) / ref.busy(ref.blocks)))
    return d + abs(math.log(flops(problem, s) / ref.flops)) if ref.flops else d


def _nearest(ts: list[Timed], dist: Callable[[Timed], float], ratio: Callable[[Timed], float],
             family: str | None) -> Timed | None:
    """The variant nearest the reference (`dist`); of the reference's MMA `family` where one of those runs within
    FAMILY_SPAN of its time (`ratio`): the same instructions exercise the same tensor-core path, which an
    architecture study of the benchmark measures."""
    kin = [t for t in ts if mma_family(t.strategy) == family and abs(math.log(ratio(t))) <= math.log(FAMILY_SPAN)]
    return min(kin or ts, key=dist, default=None)


def nearest_in_signature(measured: list[Timed], family: str | None, family_d: float = FAMILY_D,
                         ref_ncu: float | None = None) -> Timed:
    """The finalist of lowest signature distance D; of the reference's MMA `family` where one is within `family_d`
    of that (what the loop would not count as an improvement), whatever its time (D weighs time through every rate).
    Of that family's finalists within `family_d` of the lowest D, the one whose ncu time is nearest the reference's
    (`ref_ncu`, us) where it is nearer by more than TIME_TIE than the lowest D's: D cannot tell them apart, the time
    sets the DRAM bandwidth a study of the memory system reads."""
    best = min(measured, key=lambda t: t.D)
    close = [t for t in measured if t.D <= best.D + family_d]
    kin = ([t for t in close if mma_family(t.strategy) == family]
           or [t for t in close if mma_family(t.strategy) == mma_family(best.strategy)])
    low = min(kin, key=lambda t: t.D)
    if not ref_ncu:
        return low
    off = lambda t: abs(math.log(t.ncu_us / ref_ncu)) if t.ncu_us else math.inf      # noqa: E731
    near = min(kin, key=lambda t: (off(t), t.D))
    return near if off(near) < off(low) - TIME_TIE else low


def _leads(timed: list[Timed], family: str | None, near: Callable[[Timed], float] | None = None) -> list[Timed]:
    """Where the probe steps from: the fastest variant, the fastest issuing the reference's MMA `family` where that
    is another (its tensor-pipe cycles per FLOP are the reference's; wgmma's are about 0.6x mma.sync's), and with
    `near` (`distance` from the reference) the nearest: a faster kernel on another grid is further in D than a
    slower one on the reference's (conv1d 2048->2048 in r23: 256 blocks at 0.63x D 0.119, 64 at 1.45x D 0.063)."""
    ok = [t for t in timed if t.us]
    fast = min(ok, key=lambda t: t.us, default=None)
    kin = min((t for t in ok if mma_family(t.strategy) == family), key=lambda t: t.us, default=None)
    close = min(ok, key=near, default=None) if near else None
    return [t for t in dict.fromkeys((fast, kin, close)) if t is not None]


def form(s: Strategy) -> tuple[str, str]:
    """How a strategy's math is done and fed: (ffma or its MMA form, lsu | lsu-a-global | cp.async | tma, and a
    swizzled ring's layout): each reads its operands through other units (LSU and L1, for A straight into the
    fragments where it is not staged; the asynchronous copy path; the Tensor Memory Accelerator), and a padded
    cp.async ring looks up more L2 sectors than a swizzled one."""
    lsu = "lsu" if s.stage_a or not s.tensor_core else "lsu-a-global"
    feed = "tma" if s.tma else "cp.async" if s.stages > 1 else lsu
    return s.mma if s.tensor_core else "ffma", feed + ("-swizzled" if s.smem_swizzle else "")


def finalists(ok: list[Timed], by_event: Callable[[Timed], float] | None, family: str | None) -> list[Timed]:
    """The variants the probe measures again with ncu: the FINALISTS fastest, the FINALISTS nearest the reference
    (`by_event`; None without its time) and as many of the reference's MMA `family`, the nearest of each split-K
    factor and of each number of computing threads (of that family where it has one: the split's workspace traffic
    is not in `distance`, and the warp or warpgroup layout sets the tensor-pipe cycles per FLOP: two warpgroups of
    m64n16 spend 0.71-0.76 of one warpgroup of m64n32's, `tensor_cycles_h100.txt`), and the nearest of each `form`
    whose nearest is within FAMILY_SPAN as near as the nearest: near-tied event times would leave out a whole load
    path, which the L1 and coalescing components see."""
    by_ref = sorted(ok, key=by_event) if by_event else []
    kin = [t for t in by_ref if mma_family(t.strategy) == family]
    span = [t for t in by_ref if by_event(t) <= by_event(by_ref[0]) + math.log(FAMILY_SPAN)]
    each = lambda ts, key: list({key(t.strategy): t for t in reversed(ts)}.values())    # noqa: E731  nearest of each
    return list(dict.fromkeys(sorted(ok, key=lambda t: t.us)[:FINALISTS] + by_ref[:FINALISTS] + kin[:FINALISTS]
                              + each(kin or by_ref, lambda s: s.split_k) + each(kin or by_ref, lambda s: s.threads)
                              + each(span, form)))


def _valid(s: Strategy, valid: Callable[[Strategy], str | None]) -> Strategy | None:
    """`s`, or `s` without its launch-time shared memory when only that keeps it from fitting, or None."""
    if valid(s) is None:
        return s
    if s.smem_pad and valid(s.with_(smem_pad=0)) is None:
        return s.with_(smem_pad=0)
    return None


def _adder(out: list[Strategy], valid: Callable[[Strategy], str | None], seen: tuple = ()):
    def add(s: Strategy) -> None:
        v = _valid(s, valid)
        if v is not None and v not in out and v not in seen:
            out.append(v)
    return add


def _ring(s: Strategy, split: int, stages: int, vec: int | None) -> Strategy:
    return s.with_(split_k=split, stages=stages, double_buffer=s.double_buffer and stages == 1, vector=vec or s.vector,
                   stage_a=s.stage_a or stages > 1)       # a ring stages both operands


def sweep_depth(problem: Problem, start: Strategy, valid: Callable[[Strategy], str | None], sms: int = 0,
                cluster: tuple[int, str] | None = None, ref_blocks: int = 0) -> list[Strategy]:
    """Phase 1: the start, then split-K x ring depth (16-byte copies for a ring: 4 fp32 or 8 16-bit elements, else
    the widest that fits) on the start's tile and form, then whole-M tiles of a skinny GEMM (`sms`: the GPU's SMs,
    `ref_blocks`: the reference's grid);
    every tensor-core variant also as mma.sync on warp tiles and as Hopper warpgroup MMA (`wgmma_variant`), each
    one whose A is not staged (an `indexed_wo_smem` reference's start) also with A staged, each mma.sync ring also
    swizzled (its padded cp.async ring looks up about twice the L2 sectors: conv1d 1024->1024
    L16 on an H100, L2 hit rate 51% padded, 15% swizzled, the reference 20%, `l2_ops_h100_vary.txt`), each
    wgmma variant with its ring filled by the Tensor Memory Accelerator too, and each of those warp-specialized; with
    the reference's `cluster` (blocks, raster: `start.cluster_target`), each TMA variant also in clusters of that
    size, or the largest smaller one its tiles divide."""
    out: list[Strategy] = []
    add = _adder(out, valid)
    add(start)
    wide = (4,) if problem.dtype == "float32" else (8, 4)
    for split in SPLITS:
        for stages, vec in RING:
            for v in (wide if vec else (None,)):
                if _valid(_ring(start, split, stages, v), valid) is not None:
                    add(_ring(start, split, stages, v))
                    break
    for s in whole_m(problem, start, valid, sms, ref_blocks):
        add(s)
    for s in [s for s in out if s.tensor_core]:     # each on warp tiles and warpgroups too
        if s.mma != "tile":
            add(repair(problem, s.with_(mma="tile")))
        if s.mma != "wgmma" and (w := wgmma_variant(problem, s, valid)):
            add(w)
    for s in [s for s in out if s.tensor_core and not s.stage_a]:     # A through shared memory too, to compare
        add(s.with_(stage_a=True))
    for s in [s for s in out if swizzle_ring(s) and not s.smem_swizzle]:    # a padded ring overshoots the L2 hit rate
        add(s.with_(smem_swizzle=True))
    for s in [s for s in out if s.mma == "wgmma" and not s.tma]:
        add(s.with_(tma=True))
    for s in [s for s in out if s.tma and not s.warp_specialized]:
        add(s.with_(warp_specialized=True))
    if cluster:
        for s in [s for s in out if s.tma]:
            sizes = [c for c in (8, 4, 2) if c <= cluster[0]]
            if v := next((v for c in sizes if (v := _valid(s.with_(cluster=c, raster=cluster[1]), valid))), None):
                add(v)
    return out


def whole_m(problem: Problem, start: Strategy, valid: Callable[[Strategy], str | None], sms: int = 0,
            ref_blocks: int = 0) -> list[Strategy]:
    """A skinny GEMM (M at most 128, as Pi0's 51-row linears) streams its weights once when one block tile holds all
    of M, as cuBLAS's skinny kernels do (nvjet's 48x64 tiles over M 51, 64-wide K tiles, 15 in flight): block_m the
    power of two covering M, narrow N tiles, deep rings, K tiles of 64 where they fit; each without split-K, with
    the split that gives every one of `sms` SMs a block and with the one that launches at least the reference's
    `ref_blocks`; the first valid thread tile of each. On CUDA cores only a GEMV-like M below the 16 rows the block
    tile halves to (M 1 padded to 8 rows did 8.9x the useful FLOPs against its cuBLAS gemv's 1.4x, `fidelity_h100`),
    as cuBLAS's gemv does: A's rows staged, B's weights read once straight from global memory, no ring."""
    simt = not start.tensor_core
    if isinstance(problem, Conv) or problem.M > (15 if simt else 128):
        return []
    bm = max(1 if simt else 16, 1 << (problem.M - 1).bit_length())
    wide = 4 if problem.dtype == "float32" else 8
    out: list[Strategy] = []
    for bn in ((32, 64, 128) if simt else (16, 32, 64)):
        tiles = problem.batch * -(-problem.N // bn)
        fill = [next((k for k in SPLITS if tiles * k >= n), SPLITS[-1]) for n in (sms, ref_blocks)]
        for stages in ((1,) if simt else (4, 8, MAX_STAGES)):
            for split in sorted({1, *fill}):
                for s in (_ring(start.with_(block_m=bm, block_n=bn, block_k=bk, thread_m=tm, thread_n=tn,
                                            stage_b=start.stage_b and not simt), split, stages, wide)
                          for bk in dict.fromkeys((64, start.block_k)) for tm in (1, 2, 4, 8) for tn in (1, 2, 4, 8)):
                    if (v := _valid(s, valid)) is not None:
                        if v not in out:
                            out.append(v)
                        break
    return out


def neighbours(problem: Problem, best: Strategy, valid: Callable[[Strategy], str | None], seen: list[Strategy]) -> list[Strategy]:
    """One knob at a time from `best`: the other tensor-core forms, the ring swizzled or padded, filled by TMA or by
    cp.async, by a producer warpgroup or by the computing threads, with a wgmma group pending or not, in clusters half
    or twice as large, the other layout
    (implicit convolutions), the K tiles 16-128, split-K halved or doubled, the ring a slot shallower or deeper or
    twice as deep (up to MAX_STAGES: a skinny GEMM streaming its weights needs many tiles in flight), the block tile
    halved or doubled along M or N (threads kept where the thread tile allows), the same tile on half or twice the
    threads (a wgmma block: one warpgroup of m64nN or two of m64nN/2), an mma.sync form's K steps unrolled
    under one block's register budget (`one_block_registers`; also of the other forms'); none already in `seen`."""
    out: list[Strategy] = []
    add = _adder(out, valid, tuple(seen))
    if v := one_block_registers(best):
        add(v)
    if best.tensor_core:
        for form in [f for f in MMAS if f != best.mma]:
            v = wgmma_variant(problem, best, valid) if form == "wgmma" else repair(problem, best.with_(mma=form))
            if v:
                add(v)
                if w := one_block_registers(v):     # an HMMA form as xmma runs it, K steps unrolled
                    add(w)
    if swizzle_ring(best):
        add(best.with_(smem_swizzle=not best.smem_swizzle))
    if best.mma == "wgmma":
        add(best.with_(tma=not best.tma, warp_specialized=False))
    if best.mma == "wgmma":
        add(best.with_(wgmma_pending=1 - best.wgmma_pending))
    if best.tma:
        add(best.with_(warp_specialized=not best.warp_specialized))
        for c in (best.cluster // 2, best.cluster * 2):
            add(best.with_(cluster=c))
    if isinstance(problem, Conv) and best.conv_form == "implicit":
        add(best.with_(layout="nchw") if best.layout == "nhwc" else best.with_(layout="nhwc", vector=4))
    for bk in (16, 32, 64, 128):
        add(best.with_(block_k=bk))
    for split in (best.split_k // 2, best.split_k * 2):
        if 1 <= split <= SPLITS[-1]:
            add(best.with_(split_k=split))
    wide = 4 if problem.dtype == "float32" else 8
    for st in (best.stages - 1, best.stages + 1, 2 * best.stages if best.stages > 1 else 0):
        if 1 <= st <= MAX_STAGES:
            add(_ring(best, best.split_k, st, None if st == 1 or best.stages > 1 else wide))
    add(best.with_(block_m=best.block_m * 2, thread_m=best.thread_m * 2))
    add(best.with_(block_n=best.block_n * 2, thread_n=best.thread_n * 2))
    add(best.with_(block_m=max(16, best.block_m // 2), thread_m=max(1, best.thread_m // 2)))
    add(best.with_(block_n=max(16, best.block_n // 2), thread_n=max(1, best.thread_n // 2)))
    for tn in (best.thread_n * 2, best.thread_n // 2):      # the same tile on half or twice the threads
        if tn >= 1:
            add(best.with_(thread_n=tn))
    return out


def _signature_D(values: dict, reference: dict) -> float | None:
    """D of a finalist's signature from the reference's over the components both measured; None when none."""
    from vxsynth.signature.distance import distance as signature_distance

    d = signature_distance(values, reference, tuple(reference)).D if reference else math.nan
    return None if math.isnan(d) else d


def probe(record: SliceRecord, start: Strategy, valid: Callable[[Strategy], str | None],
          time_fn: Callable[[list[Strategy]], list[Timed]],
          ncu_fn: Callable[[list[Strategy]], list[Measurement | None]] | None = None,
          reference: dict | None = None, family_d: float = FAMILY_D) -> dict:
    """Time the depth sweep around `start`, then up to ROUNDS steps to the neighbours of the fastest so far and of
    the fastest of the reference's MMA family (`_leads`) while one improves (`time_fn` times a list of strategies,
    event-timed); the plain-data result: the reference's time and footprint, every variant's time, ratio and blocks,
    the fastest and the nearest (`distance`: time, busy SMs and FLOPs; of the reference's MMA family where one runs
    within FAMILY_SPAN, `_nearest`) variants, and the wall seconds of the event-timed steps and of the ncu
    measurements (`seconds`). With `ncu_fn` (the signature measurements of a list of strategies, None where one
    failed) the FINALISTS fastest and nearest, and the nearest of each split-K factor and thread count (of the
    reference's family where it has one: the split's workspace traffic is not in `distance`), are measured as the
    reference's signature was: the fastest is judged on ncu time against the reference's (an event-timed launch
    carries a launch overhead that ncu's duration does not), the nearest is the one of lowest signature distance D
    from `reference` (its measurement on this GPU: values, ncu metrics and settings), of the reference's MMA family
    where one is within `family_d` of that, else nearest by `distance` on ncu time. The reference's ncu duration and
    footprint come from `reference` when given, else from the slice record (`reference_ncu_from` says which)."""
    problem = record.problem
    ref = reference_us(record, reference)
    foot = reference_footprint(record, reference)
    t0 = time.perf_counter()
    timed = time_fn(sweep_depth(problem, start, valid, int(record.environment.get("sm_count") or 0), cluster_target(record),
                                foot.blocks if foot else 0))
    family = reference_family(record)
    by_event = (lambda t: distance(problem, t.strategy, t.ratio(ref), foot)) if ref else None
    for _ in range(ROUNDS):       # coordinate steps while a lead improves
        leads = _leads(timed, family, by_event)
        seen = [t.strategy for t in timed]
        near = list(dict.fromkeys(s for b in leads for s in neighbours(problem, b.strategy, valid, seen)))
        if not near:
            break
        timed += time_fn(near)
        if _leads(timed, family, by_event) == leads:
            break
    ok = [t for t in timed if t.us]
    seconds = {"events": time.perf_counter() - t0, "ncu": 0.0}    # where the probe's set-up time goes
    fastest = min(ok, key=lambda t: t.us, default=None)
    nearest = _nearest(ok, by_event, lambda t: t.ratio(ref), family) if ref else fastest
    ref_ncu = ncu_us((reference or {}).get("metrics"))
    ref_from = "measured on this GPU" if ref_ncu else "the slice record's signature"
    ref_ncu = ref_ncu or reference_ncu_us(record)
    how = f"CUDA events, median of {PROBE_REPEAT - 1} launches after one, L2 overwritten before each"
    if ncu_fn and ref_ncu and ok:
        finals = finalists(ok, by_event if ref else None, family)
        ref_values = (reference or {}).get("values") or {}
        t0 = time.perf_counter()
        measured = [replace(t, ncu_us=ncu_us(m.metrics), D=_signature_D(m.values, ref_values),
                            signature={"values": m.values, "nan_reasons": m.nan_reasons})
                    for t, m in zip(finals, ncu_fn([t.strategy for t in finals])) if m is not None and ncu_us(m.metrics)]
        timed = [next((m for m in measured if m.strategy == t.strategy), t) for t in timed]
        seconds["ncu"] = time.perf_counter() - t0
        if measured:
            fastest = min(measured, key=lambda t: t.ncu_us)
            by_D = all(t.D is not None for t in measured)
            if by_D:
                nearest = nearest_in_signature(measured, family, family_d, ref_ncu)
            else:
                nearest = _nearest(measured, lambda t: distance(problem, t.strategy, t.ncu_us / ref_ncu, foot),
                                   lambda t: t.ncu_us / ref_ncu, family)
            how += (f"; the {FINALISTS} fastest and {FINALISTS} nearest and the nearest of each split-K factor, "
                    "number of computing threads and form "
                    "measured again as the reference's signature (ncu in the signature harness, cache flushed): "
                    "fastest by ncu time, nearest " + ("by signature distance D from the reference measured here, "
                                                       f"the reference's MMA family within {family_d}, of those "
                                                       f"within {family_d} the nearest the reference's ncu time "
                                                       f"where more than {math.expm1(TIME_TIE):.0%} nearer"
                                                       if by_D else "by ncu time against the reference's"))

    def row(t: Timed | None) -> dict | None:
        if t is None:
            return None
        ncu = ({"ncu_us": t.ncu_us, "ncu_ratio": t.ncu_us / ref_ncu, "D": t.D, "signature": t.signature}
               if t.ncu_us and ref_ncu else {})
        return {"strategy": t.strategy.to_dict(), "us": t.us, "ratio": t.ratio(ref), **ncu,
                "blocks": blocks(problem, t.strategy), **({"error": t.error} if t.error else {})}
    return {"reference_us": ref, "reference_ncu_us": ref_ncu, "reference_ncu_from": ref_from, "timed": how,
            "reference_family": family, "reference_footprint": asdict(foot) if foot else None,
            "variants": [row(t) for t in timed], "fastest": row(fastest), "nearest": row(nearest), "seconds": seconds}


def start(record: SliceRecord, s0: Strategy, prov: dict, valid: Callable[[Strategy], str | None],
          time_fn: Callable[[list[Strategy]], list[Timed]], out_dir: Path,
          ncu_fn: Callable[[list[Strategy]], list[Measurement | None]] | None = None,
          reference: dict | None = None, family_d: float = FAMILY_D) -> tuple[Strategy, dict]:
    """The informed start `s0` moved to the probe's variant nearest the reference kernel (`reference`: its ncu
    measurement on this GPU, else the recorded time and launch), with the probe summarised in the provenance.
    The probe is saved (`speed_probe.json`) and reused while its start and reference time are the same, so a resumed
    slice keeps its start (and its trail)."""
    from vxsynth.store.io import read_json, write_json

    path = out_dir / "speed_probe.json"
    res = read_json(path) if path.exists() else None
    ref_ncu = ncu_us((reference or {}).get("metrics"))
    if res is None or res.get("start") != s0.to_dict() or (ref_ncu and res.get("reference_ncu_us") != ref_ncu):
        res = {**probe(record, s0, valid, time_fn, ncu_fn, reference, family_d), "start": s0.to_dict()}
        write_json(path, res)
    near = res["nearest"]
    if near is None:
        return s0, {**prov, "speed_probe": {"variants": len(res["variants"]), "nearest": None,
                                            "why": "no variant compiled and ran"}}
    s = Strategy.from_dict(near["strategy"])
    return s, {**prov, "strategy": s.to_dict(),
               "speed_probe": {"reference_us": res["reference_us"], "reference_ncu_us": res.get("reference_ncu_us"),
                               "reference_ncu_from": res.get("reference_ncu_from"),
                               "reference_family": res.get("reference_family"),
                               "reference_footprint": res.get("reference_footprint"),
                               "variants": len(res["variants"]), "timed": res["timed"],
                               "start_us": res["variants"][0]["us"], "nearest": near, "fastest": res["fastest"],
                               "seconds": res.get("seconds"),
                               "moved": s0.diff(s)}}
