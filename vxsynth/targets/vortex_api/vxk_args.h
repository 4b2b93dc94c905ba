/* Argument block of every vxsynth Vortex kernel (one fixed layout; the host side fills it).
 * grid_dim/block_dim: the launch (1-D grid of blocks, 1-D blocks); block_start: first linear block of the
 * window this launch covers; ptr: device addresses of A (or X), B (or W), bias (0 when absent), output. */
#ifndef VXK_ARGS_H
#define VXK_ARGS_H
#include <stdint.h>
typedef struct {
    uint32_t grid_dim[3];
    uint32_t block_dim[3];
    uint32_t block_start;
    uint32_t reserved;
    uint64_t ptr[4];
} kernel_arg_t;
#endif
