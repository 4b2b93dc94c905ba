"""Revision trails as a dataset for training kernel-editing agents: one record per round of every trail in a suite
directory, as parquet (schema `TRAJECTORIES`) and JSONL.

A record's state is the revision the round started from (its sources and per-component gaps), its action the edit
with the candidate's strategy and sources (action_kind: start, strategy_edit, free_form, or no_candidate when the
agent's reply gave none), its outcome the checks, the ten components, D and the keep decision, with the agent's
model call (tokens, latency). The reward is recomputable from the record alone (`reward_of`): the D improvement
over the state when both checks pass, a fixed penalty when a check fails, the candidate was rejected or crashed or
the reply gave no candidate (decision "failed"), 0 for the start, NaN when D was not measured (no GPU). Provenance
per trail: the slice record's DVC md5, the git commit of the trail, and the exporter's code version.
"""

from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path

import pandas as pd

from vxsynth.metrics.components import COMPONENTS
from vxsynth.records import LoopResult, SliceRecord, problem_json
from vxsynth.store import schemas
from vxsynth.store.io import read_table, write_table, write_text
from vxsynth.store.version import code_version, md5_file

PENALTY = 0.1          # reward of a candidate that fails a check, is rejected or crashes, or of a failed reply


def _passed(verdict: str) -> bool:
    """"pass", or a labelled pass such as "vortex vs reference: pass" (check 2 of a run without a GPU)."""
    return str(verdict).rsplit(": ", 1)[-1].startswith("pass")


def reward_of(row: dict | pd.Series) -> float:
    """The reward of one record, from its own fields only."""
    if row["action_kind"] == "start":
        return 0.0
    if row["decision"] in ("rejected", "crashed", "failed") or not (_passed(row["check1"]) or row["check1"].startswith("not run")) \
            or not _passed(row["check2"]):
        return -PENALTY
    if any(v is None or (isinstance(v, float) and math.isnan(v)) for v in (row["D"], row["state_D"])):
        return math.nan
    return float(row["state_D"] - row["D"])


def _action_kind(r: dict, parent: dict | None) -> str:
    if parent is None:
        return "start"
    return {"generated": "strategy_edit", "free-form": "free_form"}.get(r["source_kind"], "no_candidate")


def _source(cand: Path, name: str) -> str:
    p = cand / name
    return p.read_text() if p.exists() else ""


def _commit(path: Path) -> str:
    try:
        return subprocess.run(["git", "log", "-1", "--format=%H", "--", path.name], cwd=path.parent, capture_output=True,
                              text=True, timeout=20).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def trail_records(slice_dir: Path, slice_json: Path | None) -> list[dict]:
    """The records of one slice's trail (`slice_dir` holds trail.parquet, result.json, candidates/)."""
    trail = read_table(slice_dir / "trail.parquet", schemas.TRAIL)
    res = LoopResult.load(slice_dir / "result.json") if (slice_dir / "result.json").exists() else None
    rec = SliceRecord.load(slice_json) if slice_json and slice_json.exists() else None
    prov = {"slice_md5": md5_file(slice_json) if rec else "", "trail_commit": _commit(slice_dir / "trail.parquet"),
            "exporter_version": code_version()}
    rows = {int(r["round"]): r for r in trail.to_dict("records")}
    out = []
    for n, r in sorted(rows.items()):
        cand = slice_dir / "candidates" / f"r{n:03d}"
        parent = rows.get(int(r["parent"]))
        pcand = slice_dir / "candidates" / f"r{int(r['parent']):03d}"
        row = {"slice_id": r["slice_id"], **prov, "run_id": r["run_id"], "round": n, "parent": int(r["parent"]),
               "family": res.family if res else rec.family if rec else "",
               "precision": res.precision if res else rec.precision if rec else "",
               "problem": json.dumps(problem_json(rec.problem)) if rec else "", "reference_kernel": res.reference_kernel if res else "",
               "state_strategy": parent["strategy"] if parent else "", "state_cuda": _source(pcand, "kernel.cu") if parent else "",
               "state_vortex": _source(pcand, "kernel_vx.c") if parent else "", "state_gaps": parent["gaps"] if parent else "",
               "state_D": parent["D"] if parent else math.nan,
               "action_kind": _action_kind(r, parent), "action_edit": r["edit"], "action_diff": r["diff"],
               "action_strategy": r["strategy"], "action_cuda": _source(cand, "kernel.cu"), "action_vortex": _source(cand, "kernel_vx.c"),
               "check1": r["check1"], "check2": r["check2"], "components": json.dumps({c: r[c] for c in COMPONENTS}),
               "gaps": r["gaps"], "D": r["D"], "decision": r["decision"], "measured_with": r["measured_with"],
               "agent_call": r["agent_call"]}
        row["reward"] = reward_of(row)
        out.append(row)
    return out


def export(suite_dir: Path, slices_dir: Path | None, out_dir: Path) -> pd.DataFrame:
    """Every trail under `suite_dir` as out_dir/trajectories.{parquet,jsonl}; the table."""
    rows = []
    for d in sorted(p.parent for p in Path(suite_dir).glob("*/trail.parquet")):
        rows += trail_records(d, Path(slices_dir) / d.name / "slice.json" if slices_dir else None)
    df = pd.DataFrame(rows, columns=schemas.TRAJECTORIES.names)
    write_table(Path(out_dir) / "trajectories.parquet", df, schemas.TRAJECTORIES)
    nan = lambda v: None if isinstance(v, float) and math.isnan(v) else v  # noqa: E731 - JSON has no NaN: null
    write_text(Path(out_dir) / "trajectories.jsonl",
               "".join(json.dumps({k: nan(v) for k, v in r.items()}) + "\n" for r in df.to_dict("records")))
    return df
