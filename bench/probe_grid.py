"""What each kernel form reaches on the reference's own grid: per slice of a rebuild and per form of its speed probe's
variants (`speed.form`: MMA form and load path), the event-timed ratios to the reference's time of the variants that
launch as many blocks as the reference (`reference_footprint.blocks`), against the form's fastest on any grid. A form
fast only on other grids (split-K over more SMs) cannot match the reference's pressure per SM at its speed. Reads the
`speed_probe.json` of a rebuild's slices (CPU).

usage: python bench/probe_grid.py RUN/cuda_first [SLICE_PREFIX...]
"""

import json
import sys
from pathlib import Path

from vxsynth.kernels.strategy import Strategy
from vxsynth.reconstruct.speed import form


def by_form(probe: dict) -> dict[str, tuple[list[float], float]]:
    """form label -> (sorted event ratios of its variants on the reference's grid, its fastest ratio on any grid)."""
    blocks = probe["reference_footprint"]["blocks"]
    out: dict[str, tuple[list[float], float]] = {}
    for v in probe["variants"]:
        label = "+".join(form(Strategy.from_dict(v["strategy"])))
        on, best = out.get(label, ([], float("inf")))
        out[label] = (sorted(on + [v["ratio"]]) if v["blocks"] == blocks else on, min(best, v["ratio"]))
    return out


def main(run: Path, prefixes: list[str]) -> None:
    print(f"# python bench/probe_grid.py {run} {' '.join(prefixes)}".rstrip())
    print(f"{'slice / form':<46} {'blocks':>6} {'on grid':>7} {'min':>6} {'median':>6} {'max':>6} {'anywhere':>8}")
    for f in sorted(run.glob("*/speed_probe.json")):
        if prefixes and not any(f.parent.name.startswith(p) for p in prefixes):
            continue
        probe = json.loads(f.read_text())
        print(f"{f.parent.name}  (reference: {probe['reference_footprint']['blocks']} blocks)")
        for label, (on, best) in sorted(by_form(probe).items(), key=lambda kv: kv[1][1]):
            cells = (f"{on[0]:6.2f} {on[len(on) // 2]:6.2f} {on[-1]:6.2f}" if on else f"{'-':>6} {'-':>6} {'-':>6}")
            print(f"  {label:<44} {probe['reference_footprint']['blocks']:>6} {len(on):>7} {cells} {best:8.2f}")


if __name__ == "__main__":
    if len(sys.argv) < 2 or not (Path(sys.argv[1])).is_dir():
        sys.exit("probe_grid: give a rebuild's cuda_first folder (RUN/cuda_first), then optional slice prefixes")
    main(Path(sys.argv[1]), sys.argv[2:])
