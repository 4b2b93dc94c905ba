"""Math forms: what a block computes per K tile. Scalar FMA on a thread tile, the direct convolution, and on
tensor cores WMMA or mma.sync (with ldmatrix fragment loads); tensor-core accumulators leave through shared memory
(`Cs`) for the epilogue."""

from __future__ import annotations

from vxsynth.kernels.dialects import Dialect
from vxsynth.kernels.geometry import Geometry, elem_bytes, ring_layout, tc_shape
from vxsynth.kernels.operands import row_decode, w_ld
from vxsynth.kernels.problem import Conv, Problem
from vxsynth.kernels.staging import stage_loop
from vxsynth.kernels.strategy import Strategy, wgmma_grid
from vxsynth.kernels.writer import Writer


def scalar_main(w: Writer, p: Problem, s: Strategy, g: Geometry, d: Dialect) -> None:
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

    stage_loop(w, p, s, g, d, compute)


def direct_main(w: Writer, p: Conv, s: Strategy, d: Dialect) -> None:
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
    w(f"for (int j = 0; j < TN; ++j) b_[j] = vx_keep(CVT_A(B[(bz * P_N + cb[j]) * {w_ld(p)} + c * RS + r * P_S + s2]), cok[j]);")
    w("for (int i = 0; i < TM; ++i) for (int j = 0; j < TN; ++j) acc[i][j] += a_[i] * b_[j];")
    w.close()
    w.close()
    w.close()


