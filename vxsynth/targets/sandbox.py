"""Static rules a candidate must pass before it is compiled or run. The rules are data (conf/sandbox)."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from vxsynth.kernels.candidate import Candidate
from vxsynth.kernels.problem import Problem

POLICY = Path(__file__).resolve().parents[2] / "conf" / "sandbox" / "default.yaml"
_COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_CUDA_ENTRY = re.compile(r'extern\s+"C"\s+__global__\s+void\s+(?:__launch_bounds__\s*\(\s*\w+\s*(?:,\s*\w+\s*)?\)\s+)?(\w+)\s*\(([^)]*)\)')
_CUDA_PARAMS = ["const in_t* __restrict__ A", "const in_t* __restrict__ B", "const in_t* __restrict__ BIAS",
                "out_t* __restrict__ C"]


@dataclass(frozen=True)
class Violation:
    rule: str
    dialect: str
    message: str
    evidence: str

    def __str__(self) -> str:
        return f"{self.rule} ({self.dialect}): {self.message} [{self.evidence}]"


@functools.lru_cache(maxsize=1)
def default_policy() -> dict:
    """conf/sandbox/default.yaml, for callers that get no composed configuration (bare GPU hosts, benches)."""
    return yaml.safe_load(POLICY.read_text())


def strip_comments(src: str) -> str:
    return _COMMENTS.sub(" ", src)


def _interface(dialect: str, src: str, name: str) -> str | None:
    if dialect == "cuda":
        entries = _CUDA_ENTRY.findall(src)
        if len(re.findall(r"__global__", src)) != 1 or len(entries) != 1:
            return f"{len(re.findall(r'__global__', src))} __global__ functions"
        kname, params = entries[0]
        got = [" ".join(p.split()) for p in params.split(",")]
        if kname != name or got != _CUDA_PARAMS:
            return f"{kname}({', '.join(got)})"
        return None
    if len(re.findall(r"\bint\s+main\s*\(", src)) != 1 or len(re.findall(r"\bvx_spawn_threads\s*\(", src)) != 1:
        return "needs exactly one main() calling vx_spawn_threads once"
    if not re.search(r"\bkernel_body\s*\(\s*kernel_arg_t\s*\*\s*arg\s*\)", src):
        return "kernel_body(kernel_arg_t* arg) missing"
    return None


def check(c: Candidate, problem: Problem, precision: str, rules: list[dict]) -> list[Violation]:
    """Every violation of `rules` by candidate `c` for a slice with `problem` and `precision`."""
    out: list[Violation] = []
    for rule in rules:
        kind, rid, msg = rule["kind"], rule["id"], rule.get("message", rule["id"])
        if kind == "problem":
            if c.problem != problem or c.precision != precision:
                out.append(Violation(rid, "both", msg, f"{c.problem} / {c.precision}"))
            continue
        for dialect, src in (("cuda", c.cuda_source), ("vortex", c.vortex_source)):
            code = strip_comments(src)
            ev = None
            if kind == "regex":
                m = re.search(rule["pattern"], code, re.M)
                ev = m.group(0)[:80] if m else None
            elif kind == "includes":
                bad = [h for h in re.findall(r'#\s*include\s*[<"]([^>"]+)[>"]', code) if h not in rule["allow"]]
                ev = ", ".join(bad) if bad else None
            elif kind == "interface":
                ev = _interface(dialect, code, c.name)
            elif kind == "max_bytes":
                ev = f"{len(src)} bytes" if len(src) > int(rule["limit"]) else None
            else:
                raise ValueError(f"sandbox rule {rid}: unknown kind {kind!r}")
            if ev is not None:
                out.append(Violation(rid, dialect, msg, ev))
    return out
