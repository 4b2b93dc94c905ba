"""SimX executor: build a Vortex candidate with the installation's toolchain and kernel library, run it through
the Vortex runtime with the SimX driver from vxsynth's host driver program, and read its counters. Same interface
as the host-functional executor (inputs, outputs, covered blocks, timeout), plus counters."""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
import time
from contextlib import nullcontext
from dataclasses import replace
from pathlib import Path

import numpy as np

from vxsynth.kernels.candidate import Candidate, covered_mask, from_vortex_output, vortex_lowering
from vxsynth.kernels.problem import Conv, Gemm
from vxsynth.kernels.geometry import k_tiles
from vxsynth.simx import build as B
from vxsynth.simx.install import Installation
from vxsynth.errors import VxError
from vxsynth.simx.perf import PerfError, aggregate, per_window, vortex_signature
from vxsynth.store.io import read_json, sha256_text, write_json
from vxsynth.targets import proc
from vxsynth.targets.vortex_host import VortexConfig, VortexRun, occupancy_error, write_inputs

DRIVER = Path(__file__).resolve().parent.parent / "targets" / "vortex_api" / "simx_driver.c"
PROBE = DRIVER.parent / "lmem_probe.c"
PROBE_STEP_WORDS, PROBE_MARK, PROBE_BASE = 16, 0xC0DE0000, 0x5A000000   # as in lmem_probe.c
VXBIN_LOCK = Path(tempfile.gettempdir()) / "vxsynth-vxbin.lock"


# Cost model of one block on SimX, fitted on 20 runs of small GEMMs and convolutions on this SimX (bench/simx_fit.py,
# bench/results/simx_fit.txt) and checked on 7 real slices (bench/simx_cost.py) and the 18 final pairs of the suite
# whose SimX check ran (bench/results/simx_checks.txt): cycles within 2x on 43 of 45, the exceptions a bmm
# whose K is not a multiple of block_k (5.4x low: runs 20-21) and an M=1 linear (2.2x high)
# (bench/results/simx_model_cpu.txt). Instructions (SimX counts one per active thread) per thread and K step (every
# block runs all of them, whole tile or not): FIXED_K + PER_OUT_K x outputs per thread, x CONV2D for the
# implicit-GEMM index arithmetic of 2-D convolutions, plus PROLOGUE per thread.
# Cycles = instructions / IPC: IPC_FIT while a thread's accumulators and fragments fit the 32 FP registers, IPC_SPILL
# once they spill. A 2-D convolution whose Vortex half reads A from global memory (no staging: im2col gathers, each
# with its own index arithmetic) runs GATHER x the instructions at IPC_GATHER: fitted on two real slices whose tiles
# outgrew SimX's 4 KB of usable local memory (7x7 C=3: IPC 0.55; 3x3 C=64: IPC 0.64; bench/results/simx_cost.txt)
# and a small one (IPC 0.57, bench/results/simx_fit.txt run 15); a 1-D convolution gathering the same way runs GATHER x
# the instructions at IPC_FIT (run 14, and the suite's conv1d 1024->1024 k5 at L 16 and 32, which the model had
# predicted 1.8x and 3.4x low).
# A GEMM operand read from global memory (unstaged) whose rows map to few slots of the direct-mapped dcache (row
# strides of a large power of two) keeps evicting lines it reuses over K: the cycles are at least those at IPC_FIT
# times 1 + CONFLICT x (crowding - 1), crowding = lines per slot (`crowding`). Measured on SimX with 51x64xK, one
# 256-thread block (bench/simx_fit.py runs 16-19; the Vortex half reads float32, so BF16 and FP32 ran alike): K 1024 /
# 1056 / 2048 / 2080 (row strides 4 KB / 4.1 KB / 8 KB / 8.1 KB) ran 6.66 / 2.39 / 23.6 / 4.90 M cycles; CONFLICT
# fitted on all 45 points of tests/fixtures/simx/cost_per_block.json (bench/results/simx_model_cpu.txt).
# Simulation wall time follows cycles (about 2.6 s per million cycles on this 2-core machine).
FIXED_K, PER_OUT_K, CONV2D, PROLOGUE = 10.0, 3.25, 2.2, 400.0
IPC_FIT, IPC_SPILL, FP_REGISTERS = 2.5, 0.4, 28
GATHER, IPC_GATHER = 1.85, 0.6
CONFLICT, LINE_BYTES, DCACHE_BYTES = 0.07, 64, 16384   # SimX's dcache: 64-byte lines, one way (VX_config.h)


