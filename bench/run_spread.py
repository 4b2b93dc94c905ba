"""How far two rebuilds of the same slices on the same kind of GPU differ, slice by slice: the error bar of a median
D. Per slice: whether both started from the same strategy, start and final D, the final kernel's ncu time over the
reference's, cells within tolerance (the report's rule). Then the spread: finalists of both speed probes with the
same strategy (the same kernel measured in two runs: measurement noise), starts on the same strategy, finals
(measurement and search together). Reads two `bench/fidelity.py` output folders (CPU).

usage: python bench/run_spread.py RUN_A RUN_B      (each a fidelity output folder, e.g. scratch/r18 scratch/r19)
"""

import json
import math
import statistics
import sys
from pathlib import Path

from vxsynth import trail
from vxsynth.errors import VxError
from vxsynth.metrics.components import COMPONENTS
from vxsynth.records import LoopResult
from vxsynth.signature.agreement import within_tolerance
from vxsynth.store.measured import final_measurement


def side(folder: Path) -> dict | str | None:
    """One run's view of one slice; None where it did not finish, why where its outputs cannot be read."""
    if not (folder / "result.json").is_file():
        return None
    try:
        r = LoopResult.load(folder / "result.json")
        ref = json.loads((folder / "reference.json").read_text())["metrics"]
        start = next(row for row in trail.load(folder / "trail.parquet") if row.round == 0)
        probe = json.loads((folder / "speed_probe.json").read_text()) if (folder / "speed_probe.json").is_file() else {}
    except (OSError, ValueError, KeyError, StopIteration, VxError) as e:
        return f"unreadable: {type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}"
    m = final_measurement(folder, r.final.cuda_sha256, r.final.vortex_sha256, r.measured_with)
    t = "gpu__time_duration.sum"
    num = lambda v: math.nan if v is None else v  # noqa: E731    (not measured)
    ok = [within_tolerance(c, num(r.final.values.get(c)), num(r.reference.get(c))) for c in COMPONENTS if c in r.component_set]
    ok = [x for x in ok if x is not None]
    return {"start": start.strategy_hash, "D0": r.initial.D, "D": r.final.D,
            "time": m["metrics"][t] / ref[t] if m and ref.get(t) else math.nan,
            "cells": (sum(ok), len(ok)),
            "finalists": {json.dumps(v["strategy"], sort_keys=True): v["D"] for v in probe.get("variants", [])
                          if v.get("D") is not None}}


def main(a: Path, b: Path) -> None:
    if not (a / "cuda_first").is_dir() or not (b / "cuda_first").is_dir():
        sys.exit(f"run_spread: {a} and {b} must both be bench/fidelity.py output folders (with cuda_first/)")
    print(f"{'slice':<44} {'same start':>10} {'D start a/b':>15} {'D final a/b':>15} {'time a/b':>11} {'cells a/b':>11}")
    rows = []
    for d in sorted(p for p in (a / "cuda_first").iterdir() if p.is_dir()):
        x, y = side(d), side(b / "cuda_first" / d.name)
        if x is None or y is None:
            continue
        if isinstance(x, str) or isinstance(y, str):
            print(f"{d.name[:44]:<44} {x if isinstance(x, str) else y} ({a if isinstance(x, str) else b})")
            continue
        rows.append((x, y))
        same = x["start"] == y["start"]
        print(f"{d.name[:44]:<44} {'yes' if same else 'no':>10} {x['D0']:7.4f}/{y['D0']:.4f} {x['D']:7.4f}/{y['D']:.4f} "
              f"{x['time']:5.2f}/{y['time']:.2f} {'%d/%d' % x['cells']:>5}/{'%d/%d' % y['cells']}")
    if not rows:
        sys.exit(f"run_spread: no slice finished in both {a} and {b}")
    med = lambda v: statistics.median(v) if v else math.nan  # noqa: E731
    probe = [abs(x["finalists"][k] - y["finalists"][k]) for x, y in rows for k in x["finalists"].keys() & y["finalists"].keys()]
    same = [(x, y) for x, y in rows if x["start"] == y["start"]]
    cells = [sum(r[i]["cells"][0] for r in rows) / sum(r[i]["cells"][1] for r in rows) for i in (0, 1)]
    print(f"# {len(rows)} slices in both runs; {len(same)} started from the same strategy")
    print(f"# the same kernel measured in both runs: {len(probe)} probe finalists, |D a - D b| median {med(probe):.4f}, "
          f"max {max(probe, default=math.nan):.4f}")
    print(f"# same start: |start D a - b| median {med([abs(x['D0'] - y['D0']) for x, y in same]):.4f}; "
          f"|final D a - b| median {med([abs(x['D'] - y['D']) for x, y in same]):.4f}, "
          f"max {max((abs(x['D'] - y['D']) for x, y in same), default=math.nan):.4f}")
    print(f"# all {len(rows)}: median final D {med([x['D'] for x, _ in rows]):.4f} a, {med([y['D'] for _, y in rows]):.4f} b; "
          f"|final D a - b| median {med([abs(x['D'] - y['D']) for x, y in rows]):.4f}; "
          f"cells {cells[0]:.0%} a, {cells[1]:.0%} b; final time within 1.5x of the reference's "
          f"{sum(x['time'] <= 1.5 for x, _ in rows)} a, {sum(y['time'] <= 1.5 for _, y in rows)} b")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(Path(sys.argv[1]), Path(sys.argv[2]))
