"""Trajectory export on the committed real H200 reconstructions: schema, one record per round, states that are the
parent revisions, rewards recomputable from the records, JSONL equal to the parquet."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pandas as pd

from tests.conftest import RECORDED, ROOT
from vxsynth.export.trajectories import PENALTY, export, reward_of
from vxsynth.store import schemas
from vxsynth.store.io import read_table
from vxsynth.store.version import md5_file

SUITE = RECORDED / "reconstruct"


def test_one_record_per_round_with_its_parent_as_state(tmp_path, h200_slices):
    df = export(SUITE, h200_slices, tmp_path)
    table = read_table(tmp_path / "trajectories.parquet", schemas.TRAJECTORIES)
    trails = {p.parent.name: pd.read_parquet(p) for p in SUITE.glob("*/trail.parquet")}
    assert len(table) == len(df) == sum(len(t) for t in trails.values()) == 34
    for sid, t in table.groupby("slice_id"):
        assert sorted(t["round"]) == sorted(trails[sid]["round"])
        assert (t["slice_md5"] == md5_file(h200_slices / sid / "slice.json")).all() and t["trail_commit"].str.len().eq(40).all()
        by_round = t.set_index("round")
        start = by_round.loc[0]
        assert start["action_kind"] == "start" and start["reward"] == 0 and start["state_cuda"] == ""
        for n, r in by_round.drop(index=0).iterrows():             # the state is the revision the round edited
            parent = by_round.loc[r["parent"]]
            assert r["state_cuda"] == parent["action_cuda"] and r["state_vortex"] == parent["action_vortex"]
            assert r["state_D"] == parent["D"] and "__global__" in r["action_cuda"] and r["action_vortex"]
    kept = table[table["decision"] == "kept"]
    assert len(kept) >= 4 and (kept["reward"] > 0.005).all()          # kept revisions beat their parent by the threshold


def test_rewards_are_recomputable_from_the_records(tmp_path, h200_slices):
    """Each exported reward is the documented one, recomputed here from the trail itself (its parent's D minus its
    own), not from the exporter's columns; `reward_of` gives it back from the record's own fields, and its penalty and
    NaN branches hold on records edited to reach them."""
    df = export(SUITE, h200_slices, tmp_path)
    for sid, t in df.groupby("slice_id"):
        trail = pd.read_parquet(SUITE / sid / "trail.parquet").set_index("round")
        for _, r in t.iterrows():
            raw = trail.loc[r["round"]]
            assert raw["check1"] == "pass" and raw["check2"] == "pass"           # every committed round passed both
            expected = 0.0 if raw["parent"] < 0 else trail.loc[raw["parent"], "D"] - raw["D"]
            assert abs(r["reward"] - expected) < 1e-12, (sid, r["round"], r["reward"], expected)
            assert abs(reward_of(r) - expected) < 1e-12
    assert (df["reward"] > 0).sum() >= 4 and (df["reward"] < 0).sum() >= 4      # both signs occur: nothing constant
    edit = df[df["action_kind"] == "strategy_edit"].iloc[0].copy()
    assert PENALTY == 0.1
    for field, value in [("check1", "fail: max abs error 3.1 above the tolerance"), ("check2", "fail: max abs error 3.1"),
                         ("decision", "rejected"), ("decision", "crashed"), ("decision", "failed")]:
        assert reward_of({**edit, field: value}) == -0.1, (field, value)  # penalised, whatever its D
    assert reward_of({**edit, "check2": "vortex vs reference: pass"}) == edit["state_D"] - edit["D"]
    assert math.isnan(reward_of({**edit, "D": math.nan})) and math.isnan(reward_of({**edit, "D": None}))
    assert reward_of({**edit, "action_kind": "start", "D": math.nan}) == 0.0


def test_jsonl_matches_the_parquet(tmp_path, h200_slices):
    export(SUITE, h200_slices, tmp_path)
    lines = [json.loads(line) for line in (tmp_path / "trajectories.jsonl").read_text().splitlines()]
    table = read_table(tmp_path / "trajectories.parquet", schemas.TRAJECTORIES)
    assert len(lines) == len(table) and list(lines[0]) == schemas.TRAJECTORIES.names
    assert [x["reward"] for x in lines] == [None if math.isnan(v) else v for v in table["reward"]]


def test_export_command(tmp_path):
    cli = [sys.executable, "-m", "flows.cli", "export", "trajectories"]
    r = subprocess.run([*cli, "--suite", str(SUITE), "--out", str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "34 rounds of 3 trails" in r.stdout, r.stderr[-2000:]
    assert (pd.read_parquet(tmp_path / "trajectories.parquet")["slice_md5"] == "").all()   # no records given: none claimed
    r = subprocess.run([*cli, f"data_dir={tmp_path / 'none'}"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 1 and r.stderr.count("error: ") == 1 and "no revision trails" in r.stderr
