"""How much launch overhead CUDA events add to a kernel's time, against ncu's gpu__time_duration (issue 37: the speed
probe set event-timed candidates against the reference's trace time).

An empty kernel and a 4 MB float4 copy, each launched 10 times after a 256 MB fill that overwrites the L2, with CUDA
events around each launch, as `vxsynth.targets.cuda_worker` times candidates; prints the median and minimum of the
last 9. Run it a second time under ncu for the same launches' durations:

    python3 bench/event_bias.py
    ncu --metrics gpu__time_duration.sum --cache-control all -k regex:"empty_k|copy_k" python3 bench/event_bias.py

(bare GPU host with CuPy; raw output: bench/results/speed_probe_h200/event_bias.txt)
"""

import statistics

import cupy as cp

SRC = r'''extern "C" __global__ void empty_k() {}
extern "C" __global__ void copy_k(const float4* a, float4* b, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) b[i] = a[i]; }'''


def main() -> None:
    mod = cp.RawModule(code=SRC)
    empty, copy = mod.get_function("empty_k"), mod.get_function("copy_k")
    n = (4 << 20) // 16
    a, b = cp.ones(n * 4, cp.float32), cp.empty(n * 4, cp.float32)
    flush = cp.empty(256 << 20, dtype=cp.uint8)
    s, e = cp.cuda.Event(), cp.cuda.Event()
    for name, fn, args, grid in (("empty", empty, (), 1), ("copy4MB", copy, (a, b, cp.int32(n)), n // 256)):
        t = []
        for _ in range(10):
            flush.fill(1)
            s.record()
            fn((grid,), (256,), args)
            e.record()
            e.synchronize()
            t.append(cp.cuda.get_elapsed_time(s, e) * 1000)
        print(name, "event us median", round(statistics.median(t[1:]), 2), "min", round(min(t[1:]), 2))


if __name__ == "__main__":
    main()
