"""The program ncu profiles in pass 2: build the workload, warm up, run one inference in the `profiled` range.

Module NVTX ranges (our hooks) and aten-op NVTX ranges (`emit_nvtx(record_shapes=True)`) travel with every
profiled kernel, so each ncu result names its module path, op and input sizes.
"""

from __future__ import annotations

import argparse
import json

import torch

from vxsynth.profiling.hooks import module_ranges
from vxsynth.profiling.ncu import PROFILED_RANGE
from vxsynth.workloads.builders import build_policy, make_batch, run_inference
from vxsynth.workloads.spec import WorkloadSpec


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workload", required=True, help="JSON file with the workload config")
    ap.add_argument("--warmup", type=int, default=1)
    args = ap.parse_args()
    spec = WorkloadSpec.from_config(json.loads(open(args.workload).read()))
    policy, _ = build_policy(spec, "cuda")
    batch = make_batch(spec, "cuda")
    call = spec.call
    for _ in range(args.warmup):
        run_inference(policy, batch, call)
    torch.cuda.synchronize()
    with module_ranges(policy, profiler=False, nvtx=True), torch.autograd.profiler.emit_nvtx(record_shapes=True):
        torch.cuda.nvtx.range_push(PROFILED_RANGE)
        run_inference(policy, batch, call)
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_pop()


if __name__ == "__main__":
    main()
