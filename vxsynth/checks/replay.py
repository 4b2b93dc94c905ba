"""Replay a recorded check: the same candidate sources, the same seeds and cases, the same tolerances."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from vxsynth.checks.run import CheckEnv, run
from vxsynth.errors import VxError
from vxsynth.kernels.candidate import load
from vxsynth.records import CheckRecord


def find(suite_dir: Path, check_id: str) -> Path:
    hits = sorted(Path(suite_dir).glob(f"*/checks/{check_id}*.json"))
    if len(hits) != 1:
        raise VxError(f"check {check_id!r} matches {len(hits)} records under {suite_dir}; give a full or unique check id "
                      "(ids are listed in the report's numeric evidence)")
    return hits[0]


def replay(record_path: Path, env: CheckEnv, work: Path) -> dict:
    rec = CheckRecord.load(record_path)
    kind = rec.kind
    if kind in ("check1", "check2") and not env.cuda:
        raise VxError(f"{rec.check_id} is a {kind} (CUDA candidate): replay it on a GPU host of the recorded platform")
    c = load(record_path.parent.parent / "candidates" / rec.tag)
    if c.cuda_sha256 != rec.candidate["cuda_sha256"] or c.vortex_sha256 != rec.candidate["vortex_sha256"]:
        raise VxError(f"saved sources of {rec.check_id} do not match the hashes in the record; the candidate folder was changed")
    env = dataclasses.replace(env, cases=tuple(rec.conditions["cases"]), tolerances={rec.precision: {
        "check1": rec.tolerance if kind == "check1" else env.tolerances[rec.precision]["check1"],
        "check2": rec.tolerance if kind != "check1" else env.tolerances[rec.precision]["check2"]}})
    new = run(c, rec.slice_id, f"{rec.tag}-replay", env, work, None, seed=rec.conditions["base_seed"])[kind]

    def errs(r: CheckRecord):
        return [(e["case"], e[kind]["max_abs_err"], e[kind]["failing"]) for e in r.cases]
    return {"check_id": rec.check_id, "kind": kind, "recorded": rec.verdict, "replayed": new.verdict,
            "reproduced": rec.verdict == new.verdict, "seeds": rec.conditions["seeds"],
            "recorded_errors": errs(rec), "replayed_errors": errs(new), "reason": new.reason}
