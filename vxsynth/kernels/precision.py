"""A slice's precision flags applied to this process's torch, and kernel outputs read back as float32: what the checks
and the measurement harness do alike before they judge an output against the reference op."""

from __future__ import annotations

import numpy as np
import torch

from vxsynth.kernels import tensors as T


def apply_flags(flags: dict) -> None:
    """Set the torch backend flags a slice records (`cuda.matmul.allow_tf32`, `cudnn.allow_tf32`) for the reference op."""
    if "cuda.matmul.allow_tf32" in flags:
        torch.backends.cuda.matmul.allow_tf32 = bool(flags["cuda.matmul.allow_tf32"])
    if "cudnn.allow_tf32" in flags:
        torch.backends.cudnn.allow_tf32 = bool(flags["cudnn.allow_tf32"])


def as_float(a: np.ndarray, dtype: str, shape) -> np.ndarray:
    """A kernel's output storage (bf16/fp16 as raw uint16 bits) as a float32 array of `shape`."""
    return T.from_numpy(a, dtype).float().numpy().reshape(shape)
