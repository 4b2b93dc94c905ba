"""Typed records, parsed once: the slice record (slice.json), a slice's loop result (result.json), its reconstruction
status (status.json) and a candidate's check records (checks/*.json). JSON only at the edges: `from_dict`/`load` in,
`to_dict` out, the same JSON content as read.

A top-level module (not under `vxsynth.store`): it holds the parsed `Problem`, and `vxsynth.kernels` already imports
`vxsynth.store`.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

from vxsynth.errors import VxError
from vxsynth.kernels.problem import Problem, from_dict, to_dict
from vxsynth.kernels.strategy import Strategy

REGENERATE = "regenerate the slice records with `vxsynth slice`"
RERUN = "move the slice's folder aside and reconstruct it again (`vxsynth reconstruct`)"


def _checked(cls, d, what: str, advice: str, unknown_advice: str = "") -> str:
    """`d` as the keys of `cls` (every field without a default present, none unknown), or a VxError; the record's
    name."""
    if not isinstance(d, dict):
        raise VxError(f"{what}: not a JSON object; {advice}")
    where = f"{what} {d['slice_id']}" if isinstance(d.get("slice_id"), str) else what
    fields = dataclasses.fields(cls)
    required = [f.name for f in fields if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    if missing := [k for k in required if k not in d]:
        raise VxError(f"{where}: missing key {missing[0]!r}; {advice}")
    names = {f.name for f in fields}
    if unknown := sorted(k for k in d if k not in names):
        raise VxError(f"{where}: unknown key {unknown[0]!r}; {advice}{unknown_advice}")
    return where


def _load(path: Path, from_dict, advice: str):
    """`from_dict` of a JSON file's content; unreadable JSON or a bad record is a VxError naming the file."""
    try:
        return from_dict(json.loads(Path(path).read_text()))
    except json.JSONDecodeError as e:
        raise VxError(f"{path}: not valid JSON ({e.msg} at line {e.lineno}); {advice}") from e
    except VxError as e:
        raise VxError(f"{path}: {e}") from e


@dataclass(frozen=True)
class SliceRecord:
    """One slice of the suite as the slicing stage wrote it (`vxsynth.slicing.stage.run`)."""
    schema_version: int
    slice_id: str
    family: str                   # linear, matmul, conv1d, conv2d, ...
    precision: str                # FP32 | TF32_FP16 | BF16
    problem: Problem
    op_call: dict                 # the aten call: op, dims, dtypes, strides, args, launch_op
    platform: str
    environment: dict             # the profiled host: gpu, driver, library versions, precision flags
    occurrences: list             # one per workload the op call is in: call indices, module paths, GPU time, share
    gpu_time_us: float
    kernels: list                 # every kernel of the op call, the main one with role "main"
    main_kernel: str
    reference_signature: dict     # the main kernel's ncu components as recorded in the workload
    name_hints: dict              # what the reference kernel's name says, cross-checked with its launch
    tolerance: dict               # the precision policy of the slice's checks

    @classmethod
    def from_dict(cls, d: dict, advice: str = REGENERATE) -> SliceRecord:
        """The record of a slice.json dict; a missing or unknown key, or a damaged problem, is a VxError."""
        where = _checked(cls, d, "slice record", advice, ", or use the vxsynth that wrote it")
        try:
            problem = from_dict(d["problem"])
        except (KeyError, TypeError, AttributeError) as e:
            raise VxError(f"{where}: damaged problem ({type(e).__name__}: {e}); {advice}") from e
        return cls(**{**d, "problem": problem})

    @classmethod
    def load(cls, path: Path, advice: str = REGENERATE) -> SliceRecord:
        """The record of a slice.json file; unreadable JSON or a bad record is a VxError naming the file."""
        return _load(path, lambda d: cls.from_dict(d, advice), advice)

    def to_dict(self) -> dict:
        """The slice.json content, keys in its order: `SliceRecord.from_dict(d).to_dict() == d`."""
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return dict(sorted({**d, "problem": problem_json(self.problem)}.items()))

    @property
    def main(self) -> dict | None:
        """The main kernel's entry of `kernels` (launch, registers, time), None when none was recorded."""
        return next((k for k in self.kernels if k.get("role") == "main"), None)


def problem_json(p: Problem) -> dict:
    """The problem as slice records and harness inputs store it (JSON lists, sorted keys)."""
    return json.loads(json.dumps(to_dict(p), sort_keys=True))


class _Flat:
    """A record whose JSON object holds exactly its fields (`WHAT` names it in errors)."""
    WHAT = "record"

    @classmethod
    def from_dict(cls, d: dict):
        """The record of a JSON dict; a missing or unknown key is a VxError."""
        _checked(cls, d, cls.WHAT, RERUN)
        return cls(**d)

    @classmethod
    def load(cls, path: Path):
        """The record in a JSON file; unreadable JSON or a bad record is a VxError naming the file."""
        return _load(path, cls.from_dict, RERUN)


