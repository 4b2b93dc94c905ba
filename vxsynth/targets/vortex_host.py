"""Host-functional Vortex executor: the candidate's own Vortex kernel source, compiled with the host C compiler
against vxsynth's implementation of the Vortex v2.2 kernel API (`vortex_api/host`), linked statically and run in
the jail (`jail.py`: namespaces, seccomp allowlist, resource limits). Its object must pass the `vortex_host` object
rules first (only the kernel API imported, nothing interposed, no state), so the program holds no code of the
candidate's outside the kernel.

It enforces the target's occupancy rules (block fits one core; local memory per resident group) like the real
scheduler, and can run a window of the grid (ranges of linear block ids) at the real shape.
"""

from __future__ import annotations

import hashlib
import os
import math
import shutil
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from vxsynth.errors import VxError
from vxsynth.kernels.candidate import Candidate, covered_mask, from_vortex_output
from vxsynth.targets import jail, limits, objcheck, proc
from vxsynth.targets.sandbox import default_policy

API = Path(__file__).parent / "vortex_api"


@dataclass(frozen=True)
class VortexConfig:
    """The simulated core the kernels are built for (matches the SimX configuration when one is used)."""
    cores: int = 1
    warps: int = 16
    threads: int = 16
    local_mem: int = 16384
    unstaged_fallback: bool = False   # a tile that outgrows local_mem: the Vortex half reads it from global memory
    host_groups: int = 2
    cc: str = "gcc"
    max_blocks: int = 8
    cover_blocks: int = 64            # grids up to this many blocks: the check cases share the whole grid between them
    timeout_s: float = 300.0
    lockstep: bool = True             # trace-pc lockstep check: reject thread-divergent branches (SimX aborts on them)
    cpu_s: int = 1200                 # jail limits of one run (CPU seconds over all threads, address space, files)
    address_space_mb: int = 8192
    file_mb: int = 1024
    output_mb: int = 256              # all files of one run together (its output tmpfs)

    @classmethod
    def from_dict(cls, d: dict, others: tuple | None = None) -> "VortexConfig":
        """The core and executor settings of `d`. With `others` (the config group's keys that are not the core's, e.g.
        `executor`) any other unknown key is an error that names it; without, keys that are no field are left out."""
        extra = sorted(k for k in d if k not in cls.__dataclass_fields__ and k not in (others or ()))
        if others is not None and extra:
            raise VxError(f"target.{extra[0]}: no such Vortex target setting; use one of "
                          f"{', '.join(sorted(cls.__dataclass_fields__))} (conf/target/vortex_host.yaml)")
        for k, v in d.items():
            if isinstance(getattr(cls, k, None), bool) and not isinstance(v, bool):
                raise VxError(f"target.{k}={v!r}: use true or false, e.g. target.{k}=true")
        return cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__})


TARGET_OTHERS = ("executor",)   # conf/target keys that are not the core's or the host executor's
DRIVER_FAULTS = {5: "guard_zone", 6: "divergence"}   # exit statuses of vortex_api/host/vx_host_driver.c


@dataclass
class VortexRun:
    ok: bool
    output: np.ndarray | None = None        # exact output shape, NaN where no block of the window wrote
    covered: np.ndarray | None = None       # bool mask of the computed elements
    blocks: list = field(default_factory=list)
    error: str = ""
    wall_s: float = 0.0
    stdout: str = ""
    counters: dict | None = None            # SimX counters (None for the host executor)
    failure: str = ""                       # how the run failed (`proc.FAILURES`); "" when it ran

    @property
    def covered_fraction(self) -> float:
        return float(self.covered.mean()) if self.covered is not None else 0.0


