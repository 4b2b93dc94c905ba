"""Output checks: tolerance edge cases, NaN-poisoned outputs, an input-ignoring candidate, replay of records."""

from __future__ import annotations

import dataclasses
import math
import threading

import numpy as np
import pytest

from tests.conftest import conf
from vxsynth.checks.replay import replay
from vxsynth.checks.run import CheckEnv, run
from vxsynth.checks.tolerance import judge
from vxsynth.kernels.candidate import make
from vxsynth.kernels.problem import Conv, Gemm
from vxsynth.kernels.strategy import Strategy
from vxsynth.targets.vortex_host import HostExecutor, VortexConfig

ENV = CheckEnv(HostExecutor(VortexConfig()), conf("precision"))
P = Gemm("addmm", 1, 23, 40, 33, (0, 33, 1), (0, 1, 33), True, "float32")
S = Strategy(block_m=16, block_n=32, thread_m=1, thread_n=2)


def test_near_zero_elements_are_decided_by_atol():
    ref = np.array([0.0, 1e-9, 100.0])
    assert judge(ref + [5e-4, -5e-4, 0.05], ref, atol=1e-3, rtol=1e-3)["pass"]     # 0.05 <= 1e-3 + 0.1
    v = judge(ref + [2e-3, 0.0, 0.0], ref, atol=1e-3, rtol=1e-3)
    assert not v["pass"] and v["failing"] == 1 and v["worst"][0]["index"] == [0]


def test_exact_threshold_passes_and_just_above_fails():
    b = np.array([2.0])
    tol = 0.25 + 0.5 * 2.0                                   # atol + rtol * |b| = 1.25, exact in binary
    assert judge(b + tol, b, atol=0.25, rtol=0.5)["pass"]
    assert not judge(np.nextafter(b + tol, np.inf), b, atol=0.25, rtol=0.5)["pass"]


def test_nan_and_inf_rules():
    b = np.array([1.0, np.nan, np.inf, -np.inf, 2.0])
    assert judge(b.copy(), b, atol=0, rtol=0)["pass"]                 # same non-finite values match
    a = b.copy()
    a[0] = np.nan                                                      # NaN where the reference is finite
    v = judge(a, b, atol=1.0, rtol=1.0)
    assert not v["pass"] and v["non_finite_mismatch"] == 1 and v["worst"][0]["value"] == "nan"
    a = b.copy()
    a[2] = -np.inf
    assert not judge(a, b, atol=1.0, rtol=1.0)["pass"]                # wrong infinity
    v = judge(np.array([1.0, 5.0]), np.array([1.0, 1.0]), atol=0.1, rtol=0.1)
    assert v["max_abs_err"] == 4.0 and v["max_rel_err"] == 4.0 and v["fail_fraction"] == 0.5


def test_judge_respects_the_compared_window():
    a, b = np.array([1.0, np.nan]), np.array([1.0, 3.0])
    assert judge(a, b, atol=0, rtol=0, mask=np.array([True, False]))["pass"]
    assert judge(a, b, atol=0, rtol=0, mask=np.array([False, False]))["error"] == "no element compared"


def _vortex(c, src_from, src_to):
    assert src_from in c.vortex_source
    return dataclasses.replace(c, vortex_source=c.vortex_source.replace(src_from, src_to))


def test_a_kernel_that_never_writes_its_output_fails(tmp_path):
    c = make(P, S, "FP32")
    dead = _vortex(c, "C[bz * C_SB + m * C_LD + n] = v;", "(void)v;")
    rec = run(dead, "t", "r0", ENV, tmp_path, None)["vortex_ref"]
    assert rec.verdict == "fail"
    assert all(case["vortex_ref"]["non_finite_mismatch"] == case["vortex_ref"]["compared"] for case in rec.cases)


def test_a_kernel_that_ignores_its_inputs_is_caught(tmp_path):
    c = make(P, S, "FP32")
    const = _vortex(c, "const float v = acc[i][j] + BIAS[vx_min(n, P_N - 1)];", "const float v = 0.5f * (float)(m + n);")
    rec = run(const, "t", "r0", ENV, tmp_path, None)["vortex_ref"]
    assert rec.verdict == "fail" and "does not change when inputs change" in rec.reason


def test_records_travel_with_tolerance_and_conditions(tmp_path):
    c = make(Conv(1, 1, 6, 1, 11, 5, 1, 3, (1, 1), (0, 1), (1, 1), 1, True, "float32"), S, "TF32_FP16")
    rec = run(c, "s", "r0", ENV, tmp_path, tmp_path / "checks", seed=1234)["vortex_ref"]
    assert rec.verdict == "pass" and rec.tolerance == conf("precision")["TF32_FP16"]["check2"]
    assert rec.conditions["seeds"] == [1234, 1235, 1236, 1237, 1238, 1239]
    assert rec.conditions["cases"] == ["near_zero", "large", "shifted", "rescaled", "path_bits", "normal"]
    assert rec.candidate["source"] == "generated" and rec.covered_fraction_all_cases == 1.0
    w = rec.cases[5]["vortex_ref"]
    assert {"max_abs_err", "max_rel_err", "fail_fraction", "worst"} <= set(w) and len(w["worst"]) == 8
    assert (tmp_path / "checks" / "s-r0-vortex_ref.json").exists()


