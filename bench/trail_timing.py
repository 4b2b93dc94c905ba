"""Where a loop's time went, per candidate, from its revision trail(s): candidates, batches, and the median / max of
the compile, checks (check 1 + check 2, all cases) and measure seconds, and each batch's wall seconds and their sum
(what a slice's wall time spent on its trail; the rest went to the reference's profile and set-up).

usage: python bench/trail_timing.py TRAIL.parquet [TRAIL.parquet ...]
"""

import sys
from pathlib import Path

import pandas as pd


def main(paths: list[Path]) -> None:
    print(f"{'trail':<60} {'cands':>5} {'batches':>7}  {'compile s':>11}  {'checks s':>11}  {'measure s':>11}  {'sum s':>5}  batch wall s")
    for p in paths:
        t = pd.read_parquet(p)
        t = t[t["decision"] != "failed"]
        cols = [f"{t[c].median():5.2f}/{t[c].max():5.2f}" for c in ("t_compile_s", "t_checks_s", "t_measure_s")]
        batches = t.groupby("batch")["wall_s"].max()
        print(f"{str(p)[-60:]:<60} {len(t):>5} {len(batches):>7}  {cols[0]:>11}  {cols[1]:>11}  {cols[2]:>11}  {batches.sum():5.0f}  "
              + " ".join(f"{w:.0f}" for w in batches))
    print("(compile, checks, measure: median/max seconds per candidate; batch 0 is the start)")


if __name__ == "__main__":
    if len(sys.argv) < 2 or not all(Path(a).is_file() for a in sys.argv[1:]):
        sys.exit("usage: python bench/trail_timing.py TRAIL.parquet [TRAIL.parquet ...]  (trail files that exist)")
    main([Path(a) for a in sys.argv[1:]])
