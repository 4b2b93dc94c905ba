"""The attack corpus (tests/attacks.yaml): every attack on every base is rejected by some gate, none crashes the
checker, no file of a canary directory changes, and the unmodified bases are accepted. CPU attacks run here
(CUDA halves compiled and judged with nvcc when present); `gpu: true` attacks run with `pytest -m gpu`."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT, conf
from vxsynth.checks.gates import attack, base, judge
from vxsynth.checks.run import CheckEnv
from vxsynth.kernels.problem import from_dict
from vxsynth.targets import jail
from vxsynth.targets.vortex_host import HostExecutor, VortexConfig

CORPUS = yaml.safe_load((ROOT / "tests" / "attacks.yaml").read_text())
POLICY = conf("sandbox")
pytestmark = pytest.mark.skipif(jail.available() is not None, reason=str(jail.available()))


def _cases(gpu: bool):
    for a in CORPUS["attacks"]:
        if bool(a.get("gpu")) != gpu:
            continue
        for k in ([a["base"]] if "base" in a else list(CORPUS["bases"])):
            yield pytest.param(a, k, id=f"{a['id']}-{k}", marks=[pytest.mark.gpu] if gpu else [])


def _digest(d: Path) -> str:
    return hashlib.md5(b"".join(p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file())).hexdigest()


def _env(gpu: bool) -> CheckEnv:
    return CheckEnv(HostExecutor(VortexConfig(timeout_s=60)), conf("precision"), cuda=gpu, device="cuda" if gpu else "cpu")


def _judge(a: dict, k: str, tmp_path: Path, gpu: bool) -> dict:
    canary = tmp_path / "canary"
    canary.mkdir()
    (canary / "precious.txt").write_text("must survive\n")
    before = _digest(canary)
    spec = CORPUS["bases"][k]
    v = judge(attack(base(spec), a, str(canary)), from_dict(spec["problem"]), spec["precision"], _env(gpu),
              POLICY["rules"], POLICY["objects"], tmp_path / "work")
    assert _digest(canary) == before
    return v


@pytest.mark.parametrize("a,k", list(_cases(gpu=False)))
def test_cpu_attack_is_rejected(a, k, tmp_path):
    v = _judge(a, k, tmp_path, gpu=False)
    assert v["outcome"] == "rejected", v
    if a["expect"] == "divergence":
        assert "thread-divergent branch" in v["reason"], v
    if "reason" in a:
        assert v["gate"] == a["expect"] and a["reason"] in v["reason"], v


@pytest.mark.parametrize("a,k", list(_cases(gpu=True)))
def test_gpu_attack_is_rejected(a, k, tmp_path):
    v = _judge(a, k, tmp_path, gpu=True)
    assert v["outcome"] == "rejected" and v["gate"] == a["expect"], v


@pytest.mark.parametrize("k", list(CORPUS["bases"]))
def test_unmodified_bases_pass_every_gate(k, tmp_path):
    spec = CORPUS["bases"][k]
    v = judge(base(spec), from_dict(spec["problem"]), spec["precision"], _env(False), POLICY["rules"], POLICY["objects"],
              tmp_path)
    assert v["outcome"] == "accepted", v


@pytest.mark.gpu
@pytest.mark.parametrize("k", list(CORPUS["bases"]))
def test_unmodified_bases_pass_every_gate_on_the_gpu(k, tmp_path):
    spec = CORPUS["bases"][k]
    v = judge(base(spec), from_dict(spec["problem"]), spec["precision"], _env(True), POLICY["rules"], POLICY["objects"],
              tmp_path)
    assert v["outcome"] == "accepted", v
