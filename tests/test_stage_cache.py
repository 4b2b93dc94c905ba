"""Stage stamps: a finished slice stays finished while nothing it depends on changes, and a redo says what changed
(seen on the H200: finished slices redone by a later device call, with nothing in the log to say why)."""

from __future__ import annotations

import json
import shutil

from tasks.caching import key, stale, stamp
from tests.conftest import loop_result


class Log:
    def __init__(self):
        self.lines = []

    def info(self, line):
        self.lines.append(line)
    error = info


def test_a_stamped_slice_is_skipped_and_a_redo_names_the_setting_or_input_that_changed(tmp_path, monkeypatch, h200_slices):
    import tasks.reconstruct as R
    from flows import config

    runs = []

    def fake_loop(cfg, rec, out, work, log):
        runs.append(rec)
        return loop_result()

    monkeypatch.setattr(R, "run_slice", fake_loop)
    monkeypatch.setattr(R, "no_pair", lambda res, out: None)
    slice_json = tmp_path / "slice.json"
    shutil.copy(next(h200_slices.glob("linear-fp32-1x4096x260*/slice.json")), slice_json)
    out = tmp_path / "suite" / "s"

    def call(*overrides):
        log = Log()
        R._run("s", slice_json, config.load(["gpu=false", *overrides]), out, tmp_path / "work", log, None, None)
        return " | ".join(log.lines)

    assert "not finished before (no stamp)" in call("loop.wall_s=45") and len(runs) == 1
    assert "[s] up to date" in call("loop.wall_s=45") and len(runs) == 1            # nothing run again
    said = call()                                                                  # the default budget: 900 s
    assert "changed since it was stamped: cfg.loop.wall_s 45 -> 900" in said and len(runs) == 2
    rec = json.loads(slice_json.read_text())
    rec["problem"]["M"] += 1
    slice_json.write_text(json.dumps(rec))
    said = call()
    assert f"inputs.{slice_json}" in said and "cfg." not in said and len(runs) == 3


def test_a_stamp_without_its_key_parts_says_so_and_a_missing_one_says_not_finished(tmp_path):
    k = key("slice", [], {"slicing": {"top": 3}})
    assert stale(tmp_path, k) == "not finished before (no stamp)"
    stamp(tmp_path, k, ["a"])
    assert stale(tmp_path, key("slice", [], {"slicing": {"top": 4}})) == \
        "changed since it was stamped: cfg.slicing.top 3 -> 4"
    (tmp_path / ".stamp.json").write_text(json.dumps({"key": "old", "summary": ["a"]}))
    assert "what changed is not known" in stale(tmp_path, k)
    (tmp_path / ".stamp.json").write_text('{"key": "cut sh')
    assert stale(tmp_path, k) == "its stamp is unreadable"


def test_a_run_cut_before_its_stamp_leaves_its_status_and_is_redone(tmp_path, monkeypatch, h200_slices):
    """The stamp is written last: a run killed after the status but before the stamp is redone, never reported up to
    date without a status.json (seen in CI: the demo resumed a slice stamped by a run killed just after)."""
    import tasks.reconstruct as R
    from flows import config

    runs = []

    def fake_loop(cfg, rec, out, work, log):
        runs.append(rec)
        return loop_result()

    def killed(*a):
        raise KeyboardInterrupt("killed")          # not an Exception: the run stops here, as under SIGKILL

    for name, fake in [("run_slice", fake_loop), ("no_pair", lambda res, out: None), ("stamp", killed)]:
        monkeypatch.setattr(R, name, fake)
    slice_json = next(h200_slices.glob("linear-fp32-1x4096x260*/slice.json"))
    out = tmp_path / "suite" / "s"
    cfg = config.load(["gpu=false"])
    try:
        R._run("s", slice_json, cfg, out, tmp_path / "work", Log(), None, None)
    except KeyboardInterrupt:
        pass
    assert json.loads((out / "status.json").read_text())["status"] == "reconstructed"
    monkeypatch.setattr(R, "stamp", stamp)
    log = Log()
    R._run("s", slice_json, cfg, out, tmp_path / "work", log, None, None)
    assert len(runs) == 2 and "not finished before (no stamp)" in " | ".join(log.lines)
    assert (out / ".stamp.json").exists()
