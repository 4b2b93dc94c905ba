"""Operand loads from global memory: the clamped, masked element loaders `ld_a`, `ld_b` (strides or the im2col
decode of a convolution), the aligned vector loaders `ld_a_v`, `ld_b_v` of dialects with vector loads."""

from __future__ import annotations

import math

from vxsynth.kernels.dialects import Dialect
from vxsynth.kernels.geometry import Geometry, elem_bytes
from vxsynth.kernels.problem import Conv, Gemm, Problem
from vxsynth.kernels.strategy import Strategy
from vxsynth.kernels.writer import Writer


def load_helpers(w: Writer, p: Problem, s: Strategy, g: Geometry, d: Dialect) -> None:
    """The edge helpers, `CVT_A`, and the per-operand `ok_*` (in range), `off_*` (clamped offset), `ld_*` (masked
    element as float) and `ld_*_v` (aligned vector) loaders."""
    fn = d.fn
    w(d.helpers())
    w(f"#define CVT_A(x) {d.cvt_in(p.dtype, '(x)')}")
    if isinstance(p, Gemm):
        w(f"{fn} int ok_a(int m, int k) {{ return (m < P_M) & (k < P_K); }}\n"
          f"{fn} int off_a(int b, int m, int k) {{ return b * SAB + vx_min(m, P_M - 1) * SAM + vx_min(k, P_K - 1) * SAK; }}")
    else:
        # The im2col decode of (m, k), both never negative: unsigned division by the constants is a multiply and a
        # shift. The mask and the clamped address decode alike, so the compiler computes the decode once for both.
        # A dimension of extent 1 decodes to 0 (out-of-range rows are masked and their address clamped anyway).
        tap = "int r = 0; int s = rs;" if p.R == 1 else "int r = (int)((unsigned)rs / P_S); int s = rs - r * P_S;"
        if s.layout == "nhwc":      # k = (r * S + s) * C/groups + c: channels innermost
            kdec, addr = ("int rs = (int)((unsigned)(k) / P_CG); int c = (k) - rs * P_CG;",
                          "((n_img * P_H + h) * P_W + x) * P_C + gi * P_CG + c")
        else:                       # k = c * R * S + r * S + s: filter taps innermost
            kdec, addr = ("int c = (int)((unsigned)(k) / RS); int rs = (k) - c * RS;",
                          "((n_img * P_C + gi * P_CG + c) * P_H + h) * P_W + x")
        w("#define DECODE_A(m, k) \\\n"
          f"    {row_decode(p)} \\\n"
          f"    {kdec} {tap} \\\n"
          "    int h = p * SH - PH + r * DH; int x = q * SW - PW + s * DW")
        w(f"{fn} int ok_a(int m, int k) {{\n"
          "    DECODE_A(m, k);\n"
          "    return (m < P_M) & (k < P_K) & ((unsigned)h < (unsigned)P_H) & ((unsigned)x < (unsigned)P_W);\n}")
        w(f"{fn} int off_a(int gi, int m, int k) {{\n"
          "    DECODE_A(m, k);\n"
          "    n_img = vx_min(n_img, P_NIMG - 1); c = vx_min(c, P_CG - 1); h = vx_clamp(h, 0, P_H - 1); x = vx_clamp(x, 0, P_W - 1);\n"
          f"    return {addr};\n}}")
    b_off = ("b * SBB + vx_min(k, P_K - 1) * SBK + vx_min(n, P_N - 1) * SBN" if isinstance(p, Gemm)
             else f"(b * P_N + vx_min(n, P_N - 1)) * {w_ld(p)} + {_w_col(p, s, 'vx_min(k, P_K - 1)')}")
    w(f"{fn} int ok_b(int k, int n) {{ return (k < P_K) & (n < P_N); }}\n"
      f"{fn} int off_b(int b, int k, int n) {{ return {b_off}; }}")
    if isinstance(p, Gemm):
        w(f"{fn} float ld_a(const in_t* A, int b, int m, int k) {{ return vx_keep({d.cvt_in(p.dtype, 'A[off_a(b, m, k)]')}, ok_a(m, k)); }}")
    else:
        w(f"{fn} float ld_a(const in_t* X, int gi, int m, int k) {{ return vx_keep({d.cvt_in(p.dtype, 'X[off_a(gi, m, k)]')}, ok_a(m, k)); }}")
    w(f"{fn} float ld_b(const in_t* B, int b, int k, int n) {{ return vx_keep({d.cvt_in(p.dtype, 'B[off_b(b, k, n)]')}, ok_b(k, n)); }}")
    if d.vector_loads:
        for op, v in (("a", g.va), ("b", g.vb)):
            if v > 1:
                _vec_loader(w, p, s, d, op, v, g)
    if s.tensor_core and not s.stage_a and d.tensor_cores:
        _fragment_loader(w, p, s, d)
    w()


