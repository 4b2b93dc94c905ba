"""One writer per output: a lock file beside each stage output or slice directory (`.<name>.lock`, ignored by DVC and
git), held for as long as the output is written. A second run refuses at once, naming who holds it."""

from __future__ import annotations

import fcntl
import os
import socket
import time
from contextlib import contextmanager
from pathlib import Path

from vxsynth.errors import VxError


@contextmanager
def exclusive(out: Path, what: str):
    """Hold the lock of output `out` (a directory or file); VxError when another process holds it."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    path = out.parent / f".{out.name}.lock"
    with open(path, "a+") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            holder = f.read().strip() or "another process"
            raise VxError(f"{what} is being written by {holder}; wait for that run to finish, or stop it") from None
        f.seek(0)
        f.truncate()
        f.write(f"pid {os.getpid()} on {socket.gethostname()} since {time.strftime('%H:%M:%S')}")
        f.flush()
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