@pytest.mark.parametrize("broken", [False, True])
def test_replay_reproduces_the_recorded_verdict(tmp_path, broken):
    c = make(P, S, "FP32")
    if broken:
        c = _vortex(c, "acc[i][j] += a_[i] * b_[j];", "acc[i][j] += a_[i] * b_[j] * 1.01f;")  # 1 % off: fails FP32
    slice_dir = tmp_path / "suite" / "s"
    c.save(slice_dir / "candidates" / "r000")
    rec = run(c, "s", "r000", ENV, tmp_path / "w", slice_dir / "checks")["vortex_ref"]
    assert rec.verdict == ("fail" if broken else "pass")
    r = replay(slice_dir / "checks" / "s-r000-vortex_ref.json", ENV, tmp_path / "replay")
    assert r["reproduced"] and r["replayed"] == rec.verdict
    assert [e[1] for e in r["replayed_errors"]] == pytest.approx([e[1] for e in r["recorded_errors"]])
    assert not math.isnan(r["replayed_errors"][0][1])


def test_vortex_runs_of_the_cases_at_once_give_the_same_record(tmp_path):
    """vortex_parallel (SimX: one simulator per case) runs each case in its own folder, with the same inputs, windows
    and errors as one after another."""
    c = make(P, S, "FP32")
    one = run(c, "s", "t", ENV, tmp_path / "one", None, seed=7)["vortex_ref"]
    both = run(c, "s", "t", dataclasses.replace(ENV, vortex_parallel=4), tmp_path / "par", None, seed=7)["vortex_ref"]
    assert one.verdict == both.verdict == "pass"
    for a, b in zip(one.cases, both.cases):
        assert a["case"] == b["case"] and a["vortex_windows"] == b["vortex_windows"]
        assert a["vortex_ref"]["max_abs_err"] == b["vortex_ref"]["max_abs_err"]
    assert sorted(p.name for p in (tmp_path / "par" / "vortex").iterdir() if p.is_dir()) == sorted(ENV.cases)


def test_each_case_draws_its_inputs_once_for_every_side(tmp_path, monkeypatch):
    """The reference op, the Vortex run and check 2's path reference read one draw of each case's inputs (a conv1d
    slice's 21M weights were drawn twice per case before), and the path references run beside the Vortex runs, not
    after them in the case loop."""
    from vxsynth.kernels import tensors as T
    drawn, where = [], []
    make_inputs, path_reference = T.make_inputs, T.path_reference
    monkeypatch.setattr(T, "make_inputs", lambda *a, **k: drawn.append(a[1:3]) or make_inputs(*a, **k))
    monkeypatch.setattr(T, "path_reference", lambda *a: where.append(threading.current_thread()) or path_reference(*a))
    rec = run(make(P, S, "FP32"), "s", "t", dataclasses.replace(ENV, vortex_parallel=3), tmp_path, None, seed=7)
    assert rec["vortex_ref"].verdict == "pass"
    assert sorted(drawn) == sorted((7 + i, case) for i, case in enumerate(ENV.cases))
    assert len(where) >= len(ENV.cases) and threading.main_thread() not in where


def test_one_wrong_block_is_caught_whatever_the_seed(tmp_path):
    """Issue 39, hole 12: a 40-block grid (1 wrong block) is shared between the check cases, so every seed finds the
    block and the record says the whole grid was checked; with windows alone (cover_blocks 0) the record states the
    coverage and the chance of missing it."""
    p = Gemm("addmm", 1, 256, 320, 16, (0, 16, 1), (0, 1, 16), True, "float32")
    good = make(p, Strategy(block_m=32, block_n=64, thread_m=2, thread_n=4), "FP32")
    assert good.meta["blocks"] == 40
    bad = dataclasses.replace(good, vortex_source=good.vortex_source.replace("] = v;", "] = (lin == 23) ? v * 1.25f : v;"))
    for seed in (1, 2, 3):
        rec = run(bad, "one-wrong", f"s{seed}", ENV, tmp_path / f"s{seed}", None, seed=seed)["vortex_ref"]
        assert rec.verdict == "fail" and rec.blocks == {**rec.blocks, "grid": 40, "checked": 40, "p_miss_one_wrong_block": 0.0}
    assert run(good, "one-wrong", "good", ENV, tmp_path / "good", None, seed=1)["vortex_ref"].verdict == "pass"
    windows_only = CheckEnv(HostExecutor(VortexConfig(cover_blocks=0)), conf("precision"))
    rec = run(good, "one-wrong", "w", windows_only, tmp_path / "w", None, seed=1)["vortex_ref"]
    assert rec.blocks["checked"] < 40 and rec.blocks["p_miss_one_wrong_block"] == 1 - rec.blocks["checked"] / 40


BF16_ROUND = "static inline float bf16_round_(float x) { union { float f; unsigned u; } t; t.f = x; t.u = (t.u + 0x7fffu + ((t.u >> 16) & 1u)) & 0xffff0000u; return t.f; }\n"


