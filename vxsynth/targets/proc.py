"""Run untrusted generated code in a subprocess with a timeout; a crash or hang fails only that call."""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass


@dataclass
class ProcResult:
    ok: bool
    returncode: int | None
    stdout: str
    stderr: str
    wall_s: float
    error: str = ""


def run(cmd: list[str], timeout_s: float, cwd=None, env=None) -> ProcResult:
    t = time.perf_counter()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, cwd=cwd, env=env)
    except subprocess.TimeoutExpired as e:
        return ProcResult(False, None, _s(e.stdout), _s(e.stderr), time.perf_counter() - t, f"timed out after {timeout_s:.0f} s")
    except OSError as e:
        return ProcResult(False, None, "", str(e), time.perf_counter() - t, f"could not start {cmd[0]}: {e}")
    err = "" if p.returncode == 0 else (f"killed by signal {-p.returncode}" if p.returncode < 0 else f"exit status {p.returncode}")
    return ProcResult(p.returncode == 0, p.returncode, p.stdout, p.stderr, time.perf_counter() - t, err)


def _s(b) -> str:
    return b.decode(errors="replace") if isinstance(b, bytes) else (b or "")


def tail(text: str, n: int = 400) -> str:
    return " | ".join(line for line in text.strip().splitlines()[-6:])[-n:]
