"""bench/l2_ops.py, the L2 lookups split by operation: which kernels it measures for a slice of a rebuild (r23's
probes and final pairs), how it reads the counters, and its one-line answer on a machine without a GPU."""

from __future__ import annotations

import json
import math
import subprocess
import sys

from tests.conftest import ROOT
from vxsynth.kernels.strategy import Strategy
from vxsynth.metrics.components import compute
from vxsynth.signature.measure import Measurement

sys.path.insert(0, str(ROOT / "bench"))
import l2_ops  # noqa: E402


def test_it_measures_each_probe_form_once_and_the_final_pair(r23):
    for d in sorted((r23 / "cuda_first").glob("*/speed_probe.json")):
        chosen = l2_ops.candidates(d.parent)
        probe_forms = [label.split(" (")[0] for label, _ in chosen[:-1]]
        assert len(probe_forms) == len(set(probe_forms)) >= 1, d.parent.name
        final = json.loads((d.parent / "result.json").read_text())["final"]
        label, s = chosen[-1]
        assert s == Strategy.from_dict(final["strategy"]) and f"final r{final['round']}" in label
        varied = l2_ops.candidates(d.parent, ["block_n=64,split_k=1", "tma=false"])
        assert varied[:len(chosen)] == chosen and len(varied) == len(chosen) + 2
        assert varied[-2][1] == s.with_(block_n=64, split_k=1) and varied[-1][1] == s.with_(tma=False)


def test_a_counter_ncu_did_not_give_is_nan_not_zero():
    m = {"lts__t_sectors.sum": 4e6, "lts__t_sectors_lookup_hit.sum": 1e6,
         "lts__t_sectors_srcunit_tex_op_red.sum": 0.0, "lts__t_sectors_srcunit_tex_op_red_lookup_hit.sum": 0.0}
    b = l2_ops.breakdown(m)
    assert b["all"] == (4e6, 0.25)
    assert math.isnan(b["fabric"][0]) and math.isnan(b["fabric"][1])       # not collected
    assert b["red"][0] == 0.0 and math.isnan(b["red"][1])                   # nothing looked up: no share
    assert math.isnan(l2_ops.breakdown({"lts__t_sectors.sum": 1e3, "lts__t_sectors_lookup_hit.sum": 2e3})["all"][1])
    values, reasons = compute({"lts__t_sector_hit_rate.pct": 121.8}, "gh100", ["l2_hit_rate"])
    line = l2_ops.row("k", Measurement(True, values, reasons, m))
    assert "l2_hit_rate" in reasons and line.split()[2] == "nan"          # ncu's 121.8% printed as NaN, not as read
    assert line.split()[-4:] == ["nan"] * 4                                 # tensor counters not collected
    tensor = {"sm__pipe_tensor_op_hmma_cycles_active.sum": 2.5e6, "sm__cycles_active.sum": 1.0e7,
              "sm__inst_executed_pipe_tensor_op_gmma.sum": 4096.0}
    cells = l2_ops.row("k", Measurement(True, {"tensor_pipe": 25.0}, {}, {**m, **tensor})).split()
    assert cells[3] == "25.0" and cells[-4:] == ["2.50", "10.00", "nan", "4.10"]


def test_stalls_are_read_per_reason_and_nan_where_not_given():
    """--stalls: per reason, warps stalled per issued instruction as ncu gave it, NaN for a reason it did not give."""
    m = {l2_ops.DURATION: 35300.0, l2_ops.STALL.format("long_scoreboard"): 3.25, l2_ops.STALL.format("wait"): 0.0}
    cells = l2_ops.stall_row("tile at the reference's grid", Measurement(True, {"issue_active": 21.5}, {}, m)).split()
    at = {r: cells[-len(l2_ops.STALLS) + i] for i, r in enumerate(l2_ops.STALLS)}
    assert cells[-len(l2_ops.STALLS) - 2:-len(l2_ops.STALLS)] == ["35.3", "21.5"]
    assert at["long_scoreboard"] == "3.25" and at["wait"] == "0.00" and at["barrier"] == "nan"
    assert len(l2_ops.stall_header().split()) == len(l2_ops.STALLS) + 3


def test_without_a_gpu_it_says_why_in_one_line(r23, tmp_path):
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "l2_ops.py"), str(_h100_config(tmp_path)),
                        str(ROOT / "data" / "slices"), str(r23 / "cuda_first"), "conv1d-tf32-1024to1024k5l16",
                        "--work", str(tmp_path / "w")], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "no GPU measurement" in r.stderr


def _h100_config(tmp_path):
    out = subprocess.run([sys.executable, "-m", "flows.cli", "config", "platform=h100"], capture_output=True,
                         text=True, cwd=ROOT, check=True, timeout=300).stdout
    path = tmp_path / "h100.json"
    path.write_text(out)
    return path


def test_a_measurement_says_which_extra_counters_it_collected(tmp_path):
    """`extra_metrics` are recorded in the measurement's settings (how it was taken); without them the
    settings are the components' alone. An ncu that fails (here `false`) fails the measurement, with its settings."""
    import json

    from vxsynth.signature.measure import ncu_signature

    pcfg = json.loads(_h100_config(tmp_path).read_text())["platform"]
    pcfg["ncu"] = {**pcfg["ncu"], "binary": "false"}
    plain = ncu_signature(pcfg, ["true"], tmp_path / "a", ".*", None, lambda a: a[0])
    extra = ncu_signature({**pcfg, "extra_metrics": l2_ops.COUNTERS}, ["true"], tmp_path / "b", ".*", None, lambda a: a[0])
    assert not plain.ok and not extra.ok and "ncu failed" in extra.error
    assert "extra_metrics" not in plain.settings and extra.settings["extra_metrics"] == l2_ops.COUNTERS
