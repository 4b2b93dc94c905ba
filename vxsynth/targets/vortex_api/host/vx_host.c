/* Host-functional implementation of the Vortex v2.2 kernel API (vxsynth).
 *
 * vx_spawn_threads follows the v2.2 scheduler's rules: a block (group) must fit one core
 * (group_size <= NUM_WARPS * NUM_THREADS, else "error: group_size > threads_per_core"), warps_per_group =
 * ceil(group_size / NUM_THREADS), groups_per_core = NUM_WARPS / warps_per_group, and each resident group owns a
 * LOCAL_MEM_SIZE / groups_per_core slice of local memory through __local_group_id. Up to HOST_GROUPS groups run at
 * once, one host thread each. The threads of a group are user-level contexts of that host thread: each runs until
 * its next vx_barrier (or the end of the block), then the next one does; the barrier opens once every thread of
 * the group has reached it. Phases run in thread order, then in reverse order, alternately, so a read of another
 * thread's local memory not ordered by a barrier sees the wrong value in one of the two orders. (One host thread
 * per Vortex thread spent seconds per block in the kernel's barriers; ucontext's swapcontext, a system call per
 * switch. vxh_switch saves only what the x86-64 ABI says a call preserves.)
 *
 * Lockstep check: the candidate is compiled with -fsanitize-coverage=trace-pc, so every basic block it enters
 * folds its address into a per-thread path hash. At every barrier and at the end of every block the lanes of each
 * warp (NUM_THREADS consecutive threads) must hold the same hash: lanes that took different paths would be a
 * thread-divergent branch, which SimX aborts on. So must the count of barriers each thread reached. The first
 * mismatch found is reported by vxh_divergence(). */
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
static vx_kernel_func_cb g_fn;
static uint32_t g_total, g_groups, g_size;

void vxh_set_arg(const void *arg) { g_arg = arg; }

uintptr_t vxh_csr_read(int csr) {
    if (csr == VX_CSR_MSCRATCH) return (uintptr_t)g_arg;
    if (csr == VX_CSR_LOCAL_MEM_BASE) return (uintptr_t)g_lmem;
    fprintf(stderr, "vx_host: unsupported CSR 0x%x\n", csr);
    abort();
}

#define STACK (256 * 1024)
#if !defined(__x86_64__)
#error "vx_host.c: the context switch is x86-64 only (so is the jail's seccomp filter)"
#endif

/* vxh_switch(&save, next): push the callee-saved registers, store the stack pointer in *save, load next, pop. */
void vxh_switch(void **save, void *next);
__asm__(".text\n.p2align 4\n.type vxh_switch,@function\nvxh_switch:\n"
        "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
        "  movq %rsp, (%rdi)\n  movq %rsi, %rsp\n"
        "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n  ret\n"
        ".size vxh_switch, .-vxh_switch\n");

typedef struct {
    void *sp;                  /* saved stack pointer while switched out */
    uint64_t path;             /* hash of the basic blocks this thread entered in its current block */
    int done;                  /* returned from the kernel function for the current block */
    char *stack;
} vthread_t;

typedef struct {               /* one resident group: its host thread's scheduler and the group's threads */
    uint32_t slot, points;
    void *sched;
    vthread_t *th;
} group_t;

static __thread group_t *t_group;
static __thread vthread_t *t_cur;
static uint64_t t_none;        /* path sink for basic blocks entered outside a kernel thread */
static __thread uint64_t *t_path = &t_none;     /* the running thread's path hash */
static int g_divergent;
static uint32_t g_div_block, g_div_warp, g_div_point;
static const char *g_div_kind = "";

void __sanitizer_cov_trace_pc(void) {
    *t_path = (*t_path ^ (uint64_t)(uintptr_t)__builtin_return_address(0)) * 0x100000001b3ULL;
}

static void diverged(const char *kind, uint32_t warp, uint32_t point) {
    if (__atomic_exchange_n(&g_divergent, 1, __ATOMIC_SEQ_CST))
        return;
    g_div_kind = kind;
    g_div_block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    g_div_warp = warp;
    g_div_point = point;
}

int vxh_divergence(char *msg, size_t n) {
    if (g_divergent)
        snprintf(msg, n, "thread-divergent branch: lanes of warp %u in block %u (window-relative) %s before "
                 "synchronisation point %u; SimX aborts on divergent branches", g_div_warp, g_div_block, g_div_kind,
                 g_div_point);
    return g_divergent;
}

