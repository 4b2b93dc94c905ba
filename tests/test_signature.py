"""Components from raw metrics, gaps on a common [0, 1] scale and the distance D."""

from __future__ import annotations

import json
import math

import pytest

from vxsynth.metrics.components import COMPONENTS, LDG_INST, PRIMARY, RATE_MAX, compute, ldg_share
from vxsynth.errors import VxError
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


def _measured(suite, sid: str, key: str) -> dict:
    """A kept candidate measurement of the committed whole-suite rebuild (raw ncu metrics and recorded values)."""
    return json.loads((suite / sid / "measured" / f"{key}.json").read_text())


def test_a_rate_far_above_100_percent_is_nan_with_its_reason(rebuild_h):
    """linear-bf16-51x1024x2048's final pair: ncu reported 265.2% load coalescing, recorded clamped to 100% (a match
    with any reference near 100%); every other component as recorded."""
    m = _measured(rebuild_h, "linear-bf16-51x1024x2048-h200-50afe8", "c9fb73259917f24d38a3")
    assert m["values"]["gld_coalescing"] == 100.0 and m["metrics"][PRIMARY["gld_coalescing"]] == pytest.approx(265.16, abs=0.01)
    values, reasons = compute(m["metrics"], "gh100", list(COMPONENTS))
    assert math.isnan(values["gld_coalescing"]) and list(reasons) == ["gld_coalescing"]
    assert reasons["gld_coalescing"] == (f"ncu reported 265.2% ({PRIMARY['gld_coalescing']}), more than 1 point outside "
                                         "0-100%: the metric does not describe this kernel's loads")
    assert all(values[c] == m["values"][c] for c in COMPONENTS if c != "gld_coalescing")


def test_an_in_range_rate_is_unchanged(rebuild_h):
    m = _measured(rebuild_h, "conv2d-tf32-3to64k7x7i480x640s2-h200-c1b690", "dc4c9d02a725ef9a30eb")
    values, reasons = compute(m["metrics"], "gh100", list(COMPONENTS))
    assert values == m["values"] and reasons == {} and values["gld_coalescing"] == pytest.approx(61.85, abs=0.01)
    over = {**m["metrics"], PRIMARY["sm_throughput"]: 100.6}               # within the counters' slack: kept as reported
    assert compute(over, "gh100", list(COMPONENTS))[0]["sm_throughput"] == 100.6
    over[PRIMARY["sm_throughput"]] = RATE_MAX + 0.1
    assert "sm_throughput" in compute(over, "gh100", list(COMPONENTS))[1]


def test_a_candidate_nan_where_the_reference_has_a_value_is_left_out_of_d(rebuild_h):
    """conv1d 1024->1024 L16's final pair (coalescing 1,024,025%) against its reference (99.66%): D is the mean of the
    other nine gaps; the clamp had added a gap of 0.003 and lowered D."""
    sid = "conv1d-tf32-1024to1024k5l16-h200-424588"
    ref = json.loads((rebuild_h / sid / "reference.json").read_text())["values"]
    m = _measured(rebuild_h, sid, "0e5f6f609bc142a6b311")
    values, _ = compute(m["metrics"], "gh100", list(COMPONENTS))
    d = distance(values, ref, tuple(COMPONENTS))
    others = [c for c in COMPONENTS if c != "gld_coalescing"]
    assert not math.isnan(ref["gld_coalescing"]) and d.used == tuple(others)
    assert d.D == pytest.approx(sum(gap(c, values[c], ref[c]) for c in others) / 9)
    assert distance(m["values"], ref, tuple(COMPONENTS)).D < d.D


def test_coalescing_of_a_few_ldgs_beside_ldgsts_or_tma_traffic_is_nan_with_its_reason(rebuild_h):
    """Recorded H200 references: cuDNN's conv1d (544 LDGs beside 61,073 LSU load requests, the rest LDGSTS) and the
    4096->1024 conv1d (2,048 LDGs moving 1 MB beside 87 MB of DRAM traffic that TMA reads) report about 100% coalescing
    of loads that are not theirs: NaN with the LDGs' share. LDG kernels keep their value; so does a profile without the
    LDG instruction counter (the slicing stage's recorded profiles)."""
    ref = lambda sid: json.loads((rebuild_h / sid / "reference.json").read_text())  # noqa: E731
    for sid, share in [("conv1d-tf32-1024to1024k5l16-h200-424588", "0.9%"), ("conv1d-tf32-4096to1024k5l16-h200-98995d", "1.2%")]:
        m = ref(sid)["metrics"]
        assert m[LDG_INST] > 0 and m[PRIMARY["gld_coalescing"]] > 99
        values, reasons = compute(m, "gh100", list(COMPONENTS))
        assert math.isnan(values["gld_coalescing"]) and list(reasons) == ["gld_coalescing"]
        assert reasons["gld_coalescing"].startswith(f"LDG instructions carry about {share} of the kernel's global reads")
        assert not math.isnan(compute({k: v for k, v in m.items() if k != LDG_INST}, "gh100", list(COMPONENTS))[0]["gld_coalescing"])
    for sid in ["conv2d-tf32-3to64k7x7i480x640s2-h200-c1b690", "linear-fp32-100x512x512-h200-1ae459"]:
        m = ref(sid)["metrics"]
        assert ldg_share(m) > 0.9 and compute(m, "gh100", list(COMPONENTS))[0]["gld_coalescing"] == pytest.approx(
            m[PRIMARY["gld_coalescing"]])


