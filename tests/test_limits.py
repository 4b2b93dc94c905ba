"""Compile limits (vxsynth/targets/limits.py, conf/sandbox `compile`): every compile of candidate code runs under an
address-space limit and draws on one wall-time budget per candidate; a compiler that exhausts either fails that
candidate with the limit named, never the checker, and a build stopped by the budget is not cached."""

from __future__ import annotations

import dataclasses

import pytest

from tests.conftest import conf
from vxsynth.checks import gates
from vxsynth.checks.run import CheckEnv
from vxsynth.kernels.candidate import make
from vxsynth.kernels.problem import Gemm
from vxsynth.kernels.strategy import Strategy
from vxsynth.targets import limits, preprocess, riscv
from vxsynth.targets.cuda import compile_cuda, nvcc
from vxsynth.targets.vortex_host import HostExecutor, VortexConfig

P = Gemm("addmm", 1, 37, 70, 45, (0, 45, 1), (0, 1, 45), True, "float32")
BASE = make(P, Strategy(block_m=16, block_n=32, thread_m=1, thread_n=2), "FP32")
ANCHOR = "const int tid = threadIdx.x;"
# each level squares the copies of its argument, which the preprocessor expands in memory before substituting
MACRO_BOMB = "\n".join(["#define D0_(x) x x"] + [f"#define D{i}_(x) D{i - 1}_(D{i - 1}_(x))" for i in range(1, 8)])
RANGE_BOMB = "volatile char big_[1 << 22] = {[0 ... (1 << 22) - 1] = 1}; (void)big_;"     # 4 M initialisers


def _with(c, side: str, top: str = "", body: str = ""):
    field = "cuda_source" if side == "cuda" else "vortex_source"
    src = getattr(c, field).replace(ANCHOR, ANCHOR + "\n    " + body + "\n", 1)
    return dataclasses.replace(c, **{field: top + "\n" + src})


def test_a_macro_bomb_stops_at_the_preprocessors_memory_limit():
    c = _with(BASE, "vortex", MACRO_BOMB, "int z_ = D7_(1 +) 0; (void)z_;")
    v = preprocess.view("vortex", c.vortex_source, 8_000_000, limits.Budget(limits.CompileLimits(memory_mb=256)))
    assert not v.ok and not v.too_large and "compile memory limit of 256 MB exceeded" in v.error, v.error


@pytest.mark.skipif(riscv.compiler() is None, reason="no riscv64-unknown-elf-gcc")
def test_an_initialiser_bomb_stops_at_the_compilers_memory_limit(tmp_path):
    c = _with(BASE, "vortex", body=RANGE_BOMB)
    r = riscv.cross_compile(c.vortex_source, tmp_path, budget=limits.Budget(limits.CompileLimits(memory_mb=256)))
    assert not r.ok and "rv32imf compile failed (compile memory limit of 256 MB exceeded)" in r.error, r.error


@pytest.mark.skipif(nvcc() is None, reason="no nvcc")
def test_a_template_bomb_stops_at_nvccs_memory_limit(tmp_path, monkeypatch):
    monkeypatch.setattr(limits.CompileLimits, "configured", classmethod(lambda cls: cls(memory_mb=1024)))
    top = ("template <int N, unsigned M> struct T_ {\n"
           "  static constexpr unsigned v = T_<N - 1, 2 * M>::v + T_<N - 1, 2 * M + 1>::v; };\n"
           "template <unsigned M> struct T_<0, M> { static constexpr unsigned v = M; };")
    r = compile_cuda(_with(BASE, "cuda", top, "if (tid > 100000) C[0] = T_<30, 0>::v;"), tmp_path)
    assert not r.ok and "nvcc failed (compile memory limit of 1024 MB exceeded)" in r.error, r.error


def test_the_budget_is_shared_by_a_candidates_compiles():
    """Each stage well under its own limit; together they pass the budget: the one running then is stopped, and the
    next does not start."""
    b = limits.Budget(limits.CompileLimits(total_s=2))
    runs = [b.run(["sleep", "0.7"], 120) for _ in range(4)]
    assert [r.ok for r in runs[:2]] == [True, True]
    assert not runs[2].ok and "compile time budget of 2 s per candidate exceeded" in runs[2].error
    assert not runs[3].ok and runs[3].wall_s == 0 and "budget of 2 s per candidate spent" in runs[3].error
    assert b.spent < 2.5


def test_a_candidate_stopped_by_its_budget_is_not_cached_for_the_next(tmp_path):
    env = CheckEnv(HostExecutor(VortexConfig(), cache_dir=tmp_path / "rt"), conf("precision"),
                   compile_cache=tmp_path / "cache")
    objects = conf("sandbox")["objects"]
    spent = dataclasses.replace(BASE)
    limits.of(spent).spent = limits.of(spent).limits.total_s
    b = gates.build(spent, env, objects, tmp_path / "w1")
    assert b.error and "compile time budget" in b.error and "per candidate spent" in b.error, b.error
    assert not list((tmp_path / "cache").rglob("result.json"))
    same_source = dataclasses.replace(BASE)
    b = gates.build(same_source, env, objects, tmp_path / "w2")
    assert not b.error and b.exe is not None, b.error