def _fragment_loader(w: Writer, p: Problem, s: Strategy, d: Dialect) -> None:
    """mma.sync's unstaged A (`math_forms._a_rows`): `ga_(A, base, h0, x0, k)`, the raw bits of A's element at K column
    `k` of a row the thread keeps as its offset without k (`base`) and, for a convolution, its input origin (`h0`,
    `x0`); 0 past the problem and in the padding. A column's decode is the only per-element work."""
    bits = "__float_as_uint" if p.dtype == "float32" else "(unsigned)"    # a 16-bit in_t holds the raw bits
    if isinstance(p, Gemm):
        w(f"{d.fn} unsigned ga_(const in_t* A, int base, int h0, int x0, int k) {{ "
          f"return (base >= 0) & (k < P_K) ? {bits}(A[base + k * SAK]) : 0u; }}")
        return
    tap = "const int r = 0; const int s = rs;" if p.R == 1 else "const int r = (int)((unsigned)rs / P_S); const int s = rs - r * P_S;"
    if s.layout == "nhwc":
        kdec, koff = "const int rs = (int)((unsigned)k / P_CG); const int c = k - rs * P_CG;", "(r * DH * P_W + s * DW) * P_C + c"
    else:
        kdec, koff = "const int c = (int)((unsigned)k / RS); const int rs = k - c * RS;", "c * (P_H * P_W) + r * DH * P_W + s * DW"
    w(f"{d.fn} unsigned ga_(const in_t* X, int base, int h0, int x0, int k) {{\n    {kdec} {tap}\n"
      "    const int ok = (k < P_K) & ((unsigned)(h0 + r * DH) < (unsigned)P_H) & ((unsigned)(x0 + s * DW) < (unsigned)P_W);\n"
      f"    return ok ? {bits}(X[base + {koff}]) : 0u;\n}}")


def row_decode(p: Conv) -> str:
    """The output image and position (`n_img`, `p`, `q`) of GEMM row `m`, never negative."""
    img = "int n_img = 0; int pq = (m);" if p.N == 1 else "int n_img = (int)((unsigned)(m) / PQ); int pq = (m) - n_img * PQ;"
    row = "int p = 0; int q = pq;" if p.P == 1 else "int p = (int)((unsigned)pq / P_Q); int q = pq - p * P_Q;"
    return f"{img} {row}"


STEP_CHUNKS = 12      # chunks per thread (A and B tiles) whose offsets and masks `im2col_steps` keeps in registers


