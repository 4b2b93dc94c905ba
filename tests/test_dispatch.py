"""The replacement entry on a real tiny ACT: its linear layers, and its convolutions through NHWC kernels, dispatched
to generated kernels (the Vortex host executor standing in for the device) give the same actions, and the dispatch is
proven."""

from __future__ import annotations


import pytest
import torch

from tests.conftest import conf
from vxsynth.dispatch.replace import Replacement, Route, slice_signature
from vxsynth.dispatch.runners import vortex_runner
from vxsynth.kernels.candidate import make
from vxsynth.kernels.strategy import Strategy
from vxsynth.profiling.stage import profile_workload
from vxsynth.records import SliceRecord
from vxsynth.slicing.stage import run as slice_run
from vxsynth.targets.vortex_host import HostExecutor, VortexConfig
from vxsynth.workloads.builders import build_policy, make_batch, run_inference
from vxsynth.workloads.spec import WorkloadSpec


ORIGINAL_LINEAR = torch.nn.functional.linear


@pytest.fixture(scope="module")
def act_tiny_slices(tmp_path_factory):
    w = conf("workload", "act")
    w["preset"] = "tiny"
    root = tmp_path_factory.mktemp("act")
    profile_workload(conf("platform", "cpu"), w, root / "cpu" / "act_tiny", log=lambda m: None)
    sl = conf("slicing") | {"coverage": 1.0, "max_per_model": 100, "max_suite": 100}
    slice_run([root / "cpu" / "act_tiny"], root / "slices", sl, conf("precision"), log=lambda m: None)
    return w, [SliceRecord.load(p) for p in sorted((root / "slices").glob("*/slice.json"))]


def _dispatched_actions_match(w, recs, strategy: Strategy, op: str) -> None:
    """Every record's call routed to `strategy`'s Vortex kernel: the same actions, and the dispatch proven."""
    ex, log, routes = HostExecutor(VortexConfig()), [], []
    for rec in recs:
        c = make(rec.problem, strategy, rec.precision)
        assert c.strategy.layout == strategy.layout                       # not repaired away
        routes.append(Route(rec.slice_id, slice_signature(rec.op_call), vortex_runner(c, ex, rec.op_call["op"], log),
                            c.name, rec.occurrences[0]["calls_per_inference"]))
    spec = WorkloadSpec.from_config(w)
    policy, _ = build_policy(spec, "cpu")
    batch = make_batch(spec, "cpu")
    ref = run_inference(policy, batch)
    rep = Replacement(routes)
    with rep.active():
        out = run_inference(policy, batch)
    assert rep.prove(1, log) == []
    dispatched = [e for e in rep.log if e["dispatched"]]
    assert len(dispatched) == sum(r.expected_per_inference for r in routes) == len(log)
    assert {e["op"] for e in dispatched} == {op}
    assert any(not e["dispatched"] for e in rep.log)                   # every other call ran the original
    torch.testing.assert_close(out, ref, atol=1e-3, rtol=1e-3)
    assert torch.nn.functional.linear is ORIGINAL_LINEAR                      # patches removed on exit


def test_linear_layers_run_on_generated_kernels_with_the_same_actions(act_tiny_slices):
    w, recs = act_tiny_slices
    linears = [r for r in recs if r.family == "linear"]
    assert len(linears) >= 5
    _dispatched_actions_match(w, linears, Strategy(block_m=16, block_n=32, thread_m=1, thread_n=2), "aten::linear")


def test_convolutions_run_on_nhwc_kernels_with_the_same_actions(act_tiny_slices):
    """The runner hands an NHWC kernel the call's NCHW tensors transformed (activations NHWC, weights KRSC)."""
    w, recs = act_tiny_slices
    convs = [r for r in recs if r.family == "conv2d"]
    assert len(convs) >= 2
    _dispatched_actions_match(w, convs, Strategy(block_m=32, block_n=32, block_k=8, thread_m=2, thread_n=2, layout="nhwc"),
                              "aten::conv2d")


def test_a_dispatch_that_did_not_happen_fails_the_proof(act_tiny_slices):
    _, recs = act_tiny_slices
    rec = recs[0]
    route = Route(rec.slice_id, slice_signature(rec.op_call), lambda t: None, "vxk_never", 2)
    problems = Replacement([route]).prove(1, executed_kernels=[])
    assert problems == [f"{rec.slice_id}: dispatched 0 times, expected 2 (2 calls per inference x 1)"]
