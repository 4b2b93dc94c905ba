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
    df = export(SUITE, h200_slices, tmp_path)
    again = df.apply(reward_of, axis=1)
    assert all((math.isnan(a) and math.isnan(b)) or a == b for a, b in zip(again, df["reward"]))
    edits = df[df["action_kind"] == "strategy_edit"]
    assert all(abs(r - (s - d)) < 1e-12 for r, s, d in zip(edits["reward"], edits["state_D"], edits["D"]))
    failed = edits.iloc[0].copy()
    failed["check2"] = "fail: max abs error 3.1 above the bound"
    assert reward_of(failed) == -PENALTY                              # a failed check is penalised, whatever its D


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
