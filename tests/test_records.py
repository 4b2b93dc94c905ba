"""Typed records on real data: every slice record the slicing stage writes from the committed H200 profiles, and every
slice status of the committed whole-suite H200 rebuild, parses once and writes back the same bytes; a damaged one is
one VxError line naming the key and what to do."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from tests.conftest import RECORDED
from vxsynth import trail
from vxsynth.errors import VxError
from vxsynth.kernels.problem import Conv, Gemm
from vxsynth.kernels.strategy import Strategy
from vxsynth.records import CheckRecord, LoopResult, SliceRecord, SliceStatus
from vxsynth.store import schemas
from vxsynth.store.io import canonical_json, read_table
from vxsynth.trail import TrailRow


def test_every_real_slice_record_round_trips_to_the_same_bytes(h200_slices):
    paths = sorted(h200_slices.glob("*/slice.json"))
    assert len(paths) == 26
    for path in paths:
        d = json.loads(path.read_text())
        rec = SliceRecord.load(path)
        assert rec.to_dict() == d and json.dumps(rec.to_dict()) == json.dumps(d), path
        assert canonical_json(rec.to_dict()) + "\n" == path.read_text(), path
        assert isinstance(rec.problem, Gemm if d["problem"]["kind"] == "gemm" else Conv)
        assert rec.slice_id == path.parent.name and rec.problem.label() in rec.slice_id
        assert rec.main is not None and rec.main["name"] == rec.main_kernel


@pytest.mark.parametrize("damage,said", [
    (lambda d: d.pop("occurrences"), "missing key 'occurrences'"),
    (lambda d: d.update(occurences=[]), "unknown key 'occurences'"),
    (lambda d: d["problem"].pop("M"),
     "damaged problem (TypeError: Gemm.__init__() missing 1 required positional argument: 'M')"),
    (lambda d: d["problem"].update(kind="fft"), "problem kind 'fft' is not gemm or conv"),
])
def test_a_damaged_record_is_one_line_naming_the_key(h200_slices, tmp_path, damage, said):
    path = next(h200_slices.glob("linear-fp32-1x4096x260*/slice.json"))
    d = json.loads(path.read_text())
    damage(d)
    bad = tmp_path / "slice.json"
    bad.write_text(json.dumps(d))
    with pytest.raises(VxError) as e:
        SliceRecord.load(bad)
    msg = str(e.value)
    assert said in msg and msg.startswith(str(bad)) and "\n" not in msg, msg
    assert "vxsynth slice" in msg or "slice record is damaged" in msg, msg


def test_a_record_that_is_not_json_names_its_file(tmp_path):
    bad = tmp_path / "slice.json"
    bad.write_text('{"slice_id": ')
    with pytest.raises(VxError, match="slice.json: not valid JSON .*vxsynth slice"):
        SliceRecord.load(bad)
    with pytest.raises(VxError, match="slice record: not a JSON object"):
        SliceRecord.from_dict([1, 2])


def test_every_committed_slice_status_round_trips_to_the_same_bytes(rebuild_h):
    paths = sorted(rebuild_h.glob("*/status.json"))
    assert len(paths) == 26
    for path in paths:
        st = SliceStatus.load(path)
        assert st.to_dict() == json.loads(path.read_text()), path
        assert canonical_json(st.to_dict()) + "\n" == path.read_text(), path
        assert st.slice_id == path.parent.name and st.status == "reconstructed" and st.rounds is not None


def test_a_status_without_the_loop_writes_no_loop_figures_and_a_damaged_one_is_one_line(tmp_path):
    failed = SliceStatus("s", "failed", error="loop on GPU 0 ended with signal 15", wall_s=1.0, wall_s_total=3.0)
    assert failed.to_dict() == {"slice_id": "s", "status": "failed", "error": "loop on GPU 0 ended with signal 15",
                                "wall_s": 1.0, "wall_s_total": 3.0}
    unmeasured = SliceStatus("s", "start checked on CPU", D_initial=None, D_final=None, check2="pass", rounds=0)
    assert unmeasured.to_dict()["D_initial"] is None and SliceStatus.from_dict(unmeasured.to_dict()) == unmeasured
    bad = tmp_path / "status.json"
    bad.write_text(json.dumps({"slice_id": "s", "status": "failed", "eror": "x"}))
    with pytest.raises(VxError, match=r"status.json: slice status s: unknown key 'eror'; move the slice's folder"):
        SliceStatus.load(bad)
    bad.write_text(json.dumps({"status": "failed"}))
    with pytest.raises(VxError, match="missing key 'slice_id'"):
        SliceStatus.load(bad)


def test_every_committed_trail_round_trips_to_the_same_table(rebuild_h, tmp_path):
    """Rebuild h's 26 trails and the recorded H200 ones: parsed once into typed rows (strategies, gaps, edits, agent
    calls as values) and written back, the same table."""
    paths = sorted(rebuild_h.glob("*/trail.parquet")) + sorted((RECORDED / "reconstruct").glob("*/trail.parquet"))
    assert len(paths) == 29
    for path in paths:
        rows = trail.load(path)
        assert rows and all(isinstance(r.strategy, Strategy) and isinstance(r.gaps, dict) for r in rows)
        assert any(r.base for r in rows) and all(not math.isnan(r.D) for r in rows if r.base), path
        trail.save(rows, tmp_path / "t.parquet")
        pd.testing.assert_frame_equal(read_table(tmp_path / "t.parquet", schemas.TRAIL), read_table(path, schemas.TRAIL))


def test_a_stand_in_parent_judges_a_batch_against_its_distance():
    p = TrailRow.parent_with(0.25)
    assert (p.round, p.D, p.gaps, p.base) == (0, 0.25, {}, True)


def test_every_committed_loop_result_round_trips_to_the_same_bytes(rebuild_h):
    """Rebuild h's 26 results and the recorded H200 ones (written before `start` and `summary` existed)."""
    paths = sorted(rebuild_h.glob("*/result.json")) + sorted((RECORDED / "reconstruct").glob("*/result.json"))
    assert len(paths) == 29
    for path in paths:
        res = LoopResult.load(path)
        assert canonical_json(res.to_dict()) + "\n" == path.read_text(), path
        assert isinstance(res.final.strategy, Strategy) and res.initial.strategy is None and res.kept_a_pair
    old = [LoopResult.load(p) for p in paths[26:]]
    assert all(r.summary is None and "summary" not in r.to_dict() for r in old)