def _fake_ncu(monkeypatch, ref: dict, ranges_of):
    """ncu replaced by the recorded H200 reference profile: each profiled range of a harness process yields the
    kernels the real run saw (`kernels_seen`), the main one with its recorded metrics (DRAM bytes scaled per range,
    so the repeats differ); `ranges_of(repeats)` gives each range's kernel names. Returns the processes started."""
    from vxsynth.signature import measure

    started = []

    def run(cmd, timeout_s, log=None):
        started.append(json.loads(open(cmd[-1]).read())["repeats"])
        if ranges_of(started[-1]) is None:
            raise VxError(f"ncu did not finish within {timeout_s:.0f} s; raise platform.ncu.timeout_s")
        return ""

    def read_report(path, metrics):
        out = []
        for i, names in enumerate(ranges_of(started[-1])):
            for name in names:
                m = dict(ref["metrics"]) if name == ref["kernel"] else {"gpu__time_duration.sum": 3000.0}
                if name == ref["kernel"]:
                    m["dram__bytes.sum"] *= 1 + 0.01 * i
                    m["dram__bytes.sum.per_second"] *= 1 + 0.01 * i
                out.append({"action": len(out), "kernel_name": name, "kernel_function": name, "nvtx": [], "metrics": m})
        return out

    monkeypatch.setattr(measure.ncu_pass, "run", run)
    monkeypatch.setattr(measure.ncu_pass, "read_report", read_report)
    return started


def test_the_reference_repeats_run_in_one_harness_process(monkeypatch, rebuild_h, h200_slices, tmp_path):
    """Three repeats of a cuDNN convolution's reference (two layout kernels and the xmma kernel per range) come from one
    ncu process: the median DRAM bandwidth of the three ranges' main kernels is the reference, the spread and noise
    between them recorded; when the ranges launch different kernels and none is named like the main kernel, each
    repeat gets its own process, as before."""
    import sys

    sys.path.insert(0, str(__import__("pathlib").Path(__file__).parent))
    from conftest import conf, slice_record
    from vxsynth.signature import measure

    sid = "conv2d-tf32-64to64k3x3i120x160-h200-5e5eec"
    ref = json.loads((rebuild_h / sid / "reference.json").read_text())
    rec, pcfg = slice_record(h200_slices, sid), conf("platform", "h200")
    per = ["nchwToNhwcKernel", "nchwToNhwcKernel", ref["kernel"]]
    started = _fake_ncu(monkeypatch, ref, lambda n: [per] * n)
    m = measure.reference(rec, pcfg, tmp_path / "one", repeats=3)
    assert m.ok and started == [3] and m.settings["repeats"] == 3 and m.settings["repeats_in"] == "one harness process"
    bw = compute(ref["metrics"], "gh100", list(pcfg["components"]))[0]["dram_bw"]
    assert m.values["dram_bw"] == pytest.approx(bw * 1.01) and m.settings["spread"]["dram_bw"] == pytest.approx(bw * 0.02)
    assert m.settings["replay_main_kernel_matches"] and m.kernel == ref["kernel"] and len(m.kernels_seen) == 9
    scaled = [compute({**ref["metrics"], "dram__bytes.sum": ref["metrics"]["dram__bytes.sum"] * (1 + 0.01 * i),
                       "dram__bytes.sum.per_second": ref["metrics"]["dram__bytes.sum.per_second"] * (1 + 0.01 * i)},
                      "gh100", list(pcfg["components"]))[0] for i in (0, 2)]
    noise = distance(*scaled, tuple(pcfg["components"])).D
    assert noise > 0 and m.settings["noise_D"] == pytest.approx(noise)

    rec = rec.__class__(**{**rec.__dict__, "main_kernel": "another_kernel"})    # no launch named like the main kernel
    started = _fake_ncu(monkeypatch, ref, lambda n: [per, per[1:], per][:n])      # the second range lacks a kernel
    m = measure.reference(rec, pcfg, tmp_path / "each", repeats=3)
    assert m.ok and started == [3, 1, 1, 1] and m.settings["repeats_in"].startswith("one harness process each")
    assert m.kernel == ref["kernel"] and m.settings["repeats"] == 3        # each process's longest launch
    assert not measure.per_range([{"kernel_name": "k", "kernel_function": "k", "metrics": {}}] * 4, "main", 3)
    started = _fake_ncu(monkeypatch, ref, lambda n: None if n > 1 else [per])      # the one-process run times out
    m = measure.reference(slice_record(h200_slices, sid), pcfg, tmp_path / "late", repeats=3)
    assert m.ok and started == [3, 1, 1, 1] and "the one-process run failed: ncu did not finish" in m.settings["repeats_in"]
    a = lambda name: {"kernel_name": name, "kernel_function": name, "metrics": {"gpu__time_duration.sum": 1.0}}  # noqa: E731
    uneven = [a("main"), a("main"), a("x"), a("x"), a("x"), a("x"), a("main"), a("x"), a("x")]
    assert measure.per_range(uneven, "main", 3) is None                # two main kernels in one range, none in the next
