"""One evaluator for every candidate of a slice, whoever proposed it (the loop's agents, the attack corpus, a model's
free-form pair): the same gates in the same order with the same verdicts.

Gates: sandbox rules -> both builds with their object rules (`checks.gates.build`) -> the jailed runs and output
checks of every input case (`checks.run`) -> (on a GPU) compute-sanitizer. The problem and precision always come
from the slice record, never from the candidate. Measurement (ncu) stays with the loop, which measures the checked
launch (`Evaluation.launch`) of the candidates that pass.
"""

from __future__ import annotations

import time
import traceback
from dataclasses import dataclass, field, replace
from pathlib import Path

from vxsynth.checks import gates, run as checks
from vxsynth.kernels.candidate import Candidate
from vxsynth.records import CheckRecord
from vxsynth.store.io import write_json
from vxsynth.targets import sandbox, sanitizer
from vxsynth.targets.launch import Launch

OUTCOMES = ("passed", "rejected", "crashed")
"""passed: every gate; rejected: a gate named what is wrong (a rule, a wrong output, a write into a guard zone, a
thread-divergent branch, a sanitizer finding); crashed: the candidate's CUDA or host-executor run died without a named
reason (a hang past its time limit, a killed or restarted worker), or the checker itself failed (gate "checker")."""


@dataclass
class Evaluation:
    """What the gates found of one candidate."""
    candidate: Candidate
    outcome: str                      # one of OUTCOMES
    gate: str                         # where it stopped ("" when passed): sandbox, compile, object, run, divergence,
                                      # check, sanitizer, checker
    reason: str
    seed: int                         # the check inputs' base seed (recorded for replay)
    records: dict[str, CheckRecord] = field(default_factory=dict)   # check records by kind (check1, check2 or vortex_ref)
    launch: Launch | None = None      # the checked CUDA launch, which measurement and compute-sanitizer repeat
    work: Path | None = None          # where its builds and runs are
    notes: tuple = ()                 # what could not be checked on this host
    t_compile_s: float = 0.0
    t_checks_s: float = 0.0

    @property
    def passed(self) -> bool:
        return self.outcome == "passed"


def failed_gate(failures: set[str]) -> tuple[str, str]:
    """(outcome, gate) of failed checks from how their runs failed (`targets.proc.FAILURES`): a named fault is a
    rejection, a run that died, hung or left no output a crash, and no failed run a wrong output."""
    if "divergence" in failures:
        return "rejected", "divergence"
    if "guard_zone" in failures:
        return "rejected", "run"
    if failures & {"crash", "timeout", "no_output"}:
        return "crashed", "run"
    return "rejected", "check"


class Evaluator:
    """The gates of one slice: its problem and precision, the check environment, the sandbox's source and object
    rules, and where check records go (None: not written)."""

    def __init__(self, slice_id: str, problem, precision: str, env: checks.CheckEnv, rules: list[dict],
                 objects: dict | None = None, records_dir: Path | None = None, order: str = "cuda_first"):
        self.slice_id, self.problem, self.precision = slice_id, problem, precision
        self.env, self.rules, self.objects, self.records_dir, self.order = env, rules, objects, records_dir, order

    def check(self, c: Candidate, tag: str, work: Path, seed: int | None = None) -> Evaluation:
        """Every gate but compute-sanitizer (which the loop runs only on a revision it is about to keep)."""
        seed = checks.fresh_seed() if seed is None else seed
        ev = Evaluation(c, "crashed", "checker", "", seed, work=work)
        try:
            bad = sandbox.check(c, self.problem, self.precision, self.rules, self.env.arch)
            if bad:
                return self._stop(ev, "rejected", "sandbox", "sandbox: " + "; ".join(map(str, bad)))
            t = time.perf_counter()
            b = gates.build(c, self.env, self.objects, work, self.order, judge_cuda=True)
            ev.t_compile_s, ev.notes = time.perf_counter() - t, tuple(b.notes)
            if b.error:
                return self._stop(ev, "rejected", b.gate, b.error)
            t = time.perf_counter()
            done = checks.checked(c, self.slice_id, tag, self.env, work, self.records_dir, seed=seed, cubin=b.cubin,
                                  vortex_exe=b.exe)
            ev.records, ev.t_checks_s = done.records, time.perf_counter() - t
            failed = [r for r in ev.records.values() if not r.passed]
            if failed:
                reason = "; ".join(f"{r.kind}: {r.reason}" for r in failed)
                return self._stop(ev, *failed_gate(set(done.failures.values())), reason)
            ev.launch = done.launch
            return self._stop(ev, "passed", "", "passed every gate")
        except Exception as e:  # noqa: BLE001 - a crash of the checker fails this candidate only, and is counted
            return self._stop(ev, "crashed", "checker",
                              f"{type(e).__name__}: {e} @ {traceback.format_exc(limit=2).splitlines()[-1]}")

    def sanitize(self, ev: Evaluation) -> str | None:
        """compute-sanitizer memcheck + racecheck on the checked launch of a passed candidate (noted in its check 1
        record when records are written): None when clean or when there is nothing to run it on, else what it found."""
        if ev.launch is None or not sanitizer.available():
            return None
        ok, results = sanitizer.check(ev.launch, ev.work / "cuda")
        if "check1" in ev.records:
            ev.records["check1"] = rec = replace(ev.records["check1"], sanitizer=results)
            if self.records_dir is not None:
                write_json(checks.record_path(self.records_dir, self.slice_id, rec.tag, "check1"), rec.to_dict())
        return None if ok else "; ".join(f"{r['tool']}: {r['summary']} {r.get('first', '')}".strip()
                                          for r in results if not r["ok"])

    def judge(self, c: Candidate, work: Path, seed: int | None = None) -> Evaluation:
        """Every gate, compute-sanitizer included: the verdict of a candidate outside the loop (the attack corpus)."""
        ev = self.check(c, "judge", work, seed)
        if ev.passed:
            try:
                bad = self.sanitize(ev)
            except Exception as e:  # noqa: BLE001 - as in `check`: the checker's failure, counted, never raised
                return self._stop(ev, "crashed", "checker", f"compute-sanitizer: {type(e).__name__}: {e}")
            if bad:
                return self._stop(ev, "rejected", "sanitizer", bad)
        return ev

    @staticmethod
    def _stop(ev: Evaluation, outcome: str, gate: str, reason: str) -> Evaluation:
        ev.outcome, ev.gate, ev.reason = outcome, gate, reason[:2000]
        return ev
