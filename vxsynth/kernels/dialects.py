"""Dialects: what differs between the CUDA and the Vortex spelling of the same kernel.

The kernel body (tiling, staging, mapping, masks, loop structure) is emitted once by `emit.py`; a dialect supplies
the entry point, thread/block indices, shared-memory declaration, barrier, unroll pragma, element loads and the
edge policy for stores. Vortex (pinned API: v2.2, `vx_spawn_threads` + `__local_mem(size)`) has no divergent
branches: edges are clamped + masked on loads and the output is padded to whole tiles, so stores need no guard.
"""

from __future__ import annotations

from dataclasses import dataclass

VORTEX_API = "v2.2"


@dataclass(frozen=True)
class Dialect:
    name: str
    fn: str                 # qualifier of helper functions
    pragma_unroll: str      # format with {n}
    barrier: str
    guard_stores: bool      # True: `if (in range) store`; False: padded output, unconditional stores
    tensor_cores: bool      # WMMA available

    def helpers(self) -> str:
        return (CUDA_MINMAX if self.name == "cuda" else BRANCHLESS_MINMAX).format(fn=self.fn) + KEEP.format(fn=self.fn)


CUDA = Dialect("cuda", "static __device__ __forceinline__", "#pragma unroll {n}", "__syncthreads();", True, True)
VORTEX = Dialect("vortex", "static inline", "#pragma GCC unroll {n}", "__syncthreads();", False, False)

# Edge helpers, the same values in both dialects. Vortex gets branchless bit arithmetic (SimX cannot run a
# thread-divergent branch); CUDA gets the hardware min/max, one instruction each, which also leaves the compiler the
# value ranges it needs to turn index division into shifts (the bit trick hid them: 4x the address instructions).
BRANCHLESS_MINMAX = """{fn} int vx_min(int a, int b) {{ int d = a - b; return b + (d & (d >> 31)); }}
{fn} int vx_max(int a, int b) {{ int d = a - b; return a - (d & (d >> 31)); }}
"""
CUDA_MINMAX = """{fn} int vx_min(int a, int b) {{ return min(a, b); }}
{fn} int vx_max(int a, int b) {{ return max(a, b); }}
"""
KEEP = """{fn} int vx_clamp(int v, int lo, int hi) {{ return vx_min(vx_max(v, lo), hi); }}
{fn} float vx_keep(float x, int keep) {{ union {{ float f; unsigned u; }} t; t.f = x; t.u &= 0u - (unsigned)keep; return t.f; }}
"""
