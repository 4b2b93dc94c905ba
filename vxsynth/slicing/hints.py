"""Read tile/dtype/layout hints from cuBLAS, cuDNN and CUTLASS kernel names, and check them against the launch.

Grammars (profiling.md 5.2): xmma `..._tilesize{M}x{N}x{K}_stage{S}_warpsize{a}x{b}x{c}` (sm80) or
`_warpgroupsize...` (sm90); CUTLASS 2.x `cutlass_{arch}_{simt|tensorop|wmma_tensorop}_..._{M}x{N}_{K}x{S}_{ll}_align{A}`;
cuBLAS nvjet `nvjet_sm90_{ttt}_{M}x{N}_{K}x{S}_{cluster}_{h|v}_bz..._{LLL}` (persistent: soft hints only).
Checks: block threads = 32 x warps (xmma sm80); grid = tiles(M) x tiles(N) x split for non-persistent kernels,
in either orientation; dtypes in the name agree with the op's; the math unit in the name agrees with the measured
tensor-pipe use.
"""

from __future__ import annotations

import json
import math
import re

from vxsynth.kernels.problem import Conv, Gemm, Problem

_XMMA = re.compile(r"sm(?P<arch>\d+)_xmma_(?P<op>gemm|fprop_implicit_gemm\w*?)_(?P<types>(?:[a-z]+\d+){2}_(?:[a-z]+\d+){2}_[a-z]+\d+)"
                   r"_(?P<layout>\w+?)_tilesize(?P<tm>\d+)x(?P<tn>\d+)x(?P<tk>\d+)(?:_stage(?P<st>\d+))?"
                   r"_(?P<wk>warpsize|warpgroupsize)(?P<w1>\d+)x(?P<w2>\d+)x(?P<w3>\d+)(?P<rest>\w*)")
_CUTLASS = re.compile(r"cutlass_(?P<arch>\d+)_(?P<kind>simt|tensorop|wmma_tensorop)_(?P<types>\w*?)(?P<mma>[a-z]?\d*)gemm"
                      r"(?:_(?P<dt>[a-z0-9]+))?_(?P<tm>\d+)x(?P<tn>\d+)_(?P<tk>\d+)x(?P<st>\d+)_(?P<layout>[nt]{2})_align(?P<al>\d+)")
_NVJET = re.compile(r"nvjet_sm(?P<arch>\d+)_(?P<t>[a-z]{3})_(?P<tm>\d+)x(?P<tn>\d+)_(?P<tk>\d+)x(?P<st>\d+)"
                    r"_(?P<c1>\d+)x(?P<c2>\d+)_(?P<hv>[hv])_bz(?P<rest>\w*?)_(?P<layout>[NT]{3})$")
_LETTER = {"t": "bfloat16", "h": "float16", "s": "float32"}


def parse(name: str) -> dict:
    """Hints found in a kernel name; {'grammar': 'unparsed'} when none applies."""
    if m := _XMMA.search(name):
        types = m["types"]
        d = {"grammar": "xmma", "arch": int(m["arch"]), "tile": [int(m["tm"]), int(m["tn"]), int(m["tk"])],
             "stages": int(m["st"]) if m["st"] else None, "layout": m["layout"],
             "warps" if m["wk"] == "warpsize" else "warpgroups": [int(m["w1"]), int(m["w2"]), int(m["w3"])],
             "math": "tensor" if ("tensor" in m["rest"] or "tf32" in types or m["wk"] == "warpgroupsize") else "ffma",
             "dtypes": ["bfloat16" if "bf16" in types else "float16" if re.search(r"(?<![bt])f16", types) else "float32"],
             "tf32": "tf32" in types, "split_k": "split_k" in m["rest"]}
        if "wo_smem" in m["op"]:        # `indexed_wo_smem`: A's fragments come from global memory, not shared
            d["a_global"] = True
        if a := re.search(r"_align[ac]?(\d+)", m["rest"]):      # alignc4: channel runs of 4 elements
            d["align"] = int(a[1])
        return d
    if m := _CUTLASS.search(name):
        kind = m["kind"]
        mma = m["mma"] or ""
        dt = "bfloat16" if "bf16" in (m["types"] or "") + (m["dt"] or "") else ("float16" if "f16" in (m["types"] or "") else "float32")
        return {"grammar": "cutlass2", "arch": int(m["arch"]), "tile": [int(m["tm"]), int(m["tn"]), int(m["tk"])],
                "stages": int(m["st"]), "layout": m["layout"], "math": "ffma" if kind == "simt" else "tensor",
                "dtypes": [dt], "tf32": kind == "tensorop" and mma.endswith("1688") and dt == "float32",
                "align": int(m["al"])}
    if m := _NVJET.search(name):
        return {"grammar": "nvjet", "arch": int(m["arch"]), "tile": [int(m["tm"]), int(m["tn"]), int(m["tk"])],
                "stages": int(m["st"]), "cluster": [int(m["c1"]), int(m["c2"])], "raster": m["hv"],
                "layout": m["layout"], "math": "tensor", "dtypes": [_LETTER.get(m["t"][0], "?")],
                "split_k": "splitK" in m["rest"], "persistent": True}
    return {"grammar": "unparsed"}


