"""Measure signatures with Nsight Compute through one harness for reference and candidate (`signature.harness`:
same inputs, warm-up, NVTX range; the platform's metric list, --cache-control and --clock-control).

reference: the slice's aten op, main kernel picked by name, measured `repeats` times in one process: the per-component
median is the reference, the spread and the largest distance between two repeats (`noise_D`) are recorded for the keep
rule;
candidate: the compiled candidate's kernel (name `vxk_*`); candidates: a batch of them in one ncu process (the
profiled launches, in order, are the candidates'; a batch that does not come out whole is measured one by one).
"""

from __future__ import annotations

import json
import math
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from vxsynth.errors import VxError
from vxsynth.kernels.problem import Problem
from vxsynth.metrics import components as sig
from vxsynth.metrics.components import DURATION
from vxsynth.profiling import ncu as ncu_pass
from vxsynth.profiling.trace import kernel_base
from vxsynth.records import SliceRecord, problem_json
from vxsynth.signature import harness
from vxsynth.signature.distance import distance
from vxsynth.targets.launch import Launch


@dataclass
class Measurement:
    ok: bool
    values: dict = field(default_factory=dict)
    nan_reasons: dict = field(default_factory=dict)
    metrics: dict = field(default_factory=dict)
    kernel: str = ""
    settings: dict = field(default_factory=dict)
    error: str = ""
    wall_s: float = 0.0
    kernels_seen: list = field(default_factory=list)
    wrong_output: bool = False        # measured, but the measured launch computed something else (a rejection)


def ncu_signature(pcfg: dict, target: list[str], workdir: Path, regex: str, nvtx_range: str | None, pick) -> Measurement:
    """Run `target` under ncu with the platform's metrics and settings; the signature of the action `pick` chooses.
    `pcfg['extra_metrics']` (optional, diagnostics such as bench/l2_ops.py) are collected beside the components'."""
    ncu_cfg, chip, comps = pcfg["ncu"], pcfg["chip"], list(pcfg["components"])
    metrics = list(dict.fromkeys(sig.metric_list(chip, comps) + list(pcfg.get("extra_metrics", ()))))
    settings = {**ncu_pass.settings(ncu_cfg, chip, comps, None), "platform": pcfg["name"], "metric_set": pcfg["metric_set"],
                **({"extra_metrics": list(pcfg["extra_metrics"])} if pcfg.get("extra_metrics") else {})}
    workdir.mkdir(parents=True, exist_ok=True)
    report = workdir / "sig"
    cmd = ncu_pass.command(ncu_cfg, metrics, report, target, kernel_regex=regex, nvtx_range=nvtx_range, per_config=False)
    t = time.perf_counter()
    try:
        ncu_pass.run(cmd, float(ncu_cfg.get("timeout_s", 600)), log=workdir / "ncu.log")
        actions = ncu_pass.read_report(report.with_suffix(".ncu-rep"), metrics)
    except VxError as e:
        return Measurement(False, error=str(e), wall_s=time.perf_counter() - t, settings=settings)
    if not actions:
        return Measurement(False, error="ncu profiled no kernel", wall_s=time.perf_counter() - t, settings=settings)
    a = pick(actions)
    values, reasons = sig.compute(a["metrics"], chip, comps)
    return Measurement(True, values, reasons, a["metrics"], a["kernel_name"], settings, "", time.perf_counter() - t,
                       [x["kernel_name"][:120] for x in actions])


def spec(workdir: Path, problem: Problem, launch: str, precision_flags: dict, **kernel) -> Path:
    """The harness input for one measurement (the same fields for reference and candidate but the kernel's)."""
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / "harness.json"
    path.write_text(json.dumps({"problem": problem_json(problem), "launch": launch, "precision_flags": precision_flags,
                                "warmup": harness.WARMUP, **kernel}))
    return path


def _harness_settings() -> dict:
    return {"harness": "vxsynth.signature.harness", "warmup": harness.WARMUP, "nvtx_range": harness.RANGE,
            "inputs": harness.INPUTS}


def reference(record: SliceRecord, pcfg: dict, workdir: Path, repeats: int = 1) -> Measurement:
    """Signature of the slice's main kernel in the harness replay of its reference op, `repeats` profiled ranges in one
    harness process (one process per repeat when that process's launches cannot be told apart per range)."""
    main = kernel_base(record.main_kernel)
    flags, n = record.environment.get("precision_flags") or {}, max(1, repeats)

    def target(folder: Path, k: int) -> list[str]:
        return [sys.executable, "-m", "vxsynth.signature.harness", str(spec(folder, record.problem, "reference", flags, repeats=k))]

    def pick(actions):                 # one process, one range
        return per_range(actions, main, 1)[0]

    seen: list = []
    whole = ncu_signature(pcfg, target(workdir, n), workdir, ".*", harness.RANGE, lambda a: seen.extend(a) or pick(a))
    if not whole.ok and n == 1:
        return whole
    mains, how = per_range(seen, main, n) if whole.ok else None, "one harness process"
    if mains is not None:
        chip, comps = pcfg["chip"], list(pcfg["components"])
        runs = [Measurement(True, *sig.compute(a["metrics"], chip, comps), a["metrics"], a["kernel_name"],
                            dict(whole.settings), "", whole.wall_s, whole.kernels_seen) for a in mains]
    else:
        how = ("one harness process each (the ranges' launches differ)" if whole.ok else
               f"one harness process each (the one-process run failed: {whole.error[:200]})")
        runs = [ncu_signature(pcfg, target(workdir / f"rep{i}", 1), workdir / f"rep{i}", ".*", harness.RANGE, pick)
                for i in range(n)]
        if bad := [m for m in runs if not m.ok]:
            return bad[0]
        whole.wall_s += sum(r.wall_s for r in runs)
    comps = list(pcfg["components"])
    spread = {c: _spread([r.values.get(c, math.nan) for r in runs]) for c in comps}
    noise = max((distance(a.values, b.values, tuple(comps)).D for i, a in enumerate(runs) for b in runs[i + 1:]), default=0.0)
    m = runs[0]
    m.values = {c: _median([r.values.get(c, math.nan) for r in runs]) for c in m.values}
    m.wall_s = whole.wall_s
    m.settings.update(_harness_settings(), replay_main_kernel_matches=kernel_base(m.kernel) == main,
                      repeats=len(runs), repeats_in=how, spread=spread, noise_D=noise)
    return m