def resident_groups(threads: int, cfg: VortexConfig) -> int:
    """Blocks of `threads` threads one core holds at once (the v2.2 scheduler: warps per core / warps per block)."""
    return max(1, cfg.warps // math.ceil(threads / cfg.threads))


def lmem_per_block(threads: int, cfg: VortexConfig) -> int:
    """Local memory one block may use: LOCAL_MEM_SIZE / resident groups per core (vx_check_occupancy)."""
    return cfg.local_mem // resident_groups(threads, cfg)


def occupancy_error(c: Candidate, cfg: VortexConfig) -> str | None:
    """Why the Vortex core cannot host this block (the v2.2 scheduler and vx_check_occupancy rules)."""
    threads = c.strategy.threads
    if threads > cfg.warps * cfg.threads:
        return f"block of {threads} threads exceeds one core ({cfg.warps} warps x {cfg.threads} threads)"
    per_core = resident_groups(threads, cfg)
    smem = c.meta["vortex_local_mem_bytes"]
    if smem > lmem_per_block(threads, cfg):
        return f"{smem} B local memory x {per_core} resident groups exceeds LOCAL_MEM_SIZE {cfg.local_mem}"
    return None


def windows(total: int, max_blocks: int, seed: int | None = None, part: tuple[int, int, int] | None = None) -> list[tuple[int, int]]:
    """The whole grid, or first/middle/last ranges (edges included) of at most max_blocks blocks together. With a
    seed the middle range starts at a random block (drawn per check case, recorded, unknown to the candidate), so
    over the cases the covered blocks vary and no fixed set of blocks can be computed for the check alone. With
    `part` = (case, cases, cover_blocks), a grid of at most cover_blocks blocks is split between the cases: case i
    runs the i-th contiguous share, so together they check every block."""
    if total <= max_blocks:
        return [(0, total)]
    if part and total <= part[2]:
        i, n = part[0], part[1]
        lo, hi = i * total // n, (i + 1) * total // n
        return [(lo, hi - lo)] if hi > lo else [(0, 1)]
    k = max(1, max_blocks // 3)
    mid = total // 2 - k // 2
    if seed is not None and total > 3 * k:
        mid = int(np.random.default_rng(seed).integers(k, total - 2 * k + 1))
    return [(0, k), (mid, k), (total - k, k)]


def write_inputs(inputs: dict[str, np.ndarray], workdir: Path) -> list[str]:
    """Raw float32 files of the a, b and bias buffers ("-" for an absent bias), as the drivers take them."""
    workdir.mkdir(parents=True, exist_ok=True)
    files = []
    for role in ("a", "b", "bias"):
        if role in inputs:
            f = workdir / f"in_{role}.bin"
            np.ascontiguousarray(inputs[role], dtype=np.float32).tofile(f)
            files.append(str(f))
        else:
            files.append("-")
    return files


class HostExecutor:
    name = "vortex-host"

    def __init__(self, cfg: VortexConfig, cache_dir: Path | None = None, objects: dict | None = None):
        self.cfg = cfg
        self.cache = Path(cache_dir or Path(tempfile.gettempdir()) / "vxsynth-vxhost")
        self.rules = (objects or default_policy()["objects"])["vortex_host"]
        self.limits = jail.Limits(cfg.cpu_s, cfg.address_space_mb, cfg.file_mb, cfg.output_mb)

    def _flags(self) -> list[str]:
        c = self.cfg
        return ["-O2", "-std=gnu11", "-pthread", "-ffp-contract=fast", "-fno-stack-protector", "-U_FORTIFY_SOURCE",
                "-D_FORTIFY_SOURCE=0", f"-I{API / 'host'}", f"-I{API}",
                f"-DNUM_WARPS={c.warps}", f"-DNUM_THREADS={c.threads}", f"-DLOCAL_MEM_SIZE={c.local_mem}",
                f"-DHOST_GROUPS={c.host_groups}"]

    def _runtime(self) -> list[Path]:
        """vx_host.o and the driver, built once per configuration."""
        key = hashlib.sha256(("".join(self._flags()) + (API / "host" / "vx_host.c").read_text()
                              + (API / "host" / "vx_host_driver.c").read_text()).encode()).hexdigest()[:12]
        d = self.cache / key
        objs = [d / "vx_host.o", d / "vx_host_driver.o"]
        if not all(o.exists() for o in objs):
            d.mkdir(parents=True, exist_ok=True)
            for src, obj in zip(("vx_host.c", "vx_host_driver.c"), objs):
                tmp = f"{obj}.{os.getpid()}-{threading.get_ident()}.tmp"      # several checks may build it at once
                r = proc.run([self.cfg.cc, *self._flags(), "-c", str(API / "host" / src), "-o", tmp], 120)
                if not r.ok:
                    raise RuntimeError(f"cannot build the Vortex host runtime: {proc.tail(r.stderr)}")
                Path(tmp).rename(obj)
        return objs

    def build(self, c: Candidate, workdir: Path) -> tuple[Path | None, str]:
        """Compile the candidate's Vortex kernel (under its compile limits); (executable, "") or (None, error)."""
        workdir.mkdir(parents=True, exist_ok=True)
        (workdir / "kernel_vx.c").write_text(c.vortex_source)
        obj, exe = workdir / "kernel_vx.o", workdir / "vx_host_run"
        trace = ["-fsanitize-coverage=trace-pc"] if self.cfg.lockstep else []     # the lockstep check (vx_host.c)
        budget = limits.of(c)
        r = budget.run([self.cfg.cc, *self._flags(), "-Dmain=vx_kernel_main", *trace, "-c",
                        str(workdir / "kernel_vx.c"), "-o", str(obj)], 120)
        if not r.ok:
            return None, f"host compile failed ({r.error}): {proc.tail(r.stderr)}"
        bad = objcheck.elf_object(obj, {**self.rules, **({"instrumented": "__sanitizer_cov_trace_pc"} if trace else {})})
        if bad:
            return None, objcheck.violation("vortex_host", bad)
        r = budget.run([self.cfg.cc, "-static", "-pthread", str(obj), *map(str, self._runtime()), "-lm", "-o", str(exe)],
                       120)
        if not r.ok:
            return None, f"host link failed ({r.error}): {proc.tail(r.stderr)}"
        return exe, ""

    def run(self, c: Candidate, inputs: dict[str, np.ndarray], workdir: Path, *, full: bool = False,
            exe: Path | None = None, seed: int | None = None, part: tuple[int, int] | None = None) -> VortexRun:
        """Run the candidate on float32 input buffers; a window of blocks (middle range drawn from `seed`) unless
        `full`."""
        why = occupancy_error(c, self.cfg)
        if why:
            return VortexRun(False, error=why, failure="not_run")
        if exe is None:
            exe, err = self.build(c, workdir)
            if exe is None:
                return VortexRun(False, error=err, failure="not_run")
        wins = windows(c.meta["blocks"], 1 << 30 if full else self.cfg.max_blocks, seed,
                       (*part, self.cfg.cover_blocks) if part else None)
        files = write_inputs(inputs, workdir / "in")
        run_dir = Path(tempfile.mkdtemp(prefix="run-", dir=workdir))     # empty, private to this run
        n = c.meta["arg_layout"]["vortex"]["out"]["elements"]
        args = ["out.bin", str(n), str(c.strategy.threads), ",".join(f"{s}:{k}" for s, k in wins),
                *(f"/in/{Path(f).name}" if f != "-" else "-" for f in files)]
        try:
            r = jail.run(exe, args, {Path(f).name: Path(f) for f in files if f != "-"}, run_dir, self.cfg.timeout_s,
                         self.limits)
        except jail.JailError as e:
            return VortexRun(False, error=f"vortex host run not started: {e}", failure="not_run")
        out = run_dir / "out.bin"
        failure = ""
        if r.ok and (not out.is_file() or out.stat().st_size != 4 * n):
            r.ok, r.error, failure = False, "exited 0 without writing its full output", "no_output"
        if not r.ok:
            shutil.rmtree(run_dir, ignore_errors=True)
            return VortexRun(False, error=f"vortex host run failed ({r.error}): {proc.tail(r.stderr + r.stdout)}",
                             wall_s=r.wall_s, stdout=r.stdout, failure=failure or proc.failure_of(r, DRIVER_FAULTS))
        padded = np.fromfile(out, dtype=np.float32)
        shutil.rmtree(run_dir, ignore_errors=True)
        blocks = [b for s, k in wins for b in range(s, s + k)]
        y = from_vortex_output(c.problem, c.strategy, padded)
        return VortexRun(True, np.ascontiguousarray(y), covered_mask(c.problem, c.strategy, blocks).reshape(y.shape),
                         [[s, k] for s, k in wins], wall_s=r.wall_s, stdout=r.stdout)
