"""Workloads: real lerobot policies built offline at tiny size; identity; presets; a fourth policy from config."""

from __future__ import annotations

import pytest
import torch

from tests.conftest import conf
from vxsynth.errors import VxError
from vxsynth.workloads.builders import build_policy, make_batch, run_inference
from vxsynth.workloads.spec import WorkloadSpec


def spec(name: str, preset: str = "tiny", **over) -> WorkloadSpec:
    cfg = conf("workload", name)
    cfg["preset"] = preset
    cfg.update(over)
    return WorkloadSpec.from_config(cfg)


@pytest.mark.parametrize("name,shape", [("act", (1, 10, 14)), ("diffusion", (1, 8, 2)), ("pi0", (1, 10, 14))])
def test_tiny_policies_build_offline_and_run(name, shape):
    s = spec(name)
    policy, built = build_policy(s, "cpu")
    out = run_inference(policy, make_batch(s, "cpu"), s.call)
    assert tuple(out.shape) == shape and torch.isfinite(out).all()


def test_identity_is_stable_and_tracks_config_and_inputs():
    s = spec("act")
    _, built = build_policy(s, "cpu")
    a = s.identity(built)
    assert a == s.identity(build_policy(s, "cpu")[1])
    assert a["workload_id"].startswith("act-")
    s2 = spec("act", seed=1)
    assert s2.identity(built)["workload_id"] != a["workload_id"]          # input spec (seed) changes the identity
    _, built3 = build_policy(spec("act", config={**conf("workload", "act")["config"], "dropout": 0.2}), "cpu")
    assert s.identity(built3)["config_hash"] != a["config_hash"]          # config changes the identity


def test_full_presets_describe_paper_scale_inputs():
    assert spec("act", "full").input_spec()["tensors"]["observation.images.top"]["shape"] == [1, 3, 480, 640]
    assert spec("diffusion", "full").input_spec()["tensors"]["observation.image"]["shape"] == [1, 2, 3, 96, 96]
    p = spec("pi0", "full")
    assert p.config["dtype"] == "bfloat16" and p.input_spec()["tensors"]["observation.language.tokens"]["dtype"] == "int64"


def test_unknown_preset_is_a_clear_error():
    with pytest.raises(VxError, match="no preset 'huge'"):
        spec("act", "huge")


def test_fourth_policy_needs_only_a_config_file(tmp_path):
    """TD-MPC (conf/workload/tdmpc.yaml) builds and profiles with the generic lerobot builder."""
    from vxsynth.profiling.stage import profile_workload

    s = conf("workload", "tdmpc")
    s["preset"] = "tiny"
    summary = profile_workload(conf("platform", "cpu"), s, tmp_path / "tdmpc_tiny", log=lambda m: None)
    assert summary["identity"]["policy_type"] == "tdmpc" and summary["op_calls"] > 50
