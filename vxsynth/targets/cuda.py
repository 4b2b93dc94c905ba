"""CUDA executor: compile a candidate with nvcc (cubin for the target arch, ptxas resource report; the PTX of the same
run must pass the `cuda_ptx` object rules) and run it (a `launch.Launch`, which its result carries on) in its own
subprocess (`cuda_worker`), in a directory holding only its job, or through a persistent worker per GPU
(`gpu_worker`), so a hang, crash or illegal address fails that candidate only. Compiles are cached by source, arch,
nvcc and object rules: no candidate is compiled twice."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from vxsynth.kernels.candidate import Candidate, twin
from vxsynth.kernels.problem import to_dict
from vxsynth.store.io import read_json, sha256_obj, write_json
from vxsynth.targets import cuda_worker, limits, objcheck, preprocess, proc
from vxsynth.targets.launch import Launch
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
    failure: str = ""                 # how the run failed (`proc.FAILURES`); "" when it ran
    launch: Launch | None = None      # what ran (compute-sanitizer and measurement repeat it)


def nvcc() -> str | None:
    return shutil.which("nvcc")


_NVCC_VERSION: dict = {}


def nvcc_version() -> str:
    if "v" not in _NVCC_VERSION:
        r = subprocess.run(["nvcc", "--version"], capture_output=True, text=True)
        _NVCC_VERSION["v"] = r.stdout.strip().splitlines()[-1] if r.stdout.strip() else "unknown"
    return _NVCC_VERSION["v"]


def compile_cuda(c: Candidate, workdir: Path, arch: str = preprocess.CUDA_ARCH, timeout_s: float = 180,
                 rules: dict | None = None, cache: Path | None = None) -> CompileResult:
    """nvcc (under the candidate's compile limits) + PTX object rules (for a free-form CUDA half, the instruction forms
    of its strategy's own kernel too); with `cache`, a candidate compiled before (same source, arch, nvcc, rules,
    precision, strategy, problem) is answered from there, failures included except the compile time budget's."""
    if nvcc() is None:
        return CompileResult(False, error="nvcc not found; install the CUDA toolkit (nvcc 13)")
    if cache is None:
        return _compile(c, workdir, arch, timeout_s, rules)
    key = sha256_obj([c.cuda_source, arch, nvcc_version(), rules, c.precision, c.strategy.to_dict(), to_dict(c.problem),
                      objcheck.CACHE_FORMAT])[:24]
    entry = Path(cache) / key
    if (entry / "result.json").exists():
        d = read_json(entry / "result.json")
        error = objcheck.Violation(d["error"]) if d.pop("object_rules") else d["error"]
        return CompileResult(**{**d, "error": error, "cubin": entry / "kernel.cubin" if d["ok"] else None, "wall_s": 0.0})
    r = _compile(c, entry.with_name(key + ".tmp"), arch, timeout_s, rules)
    if r.ok:
        entry.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(r.cubin, entry / "kernel.cubin.tmp")
        (entry / "kernel.cubin.tmp").rename(entry / "kernel.cubin")
    if not limits.over_budget(r.error):
        write_json(entry / "result.json", {"ok": r.ok, "error": r.error, "object_rules": isinstance(r.error, objcheck.Violation),
                                           "registers": r.registers, "smem_bytes": r.smem_bytes, "spill_bytes": r.spill_bytes})
    shutil.rmtree(entry.with_name(key + ".tmp"), ignore_errors=True)
    return CompileResult(r.ok, entry / "kernel.cubin" if r.ok else None, r.error, r.registers, r.smem_bytes,
                         r.spill_bytes, r.wall_s)


