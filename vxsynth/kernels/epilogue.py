"""The epilogue: alpha, bias and beta applied to the accumulators and the output stored (guarded or into a padded
output), or, with split-K, added atomically or through an fp32 workspace whose last split finishes the tile."""

from __future__ import annotations

from vxsynth.kernels.dialects import Dialect
from vxsynth.kernels.geometry import Geometry, k_splits, uses_workspace
from vxsynth.kernels.problem import Gemm, Problem
from vxsynth.kernels.strategy import Strategy
from vxsynth.kernels.writer import Writer


def epilogue(w: Writer, p: Problem, s: Strategy, g: Geometry, d: Dialect, tc: bool) -> None:
    alpha = p.alpha if isinstance(p, Gemm) else 1.0
    beta = p.beta if isinstance(p, Gemm) else 1.0
    acc = "Cs[ROW(i) * LDC + COL(j)]" if tc else "acc[i][j]"
    atomic = k_splits(s, d) > 1 and not uses_workspace(p, s, d)
    if uses_workspace(p, s, d):
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


def _split_fixup(w: Writer, d: Dialect, acc: str) -> None:
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
