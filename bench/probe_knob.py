"""What one on/off knob (a boolean one, wgmma_pending, or clusters) does to kernel time, from speed-probe JSON (bench/speed_probe.py --out): per
slice, every probe variant with KNOB on (cluster: more than one block) against its sibling that differs only in KNOB
(same card, same run, event-timed), the median and range of on/off time, how many pairs it speeds up, and the fastest
variant with and without it.

usage: python bench/probe_knob.py KNOB PROBE.json [PROBE.json ...]     (e.g. warp_specialized, cluster)
"""

from __future__ import annotations

import dataclasses
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from vxsynth.kernels.strategy import Strategy  # noqa: E402


def on(strategy: dict, knob: str) -> bool:
    """`knob` is on in a probe variant's strategy: true (wgmma_pending: 1), or for `cluster`, clusters of more than one
    block."""
    return (strategy.get(knob) or 1) > 1 if knob == "cluster" else bool(strategy.get(knob))


def pairs(variants: list[dict], knob: str) -> list[tuple[float, float]]:
    """(off us, on us) for every variant pair that differs only in `knob`, both timed."""
    key = lambda s: json.dumps({k: v for k, v in s.items() if k != knob}, sort_keys=True)  # noqa: E731
    sides: dict[str, dict[bool, float]] = {}
    for v in variants:
        if v.get("us"):
            sides.setdefault(key(v["strategy"]), {})[on(v["strategy"], knob)] = v["us"]
    return [(s[False], s[True]) for s in sides.values() if len(s) == 2]


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        sys.exit(__doc__.strip().splitlines()[-1])
    knob = argv[0]
    knobs = [f.name for f in dataclasses.fields(Strategy) if f.type in (bool, "bool")] + ["wgmma_pending", "cluster"]
    if knob not in knobs:
        sys.exit(f"probe_knob: {knob!r} is not an on/off strategy knob or cluster; choose one of {knobs}")
    rows = []
    for path in argv[1:]:
        try:
            rows += [(r["slice_id"], r["variants"]) for r in json.loads(open(path).read())]
        except (OSError, ValueError, TypeError, KeyError) as e:
            sys.exit(f"probe_knob: {path} is not a speed-probe JSON ({type(e).__name__}: {e}); write one with "
                     "`python bench/speed_probe.py SLICES --out FILE`")
    print(f"{'slice':44s} {'pairs':>5s} {'on/off':>6s} {'range':>11s} {'faster':>6s} {'best on':>8s} {'best off':>8s}")
    for sid, variants in rows:
        ps = pairs(variants, knob)
        if not ps:
            print(f"{sid[:44]:44s} {0:5d}  no variant with {knob} (not applicable to this slice)")
            continue
        ratio = [on / off for off, on in ps]
        best = lambda side: min(v["us"] for v in variants if v.get("us") and on(v["strategy"], knob) == side)  # noqa: E731
        print(f"{sid[:44]:44s} {len(ps):5d} {statistics.median(ratio):6.2f} "
              f"{min(ratio):5.2f}-{max(ratio):4.2f} {sum(x < 1 for x in ratio):6d} {best(True):8.1f} {best(False):8.1f}")
    print(f"# on/off: event time with {knob} over its sibling without (median of the pairs); faster: pairs where it is "
          "shorter; best: the fastest probe variant with and without it (us)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
