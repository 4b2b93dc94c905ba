"""The structure-informed start: read the first strategy of a slice off its reference kernel.

Facts: the main kernel's launch (grid, block, registers, shared memory) from profiling pass 1, its name hints
(`slicing.hints`: tile, stages, warps, math unit, alignment) and the launch/name cross-check (tile orientation,
split-K), the precision path, and the reference's measured signature (pass 2: how much of each sector its loads use). Rules (conf/start) turn facts into knob targets; the start is the valid strategy
(CUDA and the Vortex core) with the smallest weighted mismatch to the targets. What the result records, knob by knob:
the fact, the target, the value taken, and why a target could not be mirrored.
"""

from __future__ import annotations

import itertools
import math
import re
from typing import Callable

from vxsynth.kernels.problem import Conv
from vxsynth.kernels.geometry import problem_mnk, smem_bytes, static_smem_bytes
from vxsynth.kernels.strategy import MAX_SPLIT, MAX_STAGES, Strategy
from vxsynth.records import SliceRecord

POW2 = (1, 2, 4, 8, 16, 32, 64, 128, 256)


def _orientation(record: SliceRecord) -> tuple[bool, int | None]:
    """(the name's tile M runs along our N, split-K factor) from the launch/name cross-check."""
    for c in record.name_hints.get("checks", []):
        if c.get("check") == "grid_tiles" and c.get("orientation"):
            m = re.match(r"(MxN|NxM) x split (\d+)", c["orientation"])
            if m:
                return m[1] == "NxM", int(m[2])
    return False, None


def cublas_swap(record: SliceRecord) -> bool:
    """The name's tile M runs along our N: as the launch/name cross-check says, or where a persistent grid gives no
    cross-check, as cuBLAS names the C^T of torch's row-major product (its M is our N)."""
    return _orientation(record)[0] or not any(x.get("check") == "grid_tiles" and x.get("orientation")
                                              for x in record.name_hints.get("checks", []))


def warpgroup_kernel(hints: dict) -> bool:
    """The parsed name is of an sm90 warpgroup kernel (nvjet, or xmma with warp groups): wgmma fed by TMA."""
    return bool(hints.get("warpgroups")) or hints.get("grammar") == "nvjet"


def cluster_shape(record: SliceRecord) -> tuple[int, int]:
    """The reference's thread-block cluster (blocks along our M, along our N) from an nvjet name's cluster shape
    (`..._4x1_...`), oriented by `cublas_swap`; (1, 1) when the name shows none."""
    c = record.name_hints.get("parsed", {}).get("cluster") or [1, 1]
    return (c[1], c[0]) if cublas_swap(record) else (c[0], c[1])


def cluster_target(record: SliceRecord) -> tuple[int, str] | None:
    """The reference's cluster as (blocks, raster) of a one-dimensional cluster: along our N (raster row, the blocks
    share A) where it spans N, else along our M (raster col, they share B); None when it has none."""
    along_m, along_n = cluster_shape(record)
    if max(along_m, along_n) < 2:
        return None
    return (along_n, "row") if along_n > 1 else (along_m, "col")