def _gathers(c: Candidate) -> bool:
    """The Vortex half of a convolution reads its A operand (the image) from global memory."""
    vs, _ = vortex_lowering(c.problem, c.strategy, c.meta.get("lmem_per_block"), c.meta.get("drop_staging", False))
    return isinstance(c.problem, Conv) and not vs.stage_a


def instrs_per_block(c: Candidate) -> float:
    """Predicted simulated instructions of one block (every block runs all K steps, whole tiles or not)."""
    s, p = c.strategy, c.problem
    steps = k_tiles(p, s)
    per_k = (FIXED_K + PER_OUT_K * s.thread_m * s.thread_n) * (CONV2D if getattr(p, "dims", 0) == 2 else 1.0)
    return s.threads * (steps * s.block_k * per_k + PROLOGUE) * (GATHER if _gathers(c) else 1.0)


def crowding(c: Candidate, dcache_bytes: int = DCACHE_BYTES) -> float:
    """Lines per dcache slot (at least 1) that one block's unstaged GEMM operands touch over one line's worth of K:
    each operand's rows of the tile (A: block_m rows of M, B: block_n rows of N) at their strides; 1 for
    convolutions and for operands staged in local memory."""
    p = c.problem
    if not isinstance(p, Gemm):
        return 1.0
    vs, _ = vortex_lowering(p, c.strategy, c.meta.get("lmem_per_block"), c.meta.get("drop_staging", False))
    eb = 4                                  # the Vortex half reads float32 storages whatever the path (tensors.vortex_inputs)
    slots, lines, used = dcache_bytes // LINE_BYTES, 0, 0
    for staged, rows, row_stride, k_stride in ((vs.stage_a, min(vs.block_m, p.M), p.a_strides[1], p.a_strides[2]),
                                               (vs.stage_b, min(vs.block_n, p.N), p.b_strides[2], p.b_strides[1])):
        if staged:
            continue
        touched = {(r * row_stride + k * k_stride) * eb // LINE_BYTES for r in range(rows) for k in range(LINE_BYTES // eb)}
        lines += len(touched)
        used += len({t % slots for t in touched})
    return lines / min(slots, used) if lines else 1.0


def cycles_per_block(c: Candidate, dcache_bytes: int = DCACHE_BYTES) -> float:
    """Predicted simulated cycles of one block (what sizes the windows: wall time follows cycles): the issue bound
    of its instructions, or the dcache-conflict bound when that is higher."""
    s = c.strategy
    spills = s.thread_m * s.thread_n + s.thread_m + s.thread_n > FP_REGISTERS
    n = instrs_per_block(c)
    issue = n / (IPC_SPILL if spills else IPC_GATHER if _gathers(c) and c.problem.dims == 2 else IPC_FIT)
    return max(issue, n / IPC_FIT * (1 + CONFLICT * (crowding(c, dcache_bytes) - 1)))


def measured_per_block(windows: list[dict]) -> tuple[float, float]:
    """Instructions and cycles per block over a run's windows ({blocks, instrs, cycles} each)."""
    n = sum(w["blocks"] for w in windows)
    return sum(w["instrs"] for w in windows) / n, sum(w["cycles"] for w in windows) / n


def _no_dram_trace(workdir: Path) -> Path:
    """`workdir`, where SimX's ramulator writes its DRAM command trace (./trace/ramulator.log.chN, hundreds of MB per
    run, read by nothing here) into /dev/null."""
    t = Path(workdir) / "trace"
    t.mkdir(parents=True, exist_ok=True)
    for ch in range(8):
        f = t / f"ramulator.log.ch{ch}"
        if not f.is_symlink():
            f.unlink(missing_ok=True)
            f.symlink_to(os.devnull)
    return Path(workdir)


def _kernel_env(inst: Installation) -> dict:
    """vxbin.py's objcopy for the installation's kernel compiler."""
    return {**os.environ, "OBJCOPY": "llvm-objcopy" if inst.compiler_kind == "llvm-vortex" else "riscv64-unknown-elf-objcopy"}


def _compile(inst: Installation, target: dict, source: str, workdir: Path) -> str | None:
    """Compile, link and wrap a Vortex kernel source as workdir/kernel.vxbin; None, or why it failed."""
    workdir.mkdir(parents=True, exist_ok=True)
    src = workdir / "kernel_vx.c"
    src.write_text(source)
    for cmd in B.kernel_build(inst, target, src, workdir / "kernel.elf", workdir / "kernel.vxbin"):
        vxbin = any(c.endswith("vxbin.py") for c in cmd)  # Vortex's vxbin.py writes one fixed /tmp/temp_kernel.bin
        with open(VXBIN_LOCK, "a") if vxbin else nullcontext() as lock:              # one at a time
            if vxbin:
                fcntl.flock(lock, fcntl.LOCK_EX)
            r = proc.run(cmd, 300, env=_kernel_env(inst))
        if not r.ok:
            return proc.tail(r.stderr + r.stdout)
    return None


def toolchain_error(inst: Installation, target: dict) -> str | None:
    """Why the installation's kernel compiler cannot build a Vortex kernel (the local-memory probe, compiled, linked
    and wrapped as .vxbin), or None. A riscv gcc without libc headers fails here, before any run."""
    with tempfile.TemporaryDirectory(prefix="vxsynth-toolchain-") as tmp:
        if err := _compile(inst, target, PROBE.read_text(), Path(tmp)):
            return f"the kernel compiler {inst.compiler[0]} cannot build a Vortex kernel: {err}"
    return None


# Host speed (`SimxExecutor.seconds_per_mcycle`): runs of at least SPEED_MIN_CYCLES simulated cycles count (a short
# run's wall time is mostly the simulator's start-up), their SPEED_QUANTILE quantile once SPEED_MIN_RUNS were measured.
SPEED_MIN_CYCLES, SPEED_QUANTILE, SPEED_MIN_RUNS = 1e6, 0.25, 3


class SimxExecutor:
    name = "simx"

    def __init__(self, inst: Installation, target: dict, cache_dir: Path, cycle_budget: float = 2e7, timeout_s: float = 1800):
        self.inst, self.target, self.cache = inst, dict(target), Path(cache_dir)
        self.cfg = VortexConfig.from_dict({**target, "local_mem": 1 << int(target.get("lmem_log_size", 14))})
        self.budget, self.timeout_s = cycle_budget, timeout_s
        self.scale: dict[str, float] = {}     # vortex_sha256 -> a probe's measured / predicted cycles (`calibrate`)

    def driver_dir(self) -> Path:
        """SimX (simulator library + driver) built for this configuration in its own folder: built once, cached by
        installation and configuration; a second process waits for the first one's build."""
        d = self.cache / "drivers" / f"{B.config_id(self.target)}-{sha256_text(str(self.inst.root))[:6]}"
        if (d / "libvortex-simx.so").exists():
            return d
        if self.inst.cannot_rebuild:
            raise VxError(f"SimX at {self.inst.root} cannot be rebuilt for configuration {self.target}: missing "
                          + ", ".join(self.inst.cannot_rebuild))
        d.parent.mkdir(parents=True, exist_ok=True)
        with open(d.parent / f".{d.name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if (d / "libvortex-simx.so").exists():
                return d
            tmp = Path(tempfile.mkdtemp(prefix=f".{d.name}-", dir=d.parent))
            t0 = time.perf_counter()
            sim_src, patches = B.patched_sources(self.inst, self.target, tmp)
            for cmd in B.driver_build(self.inst, self.target, tmp, sim_src):
                r = proc.run(cmd, 3600)
                if not r.ok:
                    shutil.rmtree(tmp, ignore_errors=True)
                    raise VxError(f"SimX build for {self.target} failed: {proc.tail(r.stderr + r.stdout)}")
            write_json(tmp / "build.json", {"config": self.target, "flags": B.config_flags(self.target, self.inst.api),
                                            "installation": str(self.inst.root), "build_s": time.perf_counter() - t0,
                                            "patches": patches})
            os.replace(tmp, d)
        return d

    def build(self, c: Candidate, workdir: Path) -> tuple[Path | None, str]:
        return self._build(c.vortex_source, workdir)

    def _build(self, source: str, workdir: Path) -> tuple[Path | None, str]:
        """Kernel (.vxbin) and host driver built in `workdir`; (driver, "") or (None, why not)."""
        if err := _compile(self.inst, self.target, source, workdir):
            return None, f"Vortex kernel build failed: {err}"
        exe = workdir / "simx_driver"
        r = proc.run(B.host_build(self.inst, DRIVER, exe), 120)
        if not r.ok:
            return None, f"SimX host driver build failed: {proc.tail(r.stderr)}"
        return exe, ""

    def vortex_config(self) -> VortexConfig:
        """The core candidates are generated and admitted for: local memory as measured, not as declared."""
        return replace(self.cfg, local_mem=min(self.cfg.local_mem, self.local_memory()["usable"]))

    def local_memory(self) -> dict:
        """Measured once per built configuration (kept as probe.json beside it): does the kernel compiler build a
        kernel, and how many bytes of local memory stay distinct (`usable`) of the `declared` 2^LMEM_LOG_SIZE."""
        drv = self.driver_dir()
        path = drv / "probe.json"
        if path.exists():
            return read_json(path)
        declared = 1 << int(self.target.get("lmem_log_size", 14))
        n = declared // 4 // PROBE_STEP_WORDS
        with tempfile.TemporaryDirectory(prefix="vxsynth-lmem-probe-") as tmp:
            exe, err = self._build(PROBE.read_text(), Path(tmp))
            if exe is None:
                raise VxError(f"the kernel compiler {self.inst.compiler[0]} cannot build a Vortex kernel: {err}")
            out = Path(tmp) / "out.bin"
            r = proc.run([str(exe), str(Path(tmp) / "kernel.vxbin"), str(out), str(2 * n), "1", "0:1",
                          str(int(self.timeout_s * 1000)), "-", "-", "-"], self.timeout_s, cwd=_no_dram_trace(Path(tmp)),
                         env={**os.environ, **B.run_env(self.inst, drv, 0)})
            if not r.ok:
                raise VxError(f"local-memory probe failed on SimX ({r.error}): {proc.tail(r.stderr + r.stdout)}")
            words = np.fromfile(out, dtype=np.uint32)
        clobber = next((k for k in range(1, n) if words[k] != PROBE_MARK), n)   # first probe word landing on word 0
        wrong = [i for i in range(n) if words[n + i] != PROBE_BASE + i]
        usable = clobber * PROBE_STEP_WORDS * 4
        res = {"declared": declared, "usable": usable, "step_bytes": PROBE_STEP_WORDS * 4,
               "aliases_onto_word0_at": None if clobber == n else usable, "words_overwritten": len(wrong),
               "compiler": self.inst.compiler[0], "config": self.target}
        write_json(path, res)
        return res

    def predicted(self, c: Candidate) -> float:
        """The cost model's cycles per block of `c` on this configuration's dcache."""
        return cycles_per_block(c, int(self.target.get("dcache_size", DCACHE_BYTES)))

    def calibrate(self, c: Candidate, ratio: float) -> None:
        """Scale the cost model's cycles for `c` by `ratio` (measured / predicted on a probe of its strategy) until `c`
        itself has run here."""
        self.scale[c.vortex_sha256] = ratio

    def measured(self, c: Candidate) -> bool:
        """Whether `c` has run on this configuration here (its cycles per block are known)."""
        return self._known(c).exists()

    def expected(self, c: Candidate) -> float:
        """Cycles per block of `c` as best known: measured once it has run on this configuration, else the cost model's
        (scaled by a probe's ratio when calibrated)."""
        if self.measured(c):
            return read_json(self._known(c))["cycles_per_block"]
        return self.predicted(c) * self.scale.get(c.vortex_sha256, 1.0)

    def seconds_per_mcycle(self, default: float, min_cycles: float = SPEED_MIN_CYCLES,
                           quantile: float = SPEED_QUANTILE) -> tuple[float, str]:
        """SimX wall seconds per million simulated cycles on this host: a low quantile (`quantile`) of every run
        measured on this configuration that simulated at least `min_cycles` (shorter ones, a probe's one block, are
        mostly start-up), not the latest runs: load from other work only slows a run, so the latest runs (a probe's
        own, under the load of the moment) would follow it. Fewer than SPEED_MIN_RUNS such runs: `default`
        (simx.s_per_mcycle). Returns the figure and where it came from."""
        vals = []
        for f in (self.driver_dir() / "measured").glob("*.json"):
            try:
                r = read_json(f)
            except (VxError, OSError, ValueError):
                continue
            if r.get("s_per_mcycle") and (r.get("cycles") is None or r["cycles"] >= min_cycles):
                vals.append(float(r["s_per_mcycle"]))
        if len(vals) < SPEED_MIN_RUNS:
            return default, "simx.s_per_mcycle" + (f" (only {len(vals)} runs measured here)" if vals else "")
        vals.sort()
        return vals[int(quantile * (len(vals) - 1))], f"{quantile:.0%} quantile of {len(vals)} runs measured on this host"

    def with_budget(self, budget: float) -> "SimxExecutor":
        """The same SimX and calibrations with another cycle budget (a check raised to its coverage target)."""
        e = SimxExecutor(self.inst, self.target, self.cache, budget, self.timeout_s)
        e.scale = self.scale
        return e

    def _known(self, c: Candidate) -> Path:
        """Where this candidate's measured cycles per block on this configuration are kept, once it has run."""
        return self.driver_dir() / "measured" / f"{c.vortex_sha256[:16]}.json"

    def windows(self, c: Candidate, *, full: bool = False, seed: int | None = None, together: int = 1):
        """The launch windows [(first block, blocks)] of a run and the cycles per block that sized them (`expected`)."""
        per_block = self.expected(c)
        if full:
            return [(0, c.meta["blocks"])], per_block
        return B.cycle_windows(c.meta["blocks"], per_block, self.budget, seed, together), per_block

    def run(self, c: Candidate, inputs: dict[str, np.ndarray], workdir: Path, *, full: bool = False,
            exe: Path | None = None, seed: int | None = None, counters: bool = False, together: int = 1,
            part: tuple[int, int] | None = None, windows: list[tuple[int, int]] | None = None) -> VortexRun:
        """One candidate on SimX over its windows (the whole grid with `full`). With `counters`, one run per counter
        class, each window's counters summed; without (output checks), one run. Windows are sized by the predicted
        cycles per block until the candidate has run on this configuration, then by the measured ones (so a check
        case's share of the grid, `part`, does not apply here: the check records the blocks it covered).
        `together`: blocks that must share a launch (`build.cycle_windows`). `windows`: run exactly these (a sweep
        gives every configuration the same ones, `experiments.common_windows`)."""
        why = occupancy_error(c, self.vortex_config())
        if why:
            return VortexRun(False, error=f"{why} (this SimX keeps {self.local_memory()['usable']} B of local memory "
                                          "distinct: the candidate would alias)" if "local memory" in why else why,
                             failure="not_run")
        if exe is None:
            exe, err = self.build(c, workdir)
            if exe is None:
                return VortexRun(False, error=err, failure="not_run")
        drv = self.driver_dir()
        known = self._known(c)
        wins, per_block = self.windows(c, full=full, seed=seed, together=together)
        if windows is not None:
            wins = [(int(s), int(k)) for s, k in windows]
        files = write_inputs(inputs, workdir)
        n = c.meta["arg_layout"]["vortex"]["out"]["elements"]
        raw, y, wall, text = {}, None, 0.0, ""
        classes = list(B.PERF_CLASSES[self.inst.api].items())
        for unit, klass in classes if counters else classes[:1]:
            out = workdir / f"out_{unit}.bin"
            r = proc.run([str(exe), str(exe.parent / "kernel.vxbin"), str(out), str(n), str(c.strategy.threads),
                          ",".join(f"{s}:{k}" for s, k in wins), str(int(self.timeout_s * 1000)), *files],
                         self.timeout_s, cwd=_no_dram_trace(workdir), env={**os.environ, **B.run_env(self.inst, drv, klass)})
            wall += r.wall_s
            if not r.ok:
                return VortexRun(False, error=f"SimX run failed ({r.error}): {proc.tail(r.stderr + r.stdout)}", wall_s=wall,
                                 failure=proc.failure_of(r, {}))
            try:
                raw[unit] = per_window(r.stdout)
            except PerfError as e:
                return VortexRun(False, error=str(e), wall_s=wall, stdout=r.stdout, failure="no_output")
            if y is None:
                y = from_vortex_output(c.problem, c.strategy, np.fromfile(out, dtype=np.float32))
                text = r.stdout
        summed = {unit: aggregate([w[2] for w in ws]) for unit, ws in raw.items()}
        first = summed[classes[0][0]]
        merged = {"instrs": first["instrs"], "cycles": first["cycles"], "ipc": first["ipc"],
                  "disabled": sorted({d for v in summed.values() for d in v["disabled"]})}
        for v in summed.values():
            merged.update({k: val for k, val in v.items() if isinstance(val, dict) and k != "per_core"})
        blocks = [b for s, k in wins for b in range(s, s + k)]
        per_win = [{"first_block": s, "blocks": k, "instrs": v["instrs"], "cycles": v["cycles"]}
                   for s, k, v in raw[classes[0][0]]]
        measured = measured_per_block(per_win)[1]
        runs = len(classes) if counters else 1
        write_json(known, {"cycles_per_block": measured, "predicted": self.predicted(c), "cycles": merged["cycles"],
                           "wall_s": wall / runs, "load_1min": os.getloadavg()[0],
                           "s_per_mcycle": wall / runs / merged["cycles"] * 1e6 if merged["cycles"] else None})
        return VortexRun(True, np.ascontiguousarray(y), covered_mask(c.problem, c.strategy, blocks).reshape(y.shape),
                         [[s, k] for s, k in wins], wall_s=wall, stdout=text,
                         counters={"raw": summed, "windows": per_win, "signature": vortex_signature(merged),
                                   "cycles_per_block": {"predicted": self.predicted(c), "windows_sized_with": per_block,
                                                        "measured": measured},
                                   "config": self.target, "local_memory": self.local_memory()})
