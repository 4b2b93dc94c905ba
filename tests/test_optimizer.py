"""The optimizer agent on a replay table of real H200 measurements: every valid point of a 128-point sub-space of
the Pi0 attention bmm (80 valid, each checked and measured on the H200 through the batched evaluator,
`bench/replay_table.py`, `bench/results/replay_table_pi0_bmm_h200.txt`)."""

from __future__ import annotations

import json
import random
import statistics
from dataclasses import replace

import pandas as pd
import pytest

from tests.conftest import ROOT, conf, slice_record
from vxsynth.agent.base import Context
from vxsynth.agent.optimizer import OptunaSearch
from vxsynth.errors import VxError
from vxsynth.kernels.strategy import Strategy
from vxsynth.metrics.components import COMPONENTS
from vxsynth.records import SliceRecord
from vxsynth.signature.distance import signed_gap
from vxsynth.trail import TrailRow

TABLE = ROOT / "tests" / "fixtures" / "h200" / "replay" / "pi0_bmm"
BUDGET = 24   # proposals within which TPE alone reaches the table's best point (of 79 besides the start); measured
              # over seeds 0-9 (bench/results/optimizer_replay_cpu.txt): TPE alone 3-24, with guided mutation 7-8, random 14-66


def _table():
    t = pd.read_parquet(TABLE.with_suffix(".parquet"))
    meta = json.loads(TABLE.with_suffix(".json").read_text())
    return {r.strategy_hash: r for r in t.itertuples() if not r.valid}, meta


def _row(s: Strategy, r, rnd: int, ref: dict) -> TrailRow:
    return TrailRow("pi0", "replay", "cuda_first", rnd, 0, s.hash(), s, {}, "replay", "", list(COMPONENTS), {},
                    D=r.D, decision="measured", gaps={c: signed_gap(c, getattr(r, c), ref[c]) for c in COMPONENTS})


def search(agent, rec: SliceRecord, proposals: int, batch: int = 8, trail: list | None = None) -> list[dict]:
    """Drive `agent` as the loop does: batches of proposals from the best point so far, each point's D from the
    table; the trail (round 0 = the start)."""
    table, meta = _table()
    ref = meta["reference"]
    start = Strategy.from_dict(meta["start"])
    rows = trail or [_row(start, table[start.hash()], 0, ref)]
    valid = lambda s: None if s.hash() in table else "not a valid point of the replay table"   # noqa: E731
    tried = {r.strategy_hash for r in rows}
    while len(rows) - 1 < proposals:
        best = min(rows, key=lambda r: r.D)
        ctx = Context(rec, rec.problem, rec.precision, best.strategy, best.gaps, list(rows), tried, valid, rng=random.Random(len(rows)))
        new = []
        for _ in range(min(batch, proposals + 1 - len(rows))):
            p = agent.propose(ctx)
            if p is None:
                return rows
            assert p.strategy.hash() not in tried
            tried.add(p.strategy.hash())
            new.append(p.strategy)
        rows += [_row(s, table[s.hash()], len(rows) + i, ref) for i, s in enumerate(new)]
    return rows


def _to_best(rows: list[dict]) -> int:
    best = min(r.D for r in rows)
    return next(r.round for r in rows if r.D == best)


@pytest.fixture(scope="module")
def pi0(h200_slices):
    return slice_record(h200_slices, json.loads(TABLE.with_suffix(".json").read_text())["slice_id"])


def test_tpe_finds_the_best_measured_point_sooner_than_random(pi0):
    table, meta = _table()
    best = min(r.D for r in table.values())
    space = meta["space"]
    tpe = [_to_best(search(OptunaSearch(space, mutate=0.0, seed=s), pi0, 79)) for s in range(5)]
    rnd = [_to_best(search(OptunaSearch(space, sampler="random", mutate=0.0, seed=s), pi0, 79)) for s in range(5)]
    assert max(tpe) <= BUDGET and min(r.D for r in search(OptunaSearch(space, mutate=0.0), pi0, BUDGET)) == best
    assert statistics.mean(tpe) < statistics.mean(rnd), (tpe, rnd)
    assert _to_best(search(OptunaSearch(space, seed=0), pi0, 16)) <= 8        # the default agent, with mutation


class Recording:
    """An agent wrapper that keeps every proposal with the revision it was proposed from."""

    def __init__(self, agent):
        self.agent, self.seen = agent, []

    def propose(self, ctx):
        p = self.agent.propose(ctx)
        self.seen.append((ctx.current, p))
        return p


def test_local_proposals_move_at_most_two_knobs_and_reach_the_best_sooner(pi0):
    """`local: 2` (conf/agent/optuna.yaml): every sampled proposal differs from the revision it was proposed from in at
    most two knobs, and the default agent reaches the table's best point within 7 proposals on seeds 0-2 (measured
    over seeds 0-9, bench/results/optimizer_replay_cpu.txt: 3-7, against 7-8 over the whole space)."""
    table, meta = _table()
    best = min(r.D for r in table.values())
    for seed in range(3):
        agent = Recording(OptunaSearch(meta["space"], seed=seed, local=2))
        rows = search(agent, pi0, 12)
        sampled = [(cur, p) for cur, p in agent.seen if p.name.startswith("tpe")]
        assert sampled and all(len(cur.diff(p.strategy)) <= 2 for cur, p in sampled)
        assert any(p.name == "tpe local" for _, p in sampled)     # draws farther away were brought near
        assert min(r.D for r in rows) == best and _to_best(rows) <= 7
    with pytest.raises(VxError, match="agent.local"):
        OptunaSearch(meta["space"], local=-1)


