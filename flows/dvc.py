"""DVC from flows: one DVC command at a time per workspace (a file lock), outputs committed to dvc.lock."""

from __future__ import annotations

import fcntl
import shutil
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

from flows.config import ROOT
from vxsynth.errors import VxError


@contextmanager
def workspace_lock(root: Path = ROOT):
    lock = root / ".dvc" / "tmp" / "vxsynth.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def executable() -> str:
    """dvc from PATH, else the one installed beside this interpreter (an unactivated venv)."""
    exe = shutil.which("dvc") or shutil.which("dvc", path=str(Path(sys.executable).parent))
    if exe is None:
        raise VxError("dvc not found on PATH or beside this Python; install the project (`make install`) or add dvc to PATH")
    return exe


def dvc(*args: str, root: Path = ROOT, check: bool = True) -> str:
    exe = executable()
    with workspace_lock(root):
        p = subprocess.run([exe, *args], cwd=root, capture_output=True, text=True)
    if check and p.returncode != 0:
        raise VxError(f"`dvc {' '.join(args)}` failed: {(p.stderr or p.stdout).strip().splitlines()[-1:]}")
    return p.stdout


def is_workspace(root: Path = ROOT) -> bool:
    return (root / ".dvc").is_dir() and (root / "dvc.yaml").exists()


def commit(stages: list[str], root: Path = ROOT) -> None:
    """Record the current outputs of `stages` in dvc.lock (so dvc.lock matches the data written)."""
    if stages:
        dvc("commit", "-f", *stages, root=root)
