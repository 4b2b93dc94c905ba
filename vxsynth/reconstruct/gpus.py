"""GPU slots for a suite's reconstruction: one slice per GPU at a time, each in its own process.

A slice's loop uses "the" GPU everywhere (torch's reference op, the CUDA worker, ncu, compute-sanitizer), so a slice
is pinned to one GPU by running its loop in a child process whose CUDA_VISIBLE_DEVICES names that GPU alone.
A slot is held through an exclusive lock file per GPU (`<dir>/gpu<id>.lock`, naming its holder), so two rebuilds on
one host never share a GPU either; a slice waits until a slot is free. The lock goes with the process holding it, so
a child outliving it (its Dask worker or flow killed) kills itself (`die_with_parent`).
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import threading
import time
from contextlib import contextmanager
from pathlib import Path

from vxsynth.errors import VxError

PARENT = "VXSYNTH_SLOT_HOLDER"        # pid of the process whose GPU lease a slice's child runs under


def slots(setting, visible_count: int) -> list[str]:
    """The GPUs slices are dealt to: `auto` is every GPU this process sees (its CUDA_VISIBLE_DEVICES names, or
    0..n-1), none without one; a list names them (each must be visible when this process sees GPUs)."""
    if setting in (None, "auto"):
        have = [d.strip() for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
        return have[:visible_count] if have else [str(i) for i in range(visible_count)]
    if not isinstance(setting, (list, tuple)) or not setting or not all(
            isinstance(g, int) and not isinstance(g, bool) and g >= 0 for g in setting):
        raise VxError(f"rebuild.gpus={setting!r}: give auto or a list of GPU indices, e.g. rebuild.gpus=[0,1]")
    if len(set(setting)) != len(setting):
        raise VxError(f"rebuild.gpus={list(setting)}: a GPU is listed twice; give each GPU once")
    if visible_count and max(setting) >= visible_count:
        raise VxError(f"rebuild.gpus={list(setting)}: this machine sees {visible_count} GPU(s) (0..{visible_count - 1})")
    return [str(g) for g in setting]


@contextmanager
def lease(lock_dir: Path, gpus: list[str], holder: str, poll_s: float = 0.5):
    """Hold one free GPU of `gpus` (its id) until the block ends; waits while all are held."""
    lock_dir = Path(lock_dir)
    lock_dir.mkdir(parents=True, exist_ok=True)
    while True:
        for g in gpus:
            f = open(lock_dir / f"gpu{g}.lock", "a+")
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                f.close()
                continue
            try:
                f.seek(0), f.truncate()
                f.write(json.dumps({"gpu": g, "holder": holder, "pid": os.getpid(), "since": time.time()}))
                f.flush()
                yield g
            finally:
                f.truncate(0)
                f.close()
            return
        time.sleep(poll_s)


def child_env(gpu: str) -> dict:
    """The environment of a slice's child process: this one's, seeing GPU `gpu` alone, naming this process as the
    lease holder it must not outlive."""
    return {**os.environ, "CUDA_VISIBLE_DEVICES": gpu, "PYTHONUNBUFFERED": "1", PARENT: str(os.getpid())}


def die_with_parent(poll_s: float = 1.0) -> None:
    """In a slice's child (its own process group): kill the group once the lease holder is gone. Its slot lock went
    with it, so an orphaned loop would share the GPU with the next lease and write its slice while a Dask cluster
    redoes that slice elsewhere."""
    holder = int(os.environ.get(PARENT) or 0)
    if not holder:
        return

    def watch():
        while os.getppid() == holder:
            time.sleep(poll_s)
        os.killpg(os.getpgrp(), signal.SIGKILL)

    threading.Thread(target=watch, name="die-with-parent", daemon=True).start()