def tc_main(w: Writer, p: Problem, s: Strategy, g: Geometry, d: Dialect) -> None:
    if s.mma == "wgmma":
        _wgmma_main(w, p, s, g, d)
        return
    fm, fn, fk = tc_shape(p.dtype)
    et = "wmma::precision::tf32" if p.dtype == "float32" else ("__nv_bfloat16" if p.dtype == "bfloat16" else "__half")
    warps, fr_m, fr_n = s.threads // 32, s.block_m // fm, s.block_n // fn
    frags = fr_m * fr_n
    w(f"const int warp = tid / 32;\n#define FN_ (BN / {fn})")
    if s.warps_m:   # warp grid warps_m x warps_n, each warp a (fr_m/warps_m) x (fr_n/warps_n) block of fragments
        wn = warps // s.warps_m
        pm, pn = fr_m // s.warps_m, fr_n // wn
        if s.mma == "tile":
            w(f"#define WN_ {wn}\n#define PM_ {pm}\n#define PN_ {pn}")
        if not s.stage_a:       # A's rows per thread, fixed by the warp grid (`_a_rows`)
            w(f"#define APM_ {pm}\n#define AWN_ {wn}\n#define APN_ {pn}")
        w(f"#define FPW {pm * pn}\n#define FRAG(t) (((warp / {wn}) * {pm} + (t) / {pn}) * FN_ + (warp % {wn}) * {pn} + (t) % {pn})")
        busy = ""
    else:           # fragments dealt in order; warps beyond the fragments only load tiles
        fpw = -(-frags // warps)
        w(f"#define FPW {fpw}\n#define FRAG(t) (warp * FPW + (t))")
        busy = f"if (FRAG(t) < {frags}) " if fpw * warps != frags else ""
    if s.mma != "wmma":
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


def _fragment_steps(w: Writer, p: Problem, s: Strategy, g: Geometry, d: Dialect, fk: int, busy: str, fragment,
                    t_pragma: str, store: str, warp_step=None) -> None:
    """The staged K loop around every warp's fragments (`fragment(buf)` writes one fragment's step at kk, or
    `warp_step(buf)` the step of all the warp's fragments at once), then the accumulators through Cs (`store`: one
    fragment's statement) for the epilogue."""
    def compute(buf: str, pragma: str) -> None:
        w(pragma)
        w.open(f"for (int kk = 0; kk < BK; kk += {fk})")
        if warp_step:
            warp_step(buf)
            w.close()
            return
        if t_pragma:
            w(t_pragma)
        w.open("for (int t = 0; t < FPW; ++t)")
        w("const int f = FRAG(t); const int fm = f / FN_; const int fn = f % FN_;")
        w.open(f"{busy}")
        fragment(buf)
        w.close()
        w.close()
        w.close()

    stage_loop(w, p, s, g, d, compute)
    w("float* Cs = (float*)smem_raw;")
    w(d.barrier)
    w(f"for (int t = 0; t < FPW; ++t) {{ const int f = FRAG(t); {busy}{{\n{store} }} }}")
    w(d.barrier)


_MMA = {"float32": "m16n8k8.row.col.f32.tf32.tf32.f32", "bfloat16": "m16n8k16.row.col.f32.bf16.bf16.f32",
        "float16": "m16n8k16.row.col.f32.f16.f16.f32"}


def _operand_lds(p: Problem, s: Strategy, g: Geometry, op: str) -> str:
    """How a warp reads one operand's fragment from shared memory for mma.sync: "ldmatrix" when the tile's rows run
    along K and are 16-byte aligned, "trans" (ldmatrix .trans) for such 16-bit tiles whose rows run along M/N, else
    "lds" (scalar loads); "global" for an unstaged A (its fragment elements loaded from global memory)."""
    if op == "a" and not s.stage_a:
        return "global"
    if s.stages > 1:
        fast, ld = (g.a_fast, ring_layout(p, s, "a")[1]) if op == "a" else (g.b_fast, ring_layout(p, s, "b")[1])
    else:      # the staged tiles (see staging.smem): A as (m, k) rows, B as (n, k) rows, padded
        fast, ld = "k", s.block_k + (4 if p.dtype == "float32" else 8)
    eb = elem_bytes(p)
    if ld * eb % 16:
        return "lds"
    if fast == "k":
        return "ldmatrix"
    return "trans" if eb == 2 else "lds"


def _mma_sync_main(w: Writer, p: Problem, s: Strategy, g: Geometry, d: Dialect, busy: str) -> None:
    """Tensor cores through mma.sync: each 16x16 fragment of the WMMA layout is two m16n8 tiles, each thread holding
    the PTX ISA's fragment elements (g_ = lane / 4, t_ = lane % 4); A and B fragments come from shared memory by
    ldmatrix (x4, .trans for 16-bit tiles along M/N) or by scalar loads, an unstaged A's by masked scalar loads from
    global memory (`ga_`, raw bits: the tensor cores read fp32's TF32 bits, as from a ring); the accumulators leave
    through Cs."""
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
    if a_how == "global":
        _a_rows(w, p, s)

    def load_a(buf: str, dst: str = "a_", slot: str = "t / APN_") -> None:
        A = lambda m, k: f"AS({buf}, fm * 16 + {m}, kk + {k})"    # noqa: E731
        if a_how == "ldmatrix":   # matrices (rows 0-7 | 8-15) x (k 0 | kv): lanes 8j..8j+7 give matrix j's rows
            w(ldmatrix(dst, A("(lane & 15)", f"(lane >> 4) * {kv}"), False))
        elif a_how == "trans":    # rows along K: matrix j = (m half j & 1, k half j >> 1)
            w(ldmatrix(dst, A("((lane >> 3) & 1) * 8", "(lane & 7) + (lane >> 4) * 8"), True))
        elif a_how == "global":     # rows kept before the K loop (`_a_rows`), one column decode per element
            hk = 4 if tf32 else 8
            for i, (dm, dk) in enumerate(((0, 0), (8, 0), (0, hk), (8, hk))):
                r = f"[{slot}][{dm // 8}]"
                ga = lambda k: f"ga_(A, ab_{r}, ah_{r}, ax_{r}, k0 + kk + {k})"    # noqa: E731
                w(f"{dst}[{i}] = " + (ga(f"t_ + {dk}") if tf32 else f"{ga(f'2 * t_ + {dk}')} | ({ga(f'2 * t_ + {dk} + 1')} << 16)") + ";")
        else:
            hk = 4 if tf32 else 8
            for i, (dm, dk) in enumerate(((0, 0), (8, 0), (0, hk), (8, hk))):
                k = f"t_ + {dk}" if tf32 else f"2 * t_ + {dk}"
                w(f"{dst}[{i}] = {word(A(f'g_ + {dm}', k), A(f'g_ + {dm}', k + ' + 1'))};")

    def load_b(buf: str, dst: str = "b_") -> None:
        B = lambda k, n: f"BS({buf}, kk + {k}, fn * 16 + {n})"    # noqa: E731
        if b_how == "ldmatrix":   # matrices (n 0-7, k 0 | kv), (n 8-15, k 0 | kv): b0, b1 of each n half
            w(ldmatrix(dst, B(f"((lane >> 3) & 1) * {kv}", "(lane & 7) + (lane >> 4) * 8"), False))
        elif b_how == "trans":    # rows along N: matrix j = (k half j & 1, n half j >> 1)
            w(ldmatrix(dst, B("(lane & 7) + ((lane >> 3) & 1) * 8", "(lane >> 4) * 8"), True))
        else:
            hk = 4 if tf32 else 8
            for h in range(2):
                for i, dk in enumerate((0, hk)):
                    k = f"t_ + {dk}" if tf32 else f"2 * t_ + {dk}"
                    w(f"{dst}[{2 * h + i}] = {word(B(k, f'{h * 8} + g_'), B(k + ' + 1', f'{h * 8} + g_'))};")

    def mma(t: str, a: str, b: str) -> None:
        for h in range(2):
            c = ", ".join(f'"+f"(cf[{t}][{4 * h + e}])' for e in range(4))
            w(f'asm volatile("mma.sync.aligned.{_MMA[p.dtype]} {{%0,%1,%2,%3}}, {{%4,%5,%6,%7}}, {{%8,%9}}, {{%0,%1,%2,%3}};" : '
              f'{c} : "r"({a}[0]), "r"({a}[1]), "r"({a}[2]), "r"({a}[3]), "r"({b}[{2 * h}]), "r"({b}[{2 * h + 1}]));')

    def fragment(buf: str) -> None:
        w("unsigned a_[4], b_[4];")
        load_a(buf)
        load_b(buf)
        mma("t", "a_", "b_")

    def warp_tile(buf: str) -> None:    # one K step of the warp's PM_ x PN_ fragments, each operand loaded once
        w("unsigned a_[PM_][4], b_[PN_][4];")
        w.open("#pragma unroll\nfor (int i = 0; i < PM_; ++i)")
        w("const int fm = (warp / WN_) * PM_ + i;")
        load_a(buf, "a_[i]", "i")
        w.close()
        w.open("#pragma unroll\nfor (int j = 0; j < PN_; ++j)")
        w("const int fn = (warp % WN_) * PN_ + j;")
        load_b(buf, "b_[j]")
        w.close()
        w.open("#pragma unroll\nfor (int t = 0; t < FPW; ++t)")
        w("const int i = t / PN_; const int j = t % PN_;")
        mma("t", "a_[i]", "b_[j]")
        w.close()

    _fragment_steps(w, p, s, g, d, 8 if tf32 else 16, busy, fragment, "#pragma unroll",
                    "    float* cs_ = &Cs[(f / FN_) * 16 * LDC + (f % FN_) * 16];\n"
                    "    for (int h = 0; h < 2; ++h) { cs_[g_ * LDC + h * 8 + 2 * t_] = cf[t][4 * h]; cs_[g_ * LDC + h * 8 + 2 * t_ + 1] = cf[t][4 * h + 1];\n"
                    "        cs_[(g_ + 8) * LDC + h * 8 + 2 * t_] = cf[t][4 * h + 2]; cs_[(g_ + 8) * LDC + h * 8 + 2 * t_ + 1] = cf[t][4 * h + 3]; }",
                    warp_tile if s.mma == "tile" else None)


def _a_rows(w: Writer, p: Problem, s: Strategy) -> None:
    """Before the K loop, for an unstaged A: each of the thread's A rows (fragment row slot i of its warp's APM_, half
    h: rows g_ and g_ + 8) as `ga_` reads it, its offset without the K column (`ab_`) and, for a convolution, its
    output pixel's input origin (`ah_`, `ax_`; a row past the problem gets an origin no filter tap reaches), as cuDNN's
    indexed kernels keep them; a GEMM row past the problem gets offset -1."""
    w("int ab_[APM_][2], ah_[APM_][2], ax_[APM_][2];")
    w.open("#pragma unroll\nfor (int i = 0; i < APM_; ++i)")
    w.open("#pragma unroll\nfor (int h = 0; h < 2; ++h)")
    w("const int m = m0 + ((warp / AWN_) * APM_ + i) * 16 + g_ + 8 * h;")
    if isinstance(p, Conv):
        base = ("((n_img * P_H + h0) * P_W + x0) * P_C + bz * P_CG" if s.layout == "nhwc"
                else "(n_img * P_C + bz * P_CG) * (P_H * P_W) + h0 * P_W + x0")
        w(f"{row_decode(p)} const int h0 = p * SH - PH; const int x0 = q * SW - PW;\n"
          f"ab_[i][h] = {base}; ah_[i][h] = m < P_M ? h0 : -(1 << 24); ax_[i][h] = x0;")
    else:
        w("ab_[i][h] = m < P_M ? bz * SAB + m * SAM : -1; ah_[i][h] = 0; ax_[i][h] = 0;")
    w.close()
    w.close()


_WGMMA = {"float32": ("k8.f32.tf32.tf32", "1, 1, 1"), "bfloat16": ("k16.f32.bf16.bf16", "1, 1, 1, 0, 0"),
          "float16": ("k16.f32.f16.f16", "1, 1, 1, 0, 0")}
# a shared-memory matrix descriptor: start address, leading byte offset 16 (unused by K-major swizzled layouts),
# stride byte offset 1024 (from one 8-row atom to the next), 128-byte swizzle mode; addresses and offsets in 16 B.
# DLO_ is its low word (address, leading offset). A shared address is below 2^18 bytes, so the 14-bit address field
# of DLO_(p) plus DOFF_(buf, e, ELEMS) is that of the address buf slots of ELEMS elements and e elements after p (in
# 16 B, both multiples of it): each K step's descriptor is the block's first one plus the slot's offset and a
# compile-time constant, as CUTLASS advances its descriptors, not a new conversion of an address.
# A warpgroup's first row or column is an atom's first (a multiple of 8, no XOR), so AS(buf, r, k) lies
# buf * A_ELEMS + SWZ_(0, k, BM) elements after AS(0, r, 0), and likewise for BS.
WGMMA_DESC = ("#define DLO_(p) (((((unsigned)__cvta_generic_to_shared(p)) & 0x3FFFF) >> 4) | (1u << 16))\n"
              "#define DESC_(lo) ((unsigned long long)(lo) | (64ull << 32) | (1ull << 62))\n"
              "#define DOFF_(buf, e, ELEMS) ((unsigned)(buf) * (unsigned)((ELEMS) * sizeof(sm_t) / 16) + "
              "(unsigned)((e) * sizeof(sm_t) / 16))")


def _wgmma_main(w: Writer, p: Problem, s: Strategy, g: Geometry, d: Dialect) -> None:
    """Hopper warpgroup MMA: warpgroup (wm_, wn_) of the block's wg_m x wg_n grid accumulates rows wm_*64.. and
    columns wn_*WN_.. in registers (`d_`: N/2 floats per thread, the PTX ISA's m64nN accumulator layout) with one
    `wgmma.mma_async` per K step, both operands read from the swizzled ring slot through descriptors; each K tile
    is one committed group, waited for before the tile's slot can be refilled (with `wgmma_pending`, at the end of the
    next tile: the loop waits for the last one). The accumulators leave through Cs."""
    wg_m, wg_n = wgmma_grid(s)
    wn = s.block_n // wg_n
    shape, imm = _WGMMA[p.dtype]
    kstep = 8 if p.dtype == "float32" else 16
    nacc = wn // 2
    w(WGMMA_DESC)
    w(f"#define WGN_ {wg_n}\n#define WN_ {wn}")
    # the warpgroup index broadcast from lane 0: the compiler then knows it (and the descriptors built from it) is
    # the same in every lane, and keeps the K loop's descriptor arithmetic on the uniform datapath, as CUTLASS does,
    # not in per-thread IMADs on the FMA pipe that the reference's kernels do not issue
    w("const int wg_ = __shfl_sync(0xffffffffu, tid / 128, 0); const int wl_ = tid & 127; const int wm_ = wg_ / WGN_; "
      "const int wn_ = wg_ % WGN_;")
    w(f"float d_[{nacc}];\n#pragma unroll\nfor (int e = 0; e < {nacc}; ++e) d_[e] = 0.0f;")
    w("const unsigned dla_ = DLO_(&AS(0, wm_ * 64, 0)); const unsigned dlb_ = DLO_(&BS(0, 0, wn_ * WN_));")
    regs = ",".join(f"%{i}" for i in range(nacc))
    outs = ", ".join(f'"+f"(d_[{i}])' for i in range(nacc))
    mma = (f'asm volatile("wgmma.mma_async.sync.aligned.m64n{wn}{shape} {{{regs}}}, %{nacc}, %{nacc + 1}, {imm};" : '
           f'{outs} : "l"(da_), "l"(db_));')

    def compute(buf: str, pragma: str) -> None:
        w('asm volatile("wgmma.fence.sync.aligned;" ::: "memory");')
        w.open(f"#pragma unroll\nfor (int kk = 0; kk < BK; kk += {kstep})")
        w(f"const unsigned long long da_ = DESC_(dla_ + DOFF_({buf}, SWZ_(0, kk, BM), A_ELEMS));\n"
          f"const unsigned long long db_ = DESC_(dlb_ + DOFF_({buf}, SWZ_(0, kk, BN), B_ELEMS));")
        w(mma)
        w.close()
        w('asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");')
        w(f'asm volatile("wgmma.wait_group.sync.aligned {s.wgmma_pending};" ::: "memory");')

    stage_loop(w, p, s, g, d, compute)
    w(f'#pragma unroll\nfor (int e = 0; e < {nacc}; ++e) asm volatile("" : "+f"(d_[e]) :: "memory");')
    w("float* Cs = (float*)smem_raw;")
    w(d.barrier)
    w("const int r0_ = wm_ * 64 + (wl_ / 32) * 16 + (wl_ & 31) / 4; const int c0_ = wn_ * WN_ + (wl_ & 3) * 2;")
    w.open(f"#pragma unroll\nfor (int i = 0; i < {wn // 8}; ++i)")
    w("float* cs_ = &Cs[r0_ * LDC + c0_ + i * 8];\n"
      "cs_[0] = d_[4 * i]; cs_[1] = d_[4 * i + 1]; cs_[8 * LDC] = d_[4 * i + 2]; cs_[8 * LDC + 1] = d_[4 * i + 3];")
    w.close()
    w(d.barrier)
