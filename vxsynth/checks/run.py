"""Run the output checks of one candidate and write replayable check records.

For every input case (fresh seeded inputs: normal, near-zero, large magnitudes, a shifted family drawn from the
seed, a rescaled one: the scale moved from weights to activations, and path_bits: exact sums that need the precision
path's own significand bits and exponent range) the reference aten op runs in this process, the CUDA candidate in its own subprocess, the Vortex candidate on
the jailed Vortex executor, all on the same inputs. check1 = CUDA vs the reference op. check2 = Vortex vs the path
reference: the exact result on the operands as the Vortex path rounds them, within the probabilistic rounding-error
bound of an fp32 accumulation (accum x sqrt(K) x 2^-24 x |A||B|, Higham & Mary 2019) plus the output rounding, over the blocks of the Vortex windows (the
middle window drawn per case). Without a GPU check1 is not run and the same Vortex check is recorded as
`vortex_ref`.
"""

from __future__ import annotations

import os
import platform as pyplatform
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from vxsynth.checks.cases import CASES
from vxsynth.checks.tolerance import judge
from vxsynth.kernels import tensors as T
from vxsynth.kernels.candidate import Candidate, source_kind
from vxsynth.kernels.precision import apply_flags, as_float
from vxsynth.records import CheckRecord, problem_json
from vxsynth.store.io import write_json
from vxsynth.targets import preprocess
from vxsynth.targets.cuda import compile_cuda, run_cuda
from vxsynth.targets.gpu_worker import GpuPool
from vxsynth.targets.launch import Launch
from vxsynth.targets.vortex_host import HostExecutor



@dataclass
class CheckEnv:
    vortex: HostExecutor
    tolerances: dict                  # precision path -> {check1: {atol, rtol}, check2: {...}}
    cuda: bool = False                # run CUDA candidates (needs a GPU + nvcc + CuPy)
    device: str = "cpu"               # where the reference op runs
    cases: tuple = CASES
    precision_flags: dict = field(default_factory=dict)
    arch: str = preprocess.CUDA_ARCH
    timeout_s: float = 120.0
    pool: GpuPool | None = None       # CUDA runs as jobs of persistent workers (None: a process each)
    compile_cache: Path | None = None  # compiled candidates by source (None: compile every time)
    vortex_parallel: int = 1          # cases whose Vortex runs go at once, each in its own folder (SimX: one core each)


def fresh_seed() -> int:
    return int.from_bytes(os.urandom(4), "little") & 0x7FFFFFFF


def _device_name(device: str) -> str:
    return torch.cuda.get_device_name(0) if device.startswith("cuda") else f"cpu ({pyplatform.processor() or pyplatform.machine()})"


def check_id(slice_id: str, tag: str, kind: str) -> str:
    return f"{slice_id}-{tag}-{kind}"


def record_path(records_dir: Path, slice_id: str, tag: str, kind: str) -> Path:
    """Where `run` writes the record of check `kind` of candidate `tag`."""
    return Path(records_dir) / f"{check_id(slice_id, tag, kind)}.json"


@dataclass
class Checked:
    """The check records by kind, and how each side's run failed: {"cuda" | "vortex": `proc.FAILURES` kind} for the
    sides whose recorded error is a failed run or build (the error of the last case that failed); the CUDA launch
    of the last case run (None: none ran), which measurement and compute-sanitizer repeat."""
    records: dict[str, CheckRecord]
    failures: dict[str, str]
    launch: Launch | None = None


def run(c: Candidate, slice_id: str, tag: str, env: CheckEnv, workdir: Path, records_dir: Path | None,
        seed: int | None = None, cubin: Path | None = None, vortex_exe: Path | None = None) -> dict[str, CheckRecord]:
    """Run the checks; returns {kind: record}. Records are written to `records_dir` when given."""
    return checked(c, slice_id, tag, env, workdir, records_dir, seed, cubin, vortex_exe).records