def _gemm_mn(p: Problem) -> tuple[int, int]:
    if isinstance(p, Gemm):
        return p.M, p.N
    assert isinstance(p, Conv)
    return p.N * p.P * p.Q, p.K // p.groups


def cross_check(hints: dict, problem: Problem, launch: dict, tensor_pipe: float, sm_count: int = 132) -> dict:
    """Compare hints with the measured launch {grid, block, shared_mem}; verdict agree | mismatch | soft | unparsed."""
    if hints.get("grammar") == "unparsed":
        return {"verdict": "unparsed", "checks": []}
    grid = json.loads(launch["grid"]) if isinstance(launch["grid"], str) else list(launch["grid"])
    block = json.loads(launch["block"]) if isinstance(launch["block"], str) else list(launch["block"])
    threads, blocks = math.prod(block), math.prod(grid)
    checks = []
    dtype = problem.dtype
    checks.append({"check": "dtype", "ok": hints["dtypes"][0] == dtype, "name": hints["dtypes"][0], "op": dtype})
    if not math.isnan(tensor_pipe):
        uses = tensor_pipe > 1.0
        checks.append({"check": "math_unit", "ok": uses == (hints["math"] == "tensor"), "name": hints["math"],
                       "tensor_pipe_pct": round(tensor_pipe, 2)})
    if "warps" in hints:
        want = 32 * math.prod(hints["warps"])
        checks.append({"check": "block_threads", "ok": want == threads, "name": want, "launch": threads})
    elif "warpgroups" in hints:
        checks.append({"check": "block_threads", "ok": threads % 128 == 0, "name": "multiple of 128", "launch": threads})
    persistent = hints.get("persistent") or blocks == sm_count
    if not persistent:
        m, n = _gemm_mn(problem)
        tm, tn = hints["tile"][:2]
        batch = problem.batch if isinstance(problem, Gemm) else problem.groups
        ok, orient = False, None
        for a, b, o in ((m, n, "MxN"), (n, m, "NxM")):
            tiles = math.ceil(a / tm) * math.ceil(b / tn) * batch
            if tiles and blocks % tiles == 0:
                ok, orient = True, f"{o} x split {blocks // tiles}"
                break
        checks.append({"check": "grid_tiles", "ok": ok, "launch": blocks, "tile": [tm, tn], "orientation": orient})
    smem = launch.get("shared_mem")
    if smem is not None and hints.get("stages"):
        tm, tn, tk = hints["tile"]
        est = (tm + tn) * tk * (2 if dtype != "float32" else 4) * hints["stages"]
        checks.append({"check": "smem_estimate", "ok": None, "launch": int(smem), "tile_x_stages": est})
    failed = [c for c in checks if c["ok"] is False]
    verdict = "mismatch" if failed else ("soft" if persistent else "agree")
    return {"verdict": verdict, "checks": checks, "persistent": bool(persistent)}
