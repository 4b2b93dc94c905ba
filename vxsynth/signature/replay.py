"""Isolated replay harness of a slice's reference op: the aten op at the slice's exact shapes, dtypes, strides and
precision flags, launched once inside the NVTX range `replay` (after one warm-up launch outside it).

Usage: python -m vxsynth.signature.replay SLICE.json   (run under ncu by `measure.reference`)
"""

import json
import sys

import torch

from vxsynth.checks.run import _apply_flags
from vxsynth.kernels import tensors as T
from vxsynth.kernels.problem import from_dict

RANGE = "replay"


def main() -> int:
    rec = json.loads(open(sys.argv[1]).read())
    _apply_flags(rec["environment"].get("precision_flags") or {})
    p = from_dict(rec["problem"])
    bufs = {k: v.cuda() for k, v in T.make_inputs(p, 0).items()}
    T.reference(p, bufs)
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_push(RANGE)
    T.reference(p, bufs)
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_pop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
