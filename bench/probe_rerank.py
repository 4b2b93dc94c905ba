"""The start each saved speed probe took against the one today's rule takes from the same measured finalists
(`speed.nearest_in_signature`: lowest signature distance D, the reference's MMA family within FAMILY_D, the loop's
default keep threshold, and of that family's finalists within FAMILY_D of the lowest D, the nearest the reference's
ncu time): per slice, the family, both starts' D, ncu time ratio and family, and the probe's reach:
its fastest variant's ncu time over the reference's (both measured on that GPU; the fastest's output judged by its
measurement, its two checks not run). Reads the `speed_probe.json` of a rebuild's slices (CPU).

usage: python bench/probe_rerank.py RUN/cuda_first
"""

import json
import math
import statistics
import sys
from pathlib import Path

from vxsynth.kernels.strategy import Strategy
from vxsynth.reconstruct.speed import Timed, mma_family, nearest_in_signature


def _timed(v: dict) -> Timed:
    return Timed(Strategy.from_dict(v["strategy"]), v["us"], ncu_us=v.get("ncu_us"), D=v.get("D"))


def main(run: Path) -> None:
    if not sorted(run.glob("*/speed_probe.json")):
        sys.exit(f"probe_rerank: no */speed_probe.json under {run}: name a rebuild's cuda_first folder (unpack its outputs.tgz)")
    print(f"{'slice':<46} {'family':>6}  {'saved: D':>8} {'ratio':>5} {'mma':>5}  {'today: D':>8} {'ratio':>5} {'mma':>5}  {'fastest':>7}")
    was, now, fastest, near = [], [], [], [0, 0]
    for path in sorted(run.glob("*/speed_probe.json")):
        p = json.loads(path.read_text())
        finals = [_timed(v) for v in p["variants"] if v.get("D") is not None]
        if not finals or not p.get("nearest") or p["nearest"].get("D") is None:
            print(f"{path.parent.name:<46} no finalist ranked by D")
            continue
        old, new = _timed(p["nearest"]), nearest_in_signature(finals, p["reference_family"], ref_ncu=p["reference_ncu_us"])
        ref = p["reference_ncu_us"]
        was.append(old.D), now.append(new.D)
        near = [n + (abs(math.log(t.ncu_us / ref)) <= math.log(1.2)) for n, t in zip(near, (old, new))]
        fast = (p.get("fastest") or {}).get("ncu_us")
        fastest.append(fast / ref if fast else float("nan"))
        print(f"{path.parent.name:<46} {p['reference_family'] or '-':>6}  {old.D:8.4f} {old.ncu_us / ref:5.2f} "
              f"{mma_family(old.strategy) or '-':>5}  {new.D:8.4f} {new.ncu_us / ref:5.2f} {mma_family(new.strategy) or '-':>5}  {fastest[-1]:7.2f}")
    if was:
        print(f"# {len(was)} slices: start D median {statistics.median(was):.4f} saved, {statistics.median(now):.4f} today; "
              f"changed on {sum(a != b for a, b in zip(was, now))}; starts within 1.2x of the reference's ncu time "
              f"{near[0]} saved, {near[1]} today; the fastest variant within 1.2x of the reference's ncu "
              f"time on {sum(r <= 1.2 for r in fastest)}, within 1.5x on {sum(r <= 1.5 for r in fastest)}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(Path(sys.argv[1]))
