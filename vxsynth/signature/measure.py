"""Measure signatures with Nsight Compute in the same environment and settings for reference and candidate.

reference: the isolated replay harness of the slice's aten op (`signature.replay`), main kernel picked by name;
candidate: the CUDA worker launching the compiled candidate once on the check's inputs (kernel name `vxk_*`).
Both use the platform's metric list, --cache-control and --clock-control.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from vxsynth.errors import VxError
from vxsynth.profiling import ncu as ncu_pass
from vxsynth.profiling.trace import kernel_base
from vxsynth.signature import components as sig


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


def ncu_signature(pcfg: dict, target: list[str], workdir: Path, regex: str, nvtx_range: str | None, pick) -> Measurement:
    """Run `target` under ncu with the platform's metrics and settings; the signature of the action `pick` chooses."""
    ncu_cfg, chip, comps = pcfg["ncu"], pcfg["chip"], list(pcfg["components"])
    metrics = sig.metric_list(chip, comps)
    settings = {**ncu_pass.settings(ncu_cfg, chip, comps, None), "platform": pcfg["name"], "metric_set": pcfg["metric_set"]}
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


def reference(record: dict, pcfg: dict, workdir: Path) -> Measurement:
    """Signature of the slice's main kernel in the isolated replay of its reference op."""
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "slice.json").write_text(json.dumps(record))
    main = kernel_base(record["main_kernel"])
    target = [sys.executable, "-m", "vxsynth.signature.replay", str(workdir / "slice.json")]

    def pick(actions):
        named = [a for a in actions if kernel_base(a["kernel_function"] or a["kernel_name"]) == main]
        return named[0] if named else max(actions, key=lambda a: a["metrics"].get("gpu__time_duration.sum", 0.0))

    m = ncu_signature(pcfg, target, workdir, ".*", "replay", pick)
    if m.ok:
        m.settings["replay_main_kernel_matches"] = kernel_base(m.kernel) == main
    return m


def candidate(job: Path, kernel: str, pcfg: dict, workdir: Path) -> Measurement:
    """Signature of a compiled candidate launched once by the CUDA worker (job from `targets.cuda.run_cuda`)."""
    workdir.mkdir(parents=True, exist_ok=True)
    target = [sys.executable, "-m", "vxsynth.targets.cuda_worker", str(job)]
    return ncu_signature(pcfg, target, workdir, f"^{kernel}$", None, lambda actions: actions[0])
