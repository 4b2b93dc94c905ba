"""Persistent CUDA workers, one per GPU: a candidate's launch costs a job line, not a new Python + CuPy process.

Fault isolation stays per candidate: a job that hangs past its timeout gets the worker's whole process group
killed; a worker that dies (trap, illegal address, out of memory) or reports a CUDA error is replaced by a fresh
process, so a sticky error never reaches another candidate. The fault is the job's error, and so is the recovery:
the replacement is started within the faulting job's call and waited for until its CUDA context is up (the GPU
may take a while to tear down a killed kernel), so the next job's timeout never pays for a neighbour's fault.
"""

from __future__ import annotations

import json
import os
import queue
import select
import subprocess
import sys
import tempfile
import threading

from vxsynth.targets import proc

READY_S = 300       # how long a fresh worker may take to make its CUDA context (after a killed kernel, the GPU's clean-up)


def visible(i: int) -> str:
    """CUDA_VISIBLE_DEVICES naming this process's GPU `i` (its i-th visible device, when the process has a list)."""
    have = [d for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    return have[i] if i < len(have) else str(i)


class GpuWorker:
    """One `cuda_worker --serve` process on one GPU (`gpu`: its index, None: the process default)."""

    def __init__(self, gpu: int | None = None):
        self.gpu, self.p, self.starts, self.faults = gpu, None, 0, 0
        self.lock = threading.Lock()

    def _start(self) -> None:
        """A fresh worker, returned once it reports ready (its CUDA context made, or why it could not be)."""
        r, w = os.pipe()
        env = {**os.environ, **({"CUDA_VISIBLE_DEVICES": visible(self.gpu)} if self.gpu is not None else {})}
        self.log = tempfile.TemporaryFile()
        self.p = subprocess.Popen([sys.executable, "-m", "vxsynth.targets.cuda_worker", "--serve", str(w)],
                                  stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=self.log, text=True,
                                  env=env, pass_fds=(w,), start_new_session=True)
        os.close(w)
        self.replies = os.fdopen(r)
        self.starts += 1
        if select.select([self.replies], [], [], READY_S)[0]:
            self.replies.readline()

    def _stop(self) -> str:
        """Kill the worker's process group; how it ended and the tail of its stderr."""
        proc.kill_group(self.p.pid)
        rc = self.p.wait()
        self.replies.close()
        self.log.seek(0)
        err = proc.tail(self.log.read().decode(errors="replace"))
        self.log.close()
        self.p = None
        return (f"killed by signal {-rc}" if rc < 0 else f"exit status {rc}") + (f": {err}" if err else "")

    def run(self, job: dict, timeout_s: float) -> dict:
        """{ok, kernel_us | error and failure (`proc.FAILURES`)} for one job; the worker is replaced after any
        fault."""
        with self.lock:
            if self.p is None:
                self._start()
            try:
                self.p.stdin.write(json.dumps(job) + "\n")
                self.p.stdin.flush()
            except OSError:
                pass            # it died already: the reply read below sees end of file
            ready, _, _ = select.select([self.replies], [], [], timeout_s)
            line = self.replies.readline() if ready else None
            if line:
                reply = json.loads(line)
                if reply.get("fatal"):
                    self.faults += 1
                    reply["error"] += f" (worker restarted: {self._stop()})"
                    self._start()
                return reply
            self.faults += 1
            why = f"timed out after {timeout_s:.0f} s" if line is None else "the worker died"
            reply = {"ok": False, "failure": "crash" if line is not None else "timeout",
                     "error": f"{why} (worker process group killed, restarted: {self._stop()})"}
            self._start()
            return reply

    def close(self) -> None:
        with self.lock:
            if self.p is not None:
                self._stop()


class GpuPool:
    """One worker per GPU; `run` takes whichever is free."""

    def __init__(self, gpus: int):
        self.workers = [GpuWorker(i) for i in range(max(1, gpus))]
        self.free: queue.Queue = queue.Queue()
        for w in self.workers:
            self.free.put(w)

    def run(self, job: dict, timeout_s: float) -> dict:
        w = self.free.get()
        try:
            return w.run(job, timeout_s)
        finally:
            self.free.put(w)

    def stats(self) -> dict:
        return {"workers": len(self.workers), "starts": sum(w.starts for w in self.workers),
                "faults": sum(w.faults for w in self.workers)}

    def close(self) -> None:
        for w in self.workers:
            w.close()
