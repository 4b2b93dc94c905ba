"""One measurement harness for reference and candidate: the same kind of process, the same inputs (the slice's
problem, seed 0, unit scale, on the GPU), the same warm-up launches outside and one launch inside the NVTX range
`vxsynth-measure`; ncu (`measure.ncu_signature`) profiles that range with the same settings for both.

reference: the slice's aten op at its exact shapes, dtypes, strides and precision flags (torch);
candidate: the compiled candidate's kernel on the same storages (CuPy; bf16/fp16 passed as 16-bit words);
candidates: a batch of them, one after another in one process, each with its own warm-up, output buffer and range.

Usage: python -m vxsynth.signature.harness SPEC.json   (SPEC written by `measure.spec`)
"""

from __future__ import annotations

import json
import sys

import torch

from vxsynth.checks.run import _apply_flags
from vxsynth.kernels import tensors as T
from vxsynth.kernels.problem import from_dict

RANGE = "vxsynth-measure"
WARMUP = 1
INPUTS = "make_inputs(problem, seed 0, case normal) on the GPU"


def _candidate(spec: dict, p, bufs: dict):
    """The launch of one compiled candidate (`spec`: cubin, kernel, grid, block, smem_bytes) on fresh output."""
    import cupy as cp

    from vxsynth.targets.cuda_worker import kernel, workspace

    def words(t: torch.Tensor):
        return cp.asarray(t.view(torch.int16) if t.dtype in (torch.bfloat16, torch.float16) else t)

    fn = kernel(spec["cubin"], spec["kernel"], int(spec["smem_bytes"]))
    out = torch.empty(p.out_shape, dtype=bufs["a"].dtype, device="cuda")
    null = torch.zeros(1, dtype=bufs["a"].dtype, device="cuda")
    ws = workspace(spec.get("workspace_words", 0))
    args = (words(bufs["a"]), words(bufs["b"]), words(bufs.get("bias", null)), words(out)) + ((ws,) if ws is not None else ())

    def launch():
        if ws is not None:
            ws.fill(0)     # a memset kernel before the candidate's; ncu profiles only the candidate's kernel
        fn(tuple(spec["grid"]), tuple(spec["block"]), args, shared_mem=int(spec["smem_bytes"]))
    return launch


def main() -> int:
    spec = json.loads(open(sys.argv[1]).read())
    _apply_flags(spec.get("precision_flags") or {})
    p = from_dict(spec["problem"])
    bufs = {k: v.cuda() for k, v in T.make_inputs(p, 0).items()}
    if spec["launch"] == "reference":
        launches = [lambda: T.reference(p, bufs)]
    else:
        launches = [_candidate(k, p, bufs) for k in spec.get("kernels") or [spec]]
    for launch in launches:
        for _ in range(int(spec.get("warmup", WARMUP))):
            launch()
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_push(RANGE)
        launch()
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_pop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