def test_a_damaged_loop_result_is_one_line_naming_the_file_and_key(rebuild_h, tmp_path):
    d = json.loads(next(iter(sorted(rebuild_h.glob("*/result.json")))).read_text())
    for damaged, said in (({**d, "final": {**d["final"], "colour": 1}}, "damaged revision (unknown key 'colour')"),
                          ({k: v for k, v in d.items() if k != "gpu"}, "missing key 'gpu'")):
        (tmp_path / "result.json").write_text(json.dumps(damaged))
        with pytest.raises(VxError) as e:
            LoopResult.load(tmp_path / "result.json")
        assert said in str(e.value) and str(tmp_path) in str(e.value) and "\n" not in str(e.value)


def test_every_committed_check_record_round_trips_to_the_same_bytes(rebuild_h):
    """Rebuild h's check records (the final pairs' and every round's, sanitizer verdicts on kept revisions) and the
    recorded H200 ones (written before coverage and timing were recorded)."""
    paths = sorted(rebuild_h.glob("*/checks/*.json")) + sorted((RECORDED / "reconstruct").glob("*/checks/*.json"))
    assert len(paths) > 600
    kinds, sanitized, old = set(), 0, 0
    for path in paths:
        rec = CheckRecord.load(path)
        assert canonical_json(rec.to_dict()) + "\n" == path.read_text(), path
        assert rec.passed == (rec.verdict == "pass") and rec.check_id == path.stem
        kinds.add(rec.kind)
        sanitized += rec.sanitizer is not None
        old += rec.timing is None
    assert kinds == {"check1", "check2"} and sanitized and old


def test_a_damaged_check_record_is_one_line_naming_the_file_and_key(rebuild_h, tmp_path):
    d = json.loads(next(iter(sorted(rebuild_h.glob("*/checks/*-check2.json")))).read_text())
    for damaged, said in (({**d, "colour": 1}, "unknown key 'colour'"),
                          ({k: v for k, v in d.items() if k != "verdict"}, "missing key 'verdict'")):
        (tmp_path / "c.json").write_text(json.dumps(damaged))
        with pytest.raises(VxError) as e:
            CheckRecord.load(tmp_path / "c.json")
        assert said in str(e.value) and str(tmp_path) in str(e.value) and "\n" not in str(e.value)
    (tmp_path / "c.json").write_text("{")
    with pytest.raises(VxError, match="not valid JSON"):
        CheckRecord.load(tmp_path / "c.json")
