"""Per-component agreement of a candidate with its reference, the cell rule of the report's agreement table (a mean
D can hide one component far off; workload-cloning studies report this table)."""

from __future__ import annotations

import math
from collections.abc import Iterable

from vxsynth.metrics.components import COMPONENTS, RATE_COMPONENTS

REL_TOL = 0.10     # arith_intensity and dram_bw: fraction of the reference's value
RATE_TOL = 5.0     # every rate: percentage points


def deviation(component: str, cand: float, ref: float) -> float:
    """The candidate's signed distance from the reference on its tolerance's scale: percentage points for a rate, a
    fraction of the reference's value for arith_intensity and dram_bw; NaN when either side is NaN."""
    if math.isnan(cand) or math.isnan(ref):
        return math.nan
    if component in RATE_COMPONENTS:
        return cand - ref
    if ref == 0:
        return 0.0 if cand == 0 else math.copysign(math.inf, cand)
    return (cand - ref) / abs(ref)


def within_tolerance(component: str, cand: float, ref: float) -> bool | None:
    """Whether `cand` agrees with `ref`: within 10% of the reference's value for arith_intensity and dram_bw,
    within 5 percentage points for the rates (every other component); None when either side is NaN."""
    d = deviation(component, cand, ref)
    if math.isnan(d):
        return None
    return abs(d) <= (RATE_TOL if component in RATE_COMPONENTS else REL_TOL)


def summary(rows: Iterable[dict[str, bool | None]]) -> dict[str, tuple[int, int]]:
    """(cells within tolerance, cells counted) per component and over "all", from one verdict dict per slice;
    None cells are not counted."""
    counts = {c: [0, 0] for c in (*COMPONENTS, "all")}
    for row in rows:
        for c, ok in row.items():
            if ok is not None:
                for k in (c, "all"):
                    counts[k][0] += ok
                    counts[k][1] += 1
    return {c: (n, m) for c, (n, m) in counts.items()}
