/* Host-side driver of the host-functional Vortex executor (vxsynth).
 * usage: driver OUT OUT_ELEMS THREADS WINDOWS IN0 IN1 BIAS|-
 *   WINDOWS: comma-separated start:count ranges of linear block ids; each range is one launch.
 * Inputs are raw float32 files; the output buffer is filled with NaN before the first launch and sits between two
 * guard zones of GUARD canary words, checked after the last launch (exit status 5 when a kernel wrote outside);
 * exit status 6 when lanes of a warp took different paths (vx_host.c, lockstep check). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "vxk_args.h"

#define GUARD 4096
#define CANARY 0x7FA5C3E1u

int vx_kernel_main(void);
void vxh_set_arg(const void *arg);
int vxh_divergence(char *msg, size_t n);

static float *load(const char *path) {
    if (!strcmp(path, "-")) return NULL;
    FILE *f = fopen(path, "rb");
    if (!f) { perror(path); exit(3); }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    float *p = malloc(n > 0 ? n : 4);
    if (fread(p, 1, n, f) != (size_t)n) { perror(path); exit(3); }
    fclose(f);
    return p;
}

int main(int argc, char **argv) {
    if (argc != 8) { fprintf(stderr, "usage: driver OUT OUT_ELEMS THREADS WINDOWS IN0 IN1 BIAS|-\n"); return 2; }
    long n = atol(argv[2]);
    uint32_t *buf = malloc((n + 2 * GUARD) * sizeof(float));
    if (!buf) { fprintf(stderr, "cannot allocate the output buffer\n"); return 3; }
    for (long i = 0; i < n + 2 * GUARD; ++i) buf[i] = CANARY;
    float *out = (float *)(buf + GUARD);
    for (long i = 0; i < n; ++i) out[i] = NAN;
    kernel_arg_t arg;
    memset(&arg, 0, sizeof arg);
    arg.ptr[0] = (uint64_t)(uintptr_t)load(argv[5]);
    arg.ptr[1] = (uint64_t)(uintptr_t)load(argv[6]);
    arg.ptr[2] = (uint64_t)(uintptr_t)load(argv[7]);
    arg.ptr[3] = (uint64_t)(uintptr_t)out;
    arg.block_dim[0] = (uint32_t)atol(argv[3]); arg.block_dim[1] = arg.block_dim[2] = 1;
    arg.grid_dim[1] = arg.grid_dim[2] = 1;
    char *spec = strdup(argv[4]);
    for (char *tok = strtok(spec, ","); tok; tok = strtok(NULL, ",")) {
        unsigned start, count;
        if (sscanf(tok, "%u:%u", &start, &count) != 2) { fprintf(stderr, "bad window %s\n", tok); return 2; }
        arg.block_start = start;
        arg.grid_dim[0] = count;
        vxh_set_arg(&arg);
        int rc = vx_kernel_main();
        if (rc) { fprintf(stderr, "kernel returned %d\n", rc); return 4; }
    }
    char why[256];
    if (vxh_divergence(why, sizeof why)) { fprintf(stderr, "%s\n", why); return 6; }
    for (long i = 0; i < GUARD; ++i) {
        if (buf[i] != CANARY || buf[GUARD + n + i] != CANARY) {
            fprintf(stderr, "guard zone: the kernel wrote %s its output buffer\n", buf[i] != CANARY ? "before" : "past");
            return 5;
        }
    }
    FILE *f = fopen(argv[1], "wb");
    if (!f || fwrite(out, sizeof(float), n, f) != (size_t)n) { perror(argv[1]); return 3; }
    fclose(f);
    printf("VXH: ok windows=%s\n", argv[4]);
    return 0;
}