@pytest.mark.parametrize("precision,problem", [
    ("FP32", Gemm("addmm", 1, 7, 9, 301, (0, 301, 1), (0, 1, 301), True, "float32")),
    ("TF32_FP16", Conv(1, 1, 12, 1, 9, 6, 1, 5, (1, 1), (0, 2), (1, 1), 1, True, "float32")),
    ("BF16", Gemm("bmm", 3, 5, 11, 67, (335, 67, 1), (0, 11, 1), False, "bfloat16")),
])
def test_path_bits_inputs_sum_exactly_and_need_the_paths_own_bits(precision, problem):
    """The path_bits case: fp32 sums of its inputs are exact (the reference is exact whatever its order), and the
    same inputs rounded to the next narrower format (TF32 for FP32, BF16 for TF32, FP16 for BF16) move the output."""
    import torch
    from vxsynth.kernels import tensors as T
    bufs = T.make_inputs(problem, 11, "path_bits", precision)
    exact = T.reference(problem, {k: v.double() for k, v in bufs.items()}).numpy()
    assert np.array_equal(T.reference(problem, {k: v.float() for k, v in bufs.items()}).double().numpy(), exact)
    assert 0.1 < np.sqrt(np.mean(exact ** 2)) < 1000
    narrow = {"FP32": lambda t: (t.view(torch.int32) + 0xfff + ((t.view(torch.int32) >> 13) & 1) & ~0x1fff).view(torch.float32),
              "TF32_FP16": lambda t: t.bfloat16().float(), "BF16": lambda t: t.half().float()}[precision]
    y = T.reference(problem, {k: narrow(v.float().clone()) for k, v in bufs.items()}).double().numpy()
    t1 = conf("precision")[precision]["check1"]
    assert not judge(y, exact, **t1)["pass"]


def test_a_tf32_vortex_half_on_bf16_rounded_inputs_fails_the_sqrt_k_bound_but_passed_the_old_one(tmp_path):
    """Issue 39 hole 4: at K = 4608 the worst-case bound (2 * K * 2^-24 * |A||B|) let a Vortex half that rounds its
    inputs to BF16 through on the ordinary cases; the probabilistic bound (4 * sqrt(K) ...) does not."""
    p = Gemm("addmm", 1, 8, 16, 4608, (0, 4608, 1), (0, 1, 4608), True, "float32")
    c = make(p, Strategy(block_m=8, block_n=16, thread_m=1, thread_n=1), "TF32_FP16")
    bad = dataclasses.replace(c, vortex_source=BF16_ROUND + c.vortex_source.replace(
        "acc[i][j] += a_[i] * b_[j];", "acc[i][j] += bf16_round_(a_[i]) * bf16_round_(b_[j]);"))
    assert bad.vortex_source != c.vortex_source
    env = dataclasses.replace(ENV, cases=("normal", "shifted"))
    old = {"TF32_FP16": {**conf("precision")["TF32_FP16"], "check2": {"atol": 1e-7, "rtol": 0.0, "accum": 2.0}}}
    assert run(bad, "t", "old", dataclasses.replace(env, tolerances=old), tmp_path / "o", None, seed=5)["vortex_ref"].verdict == "pass"
    rec = run(bad, "t", "new", env, tmp_path / "n", None, seed=5)["vortex_ref"]
    assert rec.verdict == "fail" and "normal" in rec.reason
    assert run(c, "t", "good", env, tmp_path / "g", None, seed=5)["vortex_ref"].verdict == "pass"


def test_an_fp32_vortex_half_on_tf32_rounded_inputs_fails_path_bits_at_large_k(tmp_path):
    """The path_bits bound counts the cancelling part of the products once (tensors.path_bits_magnitude), not K times
    as |A||B| would: at K = 8192 a Vortex half rounding its FP32 inputs to TF32 still fails, the exact one passes."""
    p = Gemm("addmm", 1, 4, 16, 8192, (0, 8192, 1), (0, 1, 8192), True, "float32")
    c = make(p, Strategy(block_m=4, block_n=16, thread_m=1, thread_n=1), "FP32")
    tf32 = ("static inline float tf32_round_(float x) { union { float f; unsigned u; } t; t.f = x; "
            "t.u = (t.u + 0xfffu + ((t.u >> 13) & 1u)) & 0xffffe000u; return t.f; }\n")
    bad = dataclasses.replace(c, vortex_source=tf32 + c.vortex_source.replace(
        "acc[i][j] += a_[i] * b_[j];", "acc[i][j] += tf32_round_(a_[i]) * tf32_round_(b_[j]);"))
    assert bad.vortex_source != c.vortex_source
    env = dataclasses.replace(ENV, cases=("path_bits", "normal"))
    rec = run(bad, "t", "bad", env, tmp_path / "b", None, seed=3)["vortex_ref"]
    assert rec.verdict == "fail" and rec.reason.startswith("path_bits: "), rec.reason
    assert run(c, "t", "good", env, tmp_path / "g", None, seed=3)["vortex_ref"].verdict == "pass"
