"""One measurement harness for reference and candidate: the same kind of process, the same inputs (the slice's
problem, seed 0, unit scale, on the GPU), the same warm-up launches outside and one launch inside the NVTX range
`vxsynth-measure`; ncu (`measure.ncu_signature`) profiles that range with the same settings for both.

reference: the slice's aten op at its exact shapes, dtypes, strides and precision flags (torch), in `repeats` ranges
one after another (each with its warm-up);
candidate: the compiled candidate's kernel on the same values, in the operand layout it reads, on buffers made like
the checks' (inputs between NaN guard zones, the output NaN-filled between canary guards, a zeroed workspace: the
measured launch cannot tell itself from a checked one); after the range its output is judged against the reference
op within check 1's tolerance and its guards inspected, and the verdict written to `validated.json` beside the spec;
candidates: a batch of them, one after another in one process, each with its own warm-up, output buffer and range.

Usage: python -m vxsynth.signature.harness SPEC.json   (SPEC written by `measure.spec`)
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import torch

from vxsynth.checks.tolerance import judge
from vxsynth.kernels import tensors as T
from vxsynth.kernels.precision import apply_flags, as_float
from vxsynth.kernels.problem import from_dict
from vxsynth.targets import tensor_map

RANGE = "vxsynth-measure"
WARMUP = 1
INPUTS = "make_inputs(problem, seed 0, case normal) on the GPU"


def _candidate(spec: dict, p, bufs: dict):
    """(launch, validate) of one compiled candidate (`spec`: cubin, kernel, grid, block, smem_bytes, workspace_words,
    zero_output, layout) on guarded buffers; `validate(tol)` judges its output after the measured launch."""
    import cupy as cp

    from vxsynth.targets.cuda_worker import guard_error, guarded_input, guarded_output, kernel, workspace

    def words(t: torch.Tensor):
        return cp.asarray(t.view(torch.int16) if t.dtype in (torch.bfloat16, torch.float16) else t)

    fn = kernel(spec["cubin"], spec["kernel"], int(spec["smem_bytes"]))
    ins = T.kernel_storages(p, spec.get("layout", "nchw"), bufs)
    n = math.prod(p.out_shape)
    buf, out, canary = guarded_output(n, p.dtype)
    null = torch.zeros(1, dtype=bufs["a"].dtype, device="cuda")
    ws = workspace(spec.get("workspace_words", 0))
    args = tuple(guarded_input(words(ins.get(r, null)), p.dtype) for r in ("a", "b", "bias")) + (out,) + ((ws,) if ws is not None else ())
    args += tensor_map.kernel_args(spec.get("tensor_maps", []), p.dtype, {r: (x.data.ptr, x.nbytes) for r, x in zip("ab", args)})

    def launch():
        if spec.get("zero_output"):
            out.fill(0)    # split-K into fp32 adds into zeros; this and the workspace's memset are not profiled
        if ws is not None:
            ws.fill(0)
        fn(tuple(spec["grid"]), tuple(spec["block"]), args, shared_mem=int(spec["smem_bytes"]))

    def validate(tol: dict) -> dict:
        if why := guard_error(buf, n, canary):
            return {"pass": False, "error": why}
        y = as_float(cp.asnumpy(out), p.dtype, p.out_shape)
        return judge(y, T.reference(p, bufs).float().cpu().numpy().reshape(p.out_shape), **tol)
    return launch, validate


def main() -> int:
    spec = json.loads(open(sys.argv[1]).read())
    apply_flags(spec.get("precision_flags") or {})
    p = from_dict(spec["problem"])
    bufs = {k: v.cuda() for k, v in T.make_inputs(p, 0).items()}
    if spec["launch"] == "reference":
        launches = [(lambda: T.reference(p, bufs), None)] * int(spec.get("repeats", 1))   # one range each
    else:
        launches = [_candidate(k, p, bufs) for k in spec.get("kernels") or [spec]]
    verdicts = []
    for launch, validate in launches:
        for _ in range(int(spec.get("warmup", WARMUP))):
            launch()
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_push(RANGE)
        launch()
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_pop()
        if validate is not None:
            verdicts.append(validate(spec["tolerance"]))
    if verdicts:
        (Path(sys.argv[1]).parent / "validated.json").write_text(json.dumps(verdicts, default=float))
    return 0


if __name__ == "__main__":
    sys.exit(main())
