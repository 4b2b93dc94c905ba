/* Local-memory probe (vxsynth.simx.executor.SimxExecutor.local_memory): how much of the core's local memory keeps
 * distinct contents on this simulator. One thread; one probe word every STEP_WORDS words of the 2^LMEM_LOG_SIZE
 * bytes the configuration declares. Output (uint32): [k] = word 0 after writing probe word k (k >= 1; word 0 is
 * reset to MARK after each read), [n + i] = probe word i after all of them were written. No branch depends on a
 * thread, so the kernel runs on SimX without the Vortex LLVM. */
#include <stdint.h>
#include <VX_config.h>
#include <vx_spawn.h>
#include "vxk_args.h"
#define STEP_WORDS 16
#define MARK 0xC0DE0000u
#define BASE 0x5A000000u

static void kernel_body(kernel_arg_t *arg) {
    volatile uint32_t *lm = (volatile uint32_t *)csr_read(VX_CSR_LOCAL_MEM_BASE);
    uint32_t *out = (uint32_t *)(uintptr_t)arg->ptr[3];
    const uint32_t n = (1u << LMEM_LOG_SIZE) / 4 / STEP_WORDS;
    lm[0] = MARK;
    out[0] = MARK;
    for (uint32_t k = 1; k < n; ++k) {
        lm[k * STEP_WORDS] = BASE + k;
        out[k] = lm[0];
        lm[0] = MARK;
    }
    for (uint32_t i = 0; i < n; ++i) lm[i * STEP_WORDS] = BASE + i;
    for (uint32_t i = 0; i < n; ++i) out[n + i] = lm[i * STEP_WORDS];
}

int main() {
    kernel_arg_t *arg = (kernel_arg_t *)csr_read(VX_CSR_MSCRATCH);
    return vx_spawn_threads(1, arg->grid_dim, arg->block_dim, (vx_kernel_func_cb)kernel_body, arg);
}
