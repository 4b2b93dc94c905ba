"""Emit one strategy as CUDA C++ and as a Vortex kernel. The body is generated once; dialects differ only where
the two programming models do (entry point, indices, shared memory, edges, tensor cores).

The kernel computes, in its GEMM view, C[b](m, n) = alpha * sum_k A[b](m, k) B[b](k, n) + beta * bias(n), with
A/B read through stride- or im2col-addressing helpers (`ld_a`, `ld_b`) that clamp indices and mask values, so no
out-of-range address is ever formed. Blocks are numbered linearly (raster order in the strategy); the Vortex
launch adds `block_start`, which is how a sampled window of blocks runs at the real shape.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from vxsynth.kernels.dialects import CUDA, Dialect
from vxsynth.kernels.problem import Conv, Gemm, Problem, to_dict
from vxsynth.kernels.strategy import Strategy, check, fast_dims, problem_mnk, ring_layout, smem_bytes, tc_shape
from vxsynth.store.io import sha256_obj


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


class _W:
    """A tiny indented line writer."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.ind = 0

    def __call__(self, text: str = "") -> None:
        for line in text.splitlines() or [""]:
            self.lines.append(("    " * self.ind + line) if line else "")

    def open(self, text: str) -> None:
        self(text + " {")
        self.ind += 1

    def block(self) -> None:
        self("{")
        self.ind += 1

    def close(self, text: str = "}") -> None:
        self.ind -= 1
        self(text)

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def emit(p: Problem, s: Strategy, d: Dialect) -> str:
    """Source code of strategy `s` for problem `p` in dialect `d`."""
    why = check(p, s)
    if why:
        raise ValueError(f"strategy cannot implement the problem: {why}")
    g = geometry(p, s)
    why = async_copy_error(p, s, g)
    if why:
        raise ValueError(f"strategy cannot implement the problem: {why}")
    tc = s.tensor_core and d.tensor_cores
    w = _W()
    _prelude(w, p, s, g, d, tc)
    _helpers(w, p, s, g, d)
    _kernel(w, p, s, g, d, tc)
    return w.text()


