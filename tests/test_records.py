"""Typed records on real data: every slice record the slicing stage writes from the committed H200 profiles, and every
slice status of the committed whole-suite H200 rebuild, parses once and writes back the same bytes; a damaged one is
one VxError line naming the key and what to do."""

from __future__ import annotations

import json

import pytest

from vxsynth.errors import VxError
from vxsynth.kernels.problem import Conv, Gemm
from vxsynth.records import SliceRecord, SliceStatus
from vxsynth.store.io import canonical_json


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
