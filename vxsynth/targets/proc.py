"""Run a tool on generated code (compilers, the CUDA launcher) in its own session with a timeout: a crash or hang
fails only that call, and on timeout the whole process group is killed. Candidate code that runs natively on the
CPU goes through `jail.py` instead."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass


FAILURES = ("crash", "timeout", "guard_zone", "divergence", "no_output", "not_run")
"""How a candidate's run failed (`CudaRun.failure`, `VortexRun.failure`; "" when it ran): crash (died: a signal, an
exit status, a fatal CUDA error), timeout (past its time limit), guard_zone (wrote outside its output buffer),
divergence (lanes of a warp took different paths: the Vortex host executor's lockstep check), no_output (exited 0
without writing its full output), not_run (refused before it ran: occupancy, build, jail set-up)."""


@dataclass
class ProcResult:
    ok: bool
    returncode: int | None
    stdout: str
    stderr: str
    wall_s: float
    error: str = ""
    timed_out: bool = False


def run(cmd: list[str], timeout_s: float, cwd=None, env=None, *, setup=None, pass_fds=()) -> ProcResult:
    """`setup` runs in the child before exec (it must start a new session itself); `pass_fds` stay open there."""
    t = time.perf_counter()
    try:
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd, env=env,
                             start_new_session=setup is None, preexec_fn=setup, pass_fds=pass_fds)
    except OSError as e:
        return ProcResult(False, None, "", str(e), time.perf_counter() - t, f"could not start {cmd[0]}: {e}")
    try:
        out, err = p.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        kill_group(p.pid)
        out, err = p.communicate()
        return ProcResult(False, None, _s(out), _s(err), time.perf_counter() - t,
                          f"timed out after {timeout_s:.0f} s (process group killed)", True)
    finally:
        kill_group(p.pid)     # nothing it started outlives it
    rc = p.returncode
    why = "" if rc == 0 else (f"killed by signal {-rc}" if rc < 0 else f"exit status {rc}")
    return ProcResult(rc == 0, rc, out, err, time.perf_counter() - t, why)


def failure_of(r: ProcResult, statuses: dict[int, str]) -> str:
    """The failure kind (`FAILURES`) of a run that failed: `statuses` are the exit statuses the program reports its
    own checks' faults with; any other end is a crash, or a timeout."""
    return "timeout" if r.timed_out else statuses.get(r.returncode, "crash")


def kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _s(b) -> str:
    return b.decode(errors="replace") if isinstance(b, bytes) else (b or "")


def tail(text: str, n: int = 400) -> str:
    return " | ".join(line for line in text.strip().splitlines()[-6:])[-n:]
