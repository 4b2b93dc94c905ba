/* vxsynth's own declarations of the Vortex v2.2 kernel intrinsics, for cross-compiling candidates with a stock
 * RISC-V gcc. Encodings: custom-0 opcode 0x0b, funct7 0; funct3 0 tmc, 1 wspawn, 2 split, 3 join, 4 bar, 5 pred
 * (vortex.md 1.3 and 4.4). CSR numbers of the Vortex-specific CSRs are placeholders: the real build uses the
 * installation's own headers. */
#ifndef VX_INTRINSICS_H
#define VX_INTRINSICS_H
#define VX_CSR_MSCRATCH 0x340
#define VX_CSR_LOCAL_MEM_BASE 0xFC3
#define csr_read(csr) ({ unsigned __r; __asm__ __volatile__("csrr %0, %1" : "=r"(__r) : "i"(csr)); __r; })
static inline void vx_tmc(int mask) { __asm__ volatile(".insn r 0x0b, 0, 0, x0, %0, x0" ::"r"(mask)); }
static inline int vx_split(int pred) { int r; __asm__ volatile(".insn r 0x0b, 2, 0, %0, %1, x0" : "=r"(r) : "r"(pred)); return r; }
static inline void vx_join(int sp) { __asm__ volatile(".insn r 0x0b, 3, 0, x0, %0, x0" ::"r"(sp)); }
static inline void vx_barrier(int id, int num_warps) { __asm__ volatile(".insn r 0x0b, 4, 0, x0, %0, %1" ::"r"(id), "r"(num_warps)); }
#endif
