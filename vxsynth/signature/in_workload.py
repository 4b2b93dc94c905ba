"""Measure a candidate inside the running workload (the loop's `measure_in: workload` option).

The workload runs one inference with the replacement entry dispatching the slice's op calls to the compiled CUDA
candidate, inside the NVTX range `profiled`, under ncu filtered to the candidate's kernel (its first launch there).
Its reference is the slice's own in-workload pass-2 signature, taken with the same ncu settings.

Usage (by `measure`): python -m vxsynth.signature.in_workload JOB.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

from vxsynth.dispatch.replace import Replacement, Route, slice_signature
from vxsynth.dispatch.runners import cuda_runner
from vxsynth.errors import VxError
from vxsynth.kernels.candidate import load
from vxsynth.profiling.ncu import PROFILED_RANGE
from vxsynth.records import SliceRecord
from vxsynth.signature import measure
from vxsynth.workloads.builders import build_policy, make_batch, run_inference
from vxsynth.workloads.spec import WorkloadSpec


def job(record: SliceRecord, candidate_dir: Path, cubin: Path, workdir: Path) -> Path:
    """The job file for the target process: which workload, which slice, which compiled candidate."""
    occ = [o for o in record.occurrences if o.get("workload_config")]
    if not occ:
        raise VxError(f"slice {record.slice_id} records no workload config; re-slice its profiles to measure in the workload")
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / "in_workload.json"
    path.write_text(json.dumps({"workload": occ[0]["workload_config"], "record": record.to_dict(),
                                "candidate": str(candidate_dir), "cubin": str(cubin)}))
    return path


def candidate(record: SliceRecord, candidate_dir: Path, cubin: Path, kernel: str, pcfg: dict, workdir: Path) -> measure.Measurement:
    target = [sys.executable, "-m", "vxsynth.signature.in_workload", str(job(record, candidate_dir, cubin, workdir))]
    m = measure.ncu_signature(pcfg, target, workdir, f"^{kernel}$", PROFILED_RANGE, lambda actions: actions[0])
    m.settings["measured_in"] = "workload"
    return m


def reference(record: SliceRecord) -> measure.Measurement:
    """The slice's in-workload pass-2 signature (recorded when it was profiled)."""
    sig = record.reference_signature
    values = {c: float("nan") if v is None else v for c, v in sig["values"].items()}
    return measure.Measurement(sig["measured_with"] is not None, values, sig["nan_reasons"], sig.get("raw_metrics", {}),
                               record.main_kernel, {**(sig["measured_with"] or {}), "measured_in": "workload"},
                               "" if sig["measured_with"] else "the slice has no pass-2 signature")


def main() -> int:
    j = json.loads(Path(sys.argv[1]).read_text())
    rec = SliceRecord.from_dict(j["record"])
    c = load(Path(j["candidate"]))
    spec = WorkloadSpec.from_config(j["workload"])
    policy, _ = build_policy(spec, "cuda")
    batch = make_batch(spec, "cuda")
    occ = [o for o in rec.occurrences if o["workload"] == spec.label]
    route = Route(rec.slice_id, slice_signature(rec.op_call), cuda_runner(c, Path(j["cubin"]), rec.op_call["op"]),
                  c.name, occ[0]["calls_per_inference"] if occ else 1)
    rep = Replacement([route])
    with rep.active():
        run_inference(policy, batch, spec.call)              # warm-up, outside the profiled range
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_push(PROFILED_RANGE)
        run_inference(policy, batch, spec.call)
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_pop()
    return 0 if route.dispatched else 3


if __name__ == "__main__":
    sys.exit(main())
