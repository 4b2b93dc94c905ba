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
        return HELPERS.format(fn=self.fn)


CUDA = Dialect("cuda", "static __device__ __forceinline__", "#pragma unroll {n}", "__syncthreads();", True, True)
VORTEX = Dialect("vortex", "static inline", "#pragma GCC unroll {n}", "__syncthreads();", False, False)

# Branchless helpers (identical text in both dialects: Vortex needs them, CUDA gets the same arithmetic).
HELPERS = """{fn} int vx_min(int a, int b) {{ int d = a - b; return b + (d & (d >> 31)); }}
{fn} int vx_max(int a, int b) {{ int d = a - b; return a - (d & (d >> 31)); }}
{fn} int vx_clamp(int v, int lo, int hi) {{ return vx_min(vx_max(v, lo), hi); }}
{fn} float vx_keep(float x, int keep) {{ union {{ float f; unsigned u; }} t; t.f = x; t.u &= 0u - (unsigned)keep; return t.f; }}
"""
