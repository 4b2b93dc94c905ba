"""Families and precision paths of op calls."""

from __future__ import annotations

import json
import math
import re

FAMILY_OF = {
    "aten::linear": "linear", "aten::addmm": "linear",
    "aten::matmul": "matmul", "aten::mm": "matmul", "aten::bmm": "matmul",
    "aten::conv1d": "conv1d", "aten::conv2d": "conv2d",
}
_TF32_NAME = re.compile(r"tf32|s1688|tensor16x8x8")


def family(op_name: str, input_dims: list) -> str | None:
    """linear | matmul | conv1d | conv2d, or None for ops that are reported but not sliced.

    A 2-D convolution over a height-1 input with a height-1 kernel is a conv1d lowered to 2-D.
    """
    fam = FAMILY_OF.get(op_name)
    if fam == "conv2d" and len(input_dims) >= 2 and len(input_dims[0]) == 4 and input_dims[0][2] == 1 \
            and len(input_dims[1]) == 4 and input_dims[1][2] == 1:
        return "conv1d"
    return fam


def precision(dtype: str, main_kernel: str, signature: dict | None) -> str:
    """FP32 (CUDA-core fp32), TF32_FP16 (fp32 tensors on TF32 tensor cores; Vortex side FP16) or BF16."""
    if dtype in ("bfloat16", "float16"):
        return "BF16"
    if _TF32_NAME.search(main_kernel):
        return "TF32_FP16"
    if signature is not None:
        metrics = json.loads(signature.get("metrics", "{}")) if isinstance(signature.get("metrics"), str) else {}
        tf32_ops = metrics.get("sm__ops_path_tensor_src_tf32_dst_fp32.sum", 0.0)
        pipe = signature.get("tensor_pipe", math.nan)
        if tf32_ops and tf32_ops > 0 and not math.isnan(pipe) and pipe > 1.0:
            return "TF32_FP16"
    return "FP32"