def _blocks_per_sm(threads: int, regs: int, smem: int, sm: dict) -> tuple[int, str]:
    """Resident blocks per SM of a launch, and the resource that limits it."""
    limits = {"registers": sm["registers"] // max(1, regs * threads),
              "shared memory": sm["shared_mem"] // (smem + sm["reserved_per_block"]),
              "threads": sm["threads"] // threads, "blocks": sm["blocks"]}
    lim = min(limits, key=limits.get)
    return max(1, limits[lim]), lim


def _rule(rules: list[dict], record: SliceRecord, knob: str, fact: str | None = None) -> dict | None:
    """The active rule for `knob` (and `fact`) that applies to the record's family (`families`, default all)."""
    return next((r for r in rules if r["knob"] == knob and (fact is None or r["fact"] == fact) and r.get("weight", 1)
                 and record.family in r.get("families", [record.family])), None)


def targets(record: SliceRecord, rules: list[dict]) -> tuple[dict, dict]:
    """Knob targets read off the reference ({knob: value}), with the fact behind each ({knob: text})."""
    k = record.main
    hints = record.name_hints.get("parsed", {})
    p_mnk = problem_mnk(record.problem)
    batch, M, N, _ = p_mnk
    on = {(r["knob"], r["fact"]) for r in rules if r.get("weight", 1)}
    t, why = {}, {}
    threads = math.prod(k["block"])
    blocks = math.prod(k["grid"])
    swap, split = _orientation(record)
    tile = hints.get("tile")
    if tile and ("block_mn", "name.tile") in on:
        tm, tn = (tile[1], tile[0]) if swap else (tile[0], tile[1])
        t["block_m"], t["block_n"] = tm, tn
        why["block_m"] = why["block_n"] = f"name tile {tile[0]}x{tile[1]}" + (" (C^T: M and N swapped)" if swap else "")
    elif ("block_mn", "launch.grid") in on:
        split = split or (k["grid"][2] if k["grid"][2] > 1 else 1)
        area = M * N * batch * split / max(1, blocks)
        side = math.sqrt(area)
        t["block_m"], t["block_n"] = max(1.0, min(M, side)), max(1.0, area / max(1.0, min(M, side)))
        why["block_m"] = why["block_n"] = f"grid of {blocks} blocks (split {split}) over {batch}x{M}x{N} outputs"
    if tile and ("block_k", "name.tile") in on:
        t["block_k"], why["block_k"] = tile[2], f"name tile K {tile[2]}"
    if ("threads", "launch.block") in on:
        t["threads"], why["threads"] = threads, f"launch block {k['block']}"
    stages = hints.get("stages")
    tma = warpgroup_kernel(hints)
    if tma and ("stages", "name.tma") in on:
        t["stages"] = 1
        why["stages"] = ("TMA-fed kernel (" + ("nvjet" if hints.get("grammar") == "nvjet" else f"warp groups {hints['warpgroups']}")
                         + "): its stages are TMA buffers, mirrored as synchronous staging")
    elif stages and ("stages", "name.stages") in on:
        t["stages"], why["stages"] = min(stages, MAX_STAGES), f"name stage{stages}"
    elif tile and ("stages", "launch.shared_mem") in on and k.get("shared_mem"):
        eb = 2 if record.precision == "BF16" else 4
        n = k["shared_mem"] // max(1, (tile[0] + tile[1]) * tile[2] * eb)
        t["stages"], why["stages"] = max(1, min(n, MAX_STAGES)), f"shared memory {k['shared_mem']} B / tile bytes"
    if hints.get("math") and ("tensor_core", "name.math") in on:
        t["tensor_core"] = hints["math"] == "tensor" and record.precision != "FP32"
        why["tensor_core"] = f"name math {hints['math']}, precision {record.precision}"
    rule = _rule(rules, record, "mma", "name.math")
    if rule and t.get("tensor_core"):
        t["mma"], why["mma"] = rule.get("value", "sync"), f"tensor-core {record.family} reference (name math {hints['math']})"
    if hints.get("warps") and ("warps_m", "name.warps") in on and t.get("tensor_core"):
        t["warps_m"] = hints["warps"][1] if swap else hints["warps"][0]
        why["warps_m"] = f"name warps {hints['warps']}"
    align = hints.get("align") or (4 if "aligna4" in k["name"] else None) or (4 if tma else None)   # TMA: 16-byte copies
    if align and ("vector", "name.align") in on:
        t["vector"], why["vector"] = min(4, align), f"name alignment {align}"
    if ("raster", "launch.grid") in on and "block_m" in t:
        tiles_m, tiles_n = math.ceil(M / t["block_m"]), math.ceil(N / t["block_n"])
        gx = k["grid"][0]
        if gx == tiles_m != tiles_n:
            t["raster"], why["raster"] = "col", f"grid x {gx} = M tiles"
        elif gx == tiles_n != tiles_m:
            t["raster"], why["raster"] = "row", f"grid x {gx} = N tiles"
    rule = _rule(rules, record, "mapping", "reference.gld_coalescing")
    coal = ((record.reference_signature or {}).get("values") or {}).get("gld_coalescing")
    if rule and coal is not None and coal < rule.get("below", 50):
        t["mapping"] = "strided"
        why["mapping"] = f"reference loads use {coal:.0f}% of each sector (below {rule.get('below', 50)}%)"
    if hints.get("a_global") and ("stage_a", "name.wo_smem") in on and t.get("tensor_core"):
        t["stage_a"], why["stage_a"] = False, "name indexed_wo_smem: A's fragments loaded from global memory"
    if ("layout", "name.layout") in on and isinstance(record.problem, Conv) and "nhwc" in (hints.get("layout") or ""):
        t["layout"], why["layout"] = "nhwc", f"name layout {hints['layout']}"
    if split and split > 1:
        t["split_k"], why["split_k"] = split, "grid z / tiles" if tile else "launch grid z"
    elif hints.get("split_k"):
        t["split_k"], why["split_k"] = 2, "name splitK"
    return t, why


def _score(s: Strategy, t: dict, w: dict) -> float:
    def log_gap(v, target):
        return abs(math.log2(max(v, 1) / max(target, 1)))
    sc = 0.0
    if "block_m" in t:
        sc += w["block_mn"] * (log_gap(s.block_m, t["block_m"]) + log_gap(s.block_n, t["block_n"]))
    for knob in ("block_k", "threads", "stages", "vector"):
        if knob in t:
            sc += w[knob] * log_gap(getattr(s, knob), t[knob])
    for knob in ("tensor_core", "mma", "warps_m", "raster", "mapping", "stage_a"):
        if knob in t:
            sc += w[knob] * (getattr(s, knob) != t[knob])
    return sc


def informed(record: SliceRecord, cfg: dict, valid: Callable[[Strategy], str | None]) -> tuple[Strategy, dict]:
    """The start strategy for a slice and its provenance {kind, facts, knobs: [...], not_mirrored: [...]}."""
    rules = cfg.get("rules", [])
    if cfg.get("name", "informed") == "default" or not rules:
        return Strategy(), {"kind": "default", "knobs": [], "not_mirrored": []}
    if record.main is None or not all(record.main.get(k) for k in ("grid", "block")):
        return Strategy(), {"kind": "default", "knobs": [], "not_mirrored": [
            {"what": "every knob", "why": f"no GPU reference kernel recorded on platform {record.platform}"}]}
    t, why = targets(record, rules)
    w = {}
    for r in rules:
        w[r["knob"]] = max(w.get(r["knob"], 0), float(r.get("weight", 1)))
    w = {k: w.get(k, 1.0) for k in ("block_mn", "block_k", "threads", "stages", "vector", "tensor_core", "mma", "warps_m",
                                    "raster", "mapping", "stage_a")}
    best = _search(t, w, valid)
    if best is None:
        return Strategy(), {"kind": "default", "knobs": [], "not_mirrored": [{"what": "every knob", "why": "no valid strategy near the reference"}]}
    best = _occupancy(record, best, cfg.get("sm", {}), valid, why, _rule(rules, record, "smem_pad") is not None)
    if t.get("split_k", 1) > 1:     # the largest split up to the reference's that the strategy can run
        for k in range(min(t["split_k"], MAX_SPLIT), 1, -1):
            if valid(best.with_(split_k=k)) is None:
                best = best.with_(split_k=k)
                break
    knobs, missed = [], []
    for knob, target in sorted(t.items()):
        value = getattr(best, knob)
        knobs.append({"knob": knob, "fact": why[knob], "target": target, "value": value, "mirrored": value == target})
    for knob in ("smem_pad", "min_blocks"):
        if getattr(best, knob):
            knobs.append({"knob": knob, "fact": why[knob], "target": getattr(best, knob), "value": getattr(best, knob), "mirrored": True})
    hints = record.name_hints.get("parsed", {})
    if hints.get("persistent") or hints.get("grammar") == "nvjet":
        missed.append({"what": "persistent TMA kernel (nvjet)", "why": "the start stages its tiles itself; the speed probe "
                       "and the search reach the TMA-filled warpgroup forms (tma, warp_specialized), but no persistent "
                       "blocks: each block computes one output tile"})
    if cl := cluster_target(record):
        missed.append({"what": f"cluster {hints['cluster'][0]}x{hints['cluster'][1]}", "why": "clusters need TMA, which "
                       f"the start has not: the speed probe tries its TMA variants as clusters of {cl[0]} along "
                       + ("N (raster row)" if cl[1] == "row" else "M (raster col)")})
    if "warpgroups" in hints and best.mma != "wgmma":
        missed.append({"what": f"warp groups {hints['warpgroups']} (wgmma)", "why": f"the start's form is {best.mma}; the "
                       "speed probe and the search reach warpgroup MMA (mma=wgmma) where the tiles allow it"})
    if "nhwc" in (hints.get("layout") or "") and best.layout != "nhwc":
        missed.append({"what": f"layout {hints['layout']}", "why": "the candidate reads NCHW directly; cuDNN's layout transforms stay "
                       "separate kernels of the op (their share is in the slice record)"})
    for kn in knobs:
        if not kn["mirrored"]:
            kn["why_not"] = _why_not(best, kn["knob"], kn["target"], valid)
    main = record.main
    others = [{"kernel": k["base"][:120], "share_of_call": k["share_of_call"]} for k in record.kernels if k["role"] != "main"]
    return best, {"kind": "informed", "strategy": best.to_dict(), "knobs": knobs, "not_mirrored": missed,
                  "reconstructs": {"kernel": main["base"][:160], "share_of_call": main["share_of_call"], "others": others}}


def _why_not(best: Strategy, knob: str, target, valid: Callable[[Strategy], str | None]) -> str:
    """Why the start does not take a knob's target: the limit the exact value breaks, or that it scored lower."""
    if isinstance(target, float) and not target.is_integer():
        return f"{target:.1f} is not a power of two"
    if knob == "threads":
        return "the block tile over a power-of-two thread tile gives another count" + (
            "; one Vortex core runs at most 256 threads" if target > 256 else "")
    try:
        why = valid(best.with_(**{knob: int(target) if isinstance(target, float) else target}))
    except (TypeError, ValueError) as e:
        why = str(e)
    return why or "the exact value scores lower on the other knobs' targets"


def _search(t: dict, w: dict, valid: Callable[[Strategy], str | None]) -> Strategy | None:
    """The valid strategy closest to the targets: candidates ranked by score, validated in that order."""
    tc_opts = [t.get("tensor_core", False)] + ([False] if t.get("tensor_core") else [])
    st_opts = sorted({t.get("stages", 1), 1}, reverse=True)
    vec_opts = sorted({t.get("vector", 1), 1}, reverse=True)
    wm_opts = [t["warps_m"], 0] if t.get("warps_m") else [0]
    mma_opts = [t["mma"], "wmma"] if t.get("mma", "wmma") != "wmma" else ["wmma"]
    rs_opts = [t.get("raster", "row")]
    layout = t.get("layout", "nchw")
    mp_opts = [t["mapping"], "coalesced"] if "mapping" in t else ["coalesced"]
    sa_opts = [t["stage_a"], True] if "stage_a" in t else [True]
    cands = []
    for bm, bn, bk, tm, tn in itertools.product(POW2[2:], POW2[2:], POW2[2:7], POW2[:6], POW2[:6]):
        if bm % tm or bn % tn:
            continue
        threads = (bm // tm) * (bn // tn)
        if threads % 32 or not 32 <= threads <= 1024:
            continue
        for tc, mma, st, vec, wm, rs, mp, sa in itertools.product(tc_opts, mma_opts, st_opts, vec_opts, wm_opts, rs_opts,
                                                                  mp_opts, sa_opts):
            if (wm or mma != "wmma") and not tc:
                continue
            s = Strategy(block_m=bm, block_n=bn, block_k=bk, thread_m=tm, thread_n=tn, tensor_core=tc, mma=mma, stages=st,
                         vector=vec, warps_m=wm, raster=rs, mapping=mp, layout=layout, stage_a=sa)
            cands.append((_score(s, t, w) + 0.01 * abs(math.log2(tm / tn)), s))
    cands.sort(key=lambda c: (c[0], c[1].hash()))
    for _, s in cands:
        if valid(s) is None:
            return s
    return None


def _occupancy(record: SliceRecord, s: Strategy, sm: dict, valid, why: dict, pad_ok: bool = True) -> Strategy:
    """Match the reference's resident blocks per SM: pad shared memory down to it (where `pad_ok`), cap registers up
    to it."""
    if not sm:
        return s
    k = record.main
    threads = math.prod(k["block"])
    want, lim = _blocks_per_sm(threads, int(k.get("registers") or 0), int(k.get("shared_mem") or 0), sm)
    fact = f"reference {want} blocks/SM ({lim}-limited: {threads} threads, {k.get('registers')} registers, {k.get('shared_mem')} B shared)"
    p = record.problem
    ours = smem_bytes(p, s) + static_smem_bytes(p, s)
    have = min(sm["shared_mem"] // (ours + sm["reserved_per_block"]), sm["threads"] // s.cuda_threads, sm["blocks"])
    out = s
    if have > want and pad_ok:
        pad = sm["shared_mem"] // want - sm["reserved_per_block"] - ours
        pad -= pad % 128
        if pad > 0 and valid(s.with_(smem_pad=pad)) is None:
            out = s.with_(smem_pad=pad)
            why["smem_pad"] = fact
    cap = sm["registers"] // (s.cuda_threads * want)
    if 64 <= cap < 255 and valid(out.with_(min_blocks=want)) is None:
        out = out.with_(min_blocks=want)
        why["min_blocks"] = fact
    return out