# ---------------------------------------------------------------------------------------------------------------
def _prelude(w: _W, p: Problem, s: Strategy, g: Geometry, d: Dialect, tc: bool) -> None:
    w(f"// generated by vxsynth: {d.name} kernel for {p.kind} {p.label()} {p.dtype}")
    w(f"// strategy {s.hash()}: {s}")
    w(d.includes(s.stages, tc))
    consts = {"P_B": g.batch, "P_M": g.M, "P_N": g.N, "P_K": g.K, "BM": s.block_m, "BN": s.block_n, "BK": s.block_k,
              "TM": s.thread_m, "TN": s.thread_n, "THREADS": s.threads, "TILES_M": g.tiles_m, "TILES_N": g.tiles_n,
              "KT": g.kt, "SMEM_BYTES": smem_bytes(p, s, d.tensor_cores)}
    if isinstance(p, Gemm):
        consts.update(SAB=p.a_strides[0], SAM=p.a_strides[1], SAK=p.a_strides[2],
                      SBB=p.b_strides[0], SBK=p.b_strides[1], SBN=p.b_strides[2])
    else:
        consts.update(P_NIMG=p.N, P_C=p.c_stored, P_CG=p.C // p.groups, P_H=p.H, P_W=p.W, P_P=p.P, P_Q=p.Q, P_R=p.R,
                      P_S=p.S, SH=p.stride[0], SW=p.stride[1], PH=p.pad[0], PW=p.pad[1], DH=p.dil[0], DW=p.dil[1],
                      RS=p.R * p.S, PQ=p.P * p.Q, P_KTOT=p.K)
        if p.c_layout:               # a shortened reduction: weight rows as long as the stored channels make them
            consts.update(W_LD=p.c_stored * p.R * p.S)
    # output addressing: exact on CUDA (guarded stores), whole tiles on Vortex (padded buffer, no guards)
    if isinstance(p, Gemm):
        ld = g.N if d.guard_stores else g.tiles_n * s.block_n
        rows = g.M if d.guard_stores else g.tiles_m * s.block_m
        consts.update(C_LD=ld, C_SB=ld * rows)
    else:
        kg = g.N if d.guard_stores else g.tiles_n * s.block_n
        consts.update(C_KG=kg, C_K=kg * p.groups)
    if _split(s, d) > 1:     # blocks per split and K tiles per split
        consts.update(SPLIT_K=s.split_k, NBLK=g.blocks, KTS=-(-g.kt // s.split_k))
    for k, v in consts.items():
        w(f"#define {k} {v}")
    w(d.types(p.dtype))
    w()


def _helpers(w: _W, p: Problem, s: Strategy, g: Geometry, d: Dialect) -> None:
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
        img = "int n_img = 0; int pq = (m);" if p.N == 1 else "int n_img = (int)((unsigned)(m) / PQ); int pq = (m) - n_img * PQ;"
        row = "int p = 0; int q = pq;" if p.P == 1 else "int p = (int)((unsigned)pq / P_Q); int q = pq - p * P_Q;"
        tap = "int r = 0; int s = rs;" if p.R == 1 else "int r = (int)((unsigned)rs / P_S); int s = rs - r * P_S;"
        if s.layout == "nhwc":      # k = (r * S + s) * C/groups + c: channels innermost
            kdec, addr = ("int rs = (int)((unsigned)(k) / P_CG); int c = (k) - rs * P_CG;",
                          "((n_img * P_H + h) * P_W + x) * P_C + gi * P_CG + c")
        else:                       # k = c * R * S + r * S + s: filter taps innermost
            kdec, addr = ("int c = (int)((unsigned)(k) / RS); int rs = (k) - c * RS;",
                          "((n_img * P_C + gi * P_CG + c) * P_H + h) * P_W + x")
        w("#define DECODE_A(m, k) \\\n"
          f"    {img} {row} \\\n"
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
             else f"(b * P_N + vx_min(n, P_N - 1)) * {_w_ld(p)} + {_w_col(p, s, 'vx_min(k, P_K - 1)')}")
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
    w()


def _w_ld(p: Conv) -> str:
    """A convolution's weight row stride (one output channel's filters)."""
    return "W_LD" if p.c_layout else "P_K"


def _w_col(p: Conv, s: Strategy, k: str) -> str:
    """Where GEMM-view column `k` of a filter lies in its row: k itself, unless a shortened reduction's NHWC filter
    taps sit a full stored channel count apart (k = tap * C + c, stored at tap * c_stored + c)."""
    if p.c_layout and s.layout == "nhwc":
        return f"({k} + ((unsigned)({k}) / P_CG) * (P_C - P_CG))"
    return k


def _vec_loader(w: _W, p: Problem, s: Strategy, d: Dialect, op: str, v: int, g: Geometry) -> None:
    """Aligned vector load of v consecutive elements along the operand's contiguous dimension."""
    eb = 4 if p.dtype == "float32" else 2
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
        addr = f"Wt[(gi * P_N + vx_min(n, P_N - 1)) * {_w_ld(p)} + {_w_col(p, s, 'vx_min(k, P_K - V)')}]"
        sig, ok = "const in_t* Wt, int gi, int k, int n", "(k < P_K) & (n < P_N)"
    ptr = addr.replace("V", str(v))
    w(f"{d.fn} void ld_{op}_v({sig}, float* o) {{\n"
      f"    int ok = {ok};\n"
      f"    union {{ {vt} v; in_t e[{v}]; }} raw;\n"
      f"    raw.v = *reinterpret_cast<const {vt}*>(&{ptr});\n"
      f"    #pragma unroll\n    for (int i = 0; i < {v}; ++i) o[i] = vx_keep({d.cvt_in(p.dtype, 'raw.e[i]')}, ok);\n}}")


# ---------------------------------------------------------------------------------------------------------------
def _kernel(w: _W, p: Problem, s: Strategy, g: Geometry, d: Dialect, tc: bool) -> None:
    name = kernel_name(p, s)
    d.kernel_open(w, name, s.min_blocks, tc, _split(s, d) > 1, _workspace(p, s, d), smem_bytes(p, s, d.tensor_cores))
    w("const int bz = lin / (TILES_M * TILES_N);\nconst int rr = lin - bz * (TILES_M * TILES_N);")
    if s.raster == "row":
        w("const int m0 = (rr / TILES_N) * BM;\nconst int n0 = (rr % TILES_N) * BN;")
    else:
        w("const int m0 = (rr % TILES_M) * BM;\nconst int n0 = (rr / TILES_M) * BN;")
    _mapping(w, s, g)
    if s.conv_form == "direct":
        _direct_main(w, p, s, d)
    else:
        _smem(w, p, s, g, d, tc)
        _tc_main(w, p, s, g, d) if tc else _scalar_main(w, p, s, g, d)
    _epilogue(w, p, s, g, d, tc)
    d.kernel_close(w)


def _mapping(w: _W, s: Strategy, g: Geometry) -> None:
    """Thread -> output elements. row(i), col(j) give the local m, n of the thread's i-th/j-th output."""
    fast_is_n = g.out_fast == "n"
    tf, ts = ("TN", "TM") if fast_is_n else ("TM", "TN")
    ext_f, ext_s = ("BN", "BM") if fast_is_n else ("BM", "BN")
    w(f"const int TF_ = {ext_f} / {tf}; const int TS_ = {ext_s} / {ts};")
    if s.mapping == "strided":
        w("const int ts = tid % TS_; const int tf = tid / TS_;")
        fast, slow = f"(tf * {tf} + (X))", f"(ts * {ts} + (X))"
    else:
        w("const int ts = tid / TF_;")
        w("const int tf = (tid % TF_) ^ (ts & (TF_ - 1));" if s.mapping == "swizzled" else "const int tf = tid % TF_;")
        fast, slow = "(tf + (X) * TF_)", "(ts + (X) * TS_)"
    row, col = (slow, fast) if fast_is_n else (fast, slow)
    w(f"#define ROW(X) {row}\n#define COL(X) {col}")


def _smem(w: _W, p: Problem, s: Strategy, g: Geometry, d: Dialect, tc: bool) -> None:
    if s.stages > 1:
        _ring_smem(w, p, s, g, d, tc)
        return
    if tc:
        ct = "float" if p.dtype == "float32" else ("__nv_bfloat16" if p.dtype == "bfloat16" else "__half")
        pad = 4 if p.dtype == "float32" else 8
        if s.mma == "sync":     # B as (n, k) rows, so that both fragments load with ldmatrix
            w(f"typedef {ct} sm_t;\n#define LDA (BK + {pad})\n#define LDB (BK + {pad})\n#define LDC (BN + 4)")
            w("#define A_ELEMS (BM * LDA)\n#define B_ELEMS (BN * LDB)")
            w("#define AS(buf, m, k) As[(buf) * A_ELEMS + (m) * LDA + (k)]\n#define BS(buf, k, n) Bs[(buf) * B_ELEMS + (n) * LDB + (k)]")
        else:
            w(f"typedef {ct} sm_t;\n#define LDA (BK + {pad})\n#define LDB (BN + {pad})\n#define LDC (BN + 4)")
            w("#define A_ELEMS (BM * LDA)\n#define B_ELEMS (BK * LDB)")
            w("#define AS(buf, m, k) As[(buf) * A_ELEMS + (m) * LDA + (k)]\n#define BS(buf, k, n) Bs[(buf) * B_ELEMS + (k) * LDB + (n)]")
    else:
        w("typedef float sm_t;\n#define A_ELEMS (BK * (BM + 1))\n#define B_ELEMS (BK * (BN + 1))")
        w("#define AS(buf, m, k) As[(buf) * A_ELEMS + (k) * (BM + 1) + (m)]\n#define BS(buf, k, n) Bs[(buf) * B_ELEMS + (k) * (BN + 1) + (n)]")
    nbuf = 2 if s.double_buffer else 1
    if s.stage_a:
        w("sm_t* As = (sm_t*)smem_raw;")
    if s.stage_b:
        w(f"sm_t* Bs = (sm_t*)smem_raw + {nbuf * int(s.stage_a)} * A_ELEMS;")


def _loader(w: _W, p: Problem, s: Strategy, g: Geometry, d: Dialect, op: str) -> tuple[str, str, int]:
    """Declare per-thread registers for one operand's tile; return (fetch code, commit code, registers)."""
    fast = g.a_fast if op == "a" else g.b_fast
    v = g.va if op == "a" else g.vb
    if op == "a":
        ext = {"m": "BM", "k": "BK"}
        slow = "k" if fast == "m" else "m"
    else:
        ext = {"k": "BK", "n": "BN"}
        slow = "n" if fast == "k" else "k"
    chunks = (s.block_m if op == "a" else s.block_n) * s.block_k // v
    loads = math.ceil(chunks / s.threads)
    ef, es = ext[fast], ext[slow]
    per_f = f"({ef} / {v})"
    if s.mapping == "strided":  # walk the non-contiguous dimension fastest: uncoalesced on purpose
        idx = f"int s_ = e % {es}; int f_ = (e / {es}) * {v};"
    else:
        idx = f"int f_ = (e % {per_f}) * {v}; int s_ = e / {per_f};"
    R = f"r{op}"
    fetch, commit = [], []
    pos = {fast: "f_ + i", slow: "s_"} if v > 1 else {fast: "f_", slow: "s_"}
    if op == "a":
        gm, gk = f"m0 + {pos['m']}", f"kb + {pos['k']}"
        lm, lk = pos["m"], pos["k"]
        one = f"ld_a(A, bz, {gm}, {gk})"
        vec = f"ld_a_v(A, bz, m0 + {pos['m'].replace(' + i', '')}, kb + {pos['k'].replace(' + i', '')}, &{R}[l * {v}])"
        store = f"AS(BUF, {lm}, {lk})"
    else:
        gk, gn = f"kb + {pos['k']}", f"n0 + {pos['n']}"
        one = f"ld_b(B, bz, {gk}, {gn})"
        vec = f"ld_b_v(B, bz, kb + {pos['k'].replace(' + i', '')}, n0 + {pos['n'].replace(' + i', '')}, &{R}[l * {v}])"
        store = f"BS(BUF, {pos['k']}, {pos['n']})"
    head = d.chunk_loop(loads, chunks, chunks % s.threads == 0) + idx
    if v > 1 and d.vector_loads:
        fetch.append(f"{head} {vec}; }}")
    else:
        inner = f"{R}[l * {v} + i] = {one};" if v > 1 else f"{R}[l] = {one};"
        fetch.append(f"{head} " + (f"for (int i = 0; i < {v}; ++i) {{ {inner} }} }}" if v > 1 else f"{inner} }}"))
    val = f"{R}[l * {v} + i]" if v > 1 else f"{R}[l]"
    conv = _to_smem(p, s.tensor_core and d.tensor_cores, val)
    body = f"{store} = {conv};"
    commit.append(f"{head} " + (f"for (int i = 0; i < {v}; ++i) {{ {body} }} }}" if v > 1 else f"{body} }}"))
    w(f"float {R}[{loads * v}];")
    return "\n".join(fetch), "\n".join(commit), loads * v


def _to_smem(p: Problem, tc: bool, val: str) -> str:
    if not tc:
        return val
    if p.dtype == "float32":
        return f"wmma::__float_to_tf32({val})"
    return f"__float2bfloat16_rn({val})" if p.dtype == "bfloat16" else f"__float2half_rn({val})"


def _stage_loop(w: _W, p: Problem, s: Strategy, g: Geometry, d: Dialect, compute) -> None:
    """The K loop with staging (plain or register-prefetch double buffering) around `compute(buf_expr)`."""
    if s.stages > 1:
        _ring_loop(w, p, s, g, d, compute)
        return
    staged = [op for op, on in (("a", s.stage_a), ("b", s.stage_b)) if on]
    code = {op: _loader(w, p, s, g, d, op) for op in staged}
    pragma = d.pragma_unroll.format(n=s.unroll)

    def fetch(kb: str) -> None:
        w(f"{{ const int kb = {kb};")
        for op in staged:
            w(code[op][0])
        w("}")

    def commit(buf: str) -> None:
        for op in staged:
            w(code[op][1].replace("BUF", buf))

    lo, hi = _k_range(s, d)
    if s.double_buffer and staged:
        w("int cur = 0;")
        fetch("0" if lo == "0" else f"{lo} * BK")
        commit("0")
        w(d.barrier)
        w.open(f"for (int kt = {lo}; kt < {hi}; ++kt)")
        w("const int k0 = kt * BK;")
        w.open(f"if (kt + 1 < {hi})")  # uniform across the block
        fetch("k0 + BK")
        w.close()
        compute("cur", pragma)
        w.open(f"if (kt + 1 < {hi})")
        commit("cur ^ 1")
        w.close()
        w(d.barrier)
        w("cur ^= 1;")
        w.close()
    else:
        w.open(f"for (int kt = {lo}; kt < {hi}; ++kt)")
        w("const int k0 = kt * BK;")
        if staged:
            fetch("k0")
            commit("0")
            w(d.barrier)
        compute("0", pragma)
        if staged:
            w(d.barrier)
        w.close()


def _ring_smem(w: _W, p: Problem, s: Strategy, g: Geometry, d: Dialect, tc: bool) -> None:
    """Ring slots in the operands' global layout and precision: AS(slot, m, k), BS(slot, k, n) address them."""
    st = d.ring_type(p.dtype, tc)
    a_rows, a_ld = ring_layout(p, s, "a")
    b_rows, b_ld = ring_layout(p, s, "b")
    w(f"typedef {st} sm_t;\n#define LDA {a_ld}\n#define LDB {b_ld}\n#define LDC (BN + 4)")
    w(f"#define A_ELEMS {a_rows * a_ld}\n#define B_ELEMS {b_rows * b_ld}")
    a_idx = "(m) * LDA + (k)" if g.a_fast == "k" else "(k) * LDA + (m)"
    b_idx = "(k) * LDB + (n)" if g.b_fast == "n" else "(n) * LDB + (k)"
    w(f"#define AS(buf, m, k) As[(buf) * A_ELEMS + {a_idx}]\n#define BS(buf, k, n) Bs[(buf) * B_ELEMS + {b_idx}]")
    w(f"sm_t* As = (sm_t*)smem_raw;\nsm_t* Bs = (sm_t*)smem_raw + {s.stages} * A_ELEMS;")


def _ring_fill(p: Problem, s: Strategy, g: Geometry, d: Dialect, op: str) -> str:
    """Code that copies one operand's tile at K offset `kb` into ring slot `SLOT`: CUDA issues asynchronous copies
    (cp.async, zero-filled outside the problem), Vortex loads and stores the same elements."""
    fast = g.a_fast if op == "a" else g.b_fast
    v = g.va if op == "a" else g.vb
    dims = {"a": ("m", "k"), "b": ("k", "n")}[op]
    slow = dims[0] if fast == dims[1] else dims[1]
    ext = {"m": "BM", "n": "BN", "k": "BK"}
    ef, es = ext[fast], ext[slow]
    chunks = {"m": s.block_m, "n": s.block_n, "k": s.block_k}
    n_chunks = chunks[fast] * chunks[slow] // v
    loads = math.ceil(n_chunks / s.threads)
    if s.mapping == "strided":
        idx = f"int s_ = e % {es}; int f_ = (e / {es}) * {v};"
    else:
        idx = f"int f_ = (e % ({ef} / {v})) * {v}; int s_ = e / ({ef} / {v});"
    pos = {fast: "f_", slow: "s_"}
    base = {"m": "m0", "n": "n0", "k": "kb"}
    gi = {dd: f"{base[dd]} + {pos[dd]}" for dd in dims}
    X = "A" if op == "a" else "B"
    args = f"bz, {gi[dims[0]]}, {gi[dims[1]]}"
    ok = f"ok_{op}({gi[dims[0]]}, {gi[dims[1]]})"
    dst = f"&{X}S(SLOT, {pos[dims[0]]}, {pos[dims[1]]})" if op == "a" else f"&BS(SLOT, {pos['k']}, {pos['n']})"
    head = d.chunk_loop(loads, n_chunks, n_chunks % s.threads == 0) + idx + " "
    if d.async_copy:
        return head + d.copy_async(dst, f"&{X}[off_{op}({args})]", v * (4 if p.dtype == "float32" else 2), ok) + " }"
    gi_i = {dd: (f"{gi[dd]} + i" if dd == fast and v > 1 else gi[dd]) for dd in dims}
    pos_i = {dd: (f"{pos[dd]} + i" if dd == fast and v > 1 else pos[dd]) for dd in dims}
    dst_i = f"{X}S(SLOT, {pos_i[dims[0]]}, {pos_i[dims[1]]})"
    one = f"{dst_i} = ld_{op}({X}, bz, {gi_i[dims[0]]}, {gi_i[dims[1]]});"
    return head + (f"for (int i = 0; i < {v}; ++i) {{ {one} }} }}" if v > 1 else f"{one} }}")


def _ring_loop(w: _W, p: Problem, s: Strategy, g: Geometry, d: Dialect, compute) -> None:
    """K loop over a ring of `stages` slots: tiles kt+1 .. kt+stages-1 are in flight while tile kt is computed.
    One barrier per step makes tile kt visible and frees the slot of tile kt-1 before it is refilled."""
    S = s.stages
    fills = [_ring_fill(p, s, g, d, op) for op in ("a", "b")]
    pragma = d.pragma_unroll.format(n=s.unroll)

    def fill(kt: str, slot: str) -> None:
        w(f"{{ const int kb = ({kt}) * BK;")
        for f in fills:
            w(f.replace("SLOT", slot))
        w("}")

    lo, hi = _k_range(s, d)
    rel = "kt" if lo == "0" else f"(kt - {lo})"    # the step within this block's K range picks the slot
    w.open(f"for (int st = 0; st < {S - 1}; ++st)")
    w.open("if (st < KT)" if lo == "0" else f"if ({lo} + st < {hi})")  # uniform across the block
    fill("st" if lo == "0" else f"{lo} + st", "st")
    w.close()
    if d.async_copy:
        w(d.commit())
    w.close()
    w.open(f"for (int kt = {lo}; kt < {hi}; ++kt)")
    w("const int k0 = kt * BK;")
    if d.async_copy:
        w(d.wait(S - 2))
    w(d.barrier)
    w.open(f"if (kt + {S - 1} < {hi})")
    fill(f"kt + {S - 1}", f"({rel} + {S - 1}) % {S}")
    w.close()
    if d.async_copy:
        w(d.commit())
    compute(f"{rel} % {S}", pragma)
    w.close()
    w(d.barrier)


def _scalar_main(w: _W, p: Problem, s: Strategy, g: Geometry, d: Dialect) -> None:
    w("float acc[TM][TN];\nfor (int i = 0; i < TM; ++i) for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;")

    def compute(buf: str, pragma: str) -> None:
        w(pragma)
        w.open("for (int kk = 0; kk < BK; ++kk)")
        w("float a_[TM], b_[TN];")
        a = f"AS({buf}, ROW(i), kk)" if s.stage_a else "ld_a(A, bz, m0 + ROW(i), k0 + kk)"
        b = f"BS({buf}, kk, COL(j))" if s.stage_b else "ld_b(B, bz, k0 + kk, n0 + COL(j))"
        if s.stages > 1:  # the ring holds the operands' own precision
            a, b = f"CVT_A({a})", f"CVT_A({b})"
        w(f"for (int i = 0; i < TM; ++i) a_[i] = {a};")
        w(f"for (int j = 0; j < TN; ++j) b_[j] = {b};")
        w("for (int i = 0; i < TM; ++i) for (int j = 0; j < TN; ++j) acc[i][j] += a_[i] * b_[j];")
        w.close()

    _stage_loop(w, p, s, g, d, compute)


def _direct_main(w: _W, p: Conv, s: Strategy, d: Dialect) -> None:
    """Direct convolution: each thread keeps its pixels' input origins and walks channels x filter taps in nested
    loops, reading input and weights from global memory (no im2col index decode per element, no staging)."""
    w("float acc[TM][TN];\nfor (int i = 0; i < TM; ++i) for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;")
    w("int nb[TM], hb[TM], wb[TM], mok[TM], cb[TN], cok[TN];")
    w.open("for (int i = 0; i < TM; ++i)")
    w("const int m = m0 + ROW(i); const int mc = vx_min(m, P_M - 1); const int n_img = mc / PQ; const int pq = mc - n_img * PQ;\n"
      "const int p = pq / P_Q; const int q = pq - p * P_Q;\n"
      "nb[i] = n_img; hb[i] = p * SH - PH; wb[i] = q * SW - PW; mok[i] = m < P_M;")
    w.close()
    w("for (int j = 0; j < TN; ++j) { const int co = n0 + COL(j); cok[j] = co < P_N; cb[j] = vx_min(co, P_N - 1); }")
    w.open("for (int c = 0; c < P_CG; ++c)")
    w.open("for (int r = 0; r < P_R; ++r)")
    w(d.pragma_unroll.format(n=s.unroll))
    w.open("for (int s2 = 0; s2 < P_S; ++s2)")
    w("float a_[TM], b_[TN];")
    w.open("for (int i = 0; i < TM; ++i)")
    w("const int h = hb[i] + r * DH; const int x = wb[i] + s2 * DW;\n"
      "const int ok = mok[i] & ((unsigned)h < (unsigned)P_H) & ((unsigned)x < (unsigned)P_W);\n"
      "a_[i] = vx_keep(CVT_A(A[((nb[i] * P_C + bz * P_CG + c) * P_H + vx_clamp(h, 0, P_H - 1)) * P_W + vx_clamp(x, 0, P_W - 1)]), ok);")
    w.close()
    w(f"for (int j = 0; j < TN; ++j) b_[j] = vx_keep(CVT_A(B[(bz * P_N + cb[j]) * {_w_ld(p)} + c * RS + r * P_S + s2]), cok[j]);")
    w("for (int i = 0; i < TM; ++i) for (int j = 0; j < TN; ++j) acc[i][j] += a_[i] * b_[j];")
    w.close()
    w.close()
    w.close()


def _tc_main(w: _W, p: Problem, s: Strategy, g: Geometry, d: Dialect) -> None:
    fm, fn, fk = tc_shape(p.dtype)
    et = "wmma::precision::tf32" if p.dtype == "float32" else ("__nv_bfloat16" if p.dtype == "bfloat16" else "__half")
    warps, fr_m, fr_n = s.threads // 32, s.block_m // fm, s.block_n // fn
    frags = fr_m * fr_n
    w(f"const int warp = tid / 32;\n#define FN_ (BN / {fn})")
    if s.warps_m:   # warp grid warps_m x warps_n, each warp a (fr_m/warps_m) x (fr_n/warps_n) block of fragments
        wn = warps // s.warps_m
        pm, pn = fr_m // s.warps_m, fr_n // wn
        w(f"#define FPW {pm * pn}\n#define FRAG(t) (((warp / {wn}) * {pm} + (t) / {pn}) * FN_ + (warp % {wn}) * {pn} + (t) % {pn})")
        busy = ""
    else:           # fragments dealt in order; warps beyond the fragments only load tiles
        fpw = -(-frags // warps)
        w(f"#define FPW {fpw}\n#define FRAG(t) (warp * FPW + (t))")
        busy = f"if (FRAG(t) < {frags}) " if fpw * warps != frags else ""
    if s.mma == "sync":
        _mma_sync_main(w, p, s, g, d, busy)
        return
    w(f"wmma::fragment<wmma::accumulator, {fm}, {fn}, {fk}, float> cf[FPW];")
    w("for (int t = 0; t < FPW; ++t) wmma::fill_fragment(cf[t], 0.0f);")
    ring = s.stages > 1
    la = "row_major" if not ring or g.a_fast == "k" else "col_major"
    lb = "row_major" if not ring or g.b_fast == "n" else "col_major"

    def fragment(buf: str) -> None:
        w(f"wmma::fragment<wmma::matrix_a, {fm}, {fn}, {fk}, {et}, wmma::{la}> af;")
        w(f"wmma::fragment<wmma::matrix_b, {fm}, {fn}, {fk}, {et}, wmma::{lb}> bf;")
        w(f"wmma::load_matrix_sync(af, &AS({buf}, fm * {fm}, kk), LDA);")
        w(f"wmma::load_matrix_sync(bf, &BS({buf}, kk, fn * {fn}), LDB);")
        if ring and p.dtype == "float32":  # the ring holds fp32: round to TF32 in the fragments
            w("for (int e = 0; e < af.num_elements; ++e) af.x[e] = wmma::__float_to_tf32(af.x[e]);\n"
              "for (int e = 0; e < bf.num_elements; ++e) bf.x[e] = wmma::__float_to_tf32(bf.x[e]);")
        w("wmma::mma_sync(cf[t], af, bf, cf[t]);")

    _fragment_steps(w, p, s, g, d, fk, busy, fragment, "",
                    f"    wmma::store_matrix_sync(&Cs[(f / FN_) * {fm} * LDC + (f % FN_) * {fn}], cf[t], LDC, wmma::mem_row_major);")


def _fragment_steps(w: _W, p: Problem, s: Strategy, g: Geometry, d: Dialect, fk: int, busy: str, fragment,
                    t_pragma: str, store: str) -> None:
    """The staged K loop around every warp's fragments (`fragment(buf)` writes one fragment's step at kk), then the
    accumulators through Cs (`store`: one fragment's statement) for the epilogue."""
    def compute(buf: str, pragma: str) -> None:
        w(pragma)
        w.open(f"for (int kk = 0; kk < BK; kk += {fk})")
        if t_pragma:
            w(t_pragma)
        w.open("for (int t = 0; t < FPW; ++t)")
        w("const int f = FRAG(t); const int fm = f / FN_; const int fn = f % FN_;")
        w.open(f"{busy}")
        fragment(buf)
        w.close()
        w.close()
        w.close()

    _stage_loop(w, p, s, g, d, compute)
    w("float* Cs = (float*)smem_raw;")
    w(d.barrier)
    w(f"for (int t = 0; t < FPW; ++t) {{ const int f = FRAG(t); {busy}{{\n{store} }} }}")
    w(d.barrier)


_MMA = {"float32": "m16n8k8.row.col.f32.tf32.tf32.f32", "bfloat16": "m16n8k16.row.col.f32.bf16.bf16.f32",
        "float16": "m16n8k16.row.col.f32.f16.f16.f32"}


def _operand_lds(p: Problem, s: Strategy, g: Geometry, op: str) -> str:
    """How a warp reads one operand's fragment from shared memory for mma.sync: "ldmatrix" when the tile's rows run
    along K and are 16-byte aligned, "trans" (ldmatrix .trans) for such 16-bit tiles whose rows run along M/N, else
    "lds" (scalar loads)."""
    if s.stages > 1:
        fast, ld = (g.a_fast, ring_layout(p, s, "a")[1]) if op == "a" else (g.b_fast, ring_layout(p, s, "b")[1])
    else:      # the staged tiles (see _smem): A as (m, k) rows, B as (n, k) rows, padded
        fast, ld = "k", s.block_k + (4 if p.dtype == "float32" else 8)
    eb = 4 if p.dtype == "float32" else 2
    if ld * eb % 16:
        return "lds"
    if fast == "k":
        return "ldmatrix"
    return "trans" if eb == 2 else "lds"


def _mma_sync_main(w: _W, p: Problem, s: Strategy, g: Geometry, d: Dialect, busy: str) -> None:
    """Tensor cores through mma.sync: each 16x16 fragment of the WMMA layout is two m16n8 tiles, each thread holding
    the PTX ISA's fragment elements (g_ = lane / 4, t_ = lane % 4); A and B fragments come from shared memory by
    ldmatrix (x4, .trans for 16-bit tiles along M/N) or by scalar loads, the accumulators leave through Cs."""
    tf32 = p.dtype == "float32"
    kv = 4 if tf32 else 8                      # elements of a 16-byte ldmatrix row
    w("const int lane = tid & 31; const int g_ = lane >> 2; const int t_ = lane & 3;")
    w("float cf[FPW][8];\nfor (int t = 0; t < FPW; ++t) for (int e = 0; e < 8; ++e) cf[t][e] = 0.0f;")
    bits = "__float_as_uint" if tf32 else ("__bfloat16_as_ushort" if p.dtype == "bfloat16" else "__half_as_ushort")

    def word(ref: str, ref2: str) -> str:      # one .b32 operand register: a tf32 value or two 16-bit values
        return f"{bits}({ref})" if tf32 else f"((unsigned){bits}({ref}) | ((unsigned){bits}({ref2}) << 16))"

    def ldmatrix(dst: str, addr: str, trans: bool) -> str:
        form = "x4.trans" if trans else "x4"
        return (f"{{ unsigned la_ = (unsigned)__cvta_generic_to_shared(&{addr});\n"
                f"  asm volatile(\"ldmatrix.sync.aligned.m8n8.{form}.shared.b16 {{%0,%1,%2,%3}}, [%4];\" : "
                f"\"=r\"({dst}[0]), \"=r\"({dst}[1]), \"=r\"({dst}[2]), \"=r\"({dst}[3]) : \"r\"(la_)); }}")

    a_how, b_how = _operand_lds(p, s, g, "a"), _operand_lds(p, s, g, "b")

    def load_a(buf: str) -> None:
        A = lambda m, k: f"AS({buf}, fm * 16 + {m}, kk + {k})"    # noqa: E731
        if a_how == "ldmatrix":   # matrices (rows 0-7 | 8-15) x (k 0 | kv): lanes 8j..8j+7 give matrix j's rows
            w(ldmatrix("a_", A("(lane & 15)", f"(lane >> 4) * {kv}"), False))
        elif a_how == "trans":    # rows along K: matrix j = (m half j & 1, k half j >> 1)
            w(ldmatrix("a_", A("((lane >> 3) & 1) * 8", "(lane & 7) + (lane >> 4) * 8"), True))
        else:
            hk = 4 if tf32 else 8
            for i, (dm, dk) in enumerate(((0, 0), (8, 0), (0, hk), (8, hk))):
                k = f"t_ + {dk}" if tf32 else f"2 * t_ + {dk}"
                w(f"a_[{i}] = {word(A(f'g_ + {dm}', k), A(f'g_ + {dm}', k + ' + 1'))};")

    def load_b(buf: str) -> None:
        B = lambda k, n: f"BS({buf}, kk + {k}, fn * 16 + {n})"    # noqa: E731
        if b_how == "ldmatrix":   # matrices (n 0-7, k 0 | kv), (n 8-15, k 0 | kv): b0, b1 of each n half
            w(ldmatrix("b_", B(f"((lane >> 3) & 1) * {kv}", "(lane & 7) + (lane >> 4) * 8"), False))
        elif b_how == "trans":    # rows along N: matrix j = (k half j & 1, n half j >> 1)
            w(ldmatrix("b_", B("(lane & 7) + ((lane >> 3) & 1) * 8", "(lane >> 4) * 8"), True))
        else:
            hk = 4 if tf32 else 8
            for h in range(2):
                for i, dk in enumerate((0, hk)):
                    k = f"t_ + {dk}" if tf32 else f"2 * t_ + {dk}"
                    w(f"b_[{2 * h + i}] = {word(B(k, f'{h * 8} + g_'), B(k + ' + 1', f'{h * 8} + g_'))};")

    def fragment(buf: str) -> None:
        w("unsigned a_[4], b_[4];")
        load_a(buf)
        load_b(buf)
        for h in range(2):
            c = ", ".join(f'"+f"(cf[t][{4 * h + e}])' for e in range(4))
            w(f'asm volatile("mma.sync.aligned.{_MMA[p.dtype]} {{%0,%1,%2,%3}}, {{%4,%5,%6,%7}}, {{%8,%9}}, {{%0,%1,%2,%3}};" : '
              f'{c} : "r"(a_[0]), "r"(a_[1]), "r"(a_[2]), "r"(a_[3]), "r"(b_[{2 * h}]), "r"(b_[{2 * h + 1}]));')

    _fragment_steps(w, p, s, g, d, 8 if tf32 else 16, busy, fragment, "#pragma unroll",
                    "    float* cs_ = &Cs[(f / FN_) * 16 * LDC + (f % FN_) * 16];\n"
                    "    for (int h = 0; h < 2; ++h) { cs_[g_ * LDC + h * 8 + 2 * t_] = cf[t][4 * h]; cs_[g_ * LDC + h * 8 + 2 * t_ + 1] = cf[t][4 * h + 1];\n"
                    "        cs_[(g_ + 8) * LDC + h * 8 + 2 * t_] = cf[t][4 * h + 2]; cs_[(g_ + 8) * LDC + h * 8 + 2 * t_ + 1] = cf[t][4 * h + 3]; }")


def _epilogue(w: _W, p: Problem, s: Strategy, g: Geometry, d: Dialect, tc: bool) -> None:
    alpha = p.alpha if isinstance(p, Gemm) else 1.0
    beta = p.beta if isinstance(p, Gemm) else 1.0
    acc = "Cs[ROW(i) * LDC + COL(j)]" if tc else "acc[i][j]"
    atomic = _split(s, d) > 1 and not _workspace(p, s, d)
    if _workspace(p, s, d):
        _split_fixup(w, d, acc)
        acc = "sum_"
    w.open("for (int i = 0; i < TM; ++i)")
    w.open("for (int j = 0; j < TN; ++j)")
    w("const int m = m0 + ROW(i); const int n = n0 + COL(j);")
    if acc == "sum_":   # the splits' partial sums in split order: the same sum whichever split arrived last
        w("float sum_ = 0.0f;\nfor (int z = 0; z < SPLIT_K; ++z) sum_ += __ldcg(&WS[WS_AT(z) + ROW(i) * BN + COL(j)]);")
    val = f"{acc}" if alpha == 1.0 else f"{alpha!r}f * {acc}"
    if p.bias:
        bidx = "vx_min(n, P_N - 1)" if isinstance(p, Gemm) else "bz * P_N + vx_min(n, P_N - 1)"
        bv = d.cvt_in(p.dtype, f"BIAS[{bidx}]")
        bv = f"(kz == 0 ? {bv} : 0.0f)" if atomic else bv     # the bias once, from the first split
        val += f" + {bv}" if beta == 1.0 else f" + {beta!r}f * {bv}"
    w(f"const float v = {val};")
    if isinstance(p, Gemm):
        addr = "C[bz * C_SB + m * C_LD + n]"
    else:
        w("const int n_img = m / PQ; const int pq = m - n_img * PQ;")
        addr = "C[(n_img * C_K + bz * C_KG + n) * PQ + pq]"
    store = f"atomicAdd(&{addr}, v);" if atomic else f"{addr} = {d.cvt_out(p.dtype, 'v')};"
    w(f"if (m < P_M && n < P_N) {store}" if d.guard_stores else store)
    w.close()
    w.close()


def _split_fixup(w: _W, d: Dialect, acc: str) -> None:
    """Split-K into a 16-bit output: each split writes its fp32 partial tile to the workspace (`WS`, zeroed by the
    launcher before every launch) and counts itself in on the tile's counter after it; the split that arrives last
    adds the partials (the serial split-K of CUTLASS, without waiting: no block ever spins) and runs the epilogue."""
    w("#define WS_AT(z) ((size_t)((z) * NBLK + lin) * (BM * BN))")
    w("for (int i = 0; i < TM; ++i) for (int j = 0; j < TN; ++j) WS[WS_AT(kz) + ROW(i) * BN + COL(j)] = "
      f"{acc};")
    w("__threadfence();")
    w("__shared__ int last_;")
    w(d.barrier)
    w("if (tid == 0) last_ = atomicAdd((unsigned*)WS + (size_t)SPLIT_K * NBLK * BM * BN + lin, 1u) == SPLIT_K - 1;")
    w(d.barrier)
    w("if (!last_) return;")
    w("__threadfence();")


def _workspace(p: Problem, s: Strategy, d: Dialect) -> bool:
    """Split-K into a 16-bit output goes through an fp32 workspace (float atomics need an fp32 output)."""
    return _split(s, d) > 1 and p.dtype != "float32"


def workspace_words(p: Problem, s: Strategy) -> int:
    """32-bit words of the workspace a CUDA launch of `s` needs (0: none): every split's partial tile of every block,
    then one arrival counter per block."""
    if not _workspace(p, s, CUDA):
        return 0
    g = geometry(p, s)
    return s.split_k * g.blocks * s.block_m * s.block_n + g.blocks


def _split(s: Strategy, d: Dialect) -> int:
    """Blocks per output tile along K: split-K is a CUDA form (float atomics); Vortex runs the whole K per block."""
    return s.split_k if d.split_k else 1


def _k_range(s: Strategy, d: Dialect) -> tuple[str, str]:
    """The block's K tiles [lo, hi): all of them, or its split's share."""
    return ("kt0", "kt1") if _split(s, d) > 1 else ("0", "KT")


def vortex_out_elements(p: Problem, s: Strategy) -> int:
    """Size of the padded output buffer a Vortex kernel writes (whole tiles)."""
    g = geometry(p, s)
    mp, np_ = g.tiles_m * s.block_m, g.tiles_n * s.block_n
    if isinstance(p, Gemm):
        return g.batch * mp * np_
    pq = p.P * p.Q
    nimg = math.ceil(mp / pq)
    return nimg * np_ * p.groups * pq
