"""Dialects: what differs between the CUDA and the Vortex spelling of the same kernel.

The kernel body (tiling, staging, mapping, masks, loop structure) is emitted once (`emit.py` and the modules it
calls); the emitter asks its dialect object, never which dialect it is. A dialect supplies spellings (headers, element
types and conversions, entry point with thread/block indices and local memory, barrier, unroll pragma, the loop that
deals tile chunks to threads, asynchronous copies) and capabilities that change the kernel's structure (guarded
stores, tensor cores, vector loads, asynchronous copies, split-K). A new target (Vortex v3) is a new object.

Vortex (pinned API: v2.2, `vx_spawn_threads` + `__local_mem(size)`) has no divergent branches: edges are clamped +
masked on loads and the output is padded to whole tiles, so stores need no guard.
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
    tensor_cores: bool      # WMMA / mma.sync available
    vector_loads: bool      # aligned vector loads from global memory (`ld_a_v`, `ld_b_v`)
    async_copy: bool        # asynchronous global->shared copies fill the stage ring (`copy_async`, `commit`, `wait`)
    split_k: bool           # float atomics and fences: the blocks of one tile split K and add their partial sums
    tma: bool               # the Tensor Memory Accelerator fills ring slots from tensor maps the launcher passes

    def helpers(self) -> str:
        """The edge helpers (`vx_min`, `vx_max`, `vx_clamp`, `vx_keep`), the same values in every dialect."""
        raise NotImplementedError

    def includes(self, stages: int, tc: bool) -> str:
        raise NotImplementedError

    def types(self, dtype: str) -> str:
        """typedefs of `in_t` and `out_t`: the element types of the kernel's buffers."""
        raise NotImplementedError

    def cvt_in(self, dtype: str, x: str) -> str:
        """Expression: stored element `x` as a float."""
        return x

    def cvt_out(self, dtype: str, x: str) -> str:
        """Expression: float `x` as a stored element."""
        return x

    def ring_type(self, dtype: str, tc: bool) -> str:
        """Element type of the stage ring's slots."""
        raise NotImplementedError

    def chunk_loop(self, loads: int, chunks: int, even: bool) -> str:
        """Open the loop giving each thread its chunks `e` of a tile (`even`: the chunks fill every pass)."""
        raise NotImplementedError

    def copy_async(self, dst: str, src: str, nbytes: int, ok: str) -> str:
        """Statement (`async_copy`): copy `nbytes` from `src` to `dst`, zero-filled where `ok` is false."""
        raise NotImplementedError

    def commit(self) -> str:
        """Statement (`async_copy`): the copies issued so far form one group."""
        raise NotImplementedError

    def wait(self, pending: int) -> str:
        """Statement (`async_copy`): wait until at most `pending` groups are in flight."""
        raise NotImplementedError

    def kernel_open(self, w, name: str, min_blocks: int, tc: bool, split: bool, workspace: bool, smem: int,
                    maps: tuple[str, ...] = (), threads: str = "THREADS", cluster: int = 1) -> None:
        """Open the kernel: entry point, arguments (A, B, BIAS, C[, WS][, TMA_A][, TMA_B]: the tensor maps of operands
        `maps`), `tid`, `lin` (and `kz`, `kt0`, `kt1` when split), `smem_raw` when the kernel declares `smem` > 0 bytes;
        `threads` the launch bound's threads per block, clusters of `cluster` blocks where the dialect has them."""
        raise NotImplementedError

    def kernel_close(self, w) -> None:
        """Close the kernel opened by `kernel_open`."""
        w.close()


