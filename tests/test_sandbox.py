"""Every sandbox rule (data in conf/sandbox) rejects its adversarial kernel (tests/adversarial/<rule>.cu|.c), and
generated candidates pass every rule."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from tests.conftest import conf
from vxsynth.kernels.candidate import make
from vxsynth.kernels.problem import Gemm
from vxsynth.kernels.strategy import Strategy
from vxsynth.targets.sandbox import check

ADV = Path(__file__).parent / "adversarial"
RULES = conf("sandbox")["rules"]
P = Gemm("addmm", 1, 37, 70, 45, (0, 45, 1), (0, 1, 45), True, "float32")
BASE = make(P, Strategy(block_m=16, block_n=32, thread_m=1, thread_n=2), "FP32")


@pytest.mark.parametrize("rule", [r["id"] for r in RULES if r["kind"] != "problem"])
def test_rule_rejects_its_adversarial_kernel(rule):
    files = sorted(ADV.glob(f"{rule}.*"))
    assert files, f"rule {rule} has no adversarial kernel in {ADV}"
    for f in files:
        field = "cuda_source" if f.suffix == ".cu" else "vortex_source"
        bad = dataclasses.replace(BASE, **{field: f.read_text()})
        hits = [v for v in check(bad, P, "FP32", RULES) if v.rule == rule]
        assert hits and hits[0].dialect == ("cuda" if f.suffix == ".cu" else "vortex"), (f.name, check(bad, P, "FP32", RULES))


def test_a_candidate_for_another_problem_is_rejected():
    other = make(dataclasses.replace(P, K=46, a_strides=(0, 46, 1), b_strides=(0, 1, 46)), BASE.strategy, "FP32")
    assert [v.rule for v in check(other, P, "FP32", RULES)] == ["same_problem"]
    assert [v.rule for v in check(BASE, P, "BF16", RULES)] == ["same_problem"]     # precision path changed


@pytest.mark.parametrize("s", [Strategy(), Strategy(tensor_core=True, block_k=16, vector=4, double_buffer=True),
                               Strategy(mapping="strided", stage_a=False, block_m=32, block_n=32, thread_m=2, thread_n=2)])
def test_generated_candidates_pass_every_rule(s):
    c = make(P, s, "TF32_FP16")
    assert check(c, P, "TF32_FP16", RULES) == []


def test_inline_asm_only_in_the_allowlisted_templates():
    """mma=sync candidates (ldmatrix, ldmatrix .trans, mma.sync on TF32 and BF16) pass; the same statements with
    another instruction in the template, an expression or memory operand, or on the Vortex side do not."""
    bf = Gemm("bmm", 8, 51, 40, 72, (51 * 72, 72, 1), (0, 40, 1), False, "bfloat16")
    good = [(P, "TF32_FP16", Strategy(tensor_core=True, mma="sync", block_k=16)),
            (bf, "BF16", Strategy(tensor_core=True, mma="sync", block_m=32, block_n=32, block_k=16, thread_m=2, thread_n=2, stages=3,
                                      vector=2))]
    for p, prec, s in good:
        c = make(p, s, prec)
        assert "ldmatrix" in c.cuda_source and "mma.sync" in c.cuda_source
        assert check(c, p, prec, RULES) == []
    p, prec, s = good[1]
    c = make(p, s, prec)
    assert "x4.trans" in c.cuda_source                         # B runs along N in the ring: the transposing load
    mma = c.cuda_source.index('asm volatile("mma.sync')
    edits = {"template": ('{%0,%1,%2,%3};"', '{%0,%1,%2,%3}; trap;"'),
             "expression": ('"r"(a_[0])', '"r"(a_[0] + 1)'),
             "memory": ('"=r"(a_[0])', '"=m"(a_[0])'),
             "call": ('"r"(la_)', '"r"(la_ + (unsigned)clock())')}
    for what, (old, new) in edits.items():
        at = c.cuda_source.index(old, mma if what in ("template", "expression") else 0)
        bad = dataclasses.replace(c, cuda_source=c.cuda_source[:at] + new + c.cuda_source[at + len(old):])
        assert [v.rule for v in check(bad, p, prec, RULES)] == ["no_inline_asm"], what
    stmt = c.cuda_source[mma:c.cuda_source.index(";\n", mma) + 1]
    vx = dataclasses.replace(c, vortex_source=c.vortex_source.replace("const int tid = threadIdx.x;", "const int tid = threadIdx.x;\n" + stmt, 1))
    assert [(v.rule, v.dialect) for v in check(vx, p, prec, RULES)] == [("no_inline_asm", "vortex")]


def test_every_function_of_the_host_object_is_instrumented(tmp_path):
    """Behind the attribute rule, the object rule: a Vortex half built for the host executor whose function skips the
    coverage hook (the lockstep check's eyes) is refused at the object, the generated one is built."""
    from vxsynth.targets.vortex_host import HostExecutor, VortexConfig

    ex = HostExecutor(VortexConfig())
    assert ex.build(BASE, tmp_path / "ok")[0] is not None
    src = (ADV / "attribute_allowlist.c").read_text()
    exe, err = ex.build(dataclasses.replace(BASE, vortex_source=src), tmp_path / "bad")
    assert exe is None and "function kernel_body is not instrumented" in err


def test_target_conditional_code_is_caught_without_the_cross_compiler(monkeypatch):
    """A host without riscv64-unknown-elf-gcc (the H200 hosts) still sees what SimX's compile sees: the host gcc with
    the cross compiler's predefined macros (vortex_api/rv32_predefined.h, checked against the compiler where it is)."""
    import subprocess

    from vxsynth.targets import preprocess, riscv

    gcc = riscv.compiler()
    if gcc is not None:
        flags = [f for f in riscv.FLAGS if f.startswith(("-march", "-mabi", "-std", "-ffreestanding"))]
        real = subprocess.run([gcc, *flags, "-dM", "-E", "-x", "c", "/dev/null"], capture_output=True, text=True, check=True)
        recorded = (preprocess.API / "rv32_predefined.h").read_text().split("*/", 1)[1]
        assert sorted(real.stdout.splitlines()) == [x for x in recorded.splitlines() if x]
    monkeypatch.setattr(riscv, "compiler", lambda: None)
    bad = dataclasses.replace(BASE, vortex_source=BASE.vortex_source.replace("] = v;", "] = v\n#ifdef __riscv\n * 0.5f\n#endif\n;"))
    assert bad.vortex_source != BASE.vortex_source
    assert [v.rule for v in check(bad, P, "FP32", RULES)] == ["same_code_on_every_target"]
    assert check(BASE, P, "FP32", RULES) == []