def im2col_steps(p: Problem, s: Strategy, g: Geometry) -> bool:
    """Whether a stage ring reads the activations and filters of convolution `p` by steps (`im2col_rows`,
    `IM2COL_TILE`, `weight_rows`): NHWC channels innermost, K tiles that never cross a filter tap (C/groups a multiple
    of BK, so no K tail either), at most 32 taps, the channels stored as summed (no shortened reduction), and at most
    STEP_CHUNKS chunks per thread (two registers each; more would take the accumulators' registers and spill)."""
    chunks = sum(math.ceil(side * s.block_k / v / s.threads) for side, v in ((s.block_m, g.va), (s.block_n, g.vb)))
    return (isinstance(p, Conv) and not p.c_layout and s.layout == "nhwc" and g.a_fast == "k" and g.b_fast == "k"
            and (p.C // p.groups) % s.block_k == 0 and p.R * p.S <= 32 and chunks <= STEP_CHUNKS)


def im2col_rows(p: Conv, d: Dialect, chunk_head: str, m: str, k: str, loads: int) -> str:
    """Per thread, once per block, for each chunk `l` of its A tile (row `m`, column `k` within the tile): the
    offset of the chunk's elements at the first filter tap and K tile, `iro_[l]`, and a mask of the taps whose input
    pixel lies in the image, `irm_[l]` (bit r * S + s; none for a row past the problem). What the full decode of
    `off_a`/`ok_a` computes per tile and chunk, reduced to an add and a shift."""
    return (f"int iro_[{loads}]; unsigned irm_[{loads}];\n{chunk_head}"
            f"const int m = {m}; {row_decode(p)} const int h0 = p * SH - PH; const int x0 = q * SW - PW;\n"
            f"    iro_[l] = ((n_img * P_H + h0) * P_W + x0) * P_C + bz * P_CG + {k}; unsigned msk = 0;\n"
            # a rolled loop: unrolled, nvcc keeps the mask's bits apart and joins them again in every K step
            f"    {d.pragma_unroll.format(n=1)}\n"
            "    for (int t = 0; t < RS; ++t) { const int r = t / P_S; const int s = t - r * P_S;\n"
            "        msk |= (unsigned)((m < P_M) & ((unsigned)(h0 + r * DH) < (unsigned)P_H) & ((unsigned)(x0 + s * DW) < (unsigned)P_W)) << t; }\n"
            "    irm_[l] = msk; }")


def weight_rows(chunk_head: str, n: str, k: str, loads: int) -> str:
    """With `im2col_steps`, per thread, once per block, for each chunk `l` of its B tile (filter row `n`, column `k`
    within the tile): the chunk's offset in the first K tile, `iwo_[l]`, and whether its row is a filter, `iwn_[l]`.
    A K tile at `kb` adds `kb`."""
    return (f"int iwo_[{loads}]; int iwn_[{loads}];\n{chunk_head}"
            f"const int n = {n}; iwo_[l] = (bz * P_N + vx_min(n, P_N - 1)) * P_K + {k}; iwn_[l] = n < P_N; }}")


# K tile `kb`'s filter tap `itap_` (the same for the whole tile) and the offset `iko_` of its elements from `iro_`
IM2COL_TILE = ("const int itap_ = kb / P_CG; const int ir_ = itap_ / P_S; "
               "const int iko_ = (ir_ * DH * P_W + (itap_ - ir_ * P_S) * DW) * P_C + (kb - itap_ * P_CG);")


def w_ld(p: Conv) -> str:
    """A convolution's weight row stride (one output channel's filters)."""
    return "W_LD" if p.c_layout else "P_K"


def _w_col(p: Conv, s: Strategy, k: str) -> str:
    """Where GEMM-view column `k` of a filter lies in its row: k itself, unless a shortened reduction's NHWC filter
    taps sit a full stored channel count apart (k = tap * C + c, stored at tap * c_stored + c)."""
    if p.c_layout and s.layout == "nhwc":
        return f"({k} + ((unsigned)({k}) / P_CG) * (P_C - P_CG))"
    return k


def _vec_loader(w: Writer, p: Problem, s: Strategy, d: Dialect, op: str, v: int, g: Geometry) -> None:
    """Aligned vector load of v consecutive elements along the operand's contiguous dimension."""
    eb = elem_bytes(p)
    vt = {2: "float2", 4: "float4"}[v] if eb == 4 else {4: "unsigned int", 8: "uint2", 16: "uint4"}[v * eb]
    if isinstance(p, Gemm):
        if op == "a":
            fast = g.a_fast
            addr = ("A[b * SAB + vx_min(m, P_M - 1) * SAM + vx_min(k, P_K - V) * SAK]" if fast == "k"
                    else "A[b * SAB + vx_min(m, P_M - V) * SAM + vx_min(k, P_K - 1) * SAK]")
            sig, ok = "const in_t* A, int b, int m, int k", "(m < P_M) & (k < P_K)"
        else:
            fast = g.b_fast
            addr = ("B[b * SBB + vx_min(k, P_K - 1) * SBK + vx_min(n, P_N - V) * SBN]" if fast == "n"
                    else "B[b * SBB + vx_min(k, P_K - V) * SBK + vx_min(n, P_N - 1) * SBN]")
            sig, ok = "const in_t* B, int b, int k, int n", "(k < P_K) & (n < P_N)"
    elif op == "a":     # NHWC: the v channels of one filter tap share the decode and the mask
        addr, sig, ok = "A[off_a(gi, m, k)]", "const in_t* A, int gi, int m, int k", "ok_a(m, k)"
    else:
        addr = f"Wt[(gi * P_N + vx_min(n, P_N - 1)) * {w_ld(p)} + {_w_col(p, s, 'vx_min(k, P_K - V)')}]"
        sig, ok = "const in_t* Wt, int gi, int k, int n", "(k < P_K) & (n < P_N)"
    ptr = addr.replace("V", str(v))
    w(f"{d.fn} void ld_{op}_v({sig}, float* o) {{\n"
      f"    int ok = {ok};\n"
      f"    union {{ {vt} v; in_t e[{v}]; }} raw;\n"
      f"    raw.v = *reinterpret_cast<const {vt}*>(&{ptr});\n"
      f"    #pragma unroll\n    for (int i = 0; i < {v}; ++i) o[i] = vx_keep({d.cvt_in(p.dtype, 'raw.e[i]')}, ok);\n}}")
