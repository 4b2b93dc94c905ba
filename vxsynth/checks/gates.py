"""The build gates of a candidate (CUDA compile + PTX rules, rv32 compile + object rules, host build + object rules),
which the slice's `reconstruct.evaluate.Evaluator` runs between the sandbox rules and the checks, and the attack
corpus's candidates (tests/attacks.yaml: an attack is an edit of a real generated candidate)."""

from __future__ import annotations

import dataclasses
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from vxsynth.checks import run as checks
from vxsynth.kernels.candidate import Candidate, make
from vxsynth.kernels.problem import from_dict, to_dict
from vxsynth.kernels.strategy import Strategy
from vxsynth.store.io import read_json, sha256_obj, write_json
from vxsynth.targets import limits, objcheck, riscv
from vxsynth.targets.cuda import compile_cuda, nvcc
from vxsynth.targets.vortex_host import VortexConfig, lmem_per_block

ANCHOR = "const int tid = threadIdx.x;"


def base(spec: dict) -> Candidate:
    """A corpus base: its strategy's pair, the Vortex half fitted to a default core's local memory."""
    s = Strategy.from_dict(spec.get("strategy", {}))
    return make(from_dict(spec["problem"]), s, spec["precision"], lmem_per_block(s.threads, VortexConfig()))


def every_base(corpus: dict) -> list[str]:
    """The corpus's bases an attack that names none runs on (all but the `named_only` ones)."""
    return [k for k, spec in corpus["bases"].items() if not spec.get("named_only")]


def attack(c: Candidate, a: dict, canary: str) -> Candidate:
    """The candidate with attack `a` applied to one side (CANARY in its text names the canary directory)."""
    field = "cuda_source" if a["side"] == "cuda" else "vortex_source"
    if "cuda_strategy" in a:       # the CUDA half of another strategy/path, renamed to this candidate's kernel
        other = make(c.problem, Strategy.from_dict({**c.strategy.to_dict(), **a["cuda_strategy"]}), a["cuda_precision"])
        return dataclasses.replace(c, cuda_source=other.cuda_source.replace(other.name, c.name))
    if "claim" in a:               # metadata only: the candidate says it implements another problem or precision
        claim = a["claim"]
        c = dataclasses.replace(c, precision=claim.get("precision", c.precision),
                                problem=from_dict({**to_dict(c.problem), **claim.get("problem", {})}))
    src = getattr(c, field)
    sub = lambda t: t.replace("CANARY", canary)          # noqa: E731
    for old, new in a.get("replace", []):
        assert old in src, f"attack {a['id']}: {old!r} not in the {a['side']} source"
        src = src.replace(old, sub(new))
    for old, new in a.get("replace_last", []):
        i = src.rindex(old)
        src = src[:i] + sub(new) + src[i + len(old):]
    if "body" in a:
        src = src.replace(ANCHOR, ANCHOR + "\n    " + sub(a["body"]) + "\n", 1)
    if "top" in a:
        src = sub(a["top"]) + "\n" + src
    return dataclasses.replace(c, **{field: src})


@dataclass
class Built:
    cubin: Path | None = None
    exe: Path | None = None
    error: str = ""                   # why the candidate was rejected while building ("" when built)
    notes: list = field(default_factory=list)
    gate: str = ""                    # which gate rejected it: compile, or object (an object rule)


def build(c: Candidate, env: checks.CheckEnv, objects: dict | None, work: Path, order: str = "cuda_first",
          judge_cuda: bool = False) -> Built:
    """Compile both halves, each followed by its object rules: CUDA (when env.cuda, or `judge_cuda` and nvcc is
    here: then compiled and judged but not run), rv32 cross-compile, host build. `order`: which half first."""
    objects = objects or {}
    out = Built()
    for side in (["vortex", "cuda"] if order == "vortex_first" else ["cuda", "vortex"]):
        if side == "cuda" and (env.cuda or (judge_cuda and nvcc() is not None)):
            cr = compile_cuda(c, work / "cuda", env.arch, rules=objects.get("cuda_ptx"), cache=env.compile_cache)
            if not cr.ok:
                out.error, out.gate = f"cuda compile: {cr.error}", _gate(cr.error)
                return out
            out.cubin = cr.cubin if env.cuda else None
        elif side == "vortex":
            out.exe, why, notes = _vortex(c, env, objects, work)
            out.notes += notes
            if why:
                out.error, out.gate = why, _gate(why)
                return out
    return out


def _gate(error: str) -> str:
    return "object" if isinstance(error, objcheck.Violation) else "compile"


def _vortex(c: Candidate, env: checks.CheckEnv, objects: dict, work: Path) -> tuple[Path | None, str, list]:
    """rv32 cross-compile + its object rules, then the host build + its object rules: (executable, error, notes).
    With `env.compile_cache`, a source built before under the same settings is answered from there (not a build
    stopped by the candidate's compile time budget, which depends on its other compiles)."""
    notes = [] if riscv.compiler() else ["RISC-V cross-compile not run: no riscv64-unknown-elf-gcc on this host"]
    entry = None
    if env.compile_cache is not None:
        entry = Path(env.compile_cache) / "vortex" / sha256_obj(
            [c.vortex_source, objects, env.vortex.cfg.__dict__, riscv.compiler(), riscv.FLAGS, objcheck.CACHE_FORMAT])[:24]
        if (entry / "result.json").exists():
            r = read_json(entry / "result.json")
            err = objcheck.Violation(r["error"]) if r["object_rules"] else r["error"]
            return (entry / "vx_host_run" if not err else None), err, notes
    err, exe = "", None
    if riscv.compiler() is not None:
        rv = riscv.cross_compile(c.vortex_source, work / "rv32", rules=objects.get("vortex_rv32"), budget=limits.of(c))
        err = "" if rv.ok else objcheck.keep(rv.error, f"vortex cross-compile: {rv.error}")
    if not err:
        exe, why = env.vortex.build(c, work / "vortex")
        err = "" if exe is not None else objcheck.keep(why, f"vortex build: {why}")
    if entry is not None and not limits.over_budget(err):
        entry.mkdir(parents=True, exist_ok=True)
        if exe is not None:
            shutil.copy2(exe, entry / "vx_host_run.tmp")
            (entry / "vx_host_run.tmp").rename(entry / "vx_host_run")
            exe = entry / "vx_host_run"
        write_json(entry / "result.json", {"error": err, "object_rules": isinstance(err, objcheck.Violation)})
    return exe, err, notes
