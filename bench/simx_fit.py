"""The runs the SimX cost model (`vxsynth.simx.executor`: FIXED_K, PER_OUT_K, CONV2D, PROLOGUE, IPC_FIT, IPC_SPILL)
was fitted on: small GEMMs and convolutions over thread tiles, K steps and staging, one block each on the base
configuration. Prints per run the instructions and cycles per block, measured and predicted, their ratio, IPC and
simulation seconds per million cycles. Needs a built SimX (VORTEX_HOME, TOOLDIR).

usage: python bench/simx_fit.py [RUN_INDEX...] > bench/results/simx_fit.txt
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from vxsynth.kernels import tensors as T  # noqa: E402
from vxsynth.kernels.candidate import make  # noqa: E402
from vxsynth.kernels.problem import Conv, Gemm  # noqa: E402
from vxsynth.kernels.strategy import Strategy  # noqa: E402
from vxsynth.simx.executor import SimxExecutor, cycles_per_block, instrs_per_block, measured_per_block  # noqa: E402
from vxsynth.simx.install import detect  # noqa: E402
from vxsynth.targets.vortex_host import lmem_per_block  # noqa: E402

G64 = Gemm("addmm", 1, 64, 64, 64, (0, 64, 1), (0, 1, 64), True, "float32")
G256 = Gemm("addmm", 1, 64, 128, 256, (0, 256, 1), (0, 1, 256), True, "float32")
RUNS = [
    (Gemm("addmm", 1, 64, 128, 64, (0, 64, 1), (0, 1, 64), True, "float32"), Strategy(), "FP32"),
    (G256, Strategy(), "FP32"),
    (G256, Strategy(block_m=32, block_n=32, thread_m=2, thread_n=2), "FP32"),
    (Gemm("bmm", 2, 51, 64, 72, (3672, 72, 1), (0, 64, 1), False, "bfloat16"), Strategy(block_m=16, block_n=32, thread_m=1, thread_n=2), "BF16"),
    (G256, Strategy(block_m=32, block_n=64, stage_a=False, stage_b=False), "FP32"),
    (Conv(1, 1, 64, 1, 16, 96, 1, 5, (1, 1), (0, 2), (1, 1), 1, True, "float32"), Strategy(block_m=16, block_n=16, thread_m=1, thread_n=1), "TF32_FP16"),
    (Conv(2, 1, 8, 12, 16, 16, 3, 3, (1, 1), (1, 1), (1, 1), 1, True, "float32"), Strategy(block_m=16, block_n=32, thread_m=2, thread_n=2), "TF32_FP16"),
    (G64, Strategy(block_k=4, thread_m=8, thread_n=4), "FP32"),
    (G64, Strategy(block_k=4), "FP32"),
    (G64, Strategy(block_k=8), "FP32"),
    (G64, Strategy(thread_m=8, thread_n=4), "FP32"),
    (G64, Strategy(thread_m=8, thread_n=8), "FP32"),
    (G64, Strategy(block_m=32, block_n=32, thread_m=2, thread_n=2), "FP32"),
    (G64, Strategy(block_k=32), "FP32"),
    # held out from the fit of the gather term: convolutions whose tiles outgrow SimX's local memory (default tiles,
    # 8320 B: Vortex reads A and B from global memory)
    (Conv(1, 1, 64, 1, 16, 96, 1, 5, (1, 1), (0, 2), (1, 1), 1, True, "float32"), Strategy(), "TF32_FP16"),
    (Conv(2, 1, 8, 12, 16, 16, 3, 3, (1, 1), (1, 1), (1, 1), 1, True, "float32"), Strategy(), "TF32_FP16"),
    # dcache conflicts: the tile of the suite's BF16 linears (Vortex reads A and B from global memory) at row strides
    # of a power of two (K 1024, 2048) and just past one (K 1056, 2080)
    *[(Gemm("mm", 1, 51, 64, k, (0, k, 1), (0, 1, k), False, "bfloat16"),
       Strategy(block_m=32, block_n=64, block_k=32, thread_m=2, thread_n=4, vector=4), "BF16") for k in (1024, 1056, 2048, 2080)],
    # a K that is not a multiple of block_k (the ACT bmm's 302, its final strategy in the suite rebuild): the edge
    # guards stay in every K step; not modelled
    *[(Gemm("bmm", 1, 302, 64, k, (0, k, 1), (0, 512, 1), False, "float32"),
       Strategy(block_m=32, block_n=32, block_k=8, thread_m=4, thread_n=4, vector=4, stages=3, raster="col",
                min_blocks=12, smem_pad=10368), "FP32") for k in (296, 300)],
]


def main() -> None:
    only = {int(a) for a in sys.argv[1:]}       # run indices (default: all)
    conf = yaml.safe_load((ROOT / "conf" / "simx" / "default.yaml").read_text())
    ex = SimxExecutor(detect(), conf["config"], ROOT / "scratch" / "simx-cache", 1.0, 1800)   # budget 1: one block
    print(f"# SimX {ex.inst.api} at {ex.inst.root}; config {conf['config']}\n# command: python bench/simx_fit.py {' '.join(sys.argv[1:])}")
    for i, (p, s, prec) in enumerate(RUNS):
        if only and i not in only:
            continue
        c = make(p, s, prec, lmem_per_block(s.threads, ex.vortex_config()), drop_staging=True)
        (ex.driver_dir() / "measured" / f"{c.vortex_sha256[:16]}.json").unlink(missing_ok=True)  # size by the model
        t = time.perf_counter()
        r = ex.run(c, T.vortex_inputs(p, prec, T.make_inputs(p, 0)), ROOT / "scratch" / "simx-fit" / str(i))
        if not r.ok:
            print(f"{i}: failed: {r.error[:200]}")
            continue
        n = sum(x["blocks"] for x in r.counters["windows"])
        mi, mc = measured_per_block(r.counters["windows"])
        pi, pc = instrs_per_block(c), cycles_per_block(c)
        print(f"{i:2d} {type(p).__name__} {json.dumps(s.to_dict())} threads {s.threads}: instrs {mi:.4g} / {pi:.4g} "
              f"= {mi / pi:.2f}; cycles {mc:.4g} / {pc:.4g} = {mc / pc:.2f}; IPC {mi / mc:.2f}; "
              f"{(time.perf_counter() - t) / (mc * n / 1e6):.2f} s per million cycles")


if __name__ == "__main__":
    main()
