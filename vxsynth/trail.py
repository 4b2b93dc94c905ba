"""The revision trail: one typed row per attempted round, parsed once from `trail.parquet` and written back to it.

In the table the structured fields (strategy, edit, gaps, moved components, component set, measurement settings,
agent call) are JSON strings and the components are one column each (`schemas.TRAIL`); in memory they are values.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, fields
from pathlib import Path

import pandas as pd

from vxsynth.kernels.strategy import Strategy
from vxsynth.metrics.components import COMPONENTS
from vxsynth.store import schemas
from vxsynth.store.io import read_table, write_table

_JSON = {"diff": False, "gaps": True, "improved": False, "worsened": False, "component_set": False,
         "measured_with": True, "agent_call": True}   # field -> sort_keys, as each column has always been written


def _nan() -> dict[str, float]:
    return {c: math.nan for c in COMPONENTS}


@dataclass
class TrailRow:
    slice_id: str
    run_id: str
    order: str
    round: int
    parent: int
    strategy_hash: str                 # of the strategy; of the strategy and both sources for a free-form pair
    strategy: Strategy
    diff: dict                         # the edit: {knob: [old, new]}
    edit: str
    edit_reason: str
    component_set: list[str]
    measured_with: dict
    source_kind: str = "generated"     # generated from the strategy, free-form (written by an agent), "" (no source)
    cuda_sha256: str = ""
    vortex_sha256: str = ""
    check1: str = "not run"
    check2: str = "not run"
    check1_record: str = ""
    check2_record: str = ""
    values: dict[str, float] = field(default_factory=_nan)   # the measured components (NaN: not measured)
    gaps: dict[str, float] = field(default_factory=dict)
    D: float = math.nan
    decision: str = "rejected"
    reason: str = ""
    improved: list[str] = field(default_factory=list)
    worsened: list[str] = field(default_factory=list)
    t_generate_s: float = 0.0
    t_compile_s: float = 0.0
    t_checks_s: float = 0.0
    t_measure_s: float = 0.0
    wall_s: float = 0.0
    agent_call: dict = field(default_factory=dict)   # the round's model call: model, attempts, tokens, latency, error
    batch: int = -1                    # the first round of the batch it was evaluated with (-1: before batches)

    @property
    def base(self) -> bool:
        """A revision later rounds start from: the start or a kept one."""
        return self.decision in ("initial", "kept")

    @classmethod
    def parent_with(cls, D: float) -> TrailRow:
        """A stand-in parent revision (round 0, no gaps) with distance `D`, to judge a batch outside a loop."""
        return cls("", "", "", 0, -1, "", Strategy(), {}, "", "", [], {}, D=D, decision="initial")

    @classmethod
    def from_row(cls, r: dict) -> TrailRow:
        """One table row (`schemas.TRAIL` columns) as a typed row."""
        names = {f.name for f in fields(cls)} - {"values"}
        kw = {k: (json.loads(r[k]) if k in _JSON else r[k]) for k in names if k in r}
        kw["strategy"] = Strategy.from_dict(json.loads(r["strategy"]))
        kw["values"] = {c: float(r.get(c, math.nan)) for c in COMPONENTS}
        for k in ("round", "parent", "batch"):
            kw[k] = int(kw[k])
        return cls(**kw)

    def to_row(self) -> dict:
        """The table row: JSON strings for the structured fields, one column per component."""
        out = {}
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name == "values":
                out.update({c: float(v.get(c, math.nan)) for c in COMPONENTS})
            elif f.name == "strategy":
                out[f.name] = json.dumps(v.to_dict(), sort_keys=True)
            else:
                out[f.name] = json.dumps(v, sort_keys=_JSON[f.name]) if f.name in _JSON else v
        return out

    def describe(self) -> str:
        """One line of the loop's log."""
        moved = f" improved {self.improved} worsened {self.worsened}" if self.improved or self.worsened else ""
        d = f"D={self.D:.4f} " if not math.isnan(self.D) else ""
        return f"[{self.slice_id}] round {self.round:>2} {self.edit:<20} {self.decision:<9} {d}{self.reason[:160]}{moved}"


def load(path: Path) -> list[TrailRow]:
    return [TrailRow.from_row(r) for r in read_table(path, schemas.TRAIL).to_dict("records")]


def save(rows: list[TrailRow], path: Path) -> None:
    write_table(path, pd.DataFrame([r.to_row() for r in rows], columns=list(schemas.TRAIL.names)), schemas.TRAIL)
