/* vxsynth's own declarations of the Vortex v2.2 software scheduler API (vortex.md 1.1), shared by the RISC-V
 * cross-compile check (riscv/vx_intrinsics.h) and the host-functional executor (host/, implemented in vx_host.c). */
#ifndef VX_SPAWN_H
#define VX_SPAWN_H
#include <stdint.h>
#include "vx_intrinsics.h"
typedef union { struct { uint32_t x, y, z; }; uint32_t m[3]; } dim3_t;
extern __thread dim3_t blockIdx;
extern __thread dim3_t threadIdx;
extern dim3_t gridDim;
extern dim3_t blockDim;
extern __thread uint32_t __local_group_id;
extern uint32_t __warps_per_group;
typedef void (*vx_kernel_func_cb)(void *arg);
int vx_spawn_threads(uint32_t dimension, const uint32_t *grid_dim, const uint32_t *block_dim,
                     vx_kernel_func_cb kernel_func, const void *arg);
#define __local_mem(size) (void *)((int8_t *)csr_read(VX_CSR_LOCAL_MEM_BASE) + __local_group_id * (size))
#define __syncthreads() vx_barrier(__local_group_id, __warps_per_group)
#endif