void vx_barrier(int barrier_id, int num_warps) {
    (void)barrier_id; (void)num_warps;
    vxh_switch(&t_cur->sp, t_group->sched);          /* back to the scheduler: this thread has arrived */
}

static void entry(void) {                            /* a thread's first frame (never returns) */
    g_fn((void *)g_arg);
    t_cur->done = 1;
    vxh_switch(&t_cur->sp, t_group->sched);
    abort();                                         /* a finished thread is never switched to */
}

/* A fresh thread: a stack that vxh_switch's pops and ret turn into a call of entry (rsp = 8 mod 16 there). */
static void fresh(vthread_t *v) {
    uintptr_t *sp = (uintptr_t *)(((uintptr_t)v->stack + STACK) & ~(uintptr_t)15);
    *--sp = 0;                                       /* entry's return address: none */
    *--sp = (uintptr_t)entry;
    for (int i = 0; i < 6; ++i) *--sp = 0;          /* rbp rbx r12-r15 */
    v->sp = sp;
    v->path = 0;
    v->done = 0;
}

/* Run every thread of the group to its next barrier (or its end), in `reverse` order or not; then compare. */
static int phase(group_t *g, int reverse) {
    uint32_t arrived = 0, finished = 0;
    for (uint32_t i = 0; i < g_size; ++i) {
        uint32_t lt = reverse ? g_size - 1 - i : i;
        vthread_t *v = &g->th[lt];
        if (v->done) { ++finished; continue; }
        threadIdx.x = lt % blockDim.x;
        threadIdx.y = (lt / blockDim.x) % blockDim.y;
        threadIdx.z = lt / (blockDim.x * blockDim.y);
        t_cur = v;
        t_path = &v->path;
        vxh_switch(&g->sched, v->sp);
        t_path = &t_none;
        v->done ? ++finished : ++arrived;
    }
    ++g->points;
    for (uint32_t w = 0; w * NUM_THREADS < g_size; ++w) {
        uint32_t first = w * NUM_THREADS, end = first + NUM_THREADS < g_size ? first + NUM_THREADS : g_size;
        for (uint32_t l = first + 1; l < end; ++l) {
            if (g->th[l].done != g->th[first].done) {
                diverged("reached different numbers of barriers", w, g->points);
                break;
            }
            if (g->th[l].path != g->th[first].path) {
                diverged("took different paths", w, g->points);
                break;
            }
        }
    }
    if (arrived && finished) {                       /* a barrier no thread past its end can open: SimX would hang */
        diverged("reached different numbers of barriers", 0, g->points);
        return 0;
    }
    return arrived > 0;
}

static void *worker(void *p) {
    group_t *g = p;
    t_group = g;
    __local_group_id = g->slot;
    for (uint32_t b = g->slot; b < g_total; b += g_groups) {
        blockIdx.x = b % gridDim.x;
        blockIdx.y = (b / gridDim.x) % gridDim.y;
        blockIdx.z = b / (gridDim.x * gridDim.y);
        for (uint32_t lt = 0; lt < g_size; ++lt)
            fresh(&g->th[lt]);
        int reverse = 0;
        while (phase(g, reverse))
            reverse = !reverse;
        if (g_divergent)
            break;
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
    group_t grp[HOST_GROUPS];
    pthread_t host[HOST_GROUPS];
    for (uint32_t s = 0; s < g_groups; ++s) {
        grp[s] = (group_t){.slot = s, .th = calloc(g_size, sizeof(vthread_t))};
        if (!grp[s].th) { fprintf(stderr, "vx_host: cannot allocate group %u\n", s); return -2; }
        for (uint32_t lt = 0; lt < g_size; ++lt)
            if (!(grp[s].th[lt].stack = malloc(STACK))) { fprintf(stderr, "vx_host: cannot allocate a stack\n"); return -2; }
    }
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 256 * 1024);
    for (uint32_t s = 0; s < g_groups; ++s) {
        if (pthread_create(&host[s], &attr, worker, &grp[s])) {
            fprintf(stderr, "vx_host: cannot start the host thread of group %u\n", s);
            return -2;
        }
    }
    for (uint32_t s = 0; s < g_groups; ++s) pthread_join(host[s], NULL);
    for (uint32_t s = 0; s < g_groups; ++s) {
        for (uint32_t lt = 0; lt < g_size; ++lt) free(grp[s].th[lt].stack);
        free(grp[s].th);
    }
    return 0;
}
