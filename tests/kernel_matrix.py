"""The problems and strategies the kernel tests run on both sides: the CPU matrix (`tests/test_kernels.py`, Vortex
on the host executor, rv32 and nvcc compiles) and the GPU one (`tests/test_gpu.py`, CUDA candidates against torch on
the H200). A plain module, not a test file: importing it collects no tests and needs no GPU."""

from __future__ import annotations

from vxsynth.kernels.problem import Conv, Gemm
from vxsynth.kernels.strategy import Strategy

PROBLEMS = {
    "linear_odd": (Gemm("addmm", 1, 37, 70, 45, (0, 45, 1), (0, 1, 45), True, "float32"), ["FP32", "TF32_FP16"]),
    "linear_m1": (Gemm("mm", 1, 1, 260, 64, (0, 64, 1), (0, 1, 64), False, "bfloat16"), ["BF16"]),
    "bmm_bcast": (Gemm("bmm", 8, 51, 40, 72, (51 * 72, 72, 1), (0, 40, 1), False, "bfloat16"), ["BF16"]),
    "bmm_kT": (Gemm("bmm", 4, 30, 33, 16, (16 * 30, 16, 1), (16 * 33, 1, 16), False, "float32"), ["FP32"]),
    "conv2d_c3": (Conv(2, 1, 3, 35, 29, 16, 7, 7, (2, 2), (3, 3), (1, 1), 1, False, "float32"), ["FP32", "TF32_FP16"]),
    "conv1d_k5": (Conv(1, 1, 64, 1, 16, 96, 1, 5, (1, 1), (0, 2), (1, 1), 1, True, "float32"), ["TF32_FP16"]),
    "tiny_odd": (Gemm("addmm", 1, 1, 13, 3, (0, 3, 1), (0, 1, 3), True, "float32"), ["FP32", "TF32_FP16"]),
    "linear_skinny": (Gemm("addmm", 1, 51, 96, 200, (0, 200, 1), (0, 1, 200), True, "bfloat16"), ["BF16"]),
    "bmm_kmajor": (Gemm("bmm", 4, 51, 40, 64, (51 * 64, 64, 1), (40 * 64, 1, 64), False, "bfloat16"), ["BF16"]),
    "bmm_tall": (Gemm("bmm", 2, 256, 64, 192, (256 * 192, 192, 1), (64 * 192, 1, 192), False, "bfloat16"), ["BF16"]),
    # two images, two groups of 32 channels (a whole number of K tiles per filter tap), stride, padding and dilation
    "conv2d_groups": (Conv(2, 2, 64, 9, 11, 24, 3, 3, (2, 1), (1, 2), (1, 2), 2, True, "float32"), ["FP32", "TF32_FP16"]),
}
CLUSTER_ONLY = {"bmm_tall"}     # problems for the cluster strategies (several M tiles, 3-D maps): only those run there
NHWC_ONLY = {"conv2d_groups"}   # problems for the NHWC strategies only (their rings read the image by filter-tap steps)
STRATEGIES = [
    Strategy(),
    Strategy(block_m=32, block_n=32, block_k=8, thread_m=2, thread_n=2, mapping="strided", stage_a=False),
    Strategy(block_m=32, block_n=64, block_k=16, thread_m=4, thread_n=2, double_buffer=True, vector=4, mapping="swizzled", raster="col", unroll=4),
    Strategy(tensor_core=True, block_k=16),
    Strategy(tensor_core=True, block_m=32, block_n=32, block_k=32, thread_m=2, thread_n=4, double_buffer=True, vector=2),
    Strategy(conv_form="direct", stage_a=False, stage_b=False, block_m=32, block_n=16, thread_m=2, thread_n=1, unroll=2),
    # asynchronous stage rings (cp.async on CUDA, the same ring with plain loads on Vortex)
    Strategy(block_m=32, block_n=32, block_k=8, thread_m=2, thread_n=4, stages=3, vector=2, min_blocks=4),
    Strategy(block_m=32, block_n=32, block_k=16, thread_m=1, thread_n=4, stages=4, mapping="strided", raster="col"),
    # tensor cores with a ring, idle (load-only) warps, a warp grid, launch-time shared memory
    Strategy(tensor_core=True, block_m=32, block_n=32, block_k=16, thread_m=2, thread_n=2, stages=4, vector=2),
    Strategy(tensor_core=True, block_m=64, block_n=32, block_k=16, thread_m=4, thread_n=4, stages=2, vector=4,
             warps_m=2, smem_pad=40000),
    # split-K (fp32 outputs): partial sums added atomically, with plain staging and with a ring (uneven last split)
    Strategy(block_m=32, block_n=32, block_k=8, thread_m=2, thread_n=2, split_k=3),
    Strategy(block_m=32, block_n=32, block_k=8, thread_m=2, thread_n=4, stages=3, vector=2, split_k=2, raster="col"),
    # split-K into 16-bit outputs (fp32 partial tiles in a workspace, the last split adds them): WMMA with plain
    # staging (uneven last split) and mma.sync with a ring of 16-byte copies (8 16-bit elements); the two split-K
    # strategies above take this path on BF16
    Strategy(tensor_core=True, block_m=32, block_n=32, block_k=16, thread_m=2, thread_n=2, split_k=3),
    Strategy(tensor_core=True, mma="sync", block_m=32, block_n=32, block_k=16, thread_m=2, thread_n=4, stages=3,
             vector=8, split_k=2),
    # convolutions on NHWC activations and KRSC weights (cuDNN's nhwckrsc kernels): scalar, register-staged channel
    # vectors, and a tensor-core ring of 16-byte channel copies with split-K
    Strategy(layout="nhwc"),
    Strategy(layout="nhwc", block_m=32, block_n=32, block_k=8, thread_m=2, thread_n=4, double_buffer=True, vector=4),
    Strategy(layout="nhwc", tensor_core=True, block_m=64, block_n=32, block_k=16, thread_m=4, thread_n=4, stages=3,
             vector=4, split_k=2),
    # mma.sync + ldmatrix (inline PTX from the sandbox's allowlist): plain staging, register prefetch, rings (B along N
    # and A along M: ldmatrix .trans or scalar loads), idle warps, a warp grid, NHWC with split-K
    Strategy(tensor_core=True, mma="sync", block_k=16),
    Strategy(tensor_core=True, mma="sync", block_m=32, block_n=32, block_k=32, thread_m=2, thread_n=4, double_buffer=True, vector=2),
    Strategy(tensor_core=True, mma="sync", block_m=32, block_n=32, block_k=16, thread_m=2, thread_n=2, stages=4, vector=2),
    Strategy(tensor_core=True, mma="sync", block_m=64, block_n=32, block_k=16, thread_m=4, thread_n=4, stages=2, vector=4,
             warps_m=2),
    Strategy(layout="nhwc", tensor_core=True, mma="sync", block_m=64, block_n=32, block_k=16, thread_m=4, thread_n=4,
             stages=3, vector=4, split_k=2),
    # a deep ring (cuBLAS's sm90 GEMMs keep up to 15 K tiles in flight) deeper than most problems' K: the prologue
    # fills what exists; the Vortex half's ring is cut to its core's local memory
    Strategy(tensor_core=True, mma="sync", block_m=32, block_n=32, block_k=16, thread_m=2, thread_n=4, stages=12,
             vector=4, split_k=2),
    # a skinny GEMM's whole-M tile (speed.whole_m): all rows in one tile, a narrow N tile, a 12-deep ring
    Strategy(tensor_core=True, mma="sync", block_m=64, block_n=16, block_k=32, thread_m=1, thread_n=4, stages=12,
             vector=8),
    # mma.sync on warp tiles (each warp's fragments loaded once per K step): 2x1 with plain staging, 2x1 on a ring, 2x2
    # on NHWC with split-K
    Strategy(tensor_core=True, mma="tile", block_m=64, block_n=64, block_k=16, thread_m=4, thread_n=4, warps_m=2),
    Strategy(tensor_core=True, mma="tile", block_m=64, block_n=32, block_k=16, thread_m=4, thread_n=4, stages=3, vector=4,
             warps_m=2),
    Strategy(layout="nhwc", tensor_core=True, mma="tile", block_m=64, block_n=64, block_k=8, thread_m=4, thread_n=8,
             stages=3, vector=4, split_k=2, warps_m=2),
    # swizzled rings instead of padded ones (mma=sync BF16/TF32 rows of 32-64 bytes, ldmatrix .trans on B along N;
    # warp tiles with 64-128-byte rows)
    Strategy(tensor_core=True, mma="sync", block_m=32, block_n=32, block_k=16, thread_m=2, thread_n=2, stages=4, vector=2,
             smem_swizzle=True),
    Strategy(tensor_core=True, mma="tile", block_m=64, block_n=64, block_k=32, thread_m=4, thread_n=4, stages=3, vector=4,
             warps_m=2, smem_swizzle=True),
    # Hopper warpgroup MMA (wgmma) from a 128-byte-swizzled cp.async ring: one warpgroup (fp32 4-element and 16-bit
    # 8-element copies), two along M, two along N with split-K into a 16-bit output, NHWC TF32 with split-K
    Strategy(tensor_core=True, mma="wgmma", block_m=64, block_n=64, block_k=64, thread_m=4, thread_n=4, stages=3, vector=4),
    Strategy(tensor_core=True, mma="wgmma", block_m=128, block_n=64, block_k=64, thread_m=8, thread_n=4, stages=2, vector=8),
    Strategy(tensor_core=True, mma="wgmma", block_m=64, block_n=128, block_k=64, thread_m=4, thread_n=8, stages=3, vector=8,
             split_k=2),
    Strategy(layout="nhwc", tensor_core=True, mma="wgmma", block_m=64, block_n=128, block_k=32, thread_m=8, thread_n=8,
             stages=4, vector=4, split_k=2),
    # the same ring filled by the Tensor Memory Accelerator: both GEMM operands (3-D maps for a batched A, a K tail
    # past the tensor's end), two warpgroups along M, and convolution weights by TMA beside the image by cp.async
    Strategy(tensor_core=True, mma="wgmma", tma=True, block_m=64, block_n=64, block_k=64, thread_m=4, thread_n=4, stages=3,
             vector=8),
    Strategy(tensor_core=True, mma="wgmma", tma=True, block_m=128, block_n=32, block_k=64, thread_m=4, thread_n=4, stages=4,
             vector=8),
    Strategy(layout="nhwc", tensor_core=True, mma="wgmma", tma=True, block_m=64, block_n=64, block_k=32, thread_m=4,
             thread_n=8, stages=3, vector=4, split_k=2),
    # warp-specialized: a producer warpgroup fills both operands' slots by TMA while the consumers compute; one
    # consumer warpgroup with a 4-slot ring, two along M with split-K into a 16-bit output
    Strategy(tensor_core=True, mma="wgmma", tma=True, warp_specialized=True, block_m=64, block_n=32, block_k=64,
             thread_m=4, thread_n=4, stages=4, vector=8),
    Strategy(tensor_core=True, mma="wgmma", tma=True, warp_specialized=True, block_m=128, block_n=64, block_k=64,
             thread_m=8, thread_n=4, stages=3, vector=8, split_k=2),
    # clusters: blocks along the raster's fast dimension share one operand's tile, each loading its share and
    # multicasting it: A along N (raster row), 2-D and batched (3-D maps), with and without a producer warpgroup; B along
    # M (raster col), two warpgroups along M with split-K into a 16-bit output, and 4 blocks of 8 B rows each
    Strategy(tensor_core=True, mma="wgmma", tma=True, cluster=2, block_m=64, block_n=16, block_k=64, thread_m=2,
             thread_n=4, stages=3, vector=8),
    Strategy(tensor_core=True, mma="wgmma", tma=True, warp_specialized=True, cluster=2, block_m=64, block_n=16, block_k=64,
             thread_m=2, thread_n=4, stages=4, vector=8),
    Strategy(tensor_core=True, mma="wgmma", tma=True, cluster=2, raster="col", block_m=128, block_n=32, block_k=64,
             thread_m=4, thread_n=4, stages=3, vector=8, split_k=2),
    Strategy(tensor_core=True, mma="wgmma", tma=True, warp_specialized=True, cluster=4, raster="col", block_m=64,
             block_n=32, block_k=64, thread_m=4, thread_n=4, stages=3, vector=8, split_k=2),
    # one wgmma group left pending per K tile (slots refilled or freed a tile later): the cp.async ring of NHWC TF32
    # with split-K, the TMA ring at its minimum of 3 slots, warp-specialized with 2 slots, and in clusters
    Strategy(layout="nhwc", tensor_core=True, mma="wgmma", block_m=64, block_n=128, block_k=32, thread_m=8, thread_n=8,
             stages=3, vector=4, split_k=2, wgmma_pending=1),
    Strategy(tensor_core=True, mma="wgmma", tma=True, block_m=128, block_n=32, block_k=64, thread_m=4, thread_n=4, stages=3,
             vector=8, wgmma_pending=1),
    Strategy(tensor_core=True, mma="wgmma", tma=True, warp_specialized=True, block_m=64, block_n=32, block_k=64,
             thread_m=4, thread_n=4, stages=2, vector=8, wgmma_pending=1),
    Strategy(tensor_core=True, mma="wgmma", tma=True, warp_specialized=True, cluster=2, raster="col", block_m=128,
             block_n=32, block_k=64, thread_m=4, thread_n=4, stages=2, vector=8, wgmma_pending=1),
    # A's fragments loaded straight from global memory, B staged (cuDNN's sm80 `indexed_wo_smem` xmma kernels, the 7x7
    # stem's reference): mma.sync with B double-buffered through registers, warp tiles on NHWC
    Strategy(tensor_core=True, mma="sync", block_m=64, block_n=32, block_k=16, thread_m=4, thread_n=4, warps_m=2,
             stage_a=False, double_buffer=True),
    Strategy(layout="nhwc", tensor_core=True, mma="tile", block_m=64, block_n=32, block_k=16, thread_m=4, thread_n=4,
             warps_m=4, stage_a=False, vector=4),
    # xmma's own sm80 tile (128x64x32, 5 stages, 2x2 warps) under one block's registers (strategy.one_block_registers:
    # K steps unrolled, fragments loaded ahead); its Vortex half takes a finer K step to fit the core's local memory
    Strategy(tensor_core=True, mma="tile", block_m=128, block_n=64, block_k=32, thread_m=8, thread_n=8, stages=5,
             vector=4, warps_m=2, min_blocks=1, unroll=8),
]

# rejected at racecheck in the H200 fidelity run (bench/results/fidelity_h200_whole_space_log.txt, conv2d 3to1152 round 20): 256
# threads for the 64 chunks of a B tile, each thread past the tile copying its last chunk again
RACY = {"block_k": 8, "block_m": 64, "block_n": 32, "mapping": "coalesced", "min_blocks": 2, "stages": 3,
        "thread_m": 1, "thread_n": 8, "vector": 4}


def in_matrix(name: str, s: Strategy) -> bool:
    """Strategy `s` belongs in the matrix of problem `name` (where it is also runnable)."""
    if name in NHWC_ONLY:
        return s.layout == "nhwc"
    return s.cluster > 1 or name not in CLUSTER_ONLY
