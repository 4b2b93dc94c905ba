"""Wall time of a full rebuild flow run (profile -> slice -> reconstruct -> report) with the given overrides.

usage: python bench/rebuild.py [OVERRIDES ...]     e.g.  suite=demo   or   platform=h200 rebuild.slices=[...]
Prints the total and the per-slice reconstruction outcome. Run it on the GPU host for the full loop.
"""

import sys
import time

from flows.config import load
from flows.rebuild import with_workers


def main() -> None:
    overrides = sys.argv[1:] or ["suite=demo"]
    cfg = load(overrides)
    t = time.perf_counter()
    s = with_workers(int(cfg["rebuild"]["cpu_workers"]), cfg["rebuild"].get("dask_address"))(overrides)
    wall = time.perf_counter() - t
    for r in s["results"]:
        print(f"{r['slice_id']:<50} {r['status']:<14} D {r.get('D_initial')} -> {r.get('D_final')}")
    print(f"skipped: {s['skipped'] or 'nothing'}")
    print(f"rebuild with {overrides}: {wall:.1f} s for {len(s['results'])} slices "
          f"({cfg['loop']['rounds']} rounds max, {cfg['loop']['wall_s']} s budget per slice)")


if __name__ == "__main__":
    main()
