"""The jail every native run of candidate code goes through: a hostile static program (tests/hostile/jail_probe.c)
tries each way out and fails with a recorded reason, while a canary directory on the host stays byte-identical and
the checking process survives."""

from __future__ import annotations

import hashlib
import subprocess
import time
from pathlib import Path

import pytest

from vxsynth.targets import jail

pytestmark = pytest.mark.skipif(jail.available() is not None, reason=str(jail.available()))
PROBE = Path(__file__).parent / "hostile" / "jail_probe.c"


@pytest.fixture(scope="module")
def probe(tmp_path_factory) -> Path:
    exe = tmp_path_factory.mktemp("probe") / "probe"
    subprocess.run(["gcc", "-O1", "-static", str(PROBE), "-o", str(exe)], check=True)
    return exe


@pytest.fixture()
def canary(tmp_path) -> Path:
    d = tmp_path / "canary"
    d.mkdir()
    (d / "precious.txt").write_text("do not touch\n")
    return d


def digest(d: Path) -> str:
    return hashlib.md5(b"".join(p.name.encode() + p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file())).hexdigest()


def test_a_well_behaved_program_runs_and_writes_its_output(probe, tmp_path):
    r = jail.run(probe, ["ok"], {}, tmp_path / "out", 20)
    assert r.ok, r.error
    assert (tmp_path / "out" / "out.bin").read_text() == "x"


@pytest.mark.parametrize("mode,reason", [
    ("unlink", "seccomp"), ("remove", "seccomp"), ("fork", "seccomp"), ("kill_parent", "seccomp"),
    ("kill_all", "seccomp"), ("socket", "seccomp"), ("ptrace", "seccomp"),
    ("shell", "exit status 7"),          # no /bin/sh exists inside
    ("read_host", "exit status 7"),      # the host's files are not there
    ("write_host", "exit status 7"),
])
def test_escape_attempts_fail_and_touch_nothing(probe, tmp_path, canary, mode, reason):
    before = digest(canary)
    target = str(canary / "precious.txt")
    r = jail.run(probe, [mode, target if mode != "shell" else f"rm -rf {canary}"], {}, tmp_path / "out", 20)
    assert not r.ok and reason in r.error, (mode, r.error, r.stderr)
    assert digest(canary) == before


def test_a_hang_is_killed_with_its_process_group(probe, tmp_path):
    t = time.perf_counter()
    r = jail.run(probe, ["spin"], {}, tmp_path / "out", 2)
    assert not r.ok and "timed out" in r.error
    assert time.perf_counter() - t < 10
    # the pid namespace goes down with bubblewrap, a moment after it (longer on a loaded machine): nothing may outlive
    # that moment
    for _ in range(50):
        left = subprocess.run(["pgrep", "-f", str(probe)], capture_output=True, text=True).stdout.split()
        if not left:
            break
        time.sleep(0.1)
    assert left == []


def test_resource_limits_stop_a_file_bomb(probe, tmp_path):
    r = jail.run(probe, ["big_file"], {}, tmp_path / "out", 20, jail.Limits(file_mb=1))
    assert not r.ok and "file size limit" in r.error


def test_an_output_quota_stops_many_files_each_within_the_file_limit(probe, tmp_path):
    r = jail.run(probe, ["many_files", "12"], {}, tmp_path / "out", 20, jail.Limits(file_mb=2, output_mb=8))
    assert not r.ok and "output quota filled (8 MB" in r.error, r.error
    assert sum(f.stat().st_blocks * 512 for f in (tmp_path / "out").iterdir()) <= 8 << 20
    r = jail.run(probe, ["many_files", "200"], {}, tmp_path / "out2", 20, jail.Limits(output_files=16))
    assert not r.ok and "16 files" in r.error and len(list((tmp_path / "out2").iterdir())) < 16
    r = jail.run(probe, ["many_files", "3"], {}, tmp_path / "out3", 20, jail.Limits(output_mb=8))
    assert r.ok and len(list((tmp_path / "out3").iterdir())) == 3, r.error


def test_console_output_counts_against_the_quota_and_only_its_end_comes_back(probe, tmp_path):
    r = jail.run(probe, ["flood_stdout", "64"], {}, tmp_path / "out", 20, jail.Limits(output_mb=8))
    assert not r.ok and "output quota filled (8 MB" in r.error, r.error
    assert len(r.stdout) == jail.CONSOLE_TAIL and set(r.stdout) == {"y"}
    r = jail.run(probe, ["flood_stdout", "2"], {}, tmp_path / "out2", 20, jail.Limits(output_mb=8))
    assert r.ok and len(r.stdout) == jail.CONSOLE_TAIL and not list((tmp_path / "out2").iterdir()), r.error


def test_inputs_are_read_only_and_only_inputs_are_visible(probe, tmp_path, canary):
    before = digest(canary)
    inp = canary / "precious.txt"
    r = jail.run(probe, ["write_host", "/in/x"], {"x": inp}, tmp_path / "out", 20)
    assert not r.ok and "exit status 7" in r.error
    r = jail.run(probe, ["read_host", "/in/x"], {"x": inp}, tmp_path / "out2", 20)
    assert r.ok, r.error
    assert digest(canary) == before


def test_the_filter_rejects_another_architecture_and_x32_numbers():
    prog = jail.seccomp_filter()
    assert len(prog) % 8 == 0 and len(prog) // 8 < 256
    assert (jail.AUDIT_ARCH_X86_64).to_bytes(4, "little") in prog
    with pytest.raises(jail.JailError, match="unknown system calls"):
        jail.seccomp_filter(allow=("read", "no_such_call"))
