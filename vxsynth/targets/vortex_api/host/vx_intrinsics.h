/* Host-functional Vortex v2.2 intrinsics (vxsynth): CSR reads and barriers, implemented in vx_host.c. */
#ifndef VX_INTRINSICS_H
#define VX_INTRINSICS_H
#include <stdint.h>
#define VX_CSR_MSCRATCH 0x340
#define VX_CSR_LOCAL_MEM_BASE 0xFC3
uintptr_t vxh_csr_read(int csr);
#define csr_read(csr) vxh_csr_read(csr)
void vx_barrier(int barrier_id, int num_warps);
#endif
