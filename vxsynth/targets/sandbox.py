"""Static rules a candidate must pass before it is compiled or run, judged on what the compiler sees (the
preprocessed, normalised tokens of the candidate's own file). The rules are data (conf/sandbox)."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from vxsynth.kernels.candidate import Candidate
from vxsynth.kernels.problem import Problem
from vxsynth.targets import limits, preprocess

POLICY = Path(__file__).resolve().parents[2] / "conf" / "sandbox" / "default.yaml"
_CUDA_ENTRY = re.compile(r'extern\s+""\s+__global__\s+void\s+(?:__launch_bounds__\s*\(\s*\w+\s*(?:,\s*\w+\s*)?\)\s+)?'
                         r'(?:__cluster_dims__\s*\([^()]*\)\s+)?(\w+)\s*\(([^)]*)\)')
_CUDA_PARAMS = ["const in_t* __restrict__ A", "const in_t* __restrict__ B", "const in_t* __restrict__ BIAS",
                "out_t* __restrict__ C"]
_CUDA_WORKSPACE = "float* __restrict__ WS"     # 16-bit split-K: fp32 partial tiles, zeroed by the launcher
_CUDA_TENSOR_MAP = "const tmap_t TMA_{}"        # tma: an operand's tensor map, encoded by the launcher
_CLUSTER_DIMS = re.compile(r"__cluster_dims__\s*\(([^()]*)\)")     # as the normalised view spells the attribute
_MAP_USE = re.compile(r"(?<!\(unsigned long long\)&)\bTMA_[AB]\b")   # the TMA copy template's one use of it


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


def _interface(dialect: str, code: str, name: str, workspace: bool, maps: list[str], cluster: int = 1) -> str | None:
    dims = ["".join(d.split()) for d in _CLUSTER_DIMS.findall(code)]
    if dims != ([f"{cluster},1,1"] if cluster > 1 and dialect == "cuda" else []):   # clusters only as the strategy has them
        return f"cluster dims {dims} where the strategy launches " + (f"clusters of {cluster}" if cluster > 1 else "no clusters")
    if dialect == "cuda":
        entries = _CUDA_ENTRY.findall(code)
        n_global = len(re.findall(r"\b__global__\b", code))
        if n_global != 1 or len(entries) != 1:
            return f"{n_global} __global__ functions"
        kname, params = entries[0]
        got = [" ".join(p.split()) for p in params.split(",")]
        want = _CUDA_PARAMS + ([_CUDA_WORKSPACE] if workspace else []) + [_CUDA_TENSOR_MAP.format(op.upper()) for op in maps]
        if kname != name or got != want:
            return f"{kname}({', '.join(got)})"
        params_at = _CUDA_ENTRY.search(code).span(2)
        if m := _MAP_USE.search(code[:params_at[0]] + code[params_at[1]:]):    # a map is only ever its own parameter
            return f"tensor map name used other than as its parameter's address: {m.group(0)}"
        return None
    if len(re.findall(r"\bint\s+main\s*\(", code)) != 1 or len(re.findall(r"\bvx_spawn_threads\s*\(", code)) != 1:
        return "needs exactly one main() calling vx_spawn_threads once"
    if not re.search(r"\bkernel_body\s*\(\s*kernel_arg_t\s*\*\s*arg\s*\)", code):
        return "kernel_body(kernel_arg_t* arg) missing"
    return None


def _state(code: str, rule: dict) -> str | None:
    decls, bodies = preprocess.top_level(code)
    objs = [d for d in decls if preprocess.declares_object(d)]
    if objs:
        return f"file-scope variable: {objs[0][:80]}"
    words = "|".join(rule["body_keywords"])
    for b in bodies:
        if m := re.search(rf"\b({words})\b[^;{{}}]*", b):
            return f"in a function: {m.group(0)[:80]}"
    return None


def _table(code: str, min_elements: int) -> str | None:
    for m in re.finditer(r"\{([^{};]*)\}", code):
        depth, commas = 0, 0
        for ch in m.group(1):
            depth += {"(": 1, ")": -1, "[": 1, "]": -1}.get(ch, 0)
            commas += ch == "," and depth == 0
        if commas + 1 >= min_elements:
            return f"brace list of {commas + 1} elements: {m.group(0)[:60]}"
    return None


def _asm(statements: tuple, rule: dict, dialect: str) -> str | None:
    """The first inline-assembly statement that matches none of the rule's templates for `dialect`."""
    allowed = [re.compile(t.replace("OP", rule["operand"])) for t in rule.get("allow", {}).get(dialect, [])]
    return next((st[:120] for st in statements if not any(a.fullmatch(st) for a in allowed)), None)