@dataclass(frozen=True)
class Cuda(Dialect):
    def helpers(self) -> str:
        return CUDA_MINMAX.format(fn=self.fn) + KEEP.format(fn=self.fn)

    def includes(self, stages: int, tc: bool) -> str:
        return ("#include <cuda_bf16.h>\n#include <cuda_fp16.h>" + ("\n#include <cuda_pipeline.h>" if stages > 1 else "")
                + ("\n#include <mma.h>" if tc else ""))

    def types(self, dtype: str) -> str:
        return {"float32": "typedef float in_t;\ntypedef float out_t;",
                "bfloat16": "typedef unsigned short in_t;\ntypedef unsigned short out_t;",
                "float16": "typedef unsigned short in_t;\ntypedef unsigned short out_t;"}[dtype]

    CVT_IN = {"float32": "{x}", "bfloat16": "__uint_as_float(((unsigned)({x})) << 16)",
              "float16": "__half2float(__ushort_as_half({x}))"}
    CVT_OUT = {"float32": "{x}", "bfloat16": "__bfloat16_as_ushort(__float2bfloat16_rn({x}))",
               "float16": "__half_as_ushort(__float2half_rn({x}))"}

    def cvt_in(self, dtype: str, x: str) -> str:
        return self.CVT_IN[dtype].format(x=x)

    def cvt_out(self, dtype: str, x: str) -> str:
        return self.CVT_OUT[dtype].format(x=x)

    def ring_type(self, dtype: str, tc: bool) -> str:
        if tc and dtype != "float32":
            return "__nv_bfloat16" if dtype == "bfloat16" else "__half"
        return "in_t"

    def chunk_loop(self, loads: int, chunks: int, even: bool) -> str:
        """Unrolled (the chunk positions become constants per thread); threads past the last chunk stop, so no two
        threads write one shared-memory slot (racecheck clean)."""
        head = f"#pragma unroll\nfor (int l = 0; l < {loads}; ++l) {{ int e = tid + l * THREADS; "
        return head if even else head + f"if (e >= {chunks}) break; "

    def copy_async(self, dst: str, src: str, nbytes: int, ok: str) -> str:
        return f"__pipeline_memcpy_async({dst}, {src}, {nbytes}, {ok} ? 0 : {nbytes});"

    def commit(self) -> str:
        return "__pipeline_commit();"

    def wait(self, pending: int) -> str:
        return f"__pipeline_wait_prior({pending});"

    def kernel_open(self, w, name: str, min_blocks: int, tc: bool, split: bool, workspace: bool, smem: int,
                    maps: tuple[str, ...] = (), threads: str = "THREADS", cluster: int = 1) -> None:
        if tc:
            w("using namespace nvcuda;")
        if maps:
            w(TMAP_TYPE)
        bounds = f"{threads}, {min_blocks}" if min_blocks else threads
        dims = " __cluster_dims__(CLUSTER, 1, 1)" if cluster > 1 else ""     # compile-time: every launch is clustered
        w(f'extern "C" __global__ void __launch_bounds__({bounds}){dims} {name}(\n'
          "        const in_t* __restrict__ A, const in_t* __restrict__ B, const in_t* __restrict__ BIAS,\n"
          "        out_t* __restrict__ C" + (", float* __restrict__ WS" if workspace else "")
          + "".join(f", {tensor_map_param(op)}" for op in maps) + ")")
        w.block()
        if split:    # splits are the slowest grid dimension; split kz runs K tiles [kt0, kt1)
            w("const int tid = threadIdx.x;\nconst int kz = blockIdx.x / NBLK;\nconst int lin = blockIdx.x - kz * NBLK;\n"
              "const int kt0 = kz * KTS;\nconst int kt1 = vx_min(KT, kt0 + KTS);")
        else:
            w("const int tid = threadIdx.x;\nconst int lin = blockIdx.x;")
        if smem:
            w("extern __shared__ __align__(128) unsigned char smem_raw[];  // SMEM_BYTES, dynamic")


@dataclass(frozen=True)
class Vortex(Dialect):
    def helpers(self) -> str:
        return BRANCHLESS_MINMAX.format(fn=self.fn) + KEEP.format(fn=self.fn)

    def includes(self, stages: int, tc: bool) -> str:
        return "#include <stdint.h>\n#include <vx_spawn.h>\n#include \"vxk_args.h\""

    def types(self, dtype: str) -> str:
        return "typedef float in_t;\ntypedef float out_t;"     # the host hands fp32 buffers

    def ring_type(self, dtype: str, tc: bool) -> str:
        return "float"

    def chunk_loop(self, loads: int, chunks: int, even: bool) -> str:
        """Threads past the last chunk clamp to it and write the same value again: SimX cannot run
        thread-divergent branches."""
        return (f"for (int l = 0; l < {loads}; ++l) {{ "
                + ("int e = tid + l * THREADS; " if even else f"int e = vx_min(tid + l * THREADS, {chunks - 1}); "))

    def kernel_open(self, w, name: str, min_blocks: int, tc: bool, split: bool, workspace: bool, smem: int,
                    maps: tuple[str, ...] = (), threads: str = "THREADS", cluster: int = 1) -> None:
        w.open("static void kernel_body(kernel_arg_t* arg)")
        w("const in_t* A = (const in_t*)(uintptr_t)arg->ptr[0];\nconst in_t* B = (const in_t*)(uintptr_t)arg->ptr[1];\n"
          "const in_t* BIAS = (const in_t*)(uintptr_t)arg->ptr[2];\nout_t* C = (out_t*)(uintptr_t)arg->ptr[3];")
        w("const int tid = threadIdx.x;\nconst int lin = (int)(arg->block_start + blockIdx.x);")
        if smem:
            w("unsigned char* smem_raw = (unsigned char*)__local_mem(SMEM_BYTES);")

    def kernel_close(self, w) -> None:
        w.close()
        w()
        w.open("int main()")
        w("kernel_arg_t* arg = (kernel_arg_t*)csr_read(VX_CSR_MSCRATCH);")
        w("return vx_spawn_threads(1, arg->grid_dim, arg->block_dim, (vx_kernel_func_cb)kernel_body, arg);")
        w.close()


CUDA = Cuda("cuda", "static __device__ __forceinline__", "#pragma unroll {n}", "__syncthreads();",
            guard_stores=True, tensor_cores=True, vector_loads=True, async_copy=True, split_k=True, tma=True)
VORTEX = Vortex("vortex", "static inline", "#pragma GCC unroll {n}", "__syncthreads();",
                guard_stores=False, tensor_cores=False, vector_loads=False, async_copy=False, split_k=False, tma=False)

# A CUDA tensor map (CUtensorMap: 128 opaque bytes, 64-byte aligned) passed by value in the kernel's parameter space,
# where the Tensor Memory Accelerator reads it (`__grid_constant__`: the kernel takes its address, never a copy)
TMAP_TYPE = "struct __align__(64) tmap_t { unsigned long long w_[16]; };"


def tensor_map_param(op: str) -> str:
    """The kernel parameter holding operand `op`'s tensor map."""
    return f"const __grid_constant__ tmap_t TMA_{op.upper()}"

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