def test_resume_rebuilds_the_study_from_the_trail(pi0):
    """A fresh agent given a trail of 24 measured points tells all of them to its study, never proposes one of them
    again, and goes on to the best point."""
    table, meta = _table()
    first = search(OptunaSearch(meta["space"], seed=1), pi0, 24)
    again = OptunaSearch(meta["space"], seed=1)
    rows = search(again, pi0, 60, trail=[replace(r) for r in first])
    assert [r.strategy_hash for r in rows[:25]] == [r.strategy_hash for r in first]
    assert len({r.strategy_hash for r in rows}) == len(rows)
    done = [t for t in again.study.trials if t.state.name == "COMPLETE" and "invalid" not in t.user_attrs]
    assert len({tuple(sorted(t.params.items())) for t in done}) >= 25     # the 25 from the trail, then its own
    assert min(r.D for r in rows) == min(r.D for r in table.values())


def test_bad_settings_are_one_line_errors():
    with pytest.raises(VxError, match="agent.space"):
        OptunaSearch({"block_q": [1]})
    with pytest.raises(VxError, match="agent.sampler"):
        OptunaSearch({"block_m": [32]}, sampler="grid")
    assert OptunaSearch(conf("agent", "optuna")["space"]).space["mapping"] == ["coalesced", "strided", "swizzled"]


class TableMeasure:
    """The replay table's H200 measurement of a strategy (by hash), as the loop's measurement."""

    def __init__(self):
        self.table, _ = _table()

    def __call__(self, c, launch, record, folder, work):
        from vxsynth.signature.measure import Measurement
        r = self.table.get(c.strategy.hash())
        return Measurement(True, {k: getattr(r, k) for k in COMPONENTS}) if r else Measurement(False, error="not in the table")

    def batch(self, items, record, work):
        return [self(c, launch, record, None, work) for c, launch in items]


def test_the_loop_with_the_optimizer_keeps_the_best_point(pi0, tmp_path):
    """`agent=optuna` (TPE alone) in the reconstruction loop, batches of 8 on the CPU checks and the table's H200
    measurements: every candidate passes check 2 here, the kept revisions descend, the final one is the table's best
    point."""
    from vxsynth.checks.run import CheckEnv
    from vxsynth.reconstruct.loop import LoopConfig, LoopEnv, reconstruct
    from vxsynth.signature.measure import Measurement
    from vxsynth.targets.vortex_host import HostExecutor, VortexConfig

    table, meta = _table()
    meas = TableMeasure()
    env = LoopEnv(CheckEnv(HostExecutor(VortexConfig()), conf("precision")), conf("sandbox")["rules"], measure=meas,
                  measure_batch=meas.batch, reference=lambda rec: Measurement(True, meta["reference"]))
    cfg = LoopConfig(rounds=16, batch=8, initial=meta["start"], sanitize=False)
    res = reconstruct(pi0, cfg, env, OptunaSearch(meta["space"], mutate=0.0), tmp_path / "out", log=lambda s: None,
                      work_dir=tmp_path / "work")
    trail = pd.read_parquet(tmp_path / "out" / "trail.parquet")
    assert len(trail) == 17 and set(trail["batch"]) == {0, 1, 9}
    assert (trail["check2"] == "vortex vs reference: pass").all()
    kept = trail[trail["decision"].isin(["initial", "kept"])]["D"].tolist()
    assert kept == sorted(kept, reverse=True) and res.final.D == pytest.approx(min(r.D for r in table.values()))
    summ = res.summary
    assert summ["candidates"] == 17 and summ["budget"] == {"rounds": 16, "wall_s": cfg.wall_s} and summ["batch"] == 8
    top = sorted(((k, v) for k, v in res.final.gaps.items() if v == v), key=lambda kv: -abs(kv[1]))[:3]
    assert [tuple(g) for g in summ["largest_gaps"]] == top


def test_a_space_with_no_valid_point_falls_back_to_guided_edits(pi0):
    """A space whose every point cannot run (16384 threads a block) stops nothing: the proposals become the
    profile-guided edits of the current revision, and they say why."""
    agent = OptunaSearch({"block_m": [128], "block_n": [128], "thread_m": [1], "thread_n": [1]}, mutate=0.0, max_draws=20)
    rows = search(agent, pi0, 4, batch=2)
    assert len(rows) == 5 and agent.stopped is None
    assert {r.strategy_hash for r in rows[1:]} <= set(_table()[0])
    assert all(t.user_attrs.get("invalid") for t in agent.study.trials)