def checked(c: Candidate, slice_id: str, tag: str, env: CheckEnv, workdir: Path, records_dir: Path | None,
            seed: int | None = None, cubin: Path | None = None, vortex_exe: Path | None = None) -> Checked:
    """`run`, with how each side's run failed."""
    p, prec = c.problem, c.precision
    seed = fresh_seed() if seed is None else seed
    tol = env.tolerances[prec]
    apply_flags(env.precision_flags)
    shape = p.out_shape
    cond = {"device": _device_name(env.device), "torch": torch.__version__, "precision_flags": env.precision_flags,
            "cases": list(env.cases), "seeds": [seed + i for i in range(len(env.cases))], "base_seed": seed,
            "inputs": "activations N(0,1); weights, bias U(+-1/sqrt(fan_in)); case scale normal 1, near_zero 1e-3, large 1e2; "
                      "shifted: N(mu, sigma) activations, 10% zeros, weights with a random bound and offset (from the seed); "
                      "rescaled: weights N(0,1), activations N(0,1)/sqrt(fan_in), signs from the seed; "
                      "path_bits: exact sums of values that need the path's significand bits and exponent range (tensors.PATH_BITS)",
            "check2_reference": "float64 on the Vortex path's rounded operands; bound accum * sqrt(K) * 2^-24 * (|A||B| + |bias|); "
                                "path_bits: |A - s||B| + s max|B| sqrt(K) for |A||B| (tensors.path_bits_magnitude)",
            "atol_scaling": "atol is stated for unit-scale data; the large case multiplies it by its output scale 1e4",
            "vortex_executor": {"kind": env.vortex.name, **env.vortex.cfg.__dict__}, "cuda_arch": env.arch}
    errors: dict[str, str] = {}
    failures: dict[str, str] = {}
    if env.cuda and cubin is None:
        cr = compile_cuda(c, workdir / "cuda", env.arch, cache=env.compile_cache)
        if not cr.ok:
            errors["cuda"], failures["cuda"] = cr.error, "not_run"
        cubin = cr.cubin
        cond["ptxas"] = {"registers": cr.registers, "smem_bytes": cr.smem_bytes, "spill_bytes": cr.spill_bytes}
    cases, outs, covered, launch = [], {"cuda": [], "vortex": [], "ref": []}, None, None
    timing = {"reference_s": 0.0, "cuda_s": 0.0, "vortex_s": 0.0}     # wall seconds per side over all cases
    drawn = ThreadPoolExecutor(max(1, env.vortex_parallel))     # each case's inputs, drawn once for all sides
    inputs = [drawn.submit(T.make_inputs, p, seed + i, case, prec) for i, case in enumerate(env.cases)]
    drawn.shutdown(wait=False)
    vruns = _vortex_runs(c, env, workdir, vortex_exe, seed, inputs)
    for i, case in enumerate(env.cases):
        s = seed + i
        bufs = inputs[i].result()
        dev = {k: v.to(env.device) for k, v in bufs.items()}
        t = time.perf_counter()
        ref = T.reference(p, dev).float().cpu().numpy().reshape(shape)
        timing["reference_s"] += time.perf_counter() - t
        outs["ref"].append(ref)
        entry = {"case": case, "seed": s}
        y_c = None
        if cubin is not None and "cuda" not in errors:
            t = time.perf_counter()
            r = run_cuda(c, cubin, {k: T.to_numpy(v) for k, v in T.kernel_storages(p, c.strategy.layout, bufs).items()},
                         workdir / "cuda", env.timeout_s, pool=env.pool)
            timing["cuda_s"] += time.perf_counter() - t
            launch = r.launch
            if r.ok:
                y_c = as_float(r.output, p.dtype, shape)
                entry["cuda_kernel_us"] = r.info.get("kernel_us")
            else:
                errors["cuda"], failures["cuda"] = r.error, r.failure
        vr, vortex_s, pref, mag = vruns[i].result()
        timing["vortex_s"] += vortex_s
        y_v = None
        if vr.ok:
            y_v = T.round_output(p.dtype, torch.from_numpy(vr.output)).float().numpy()
            entry.update(vortex_windows=vr.blocks, covered_fraction=vr.covered_fraction, vortex_s=vortex_s)
            if vr.counters:
                cyc = [w["cycles"] for w in vr.counters.get("windows", [])]
                entry["vortex_cycles"] = {"cycles": sum(cyc), "instrs": sum(w["instrs"] for w in vr.counters["windows"]),
                                          "blocks": sum(w["blocks"] for w in vr.counters["windows"])}
            covered = vr.covered if covered is None else covered | vr.covered
        else:
            errors["vortex"], failures["vortex"] = vr.error, vr.failure
        k = T.output_scale(case)
        t1 = {"atol": tol["check1"]["atol"] * k, "rtol": tol["check1"]["rtol"]}
        t2 = {"atol": tol["check2"]["atol"] * k, "rtol": tol["check2"]["rtol"]}
        if y_c is not None:
            entry["check1"] = judge(y_c, ref, **t1)
        if y_v is not None:
            bound = tol["check2"]["accum"] * _growth(tol["check2"], T.fan_in(p)) * 2.0 ** -24 * mag.reshape(shape)
            v2 = judge(y_v, pref.reshape(shape), **t2, mask=vr.covered, bound=bound)
            entry["check2" if y_c is not None else "vortex_ref"] = v2
            if y_c is not None:
                d = np.abs(y_v - y_c)[vr.covered]
                entry["vortex_vs_cuda_max_abs"] = float(np.nanmax(d)) if d.size and not np.isnan(d).all() else None
        outs["cuda"].append(y_c)
        outs["vortex"].append(y_v)
        cases.append(entry)
    source = source_kind(c)
    insensitive = {side: _insensitive(outs[side], outs["ref"]) for side in ("cuda", "vortex")}
    kinds = ["check1", "check2"] if env.cuda else ["vortex_ref"]
    records = {}
    for kind in kinds:
        needed = {"check1": ["cuda"], "check2": ["cuda", "vortex"], "vortex_ref": ["vortex"]}[kind]
        err = "; ".join(f"{k}: {errors[k]}" for k in needed if k in errors)
        dead = [k for k in needed if insensitive[k]]
        ran = all(kind in e for e in cases)
        ok = ran and not err and not dead and all(e[kind]["pass"] for e in cases)
        reason = ("pass" if ok else err or (f"{', '.join(dead)} output does not change when inputs change" if dead else
                  "did not run" if not ran else
                  "; ".join(f"{e['case']}: {e[kind]['failing']} of {e[kind]['compared']} elements outside tolerance"
                            for e in cases if not e[kind]["pass"])))
        rec = CheckRecord(
            check_id(slice_id, tag, kind), kind, slice_id, tag,
            {"kernel_name": c.name, "strategy_hash": c.strategy.hash(), "strategy": c.strategy.to_dict(),
             "cuda_sha256": c.cuda_sha256, "vortex_sha256": c.vortex_sha256, "source": source},
            prec, tol["check2" if kind == "vortex_ref" else kind], cond,
            problem_json(c.problem),
            "pass" if ok else "fail", reason,
            [{k: v for k, v in e.items() if k in ("case", "seed", kind, "covered_fraction", "vortex_windows", "vortex_s",
                                                  "vortex_cycles", "cuda_kernel_us", "vortex_vs_cuda_max_abs")} for e in cases],
            float(covered.mean()) if covered is not None else 0.0, timing,
            _block_coverage(c, cases) if kind != "check1" else None)
        if records_dir is not None:
            write_json(record_path(records_dir, slice_id, tag, kind), rec.to_dict())
        records[kind] = rec
    return Checked(records, failures, launch)


