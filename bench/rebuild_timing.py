"""Where a rebuild's per-slice time went: the probe's set-up (speed_probe.json `seconds`: event-timed steps and ncu
finalists), round 0's checks and measurement, and the search rounds' checks (median per candidate), from the trails
of a `bench/fidelity.py` output folder.

usage: python bench/rebuild_timing.py OUT_DIR [ORDER]     (ORDER: cuda_first, the default)
"""

import json
import statistics
import sys
from pathlib import Path

import pandas as pd


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    root = Path(sys.argv[1]) / (sys.argv[2] if len(sys.argv) > 2 else "cuda_first")
    if not root.is_dir():
        sys.exit(f"rebuild_timing: no folder {root}; give a bench/fidelity.py output folder")
    print(f"{'slice':<44} {'probe s':>8} {'events':>7} {'ncu':>6} {'r0 checks':>9} {'r0 meas':>8} {'batches':>7} "
          f"{'cands':>5} {'checks/cand':>11} {'batch wall':>10}")
    for d in sorted(p for p in root.iterdir() if (p / "result.json").is_file()):
        try:
            probe = json.loads((d / "speed_probe.json").read_text()) if (d / "speed_probe.json").is_file() else {}
            t = pd.read_parquet(d / "trail.parquet")
        except (OSError, ValueError) as e:
            print(f"{d.name:<44} unreadable: {type(e).__name__}: {str(e).splitlines()[0][:120]}")
            continue
        sec = probe.get("seconds") or {}
        r0, rest = t[t["round"] == 0].iloc[0], t[t["round"] > 0]
        walls = rest.groupby("batch")["wall_s"].max() if len(rest) else pd.Series(dtype=float)
        med = lambda s: statistics.median(s) if len(s) else float("nan")  # noqa: E731
        print(f"{d.name:<44} {sum(sec.values()) if sec else float('nan'):8.1f} {sec.get('events', float('nan')):7.1f} "
              f"{sec.get('ncu', float('nan')):6.1f} {r0['t_checks_s']:9.1f} {r0['t_measure_s']:8.1f} {len(walls):7d} "
              f"{len(rest):5d} {med(rest['t_checks_s']):11.1f} {med(walls):10.1f}")


if __name__ == "__main__":
    main()