@dataclass(frozen=True)
class SliceStatus(_Flat):
    """How a slice's last reconstruction attempt ended (status.json), where it ran and what it cost. The loop's
    figures (D_initial, D_final, check2, rounds, gpu_skipped) are set when the loop finished; statuses written before
    check2 and host were recorded lack them."""
    slice_id: str
    status: str                           # reconstructed | start checked on CPU | failed
    error: str | None = None              # why it failed
    D_initial: float | None = None        # None with `rounds` set: not measured (no GPU)
    D_final: float | None = None
    check2: str | None = None
    rounds: int | None = None
    gpu_skipped: str | None = None        # why the GPU steps were skipped ("" when they ran)
    host: str | None = None               # the GPU slot it ran on, and when
    gpu: str | None = None
    started: float | None = None
    ended: float | None = None
    wall_s: float | None = None           # this attempt's wall seconds
    wall_s_total: float | None = None     # with the earlier attempts whose trail it went on with
    traceback: str | None = None
    WHAT = "slice status"

    def to_dict(self) -> dict:
        """The status.json content: the keys that are set (D_initial and D_final, null or not, with `rounds`)."""
        loop = self.rounds is not None
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                if getattr(self, f.name) is not None or (loop and f.name in ("D_initial", "D_final"))}


@dataclass(frozen=True)
class Revision:
    """One revision of a loop's result: its distance (None: not measured), components, gaps and check verdicts; the
    final revision also names its strategy, sources and check records."""
    round: int
    D: float | None
    values: dict                          # component -> value (None: not measured)
    gaps: dict                            # component -> signed gap (NaN: not comparable)
    check1: str
    check2: str
    strategy: Strategy | None = None
    cuda_sha256: str | None = None
    vortex_sha256: str | None = None
    check1_record: str | None = None
    check2_record: str | None = None

    @classmethod
    def from_dict(cls, d: dict) -> Revision:
        names = {f.name for f in dataclasses.fields(cls)}
        if unknown := sorted(k for k in d if k not in names):
            raise VxError(f"unknown key {unknown[0]!r}")
        s = d.get("strategy")
        return cls(**{**d, "strategy": Strategy.from_dict(s) if s is not None else None})

    def to_dict(self) -> dict:
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if getattr(self, f.name) is not None
             or f.name == "D"}
        return {**d, "strategy": self.strategy.to_dict()} if self.strategy is not None else d


@dataclass(frozen=True)
class LoopResult:
    """What a slice's reconstruction loop ended with (result.json): the start and final revisions, the reference,
    the decisions, how it was measured and what it cost. Results written before `start` and `summary` lack them."""
    slice_id: str
    precision: str
    family: str
    order: str
    agent: str
    threshold: float
    rounds: int
    decisions: dict                       # decision -> rounds
    initial: Revision
    final: Revision
    reference: dict                       # component -> the reference's value (None: not measured)
    reference_kernel: str
    component_set: list
    gpu: bool
    measured_with: dict
    time_s: dict                          # seconds spent generating, compiling, checking, measuring, in all
    start: dict | None = None             # the start strategy's provenance (start.json)
    summary: dict | None = None           # candidates, budget, wall seconds, set-up seconds, largest gaps

    @property
    def kept_a_pair(self) -> bool:
        """Whether a revision passed both checks (the start or a kept one)."""
        return bool(self.decisions.get("initial", 0) + self.decisions.get("kept", 0))

    @classmethod
    def from_dict(cls, d: dict) -> LoopResult:
        """The result of a result.json dict; a missing or unknown key is a VxError."""
        where = _checked(cls, d, "loop result", RERUN)
        try:
            return cls(**{**d, "initial": Revision.from_dict(d["initial"]), "final": Revision.from_dict(d["final"])})
        except (VxError, TypeError, AttributeError) as e:
            raise VxError(f"{where}: damaged revision ({e}); {RERUN}") from e

    @classmethod
    def load(cls, path: Path) -> LoopResult:
        """The result in a result.json file; unreadable JSON or a bad result is a VxError naming the file."""
        return _load(path, cls.from_dict, RERUN)

    def to_dict(self) -> dict:
        """The result.json content: `LoopResult.from_dict(d).to_dict() == d`."""
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
             if getattr(self, f.name) is not None or f.name not in ("start", "summary")
             or (f.name == "start" and self.summary is not None)}     # written by the loop since summary, null or not
        return {**d, "initial": self.initial.to_dict(), "final": self.final.to_dict()}


@dataclass(frozen=True)
class CheckRecord(_Flat):
    """One output check of one candidate (checks/<check_id>.json), replayable from its seeds: check1 (CUDA vs the
    reference op), check2 (Vortex vs the path reference) or vortex_ref (check 2 without a GPU), as `checks.run`
    wrote it. Records written before coverage and timing were recorded lack them; `blocks` is on Vortex checks only;
    `sanitizer` is on the check-1 record of a kept revision (compute-sanitizer's verdicts)."""
    check_id: str
    kind: str                             # check1 | check2 | vortex_ref
    slice_id: str
    tag: str                              # the candidate's tag within the slice (round, attack, ...)
    candidate: dict                       # kernel name, strategy and its hash, source hashes, source kind
    precision: str
    tolerance: dict                       # this check's atol, rtol (and accumulation bound)
    conditions: dict                      # device, versions, flags, cases and seeds, input recipe, executor
    problem: dict                         # the checked problem's fields
    verdict: str                          # pass | fail
    reason: str
    cases: list                           # per case: seed, verdict and errors, Vortex windows, coverage, times
    covered_fraction_all_cases: float | None = None
    timing: dict | None = None            # wall seconds per side over all cases
    blocks: dict | None = None            # which blocks the Vortex runs checked
    sanitizer: list | None = None        # compute-sanitizer's result per tool
    WHAT = "check record"

    @property
    def passed(self) -> bool:
        return self.verdict == "pass"

    def to_dict(self) -> dict:
        """The record's JSON content: `CheckRecord.from_dict(d).to_dict() == d`."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if getattr(self, f.name) is not None}
