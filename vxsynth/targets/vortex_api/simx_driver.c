/* Host driver that runs a vxsynth Vortex candidate on SimX through the Vortex v2.2 runtime (vortex.h).
 * usage: simx_driver KERNEL.vxbin OUT OUT_ELEMS THREADS WINDOWS TIMEOUT_MS IN0 IN1 BIAS|-
 * Same arguments and file formats as the host-functional driver; the output buffer is filled with NaN first.
 * Counters: build SimX with PERF_ENABLE and set VORTEX_PROFILING. SimX resets them at every launch, so they are
 * dumped after each window, between "VXSYNTH-WINDOW start count" markers; "VXSYNTH-END" precedes vx_dev_close's
 * own dump (a repeat of the last window). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vortex.h>
#include "vxk_args.h"

#define CHECK(x) do { int rc_ = (x); if (rc_) { fprintf(stderr, "error %d: %s\n", rc_, #x); exit(5); } } while (0)

static void *load(const char *path, long *n) {
    *n = 0;
    if (!strcmp(path, "-")) return NULL;
    FILE *f = fopen(path, "rb");
    if (!f) { perror(path); exit(3); }
    fseek(f, 0, SEEK_END);
    *n = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *p = malloc(*n > 0 ? *n : 4);
    if (fread(p, 1, *n, f) != (size_t)*n) { perror(path); exit(3); }
    fclose(f);
    return p;
}

int main(int argc, char **argv) {
    if (argc != 10) { fprintf(stderr, "usage: simx_driver KERNEL OUT OUT_ELEMS THREADS WINDOWS TIMEOUT_MS IN0 IN1 BIAS|-\n"); return 2; }
    long n_out = atol(argv[3]);
    uint64_t timeout = (uint64_t)atoll(argv[6]);
    vx_device_h dev;
    CHECK(vx_dev_open(&dev));
    kernel_arg_t arg;
    memset(&arg, 0, sizeof arg);
    vx_buffer_h bufs[4] = {0, 0, 0, 0};
    for (int i = 0; i < 3; ++i) {
        long n;
        void *host = load(argv[7 + i], &n);
        if (!host) continue;
        CHECK(vx_mem_alloc(dev, n, VX_MEM_READ, &bufs[i]));
        CHECK(vx_copy_to_dev(bufs[i], host, 0, n));
        CHECK(vx_mem_address(bufs[i], &arg.ptr[i]));
        free(host);
    }
    float *out = malloc(n_out * sizeof(float));
    for (long i = 0; i < n_out; ++i) out[i] = NAN;
    CHECK(vx_mem_alloc(dev, n_out * sizeof(float), VX_MEM_READ_WRITE, &bufs[3]));
    CHECK(vx_copy_to_dev(bufs[3], out, 0, n_out * sizeof(float)));
    CHECK(vx_mem_address(bufs[3], &arg.ptr[3]));
    vx_buffer_h krnl;
    CHECK(vx_upload_kernel_file(dev, argv[1], &krnl));
    arg.block_dim[0] = (uint32_t)atol(argv[4]); arg.block_dim[1] = arg.block_dim[2] = 1;
    arg.grid_dim[1] = arg.grid_dim[2] = 1;
    char *spec = strdup(argv[5]);
    for (char *tok = strtok(spec, ","); tok; tok = strtok(NULL, ",")) {
        unsigned start, count;
        if (sscanf(tok, "%u:%u", &start, &count) != 2) { fprintf(stderr, "bad window %s\n", tok); return 2; }
        arg.block_start = start;
        arg.grid_dim[0] = count;
        vx_buffer_h args;
        CHECK(vx_upload_bytes(dev, &arg, sizeof arg, &args));
        CHECK(vx_start(dev, krnl, args));
        CHECK(vx_ready_wait(dev, timeout));
        printf("VXSYNTH-WINDOW %u %u\n", start, count);
        CHECK(vx_dump_perf(dev, stdout));
        fflush(stdout);
        CHECK(vx_mem_free(args));
    }
    CHECK(vx_copy_from_dev(out, bufs[3], 0, n_out * sizeof(float)));
    FILE *f = fopen(argv[2], "wb");
    if (!f || fwrite(out, sizeof(float), n_out, f) != (size_t)n_out) { perror(argv[2]); return 3; }
    fclose(f);
    for (int i = 0; i < 4; ++i) if (bufs[i]) vx_mem_free(bufs[i]);
    vx_mem_free(krnl);
    printf("VXSYNTH-END\n");
    fflush(stdout);
    vx_dev_close(dev);
    printf("PASSED!\n");
    return 0;
}
