"""The attack corpus (tests/attacks.yaml), judged by the slice's `Evaluator` (the loop's own gates and verdicts): every
attack on every base is rejected by some gate, none crashes the checker, no file of a canary directory changes, and
the unmodified bases pass. CPU attacks run here
(CUDA halves compiled and judged with nvcc when present); `gpu: true` attacks run with `pytest -m gpu`."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT, conf
from vxsynth.checks.gates import attack, base, every_base
from vxsynth.checks.run import CheckEnv
from vxsynth.kernels.problem import from_dict
from vxsynth.reconstruct.evaluate import Evaluator
from vxsynth.records import SliceRecord
from vxsynth.targets import jail
from vxsynth.targets.vortex_host import HostExecutor, VortexConfig

CORPUS = yaml.safe_load((ROOT / "tests" / "attacks.yaml").read_text())
POLICY = conf("sandbox")
pytestmark = pytest.mark.skipif(jail.available() is not None, reason=str(jail.available()))


def _cases(gpu: bool):
    for a in CORPUS["attacks"]:
        if bool(a.get("gpu")) != gpu:
            continue
        for k in ([a["base"]] if "base" in a else every_base(CORPUS)):
            yield pytest.param(a, k, id=f"{a['id']}-{k}", marks=[pytest.mark.gpu] if gpu else [])


def _digest(d: Path) -> str:
    return hashlib.md5(b"".join(p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file())).hexdigest()


def _env(gpu: bool) -> CheckEnv:
    return CheckEnv(HostExecutor(VortexConfig(timeout_s=60)), conf("precision"), cuda=gpu, device="cuda" if gpu else "cpu")


def _evaluator(k: str, gpu: bool) -> Evaluator:
    spec = CORPUS["bases"][k]
    return Evaluator(f"attack-{k}", from_dict(spec["problem"]), spec["precision"], _env(gpu), POLICY["rules"], POLICY["objects"])


def _judge(a: dict, k: str, tmp_path: Path, gpu: bool):
    canary = tmp_path / "canary"
    canary.mkdir()
    (canary / "precious.txt").write_text("must survive\n")
    before = _digest(canary)
    spec = CORPUS["bases"][k]
    v = _evaluator(k, gpu).judge(attack(base(spec), a, str(canary)), tmp_path / "work")
    assert _digest(canary) == before
    return v


@pytest.mark.parametrize("a,k", list(_cases(gpu=False)))
def test_cpu_attack_is_rejected(a, k, tmp_path):
    v = _judge(a, k, tmp_path, gpu=False)
    assert v.outcome == "rejected", (v.gate, v.reason)
    if a["expect"] == "divergence":
        assert v.gate == "divergence" and "thread-divergent branch" in v.reason, (v.gate, v.reason)
    if "reason" in a:
        assert v.gate == a["expect"] and a["reason"] in v.reason, (v.gate, v.reason)


@pytest.mark.parametrize("a,k", list(_cases(gpu=True)))
def test_gpu_attack_is_rejected(a, k, tmp_path):
    v = _judge(a, k, tmp_path, gpu=True)
    assert v.outcome == "rejected" and v.gate == a["expect"], (v.gate, v.reason)


@pytest.mark.parametrize("k", list(CORPUS["bases"]))
def test_unmodified_bases_pass_every_gate(k, tmp_path):
    v = _evaluator(k, False).judge(base(CORPUS["bases"][k]), tmp_path)
    assert v.passed, (v.gate, v.reason)


@pytest.mark.gpu
@pytest.mark.parametrize("k", list(CORPUS["bases"]))
def test_unmodified_bases_pass_every_gate_on_the_gpu(k, tmp_path):
    v = _evaluator(k, True).judge(base(CORPUS["bases"][k]), tmp_path)
    assert v.passed, (v.gate, v.reason)


LOOP_SAMPLE = ["builtin_printf_vx", "fnptr_from_int", "scale_1p2", "divergent_branch", "write_past_output_vx",
               "unstaged_kernel_labelled_staged", "bf16_path_via_fp16_vx"]


@pytest.mark.parametrize("aid", LOOP_SAMPLE)
def test_the_loop_gives_an_attack_the_corpus_verdict(aid, tmp_path):
    """An attack proposed to the loop as a free-form pair (`evaluate_batch`, the loop's own path) ends as the
    corpus's judgment says: the same outcome and reason (up to the counts, which depend on the drawn seed)."""
    from vxsynth.reconstruct.loop import LoopConfig, LoopEnv, evaluate_batch

    a = next(x for x in CORPUS["attacks"] if x["id"] == aid)
    k = a.get("base", "fp32_linear")
    spec = CORPUS["bases"][k]
    c = attack(base(spec), a, str(tmp_path / "canary"))
    v = _evaluator(k, False).judge(c, tmp_path / "judge")
    rec = SliceRecord(schema_version=1, slice_id=f"attack-{k}", family="attack", precision=spec["precision"],
                      problem=from_dict(spec["problem"]), op_call={}, platform="cpu", environment={}, occurrences=[],
                      gpu_time_us=0.0, kernels=[], main_kernel="", reference_signature={}, name_hints={},
                      tolerance=conf("precision")[spec["precision"]])        # the attacked base, as a slice
    env = LoopEnv(_env(False), POLICY["rules"], objects=POLICY["objects"])
    row, = evaluate_batch(rec, [(1, c.strategy, {}, aid, "", (c.cuda_source, c.vortex_source))],
                          0, env, LoopConfig(), "t", tmp_path / "out", tmp_path / "work", {}, None)
    assert (row.decision, v.outcome) == ("rejected", "rejected")
    words = lambda r: re.sub(r"\d+", "#", r.split(": ", 1)[-1])[:120]     # noqa: E731 - counts differ with the seed
    assert words(row.reason) == words(v.reason)
