/* Host-functional implementation of the Vortex v2.2 kernel API (vxsynth).
 *
 * vx_spawn_threads follows the v2.2 scheduler's rules: a block (group) must fit one core
 * (group_size <= NUM_WARPS * NUM_THREADS, else "error: group_size > threads_per_core"), warps_per_group =
 * ceil(group_size / NUM_THREADS), groups_per_core = NUM_WARPS / warps_per_group, and each resident group owns a
 * LOCAL_MEM_SIZE / groups_per_core slice of local memory through __local_group_id. Up to HOST_GROUPS groups run at
 * once, each thread of each group on its own host thread; vx_barrier is a real barrier over the group's threads.
 *
 * Lockstep check: the candidate is compiled with -fsanitize-coverage=trace-pc, so every basic block it enters
 * folds its address into a per-thread path hash. At every barrier and at the end of every block the lanes of each
 * warp (NUM_THREADS consecutive threads) must hold the same hash: lanes that took different paths would be a
 * thread-divergent branch, which SimX aborts on. The first one found is reported by vxh_divergence(). */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "vx_spawn.h"

#ifndef NUM_WARPS
#define NUM_WARPS 16
#endif
#ifndef NUM_THREADS
#define NUM_THREADS 16
#endif
#ifndef LOCAL_MEM_SIZE
#define LOCAL_MEM_SIZE 16384
#endif
#ifndef HOST_GROUPS
#define HOST_GROUPS 2
#endif

__thread dim3_t blockIdx;
__thread dim3_t threadIdx;
dim3_t gridDim;
dim3_t blockDim;
__thread uint32_t __local_group_id;
uint32_t __warps_per_group;

static const void *g_arg;
static unsigned char g_lmem[LOCAL_MEM_SIZE] __attribute__((aligned(64)));
static pthread_barrier_t g_bar[HOST_GROUPS];
static vx_kernel_func_cb g_fn;
static uint32_t g_total, g_groups, g_size;

void vxh_set_arg(const void *arg) { g_arg = arg; }

uintptr_t vxh_csr_read(int csr) {
    if (csr == VX_CSR_MSCRATCH) return (uintptr_t)g_arg;
    if (csr == VX_CSR_LOCAL_MEM_BASE) return (uintptr_t)g_lmem;
    fprintf(stderr, "vx_host: unsupported CSR 0x%x\n", csr);
    abort();
}

static __thread uint64_t t_path;        /* hash of the basic blocks this thread entered in its current block */
static __thread uint32_t t_lt, t_points;
static uint64_t g_path[HOST_GROUPS][2][NUM_WARPS * NUM_THREADS];
static int g_divergent;
static uint32_t g_div_block, g_div_warp, g_div_point;

void __sanitizer_cov_trace_pc(void) {
    t_path = (t_path ^ (uint64_t)(uintptr_t)__builtin_return_address(0)) * 0x100000001b3ULL;
}

/* Publish this thread's path, wait for the group, then each warp's first lane compares its lanes' paths. Parity
 * buffers: a lane can write the same parity again only after the next barrier, which its leader must reach first. */
static void lockstep_barrier(uint32_t slot) {
    uint32_t par = t_points++ & 1;
    g_path[slot][par][t_lt] = t_path;
    pthread_barrier_wait(&g_bar[slot]);
    if (t_lt % NUM_THREADS)
        return;
    uint32_t end = t_lt + NUM_THREADS < g_size ? t_lt + NUM_THREADS : g_size;
    for (uint32_t l = t_lt + 1; l < end; ++l) {
        if (g_path[slot][par][l] != g_path[slot][par][t_lt] && !__atomic_exchange_n(&g_divergent, 1, __ATOMIC_SEQ_CST)) {
            g_div_block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
            g_div_warp = t_lt / NUM_THREADS;
            g_div_point = t_points;
            break;
        }
    }
}

int vxh_divergence(char *msg, size_t n) {
    if (g_divergent)
        snprintf(msg, n, "thread-divergent branch: lanes of warp %u in block %u (window-relative) took different paths "
                 "before synchronisation point %u; SimX aborts on divergent branches", g_div_warp, g_div_block, g_div_point);
    return g_divergent;
}

void vx_barrier(int barrier_id, int num_warps) {
    (void)num_warps;
    lockstep_barrier((uint32_t)barrier_id);
}

static void *worker(void *p) {
    uint32_t id = (uint32_t)(uintptr_t)p, slot = id / g_size, lt = id % g_size;
    __local_group_id = slot;
    t_lt = lt;
    threadIdx.x = lt % blockDim.x;
    threadIdx.y = (lt / blockDim.x) % blockDim.y;
    threadIdx.z = lt / (blockDim.x * blockDim.y);
    for (uint32_t b = slot; b < g_total; b += g_groups) {
        blockIdx.x = b % gridDim.x;
        blockIdx.y = (b / gridDim.x) % gridDim.y;
        blockIdx.z = b / (gridDim.x * gridDim.y);
        t_path = 0;
        g_fn((void *)g_arg);
        lockstep_barrier(slot); /* the block is done before its local memory is reused */
    }
    return NULL;
}

int vx_spawn_threads(uint32_t dimension, const uint32_t *grid_dim, const uint32_t *block_dim,
                     vx_kernel_func_cb kernel_func, const void *arg) {
    uint32_t g[3] = {1, 1, 1}, b[3] = {1, 1, 1};
    for (uint32_t i = 0; i < dimension && i < 3; ++i) {
        g[i] = grid_dim[i];
        if (block_dim) b[i] = block_dim[i];
    }
    gridDim.x = g[0]; gridDim.y = g[1]; gridDim.z = g[2];
    blockDim.x = b[0]; blockDim.y = b[1]; blockDim.z = b[2];
    g_size = b[0] * b[1] * b[2];
    if (g_size > NUM_WARPS * NUM_THREADS) {
        printf("error: group_size > threads_per_core\n");
        return -1;
    }
    __warps_per_group = (g_size + NUM_THREADS - 1) / NUM_THREADS;
    uint32_t per_core = NUM_WARPS / __warps_per_group;
    g_total = g[0] * g[1] * g[2];
    g_groups = per_core < HOST_GROUPS ? per_core : HOST_GROUPS;
    if (g_groups > g_total) g_groups = g_total;
    if (g_total == 0) return 0;
    g_fn = kernel_func;
    g_arg = arg;
    uint32_t n = g_groups * g_size;
    pthread_t *th = calloc(n, sizeof *th);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 256 * 1024);
    for (uint32_t s = 0; s < g_groups; ++s) pthread_barrier_init(&g_bar[s], NULL, g_size);
    for (uint32_t i = 0; i < n; ++i) {
        if (pthread_create(&th[i], &attr, worker, (void *)(uintptr_t)i)) {
            fprintf(stderr, "vx_host: cannot start thread %u\n", i);
            return -2;
        }
    }
    for (uint32_t i = 0; i < n; ++i) pthread_join(th[i], NULL);
    for (uint32_t s = 0; s < g_groups; ++s) pthread_barrier_destroy(&g_bar[s]);
    free(th);
    return 0;
}
