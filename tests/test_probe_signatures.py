"""The speed probe's finalists keep the signature their D was computed from (speed_probe.json), and
bench/probe_signatures.py reads which components separate the MMA forms, on the probes of the H100 run r23
(bench/results/fidelity_h100_r23)."""

from __future__ import annotations

import json
import math
import statistics
import sys

import pytest

from tests.conftest import ROOT
from vxsynth.kernels.strategy import Strategy
from vxsynth.signature.distance import distance

sys.path.insert(0, str(ROOT / "bench"))
import probe_signatures  # noqa: E402


def _probes(run):
    for path in sorted((run / "cuda_first").glob("*/speed_probe.json")):
        yield path, json.loads(path.read_text()), json.loads(path.with_name("reference.json").read_text())["values"]


def test_each_finalist_keeps_the_signature_its_d_came_from(r23):
    n = 0
    for path, probe, ref in _probes(r23):
        for v in probe["variants"]:
            if "signature" not in v:
                continue
            n += 1
            sig = v["signature"]
            assert set(sig) == {"values", "nan_reasons"}
            assert all(math.isnan(sig["values"][c]) for c in sig["nan_reasons"]), path.parent.name
            assert distance(sig["values"], ref, tuple(ref)).D == pytest.approx(v["D"], abs=1e-9), path.parent.name
            assert v["ncu_ratio"] == pytest.approx(v["ncu_us"] / probe["reference_ncu_us"])
    assert n >= 30


def test_the_mma_sync_ring_overshoots_the_l2_hit_rate_of_an_hmma_reference(r23, capsys):
    """On the conv1d slices whose reference is sm80 xmma (HMMA), each form's nearest finalist: the warp-tile mma.sync
    kernel fed by a cp.async ring reads 0.2-0.3 more of its L2 sectors as hits than the reference (a median over the
    slices), the wgmma forms (the same cp.async loads of the activations, or TMA) fewer, the mma.sync kernel fed
    through the LSU about as many; on each slice the ring-fed HMMA kernel is above every wgmma form in L2 hit rate
    and in D."""
    hmma = [(path, probe, ref) for path, probe, ref in _probes(r23) if probe["reference_family"] == "HMMA"]
    assert len(hmma) >= 2
    gaps = {"ring": [], "wgmma": [], "lsu": []}
    for path, probe, ref in hmma:
        rows = probe_signatures.nearest_by_form(probe, ref)
        wgmma = [rows[f] for f in ("HGMMA wgmma+tma", "HGMMA wgmma+cp.async") if f in rows]
        gaps["wgmma"] += [r["gaps"]["l2_hit_rate"] for r in wgmma]
        gaps["lsu"] += [rows["HMMA tile+lsu"]["gaps"]["l2_hit_rate"]] if "HMMA tile+lsu" in rows else []
        if "HMMA tile+cp.async" not in rows or not wgmma:
            continue
        ring = rows["HMMA tile+cp.async"]
        gaps["ring"].append(ring["gaps"]["l2_hit_rate"])
        assert ring["gaps"]["l2_hit_rate"] > max(r["gaps"]["l2_hit_rate"] for r in wgmma), path.parent.name
        assert ring["D"] > min(r["D"] for r in wgmma), path.parent.name
        same = [v["D"] for v in probe["variants"]
                if v.get("signature") and probe_signatures.form(Strategy.from_dict(v["strategy"])) == "HMMA tile+cp.async"]
        assert ring["D"] == min(same)
    assert len(gaps["ring"]) >= 2 and statistics.median(gaps["ring"]) > 0.2
    assert statistics.median(gaps["wgmma"]) < 0 and abs(statistics.median(gaps["lsu"])) < 0.05
    probe_signatures.main(r23 / "cuda_first")
    assert "HMMA the forms differ most in l2_hit_rate" in capsys.readouterr().out


def test_a_run_without_signatures_is_named(r18):
    with pytest.raises(SystemExit, match="kept its finalists' signatures"):
        probe_signatures.main(r18 / "cuda_first")
