"""Wall time of a full rebuild flow run (profile -> slice -> reconstruct -> report) with the given overrides.

usage: python bench/rebuild.py [OVERRIDES ...]     e.g.  suite=demo   or   platform=h200 rebuild.slices=[...]
Prints the total and the per-slice reconstruction outcome. Run it on the GPU host for the full loop.
"""

import sys
import time

from flows import plans, server


def main() -> None:
    overrides = sys.argv[1:] or ["suite=demo"]
    cfg = plans.rebuild(overrides)
    server.ensure()
    from flows.rebuild import rebuild_flow

    t = time.perf_counter()
    s = rebuild_flow(overrides)
    wall = time.perf_counter() - t
    for r in s["results"]:
        print(f"{r['slice_id']:<50} {r['status']:<14} D {r.get('D_initial')} -> {r.get('D_final')}")
    print(f"skipped: {s['skipped'] or 'nothing'}")
    print(f"rebuild with {overrides}: {wall:.1f} s for {len(s['results'])} slices "
          f"({cfg['loop']['rounds']} rounds max, {cfg['loop']['wall_s']} s budget per slice)")


if __name__ == "__main__":
    main()
