"""Which variants a saved speed probe measured again with ncu against those today's rule (`speed.finalists`: the
fastest, the nearest, the nearest of each split-K factor and thread count, and of each form near the reference's
time) picks from the same event times: per slice, how many each measures, the forms (MMA form x load path, a swizzled
ring's as its own) of the finalists today's rule adds, and any variant the probe measured that it would no longer
measure. Reads the `speed_probe.json` of a rebuild's slices and their slice records (CPU).

usage: python bench/probe_finalists.py RUN/cuda_first SLICES_DIR
"""

import json
import statistics
import sys
from pathlib import Path

from vxsynth.errors import VxError
from vxsynth.kernels.strategy import Strategy
from vxsynth.records import SliceRecord
from vxsynth.reconstruct import speed


def main(run: Path, slices: Path) -> None:
    probes = sorted(run.glob("*/speed_probe.json"))
    if not probes:
        sys.exit(f"probe_finalists: no */speed_probe.json under {run}: name a rebuild's cuda_first folder (unpack its outputs.tgz)")
    print(f"{'slice':<46} {'saved':>5} {'today':>5} {'lost':>4}  forms added")
    added = []
    for path in probes:
        record = slices / path.parent.name / "slice.json"
        if not record.exists():
            sys.exit(f"probe_finalists: no slice record {record}: name the slices folder the rebuild read")
        try:
            p, problem = json.loads(path.read_text()), SliceRecord.load(record).problem
            foot = speed.Footprint(**p["reference_footprint"]) if p.get("reference_footprint") else None
            ok = [speed.Timed(Strategy.from_dict(v["strategy"]), v["us"]) for v in p["variants"] if v["us"]]
        except (ValueError, KeyError, TypeError, VxError) as e:
            sys.exit(f"probe_finalists: cannot read {path} or {record} ({type(e).__name__}: {e}): unpack the rebuild's "
                     "outputs.tgz again")
        by_event = (lambda t: speed.distance(problem, t.strategy, t.ratio(p["reference_us"]), foot)) if p["reference_us"] else None
        saved = {Strategy.from_dict(v["strategy"]) for v in p["variants"] if "ncu_us" in v}
        today = {t.strategy for t in speed.finalists(ok, by_event, p["reference_family"])}
        new = sorted("/".join(speed.form(s)) for s in today - saved)
        added.append(len(new))
        print(f"{path.parent.name:<46} {len(saved):5d} {len(today):5d} {len(saved - today):4d}  {' '.join(new) or '-'}")
    print(f"# {len(added)} probes: today's rule adds a median {statistics.median(added):g} finalists (max {max(added)}), "
          f"on {sum(a > 0 for a in added)} of {len(added)}")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(Path(sys.argv[1]), Path(sys.argv[2]))
