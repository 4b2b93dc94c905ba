"""Typed records, parsed once: the slice record (slice.json) and a slice's reconstruction status (status.json). JSON
only at the edges: `from_dict`/`load` in, `to_dict` out, the same JSON content as read.

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

REGENERATE = "regenerate the slice records with `vxsynth slice`"
RERUN = "move the slice's folder aside and reconstruct it again (`vxsynth reconstruct`)"


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
    def from_dict(cls, d: dict) -> SliceRecord:
        """The record of a slice.json dict; a missing or unknown key, or a damaged problem, is a VxError."""
        names = [f.name for f in dataclasses.fields(cls)]
        if not isinstance(d, dict):
            raise VxError(f"slice record: not a JSON object; {REGENERATE}")
        where = f"slice record {d['slice_id']}" if isinstance(d.get("slice_id"), str) else "slice record"
        if missing := [k for k in names if k not in d]:
            raise VxError(f"{where}: missing key {missing[0]!r}; {REGENERATE}")
        if unknown := sorted(k for k in d if k not in names):
            raise VxError(f"{where}: unknown key {unknown[0]!r}; {REGENERATE}, or use the vxsynth that wrote it")
        try:
            problem = from_dict(d["problem"])
        except (KeyError, TypeError, AttributeError) as e:
            raise VxError(f"{where}: damaged problem ({type(e).__name__}: {e}); {REGENERATE}") from e
        return cls(**{**d, "problem": problem})

    @classmethod
    def load(cls, path: Path) -> SliceRecord:
        """The record of a slice.json file; unreadable JSON or a bad record is a VxError naming the file."""
        try:
            return cls.from_dict(json.loads(Path(path).read_text()))
        except json.JSONDecodeError as e:
            raise VxError(f"{path}: not valid JSON ({e.msg} at line {e.lineno}); {REGENERATE}") from e
        except VxError as e:
            raise VxError(f"{path}: {e}") from e

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


@dataclass(frozen=True)
class SliceStatus:
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

    @classmethod
    def from_dict(cls, d: dict) -> SliceStatus:
        """The status of a status.json dict; a missing or unknown key is a VxError."""
        names = [f.name for f in dataclasses.fields(cls)]
        if not isinstance(d, dict):
            raise VxError(f"slice status: not a JSON object; {RERUN}")
        if missing := [k for k in ("slice_id", "status") if k not in d]:
            raise VxError(f"slice status: missing key {missing[0]!r}; {RERUN}")
        if unknown := sorted(k for k in d if k not in names):
            raise VxError(f"slice status {d['slice_id']}: unknown key {unknown[0]!r}; {RERUN}")
        return cls(**d)

    @classmethod
    def load(cls, path: Path) -> SliceStatus:
        """The status in a status.json file; unreadable JSON or a bad status is a VxError naming the file."""
        try:
            return cls.from_dict(json.loads(Path(path).read_text()))
        except json.JSONDecodeError as e:
            raise VxError(f"{path}: not valid JSON ({e.msg} at line {e.lineno}); {RERUN}") from e
        except VxError as e:
            raise VxError(f"{path}: {e}") from e

    def to_dict(self) -> dict:
        """The status.json content: the keys that are set (D_initial and D_final, null or not, with `rounds`)."""
        loop = self.rounds is not None
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                if getattr(self, f.name) is not None or (loop and f.name in ("D_initial", "D_final"))}
