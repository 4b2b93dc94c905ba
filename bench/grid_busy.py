"""Per-SM rates against busy SMs: how far the SMs a final kernel's grid keeps busy explain its tensor-pipe gap.

For each slice of a rebuild (`bench/fidelity.py`'s OUT/cuda_first, from the measurements the loop kept), the reference
kernel's and the final CUDA kernel's grid, duration, tensor-core FLOPs and tensor-pipe activity (an ncu rate per active
SM), with the ratio a busy-SM model predicts: final/reference = FLOPs ratio / (busy-SM ratio x time ratio), busy SMs
= min(blocks, SMs). Prints one row per slice (tensor-core references only) with the reference's and the final kernel's
MMA instructions (HMMA: mma.sync/WMMA, HGMMA: wgmma; the reference's read off its name, `speed.reference_family`), the
median |log| error of the model, and the median measured/model ratio per pair of instructions: a pair whose ratio
stays off 1 spends other tensor-pipe cycles per FLOP, which no grid or time can make up.

usage: python bench/grid_busy.py RUN/cuda_first   (CPU)
"""

import json
import math
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from vxsynth.kernels.strategy import Strategy  # noqa: E402
from vxsynth.metrics.components import PRIMARY, TENSOR_FLOPS  # noqa: E402
from vxsynth.reconstruct.speed import mma_family  # noqa: E402
from vxsynth.store.measured import final_measurement  # noqa: E402

TP, T, GRID, SMS = PRIMARY["tensor_pipe"], "gpu__time_duration.sum", "launch__grid_size", "launch__sm_count"


def main(run: Path) -> int:
    print(f"{'slice':44} {'blocks ref/fin':>14} {'time fin/ref':>12} {'flops fin/ref':>13} {'tp ref':>6} {'tp fin':>6} "
          f"{'tp fin/ref':>10} {'model':>6}  mma ref/fin")
    errs, pairs = [], {}
    for d in sorted(p for p in run.iterdir() if (p / "result.json").exists()):
        r = json.loads((d / "result.json").read_text())
        m = final_measurement(d, r["final"]["cuda_sha256"], r["final"]["vortex_sha256"], r["measured_with"])
        measured = json.loads((d / "reference.json").read_text())
        ref, fin = measured["metrics"], (m or {}).get("metrics")
        tops = lambda x: sum(x.get(k) or 0.0 for k in TENSOR_FLOPS[measured["settings"]["chip"]])   # noqa: E731
        if not fin or not tops(ref) or not ref.get(TP):
            continue
        busy = lambda x: min(x[GRID], x[SMS])                                  # noqa: E731
        t, f, b = fin[T] / ref[T], tops(fin) / tops(ref), busy(fin) / busy(ref)
        obs, model = fin[TP] / ref[TP], f / (b * t)
        errs.append(abs(math.log(obs / model)))
        probe = d / "speed_probe.json"
        pair = (json.loads(probe.read_text()).get("reference_family") if probe.exists() else None) or "?", \
            mma_family(Strategy.from_dict(r["final"]["strategy"]))
        pairs.setdefault(pair, []).append(obs / model)
        print(f"{d.name[:44]:44} {ref[GRID]:6.0f}/{fin[GRID]:<7.0f} {t:12.2f} {f:13.2f} {ref[TP]:6.1f} {fin[TP]:6.1f} "
              f"{obs:10.2f} {model:6.2f}  {'/'.join(pair)}")
    if errs:
        print(f"# {len(errs)} tensor-core slices; model vs measured tensor-pipe ratio: median |log| error "
              f"{statistics.median(errs):.3f}, max {max(errs):.3f}")
    for (a, b), v in sorted(pairs.items()):
        print(f"# reference {a}, final {b}: measured/model median {statistics.median(v):.2f} "
              f"({min(v):.2f}-{max(v):.2f}, {len(v)} slices)")
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