def _compile(c: Candidate, workdir: Path, arch: str, timeout_s: float, rules: dict | None) -> CompileResult:
    workdir.mkdir(parents=True, exist_ok=True)
    src, cubin = workdir / "kernel.cu", workdir / "kernel.cubin"
    src.write_text(c.cuda_source)
    keep = workdir / "nvcc-keep"
    keep.mkdir(exist_ok=True)
    r = limits.of(c).run(["nvcc", "-cubin", f"-arch={arch}", "-O3", "-std=c++17", "-Xptxas", "-v", "--keep",
                          "--keep-dir", str(keep), str(src), "-o", str(cubin)], timeout_s)
    if not r.ok:
        return CompileResult(False, error=f"nvcc failed ({r.error}): {proc.tail(r.stderr)}", wall_s=r.wall_s)
    ptx = sorted(keep.glob("*.ptx"))
    rules = rules or default_policy()["objects"]["cuda_ptx"]
    bad = objcheck.ptx(ptx[0].read_text(), rules, c.precision) if ptx else ["no PTX kept"]
    if not bad and rules.get("strategy_forms"):
        bad = _strategy_forms(c, ptx[0].read_text(), rules["strategy_forms"], workdir / "strategy", arch, timeout_s)
    if bad:
        return CompileResult(False, error=objcheck.violation("cuda_ptx", bad), wall_s=r.wall_s)
    info = r.stderr
    regs = re.search(r"Used (\d+) registers", info)
    smem = re.search(r"(\d+) bytes smem", info)
    spill = re.search(r"(\d+) bytes spill stores", info)
    return CompileResult(True, cubin, "", int(regs[1]) if regs else None, int(smem[1]) if smem else 0,
                         int(spill[1]) if spill else 0, r.wall_s)


def _strategy_forms(c: Candidate, text: str, forms: dict, workdir: Path, arch: str, timeout_s: float) -> list[str]:
    """For a CUDA half that is not what its strategy generates: the instruction forms in which its PTX and the PTX of
    the strategy's own kernel (generated here, trusted) differ."""
    g = twin(c)
    if g is None:
        return [f"does not match its strategy: {c.strategy} generates no kernel for this slice, so nothing says what it does"]
    if g.cuda_sha256 == c.cuda_sha256:
        return []
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "kernel.cu").write_text(g.cuda_source)
    r = proc.run(["nvcc", "-ptx", f"-arch={arch}", "-O3", "-std=c++17", str(workdir / "kernel.cu"), "-o",
                  str(workdir / "kernel.ptx")], timeout_s)
    if not r.ok:           # the project's own kernel: a failure here is the checker's, never the candidate's verdict
        raise RuntimeError(f"the strategy's own kernel did not compile to PTX ({r.error}): {proc.tail(r.stderr)}")
    return objcheck.strategy_forms(text, (workdir / "kernel.ptx").read_text(), forms)


def run_cuda(c: Candidate, cubin: Path, inputs: dict[str, np.ndarray], workdir: Path, timeout_s: float = 120,
             repeat: int = 1, pool=None, flush_l2: bool = False) -> CudaRun:
    """Launch the compiled candidate on `inputs` (raw numpy storages) in a fresh process, or as a job of `pool`'s
    persistent workers (`gpu_worker.GpuPool`); output filled with NaN before the launch (zeros for split-K);
    `flush_l2`: L2 overwritten before every launch, for timings."""
    lc = c.meta["launch"]
    workdir.mkdir(parents=True, exist_ok=True)
    files = {}
    for role in ("a", "b", "bias"):
        if role in inputs:
            files[role] = workdir / f"in_{role}.npy"
            np.save(files[role], inputs[role])
    launch = Launch(cubin, c.name, tuple(lc["grid"]), tuple(lc["block"]), lc.get("smem_bytes", 0), c.problem.dtype,
                    c.meta["arg_layout"]["cuda"]["out"]["elements"], files, workdir / "out.npy", repeat, flush_l2,
                    bool(lc.get("zero_output")), lc.get("workspace_words", 0), tuple(lc.get("tensor_maps", ())))
    job = launch.write(workdir / "job.json")
    if pool is not None:
        t = time.perf_counter()
        reply = pool.run(launch.to_dict(), timeout_s)
        if not reply["ok"]:
            return CudaRun(False, error=f"CUDA run failed ({reply['error']})", wall_s=time.perf_counter() - t,
                           failure=reply.get("failure", "crash"), launch=launch)
        return CudaRun(True, np.load(launch.output), wall_s=time.perf_counter() - t, info=reply, launch=launch)
    r = proc.run([sys.executable, "-m", "vxsynth.targets.cuda_worker", str(job)], timeout_s)
    if not r.ok:
        return CudaRun(False, error=f"CUDA run failed ({r.error}): {proc.tail(r.stderr + r.stdout)}", wall_s=r.wall_s,
                       failure=proc.failure_of(r, cuda_worker.EXIT_FAILURES), launch=launch)
    info = json.loads(r.stdout.strip().splitlines()[-1])
    return CudaRun(True, np.load(launch.output), wall_s=r.wall_s, info=info, launch=launch)