def _growth(t: dict, k: int) -> float:
    """How the accumulation bound grows with K: sqrt(K) (`accum_growth: sqrt(K)`, conf/precision) or K (records
    judged before the probabilistic bound, which lack the key, so their replays keep their own rule)."""
    return float(np.sqrt(k)) if t.get("accum_growth", "K") == "sqrt(K)" else float(k)   # tolerance.validate: K or sqrt(K)


def _vortex_runs(c: Candidate, env: CheckEnv, workdir: Path, exe: Path | None, seed: int,
                 inputs: list[Future]) -> list[Future]:
    """The Vortex run of every case on its drawn `inputs` (futures), `env.vortex_parallel` at a time, each in its own
    folder when more than one goes at once, and after a run that gave an output, the check 2 reference of its case
    (`T.path_reference`; `path_bits`: `T.path_bits_magnitude`): futures of (run, wall seconds of the run, reference,
    magnitude), returned at once (the CUDA side and the reference op run meanwhile)."""
    p, prec = c.problem, c.precision

    def one(i: int, case: str):
        bufs = inputs[i].result()
        vin = T.vortex_inputs(p, prec, T.kernel_storages(p, c.strategy.layout, bufs))
        t = time.perf_counter()
        r = env.vortex.run(c, vin, workdir / "vortex" / (case if env.vortex_parallel > 1 else ""), exe=exe,
                           seed=seed + i, part=(i, len(env.cases)))
        wall = time.perf_counter() - t
        if not r.ok:
            return r, wall, None, None
        vin = T.vortex_inputs(p, prec, bufs)
        pref, mag = T.path_reference(p, vin)
        return r, wall, pref, T.path_bits_magnitude(p, vin, prec) if case == "path_bits" else mag

    pool = ThreadPoolExecutor(max(1, env.vortex_parallel))
    runs = [pool.submit(one, i, case) for i, case in enumerate(env.cases)]
    pool.shutdown(wait=False)           # the submitted runs go on; the pool takes no more
    return runs


def _block_coverage(c: Candidate, cases: list[dict]) -> dict:
    """Which of the grid's blocks the Vortex runs checked over all cases, and the chance that a single wrong block
    (anywhere in the grid, uniformly) was in none of them."""
    grid = int(c.meta["blocks"])
    seen = {b for e in cases for s, k in e.get("vortex_windows") or [] for b in range(s, s + k)}
    return {"grid": grid, "checked": len(seen), "p_miss_one_wrong_block": 1 - len(seen) / grid if grid else 0.0,
            "how": "grids up to cover_blocks: the cases share the grid; larger: first, last and a drawn middle range per case"}


def _insensitive(outs: list, refs: list) -> bool:
    """True when a side produced identical outputs for inputs whose references differ."""
    have = [(o, r) for o, r in zip(outs, refs) if o is not None]
    for i in range(len(have)):
        for j in range(i + 1, len(have)):
            (oi, ri), (oj, rj) = have[i], have[j]
            if np.array_equal(oi, oj, equal_nan=True) and not np.array_equal(ri, rj):
                return True
    return False
