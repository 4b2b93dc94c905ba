"""Per-component gaps on a common [0, 1] scale and the distance D.

Rates (percent): |a - b| / 100.  Arithmetic intensity and DRAM bandwidth span orders of magnitude, so their gap
is the log-ratio |log10(a / b)| / LOG_SPAN, capped at 1 (a 100x difference is the largest gap).
D is the mean gap over the components measurable on both sides within the platform's component set.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from vxsynth.signature.components import COMPONENTS, RATE_COMPONENTS

LOG_SPAN = 2.0


def gap(component: str, candidate: float, reference: float) -> float:
    """Gap in [0, 1]; NaN when either side is unmeasurable."""
    if math.isnan(candidate) or math.isnan(reference):
        return math.nan
    if component in RATE_COMPONENTS:
        return min(1.0, abs(candidate - reference) / 100.0)
    if candidate <= 0 or reference <= 0:
        return 1.0 if candidate != reference else 0.0
    return min(1.0, abs(math.log10(candidate / reference)) / LOG_SPAN)


def signed_gap(component: str, candidate: float, reference: float) -> float:
    """Like `gap` but signed: positive when the candidate is above the reference."""
    g = gap(component, candidate, reference)
    if math.isnan(g):
        return g
    return g if candidate >= reference else -g


@dataclass(frozen=True)
class Distance:
    D: float
    gaps: dict[str, float]
    component_set: tuple[str, ...]
    used: tuple[str, ...] = field(default=())


def distance(candidate: dict[str, float], reference: dict[str, float], component_set: tuple[str, ...]) -> Distance:
    """D over the components of `component_set` that both signatures measured."""
    gaps = {c: gap(c, candidate.get(c, math.nan), reference.get(c, math.nan)) for c in COMPONENTS if c in component_set}
    used = tuple(c for c, g in gaps.items() if not math.isnan(g))
    d = sum(gaps[c] for c in used) / len(used) if used else math.nan
    return Distance(D=d, gaps=gaps, component_set=tuple(component_set), used=used)


def comparable(a: tuple[str, ...], b: tuple[str, ...]) -> bool:
    """D values are ranked together only when computed over the same component set."""
    return tuple(sorted(a)) == tuple(sorted(b))
