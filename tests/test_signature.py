"""Gaps on a common [0, 1] scale and the distance D."""

from __future__ import annotations

import math

import pytest

from vxsynth.signature.components import COMPONENTS
from vxsynth.signature.distance import comparable, distance, gap, signed_gap


def test_rates_are_percentage_points_over_100_and_intensities_log_ratios():
    assert gap("l2_hit_rate", 80.0, 90.0) == pytest.approx(0.1)
    assert gap("gld_coalescing", 29.0, 37.0) == pytest.approx(0.08)
    assert gap("arith_intensity", 100.0, 10.0) == pytest.approx(0.5)       # 10x = half the span
    assert gap("dram_bw", 1e9, 1e12) == 1.0                                   # capped
    assert signed_gap("fma_pipe", 10.0, 30.0) == pytest.approx(-0.2)
    assert math.isnan(gap("l1_hit_rate", math.nan, 50.0))


def test_d_averages_only_components_measurable_on_both_sides():
    ref = {c: 50.0 for c in COMPONENTS} | {"arith_intensity": 100.0, "dram_bw": 1e11, "l1_hit_rate": math.nan}
    cand = dict(ref) | {"l2_hit_rate": 70.0, "gld_coalescing": math.nan}
    d = distance(cand, ref, tuple(COMPONENTS))
    assert set(d.used) == set(COMPONENTS) - {"l1_hit_rate", "gld_coalescing"}
    assert d.D == pytest.approx(0.2 / 8)


def test_orin_and_h200_distances_are_never_ranked_together():
    orin = tuple(c for c in COMPONENTS if c not in ("arith_intensity", "dram_bw"))
    assert not comparable(orin, tuple(COMPONENTS)) and comparable(orin, tuple(reversed(orin)))
    assert distance({}, {}, orin).component_set == orin
