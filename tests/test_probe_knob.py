"""bench/probe_knob.py on the committed H100 speed-probe outputs (bench/results/speed_probe_ws_h100)."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import ROOT

RUN = ROOT / "bench" / "results" / "speed_probe_ws_h100"


def _knob(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "bench" / "probe_knob.py"), *args], capture_output=True, text=True,
                          timeout=60)


def test_warp_specialized_against_its_siblings_on_the_recorded_probe():
    """Pairs differing only in warp_specialized: 24 on Pi0's BF16 linear 51x4096x1024, median 0.95x, 22 shorter; the
    bmm without two tensor maps has none; the committed table is what the script prints."""
    p = _knob("warp_specialized", str(RUN / "probe_ws.json"), str(RUN / "probe_ws2.json"))
    assert p.returncode == 0 and p.stdout == (RUN / "knob_warp_specialized.txt").read_text()
    row = next(line.split() for line in p.stdout.splitlines() if line.startswith("linear-bf16-51x4096x1024"))
    assert row[1:5] == ["24", "0.95", "0.81-1.02", "22"]
    bmm = next(line.split() for line in p.stdout.splitlines() if line.startswith("matmul-bf16-8x51x256x355"))
    assert bmm[1:5] == ["0", "no", "variant", "with"]


def test_bad_knob_or_file_is_one_line():
    for args, msg in [(["warp_spec", str(RUN / "probe_ws.json")], "'warp_spec' is not an on/off strategy knob"),
                      (["tma", str(RUN / "gpu.txt")], "is not a speed-probe JSON (JSONDecodeError")]:
        p = _knob(*args)
        assert p.returncode == 1 and p.stdout == "" and len(p.stderr.strip().splitlines()) == 1 and msg in p.stderr
