"""One block of the conv1d 2048->2048 k5 L16's final strategy (whole-suite rebuild; both operands staged on the fixed
SimX) at fewer input channels, each stored either with exactly its channels or with more (`c_layout`, as a shortened
check stored them): instructions and cycles per block, per channel, and the cost model's prediction. Shows whether a
shortened convolution runs the full one's cycles per channel (issue 43). Needs a built SimX (VORTEX_HOME, TOOLDIR).

usage: python bench/simx_shortened_conv.py C:STORED ... > bench/results/simx_shortened_conv_cpu.txt
"""

from __future__ import annotations

import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from vxsynth.kernels import tensors as T  # noqa: E402
from vxsynth.kernels.candidate import make  # noqa: E402
from vxsynth.kernels.problem import Conv  # noqa: E402
from vxsynth.kernels.strategy import Strategy  # noqa: E402
from vxsynth.simx.executor import SimxExecutor, cycles_per_block, measured_per_block  # noqa: E402
from vxsynth.simx.install import detect  # noqa: E402
from vxsynth.targets.vortex_host import lmem_per_block  # noqa: E402

BASE = {"cores": 1, "warps": 16, "threads": 16, "dcache_size": 16384, "l2": False, "lmem_log_size": 14}
S = Strategy(block_m=64, block_n=32, block_k=32, thread_m=2, thread_n=4, vector=4, tensor_core=True, min_blocks=2,
             layout="nhwc")
CONV = Conv(1, 1, 2048, 1, 16, 2048, 1, 5, (1, 1), (0, 2), (1, 1), 1, True, "float32")


def main() -> None:
    ex = SimxExecutor(detect(), BASE, ROOT / "scratch" / "simx-cache", 1.0, 1800)     # budget 1: one block
    print(f"# SimX {ex.inst.api} at {ex.inst.root}; config {BASE}\n# command: python bench/simx_shortened_conv.py {' '.join(sys.argv[1:])}")
    for C, stored in [tuple(map(int, a.split(":"))) for a in sys.argv[1:]]:
        p = replace(CONV, C=C, c_layout=stored if stored != C else 0)
        c = make(p, S, "TF32_FP16", lmem_per_block(S.threads, ex.vortex_config()), drop_staging=True)
        t = time.time()
        r = ex.run(c, T.vortex_inputs(p, "TF32_FP16", T.make_inputs(p, 0)), ROOT / "scratch" / "simx-shortened" / f"{C}_{stored}")
        mi, mc = measured_per_block(r.counters["windows"])
        print(f"C {C} stored {stored}: blocks {r.blocks} instrs {mi:.4g} cycles {mc:.4g} IPC {mi/mc:.2f} pred {cycles_per_block(c):.4g} "
              f"ratio {mc/cycles_per_block(c):.2f} per-C cycles {mc/C:.4g} per-C instrs {mi/C:.4g} wall {time.time()-t:.0f}", flush=True)


if __name__ == "__main__":
    main()
