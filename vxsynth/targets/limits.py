"""Limits on every compile of candidate code: the sandbox's preprocessor views, nvcc, the rv32 cross gcc and the host
build of the Vortex half. Each compiler process runs under an address-space limit (RLIMIT_AS, set by util-linux's
prlimit: cheaper than a pre-exec hook, which makes Python fork; the stages it starts inherit it), and all compiles of
one candidate draw on one wall-time budget (conf/sandbox `compile`), so a source that keeps every stage under its own
time limit still cannot take longer in total. Exceeding either fails that compile with a one-line named reason, and
only that candidate."""

from __future__ import annotations

import re
import threading
import weakref
from dataclasses import dataclass

from vxsynth.targets import proc
from vxsynth.targets.proc import ProcResult

MEMORY = re.compile(r"out of memory|memory exhausted|cannot allocate memory|bad_alloc|memory allocation fail", re.I)
BUDGET = "compile time budget"


@dataclass(frozen=True)
class CompileLimits:
    memory_mb: int = 4096       # address space of each compiler process
    total_s: float = 180.0      # wall seconds of all compiles of one candidate together

    @classmethod
    def configured(cls) -> "CompileLimits":
        from vxsynth.targets.sandbox import default_policy

        return cls(**default_policy()["compile"])


class Budget:
    """The compile time one candidate has left, and the memory limit of each of its compiles."""

    def __init__(self, limits: CompileLimits | None = None):
        self.limits = limits or CompileLimits.configured()
        self.spent = 0.0

    def run(self, cmd: list[str], stage_s: float, file_bytes: int | None = None) -> ProcResult:
        """`cmd` under the memory limit (and a largest file written of `file_bytes`), stopped at `stage_s` or when
        the budget runs out, whichever comes first."""
        lim, left = self.limits, self.limits.total_s - self.spent
        if left <= 0:
            return ProcResult(False, None, "", "", 0.0, f"{BUDGET} of {lim.total_s:g} s per candidate spent")
        fsize = [f"--fsize={file_bytes}"] if file_bytes else []
        r = proc.run(["prlimit", f"--as={lim.memory_mb << 20}", "--core=0", *fsize, "--", *cmd], min(stage_s, left))
        self.spent += r.wall_s
        if r.timed_out and left < stage_s:
            r.error = f"{BUDGET} of {lim.total_s:g} s per candidate exceeded (process group killed)"
        elif not r.ok and MEMORY.search(r.stderr):
            r.error = f"compile memory limit of {lim.memory_mb} MB exceeded"
        return r


def over_budget(error: str) -> bool:
    """True when a compile failed for the budget: it depends on the candidate's other compiles, so it is not cached."""
    return BUDGET in error


_budgets: dict[int, Budget] = {}
_lock = threading.Lock()


def of(c) -> Budget:
    """The budget of candidate object `c` (configured limits), shared by all its compiles: created at the first,
    dropped with the object."""
    with _lock:
        b = _budgets.get(id(c))
        if b is None:
            b = _budgets[id(c)] = Budget()
            weakref.finalize(c, _budgets.pop, id(c), None)
        return b
