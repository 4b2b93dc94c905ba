"""How a candidate's run failed is a field of its run result (`targets.proc.FAILURES`), set by the executor from how the
run ended; the slice's `Evaluator` judges crashed or rejected from it. Real candidates (the attack corpus's fp32
linear base, edited) on the jailed Vortex host executor."""

from __future__ import annotations

import pytest
import yaml

from tests.conftest import ROOT, conf
from vxsynth.checks.gates import attack, base
from vxsynth.checks.run import CheckEnv, checked
from vxsynth.kernels import tensors as T
from vxsynth.reconstruct.evaluate import Evaluator
from vxsynth.targets import jail
from vxsynth.targets.vortex_host import HostExecutor, VortexConfig

SPEC = yaml.safe_load((ROOT / "tests" / "attacks.yaml").read_text())["bases"]["fp32_linear"]
pytestmark = pytest.mark.skipif(jail.available() is not None, reason=str(jail.available()))

BODIES = {
    "crash": "{ volatile int z_ = 0; volatile int q_ = tid / z_; (void)q_; }",           # every lane: SIGFPE
    "timeout": "{ volatile int spin_ = 1; while (spin_) { } }",                           # never returns
    "guard_zone": "C[P_B * C_SB + tid] = 0.0f;",                                          # past its output
    "divergence": "if (tid & 1) { volatile float z_ = 0.0f; (void)z_; }",                 # lanes part ways
    "not_run": "this is not C;",                                                          # does not build
}


def _candidate(kind: str):
    return attack(base(SPEC), {"id": kind, "side": "vortex", "body": BODIES[kind]}, "")


@pytest.mark.parametrize("kind", list(BODIES))
def test_the_host_executor_says_how_a_run_failed(kind, tmp_path):
    c = _candidate(kind)
    r = HostExecutor(VortexConfig(timeout_s=10)).run(c, T.vortex_inputs(c.problem, c.precision,
                                                                          T.make_inputs(c.problem, 0)), tmp_path)
    assert not r.ok and r.failure == kind, (r.failure, r.error)


def test_a_run_that_ran_has_no_failure(tmp_path):
    c = base(SPEC)
    r = HostExecutor(VortexConfig()).run(c, T.vortex_inputs(c.problem, c.precision, T.make_inputs(c.problem, 0)), tmp_path)
    assert r.ok and r.failure == "", r.error


@pytest.mark.parametrize("kind,outcome,gate", [("crash", "crashed", "run"), ("timeout", "crashed", "run"),
                                               ("guard_zone", "rejected", "run")])
def test_the_evaluator_judges_from_the_failure_kind(kind, outcome, gate, tmp_path):
    """The checks say which side failed how; a crash or a hang is the candidate's crash, a write into a guard zone
    a rejection, whatever the error text says."""
    env = CheckEnv(HostExecutor(VortexConfig(timeout_s=10)), conf("precision"), cases=("normal",))
    c = _candidate(kind)
    done = checked(c, "s", "t", env, tmp_path / "c", None)
    assert done.failures == {"vortex": kind} and done.records["vortex_ref"].verdict == "fail"
    ev = Evaluator("s", c.problem, c.precision, env, [], None).check(c, "t", tmp_path / "e")
    assert (ev.outcome, ev.gate) == (outcome, gate), ev.reason
