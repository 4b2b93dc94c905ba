"""SimX executor: build a Vortex candidate with the installation's toolchain and kernel library, run it through
the Vortex runtime with the SimX driver from vxsynth's host driver program, and read its counters. Same interface
as the host-functional executor (inputs, outputs, covered blocks, timeout), plus counters."""

from __future__ import annotations

import fcntl
import math
import os
import shutil
from pathlib import Path

import numpy as np

from vxsynth.kernels.candidate import Candidate, covered_mask, from_vortex_output
from vxsynth.simx import build as B
from vxsynth.simx.install import Installation
from vxsynth.simx.perf import PerfError, parse, vortex_signature
from vxsynth.targets import proc
from vxsynth.targets.vortex_host import VortexConfig, VortexRun, occupancy_error, write_inputs

DRIVER = Path(__file__).resolve().parent.parent / "targets" / "vortex_api" / "simx_driver.c"


def instrs_per_block(c: Candidate, threads_per_warp: int) -> float:
    """Rough simulated warp-instructions per block, for sizing grid windows."""
    s = c.strategy
    warps = math.ceil(s.threads / threads_per_warp)
    kt = math.ceil(c.problem.flops / (2 * c.meta["blocks"] * s.block_m * s.block_n) / s.block_k) if c.meta["blocks"] else 1
    return warps * kt * s.block_k * (s.thread_m * s.thread_n + s.thread_m + s.thread_n + 6)


class SimxExecutor:
    name = "simx"

    def __init__(self, inst: Installation, target: dict, cache_dir: Path, instr_budget: float = 5e7, timeout_s: float = 1800):
        self.inst, self.target, self.cache = inst, dict(target), Path(cache_dir)
        self.cfg = VortexConfig.from_dict({**target, "local_mem": 1 << int(target.get("lmem_log_size", 14))})
        self.budget, self.timeout_s = instr_budget, timeout_s

    def driver_dir(self) -> Path:
        """The SimX runtime built for this configuration (built once, cached by configuration id)."""
        d = self.cache / "drivers" / B.config_id(self.target)
        if (d / "libvortex-simx.so").exists():
            return d
        d.mkdir(parents=True, exist_ok=True)
        rt = self.inst.root / ("runtime" if self.inst.api == "v2.2" else "sw/runtime")
        with open(self.cache / "build.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # the runtime builds in place: one configuration at a time
            for cmd in B.driver_build(self.inst, self.target):
                r = proc.run(cmd, 3600)
                if not r.ok:
                    raise RuntimeError(f"SimX driver build failed: {proc.tail(r.stderr + r.stdout)}")
            for lib in list(rt.glob("libvortex*.so")) + list((rt / "simx").glob("*.so")):
                shutil.copy2(lib, d / lib.name)
        return d

    def build(self, c: Candidate, workdir: Path) -> tuple[Path | None, str]:
        workdir.mkdir(parents=True, exist_ok=True)
        src = workdir / "kernel_vx.c"
        src.write_text(c.vortex_source)
        for cmd in B.kernel_build(self.inst, self.target, src, workdir / "kernel.elf", workdir / "kernel.vxbin"):
            r = proc.run(cmd, 300, env={**os.environ, "OBJCOPY": "llvm-objcopy" if self.inst.compiler_kind == "llvm-vortex" else "riscv64-unknown-elf-objcopy"})
            if not r.ok:
                return None, f"Vortex kernel build failed: {proc.tail(r.stderr)}"
        exe = workdir / "simx_driver"
        r = proc.run(B.host_build(self.inst, DRIVER, exe), 120)
        if not r.ok:
            return None, f"SimX host driver build failed: {proc.tail(r.stderr)}"
        return exe, ""

    def run(self, c: Candidate, inputs: dict[str, np.ndarray], workdir: Path, *, full: bool = False,
            exe: Path | None = None) -> VortexRun:
        why = occupancy_error(c, self.cfg)
        if why:
            return VortexRun(False, error=why)
        if exe is None:
            exe, err = self.build(c, workdir)
            if exe is None:
                return VortexRun(False, error=err)
        drv = self.driver_dir()
        wins = [(0, c.meta["blocks"])] if full else B.instruction_windows(
            c.meta["blocks"], instrs_per_block(c, self.cfg.threads), self.budget)
        files = write_inputs(inputs, workdir)
        n = c.meta["arg_layout"]["vortex"]["out"]["elements"]
        counters, y, wall = {}, None, 0.0
        for unit, klass in B.PERF_CLASSES[self.inst.api].items():
            out = workdir / f"out_{unit}.bin"
            r = proc.run([str(exe), str(workdir / "kernel.vxbin"), str(out), str(n), str(c.strategy.threads),
                          ",".join(f"{s}:{k}" for s, k in wins), str(int(self.timeout_s * 1000)), *files],
                         self.timeout_s, env={**os.environ, **B.run_env(self.inst, drv, klass)})
            wall += r.wall_s
            if not r.ok:
                return VortexRun(False, error=f"SimX run failed ({r.error}): {proc.tail(r.stderr + r.stdout)}", wall_s=wall)
            try:
                counters[unit] = parse(r.stdout)
            except PerfError as e:
                return VortexRun(False, error=str(e), wall_s=wall, stdout=r.stdout)
            if y is None:
                y = from_vortex_output(c.problem, c.strategy, np.fromfile(out, dtype=np.float32))
        merged = {"instrs": counters["core"]["instrs"], "cycles": counters["core"]["cycles"], "ipc": counters["core"]["ipc"],
                  "disabled": sorted({d for v in counters.values() for d in v["disabled"]})}
        for v in counters.values():
            merged.update({k: val for k, val in v.items() if isinstance(val, dict) and k != "per_core"})
        blocks = [b for s, k in wins for b in range(s, s + k)]
        return VortexRun(True, np.ascontiguousarray(y), covered_mask(c.problem, c.strategy, blocks).reshape(y.shape),
                         [[s, k] for s, k in wins], wall_s=wall,
                         counters={"raw": counters, "signature": vortex_signature(merged), "config": self.target})