def check(c: Candidate, problem: Problem, precision: str, rules: list[dict],
          arch: str = preprocess.CUDA_ARCH) -> list[Violation]:
    """Every violation of `rules` by candidate `c` for a slice with `problem` and `precision`. Rules judge each
    source as its compiler (CUDA: for `arch`) sees it (`preprocess.view`, under the candidate's compile limits); a
    source the preprocessor rejects is itself a violation."""
    out: list[Violation] = []
    views = {}
    cap = next((r for r in rules if r["kind"] == "max_preprocessed_bytes"), None)
    for dialect, src in (("cuda", c.cuda_source), ("vortex", c.vortex_source)):
        if any(r["kind"] == "max_bytes" and len(src) > int(r["limit"]) for r in rules):
            continue                     # judged below without preprocessing
        v = preprocess.view(dialect, src, cap and int(cap["output_limit"]), limits.of(c), arch)
        views[dialect] = v
        if v.too_large:
            out.append(Violation(cap["id"], dialect, cap.get("message", cap["id"]), v.error[:200]))
        elif not v.ok:
            out.append(Violation("preprocess", dialect, "the preprocessor rejects the source", v.error[:200]))
    for rule in rules:
        kind, rid, msg = rule["kind"], rule["id"], rule.get("message", rule["id"])
        if kind == "problem":
            if c.problem != problem or c.precision != precision:
                out.append(Violation(rid, "both", msg, f"{c.problem} / {c.precision}"))
            continue
        for dialect, src in (("cuda", c.cuda_source), ("vortex", c.vortex_source)):
            if kind == "max_bytes":
                ev = f"{len(src)} bytes" if len(src) > int(rule["limit"]) else None
                if ev:
                    out.append(Violation(rid, dialect, msg, ev))
                continue
            v = views.get(dialect)
            if v is None or not v.ok:
                continue
            code, ev = v.text, None
            if kind == "regex":
                m = re.search(rule["pattern"], code, re.M)
                ev = m.group(0)[:80] if m else None
            elif kind == "includes":
                bad = [h for h in v.includes if h[1:-1] not in rule["allow"]]     # "<name>" only: no include_next
                ev = ", ".join(bad) if bad else None
            elif kind == "interface":
                lc = c.meta.get("launch", {})
                ev = _interface(dialect, code, c.name, bool(lc.get("workspace_words")),
                                [m.get("operand", "") for m in lc.get("tensor_maps", [])], c.strategy.cluster)
            elif kind == "state":
                ev = _state(code, rule)
            elif kind == "table":
                ev = _table(code, int(rule["min_elements"]))
            elif kind == "asm":
                ev = _asm(v.asm, rule, dialect)
            elif kind == "line_directive":
                ev = v.line_directive
            elif kind == "attributes":
                ev = next((a for a in v.attributes if not any(re.fullmatch(x, a) for x in rule["allow"])), None)
            elif kind == "targets":
                ev = v.targets_differ
            elif kind == "max_preprocessed_bytes":
                ev = f"{len(v.text)} bytes of its own text" if len(v.text) > int(rule["limit"]) else None
            else:
                raise ValueError(f"sandbox rule {rid}: unknown kind {kind!r}")
            if ev is not None:
                out.append(Violation(rid, dialect, msg, ev))
    return out