def per_range(actions: list[dict], main: str, n: int) -> list[dict] | None:
    """The main kernel of each of `n` profiled ranges of one process (launch order): in each range the first launch
    named like the slice's main kernel, else its longest; None unless the launches split into `n` ranges that launch
    the same kernels in the same order."""
    k = len(actions) // n
    ranges = [actions[i * k:(i + 1) * k] for i in range(n)]
    if not k or len(actions) % n or any([a["kernel_name"] for a in r] != [a["kernel_name"] for a in ranges[0]] for r in ranges):
        return None
    named = [[a for a in r if kernel_base(a["kernel_function"] or a["kernel_name"]) == main] for r in ranges]
    return [m[0] if m else max(r, key=lambda a: a["metrics"].get(DURATION, 0.0)) for m, r in zip(named, ranges)]


def _kernel(c, launch: Launch) -> dict:
    return {"cubin": str(launch.cubin), "kernel": c.name, "grid": list(launch.grid), "block": list(launch.block),
            "smem_bytes": launch.smem_bytes, "workspace_words": launch.workspace_words,
            "zero_output": launch.zero_output, "layout": c.strategy.layout, "tensor_maps": list(launch.tensor_maps)}


def _validated(m: Measurement, verdict: dict | None) -> Measurement:
    """`m`, failed when the measured launch's output was wrong or missing (it measured another computation)."""
    if m.ok and (verdict is None or not verdict.get("pass")):
        why = ("no verdict on its output" if verdict is None else verdict.get("error") or
               f"{verdict['failing']} of {verdict['compared']} elements outside check 1's tolerance")
        return Measurement(False, error=f"the measured launch's output is wrong: {why}", wall_s=m.wall_s,
                           kernels_seen=m.kernels_seen, wrong_output=True)
    return m


def _verdicts(workdir: Path) -> list:
    f = workdir / "validated.json"
    return json.loads(f.read_text()) if f.exists() else []


def candidate(c, launch: Launch, record: SliceRecord, pcfg: dict, workdir: Path) -> Measurement:
    """Signature of a compiled candidate (the cubin and geometry of its check 1 launch) in the harness, on the
    reference's inputs; failed when the measured launch's output does not match the reference op (`harness`)."""
    target = [sys.executable, "-m", "vxsynth.signature.harness",
              str(spec(workdir, record.problem, "candidate", record.environment.get("precision_flags") or {},
                       tolerance=record.tolerance["check1"], **_kernel(c, launch)))]
    m = ncu_signature(pcfg, target, workdir, f"^{c.name}$", harness.RANGE, lambda actions: actions[0])
    m.settings.update(_harness_settings())
    return _validated(m, (_verdicts(workdir) or [None])[0])


def candidates(batch: list, record: SliceRecord, pcfg: dict, workdir: Path) -> list[Measurement]:
    """Signatures of a batch of compiled candidates [(candidate, check 1 launch)] from one ncu process; one by one
    when that process fails or its profiled launches are not exactly the batch's kernels in order."""
    if len(batch) == 1:
        return [candidate(*batch[0], record, pcfg, workdir / "c0")]
    kernels = [_kernel(c, launch) for c, launch in batch]
    target = [sys.executable, "-m", "vxsynth.signature.harness",
              str(spec(workdir, record.problem, "candidates", record.environment.get("precision_flags") or {},
                       tolerance=record.tolerance["check1"], kernels=kernels))]
    names = [k["kernel"] for k in kernels]
    seen: list = []
    whole = ncu_signature(pcfg, target, workdir, "^(" + "|".join(sorted(set(names))) + ")$", harness.RANGE,
                          lambda actions: seen.extend(actions) or actions[0])
    if not whole.ok or [a["kernel_name"] for a in seen] != names:
        return [candidate(c, launch, record, pcfg, workdir / f"c{i}") for i, (c, launch) in enumerate(batch)]
    comps = list(pcfg["components"])
    verdicts = _verdicts(workdir)
    out = []
    for i, a in enumerate(seen):
        values, reasons = sig.compute(a["metrics"], pcfg["chip"], comps)
        out.append(_validated(Measurement(True, values, reasons, a["metrics"], a["kernel_name"],
                                          {**whole.settings, **_harness_settings(), "batch": len(batch)}, "",
                                          whole.wall_s / len(batch), whole.kernels_seen),
                              verdicts[i] if i < len(verdicts) else None))
    return out


def _median(v: list[float]) -> float:
    v = [x for x in v if not math.isnan(x)]
    return statistics.median(v) if v else math.nan


def _spread(v: list[float]) -> float:
    v = [x for x in v if not math.isnan(x)]
    return max(v) - min(v) if v else math.nan
