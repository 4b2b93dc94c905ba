"""CUDA executor: compile a candidate with nvcc (cubin for the target arch, ptxas resource report; the PTX of the same
run must pass the `cuda_ptx` object rules) and run it in its own subprocess (`cuda_worker`), in a directory holding
only its job, so a hang, crash or illegal address fails that candidate only."""

from __future__ import annotations

import json
import re
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from vxsynth.kernels.candidate import Candidate
from vxsynth.targets import objcheck, proc
from vxsynth.targets.sandbox import default_policy


@dataclass
class CompileResult:
    ok: bool
    cubin: Path | None = None
    error: str = ""
    registers: int | None = None
    smem_bytes: int | None = None
    spill_bytes: int | None = None
    wall_s: float = 0.0


@dataclass
class CudaRun:
    ok: bool
    output: np.ndarray | None = None
    error: str = ""
    wall_s: float = 0.0
    info: dict = field(default_factory=dict)


def nvcc() -> str | None:
    return shutil.which("nvcc")


def compile_cuda(c: Candidate, workdir: Path, arch: str = "sm_90", timeout_s: float = 180,
                 rules: dict | None = None) -> CompileResult:
    if nvcc() is None:
        return CompileResult(False, error="nvcc not found; install the CUDA toolkit (nvcc 13)")
    workdir.mkdir(parents=True, exist_ok=True)
    src, cubin = workdir / "kernel.cu", workdir / "kernel.cubin"
    src.write_text(c.cuda_source)
    keep = workdir / "nvcc-keep"
    keep.mkdir(exist_ok=True)
    r = proc.run(["nvcc", "-cubin", f"-arch={arch}", "-O3", "-std=c++17", "-Xptxas", "-v", "--keep", "--keep-dir",
                  str(keep), str(src), "-o", str(cubin)], timeout_s)
    if not r.ok:
        return CompileResult(False, error=f"nvcc failed ({r.error}): {proc.tail(r.stderr)}", wall_s=r.wall_s)
    ptx = sorted(keep.glob("*.ptx"))
    bad = objcheck.ptx(ptx[0].read_text(), rules or default_policy()["objects"]["cuda_ptx"], c.precision) if ptx else ["no PTX kept"]
    if bad:
        return CompileResult(False, error="object rules (cuda_ptx): " + "; ".join(bad), wall_s=r.wall_s)
    info = r.stderr
    regs = re.search(r"Used (\d+) registers", info)
    smem = re.search(r"(\d+) bytes smem", info)
    spill = re.search(r"(\d+) bytes spill stores", info)
    return CompileResult(True, cubin, "", int(regs[1]) if regs else None, int(smem[1]) if smem else 0,
                         int(spill[1]) if spill else 0, r.wall_s)


def run_cuda(c: Candidate, cubin: Path, inputs: dict[str, np.ndarray], workdir: Path, timeout_s: float = 120,
             repeat: int = 1) -> CudaRun:
    """Launch the compiled candidate on `inputs` (raw numpy storages) in a fresh process; output filled with NaN
    before the launch."""
    job = {"cubin": str(cubin), "kernel": c.name, "grid": c.meta["launch"]["grid"], "block": c.meta["launch"]["block"],
           "smem_bytes": c.meta["launch"].get("smem_bytes", 0), "dtype": c.problem.dtype, "out_elements": c.meta["arg_layout"]["cuda"]["out"]["elements"],
           "inputs": {}, "output": str(workdir / "out.npy"), "repeat": repeat}
    for role in ("a", "b", "bias"):
        if role in inputs:
            f = workdir / f"in_{role}.npy"
            np.save(f, inputs[role])
            job["inputs"][role] = str(f)
    (workdir / "job.json").write_text(json.dumps(job))
    r = proc.run([sys.executable, "-m", "vxsynth.targets.cuda_worker", str(workdir / "job.json")], timeout_s)
    if not r.ok:
        return CudaRun(False, error=f"CUDA run failed ({r.error}): {proc.tail(r.stderr + r.stdout)}", wall_s=r.wall_s)
    info = json.loads(r.stdout.strip().splitlines()[-1])
    return CudaRun(True, np.load(workdir / "out.npy"), wall_s=r.wall_s, info=info)
