"""Profiling on the cpu platform, for real, on tiny lerobot policies; platform refusal; the Orin metric-set rule."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from tests.conftest import conf
from vxsynth.errors import VxError
from vxsynth.metrics.components import COMPONENTS, compute, metric_list
from vxsynth.profiling.stage import profile_workload
from vxsynth.store import schemas
from vxsynth.store.io import read_table


@pytest.fixture(scope="module")
def act_tiny(tmp_path_factory):
    w = conf("workload", "act")
    w["preset"] = "tiny"
    out = tmp_path_factory.mktemp("prof") / "cpu" / "act_tiny"
    summary = profile_workload(conf("platform", "cpu"), w, out, log=lambda m: None)
    return out, summary


def test_tables_have_their_schemas_and_measurement_records(act_tiny):
    out, summary = act_tiny
    for name, schema in [("kernels", schemas.KERNELS), ("op_calls", schemas.OP_CALLS), ("op_call_runs", schemas.OP_CALL_RUNS)]:
        df = read_table(out / f"{name}.parquet", schema)
        assert len(df) and set(df["platform"]) == {"cpu"}
        assert json.loads(df["measured_with"].iloc[0])["tool"] == "torch.profiler"
    env = json.loads((out / "env.json").read_text())
    assert env["platform"] == "cpu" and env["lerobot"] == "0.6.1" and "precision_flags" in env
    assert not (out / "ncu.parquet").exists()  # cpu: no ncu pass, signatures all NaN downstream


def test_op_calls_carry_module_paths_ordinals_and_aggregate_over_inferences(act_tiny):
    out, _ = act_tiny
    calls = read_table(out / "op_calls.parquet")
    runs = read_table(out / "op_call_runs.parquet")
    conv1 = calls[calls["module_path"] == "model.backbone.layer1.0.conv1"]
    assert list(conv1["op_name"]) == ["aten::conv2d"]
    assert json.loads(conv1["input_dims"].iloc[0])[1] == [64, 64, 3, 3]
    lin = calls[calls["op_name"] == "aten::linear"]
    assert lin["module_path"].str.startswith("model.").all()
    n_inf = runs["inference"].nunique()
    assert n_inf >= 2 and (calls["n_inferences"] == n_inf).all()
    mean = runs.groupby("call_index")["gpu_time_us"].mean()
    assert (abs(calls.set_index("call_index")["gpu_time_us"] - mean) < 1e-6).all()
    assert abs(calls["share"].sum() - 1.0) < 1e-6


def test_kernel_rows_link_to_their_launching_op(act_tiny):
    out, _ = act_tiny
    k = read_table(out / "kernels.parquet")
    addmm = k[k["kernel_name"] == "cpu:aten::addmm"]
    assert len(addmm) and set(addmm["op_name"]) == {"aten::linear"}
    assert json.loads(addmm["launch_dims"].iloc[0])[0] != []   # addmm's own input dims (bias first)


def test_gpu_platform_on_a_machine_without_it_stops_and_writes_nothing(tmp_path):
    w = conf("workload", "act")
    w["preset"] = "tiny"
    out = tmp_path / "h200" / "act_tiny"
    out.mkdir(parents=True)
    (out / "keep.txt").write_text("earlier result")
    import torch
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(VxError, match="needs an NVIDIA GPU"):
        profile_workload(conf("platform", "h200"), w, out)
    assert (out / "keep.txt").read_text() == "earlier result" and len(list(out.iterdir())) == 1


def test_orin_metric_set_has_no_dram_components():
    orin, h200 = conf("platform", "orin"), conf("platform", "h200")
    assert set(h200["components"]) == set(COMPONENTS)
    assert set(COMPONENTS) - set(orin["components"]) == {"arith_intensity", "dram_bw"}
    metrics = metric_list("ga10b", orin["components"])
    assert not any(m.startswith("dram__") for m in metrics)
    assert "sm__ops_path_tensor_src_fp16_dst_fp32.sum" not in metric_list("ga10b", orin["components"])  # AI not collected
    values, reasons = compute({"lts__t_sector_hit_rate.pct": 50.0}, "ga10b", orin["components"])
    assert pd.isna(values["dram_bw"]) and reasons["dram_bw"] == "not in this platform's metric set"
    assert values["l2_hit_rate"] == 50.0
