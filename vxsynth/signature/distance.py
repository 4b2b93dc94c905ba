"""Per-component gaps on a common [0, 1] scale and the distance D.

Rates (percent): |a - b| / 100.  Arithmetic intensity and DRAM bandwidth span orders of magnitude, so their gap
is the log-ratio |log10(a / b)| / LOG_SPAN, capped at 1 (a 100x difference is the largest gap).
D is the mean gap over the components measurable on both sides within the platform's component set.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from vxsynth.metrics.components import COMPONENTS, RATE_COMPONENTS

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


def gap_noise(values: dict[str, float], spread: dict[str, float]) -> dict[str, float]:
    """Each component's measurement noise on the gap scale: the gap between a reference value and that value moved
    by its spread over repeated measurements (0 where either is unknown)."""
    return {c: abs(signed_gap(c, v + spread[c], v)) if not math.isnan(spread.get(c, math.nan)) and not math.isnan(v)
            else 0.0 for c, v in values.items()}


def excess(gaps: dict[str, float], limits: dict[str, float]) -> dict[str, float]:
    """By how much each component's |gap| exceeds its limit, for the components that do."""
    return {c: abs(g) - limits[c] for c, g in gaps.items() if c in limits and not math.isnan(g) and abs(g) > limits[c]}


@dataclass(frozen=True)
class Distance:
    D: float
    gaps: dict[str, float]
    component_set: tuple[str, ...]
    used: tuple[str, ...] = field(default=())


def distance(candidate: dict[str, float], reference: dict[str, float], component_set: tuple[str, ...]) -> Distance:
    """D over the components of `component_set` that both signatures measured. A component NaN on either side (the
    reference's coalescing of a TMA kernel, or the candidate's where the reference has a value: no LDG, a rate ncu
    reported far above 100%) has a NaN gap and is left out: D is the mean of the other gaps, `used` names them, and
    the D is ranked with D values over other `used` sets of the same component set."""
    gaps = {c: gap(c, candidate.get(c, math.nan), reference.get(c, math.nan)) for c in COMPONENTS if c in component_set}
    used = tuple(c for c, g in gaps.items() if not math.isnan(g))
    d = sum(gaps[c] for c in used) / len(used) if used else math.nan
    return Distance(D=d, gaps=gaps, component_set=tuple(component_set), used=used)


def comparable(a: tuple[str, ...], b: tuple[str, ...]) -> bool:
    """D values are ranked together only when computed over the same component set."""
    return tuple(sorted(a)) == tuple(sorted(b))
