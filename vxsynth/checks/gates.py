"""Every gate a candidate must pass, in the loop's order, as one verdict: sandbox rules -> CUDA compile + PTX rules ->
rv32 compile + object rules -> host build + object rules -> jailed runs and output checks -> (GPU) compute-sanitizer.
Used to judge the attack corpus (tests/attacks.yaml): an attack is an edit of a real generated candidate."""

from __future__ import annotations

import dataclasses
import traceback
from pathlib import Path

from vxsynth.checks import run as checks
from vxsynth.kernels.candidate import Candidate, make
from vxsynth.kernels.problem import from_dict
from vxsynth.kernels.strategy import Strategy
from vxsynth.targets import riscv, sandbox, sanitizer
from vxsynth.targets.cuda import compile_cuda, nvcc

ANCHOR = "const int tid = threadIdx.x;"


def base(spec: dict) -> Candidate:
    return make(from_dict(spec["problem"]), Strategy.from_dict(spec.get("strategy", {})), spec["precision"])


def attack(c: Candidate, a: dict, canary: str) -> Candidate:
    """The candidate with attack `a` applied to one side (CANARY in its text names the canary directory)."""
    field = "cuda_source" if a["side"] == "cuda" else "vortex_source"
    if "cuda_strategy" in a:       # the CUDA half of another strategy/path, renamed to this candidate's kernel
        other = make(c.problem, Strategy.from_dict({**c.strategy.to_dict(), **a["cuda_strategy"]}), a["cuda_precision"])
        return dataclasses.replace(c, cuda_source=other.cuda_source.replace(other.name, c.name))
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


def judge(c: Candidate, env: checks.CheckEnv, rules: list[dict], objects: dict, work: Path, seed: int = 1) -> dict:
    """{outcome: accepted | rejected | crashed, gate, reason} for candidate `c` (its own problem and precision)."""
    try:
        bad = sandbox.check(c, c.problem, c.precision, rules)
        if bad:
            return _verdict("rejected", "sandbox", "; ".join(map(str, bad)))
        cubin = None
        if env.cuda or nvcc() is not None:          # without a GPU the CUDA half is still compiled and judged
            cr = compile_cuda(c, work / "cuda", env.arch, rules=objects["cuda_ptx"])
            if not cr.ok:
                return _verdict("rejected", "object" if "object rules" in cr.error else "compile", cr.error)
            cubin = cr.cubin if env.cuda else None
        if riscv.compiler():
            rv = riscv.cross_compile(c.vortex_source, work / "rv32", rules=objects["vortex_rv32"])
            if not rv.ok:
                return _verdict("rejected", "object" if "object rules" in rv.error else "compile", rv.error)
        exe, err = env.vortex.build(c, work / "vortex")
        if exe is None:
            return _verdict("rejected", "object" if "object rules" in err else "compile", err)
        recs = checks.run(c, "attack", "a", env, work, None, seed=seed, cubin=cubin, vortex_exe=exe)
        failed = [r for r in recs.values() if r["verdict"] != "pass"]
        if failed:
            reason = "; ".join(f"{r['kind']}: {r['reason']}" for r in failed)
            ran = "run failed" in reason or "guard zone" in reason
            return _verdict("rejected", "run" if ran else "check", reason)
        if env.cuda and sanitizer.available():
            ok, results = sanitizer.check(work / "cuda" / "job.json")
            if not ok:
                return _verdict("rejected", "sanitizer", "; ".join(f"{r['tool']}: {r['summary']}" for r in results if not r["ok"]))
        return _verdict("accepted", "", "passed every gate")
    except Exception as e:  # noqa: BLE001 - a crash of the checker is what this verdict exists to count
        return _verdict("crashed", "checker", f"{type(e).__name__}: {e} @ {traceback.format_exc(limit=3).splitlines()[-1]}")


def _verdict(outcome: str, gate: str, reason: str) -> dict:
    return {"outcome": outcome, "gate": gate, "reason": reason[:400]}
