"""Typed records, parsed once: the slice record (slice.json). JSON only at the edges: `from_dict`/`load` in,
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

REGENERATE = "regenerate the slice records with `vxsynth slice`"


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
