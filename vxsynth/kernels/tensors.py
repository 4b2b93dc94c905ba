"""Buffers of a problem: storage sizes, seeded inputs, strided views for the reference op, output layouts.

Buffers are flat storages; A and B are read through the problem's strides (a batch stride of 0 is a broadcast
operand, as in Pi0's grouped-query attention). bf16/fp16 travel as raw uint16 bits in numpy.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from vxsynth.kernels.problem import Conv, Gemm, Problem

TORCH_DTYPE = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


CASE_SCALE = {"normal": 1.0, "near_zero": 1e-3, "large": 1e2, "shifted": 1.0, "rescaled": 1.0, "path_bits": 1.0}
# path_bits: the significand bits its activations need, and their magnitude, per precision path. BF16: 7 bits at 2^20,
# beyond FP16's range (65504); TF32: 10 bits at 1, within FP16's range (the Vortex half runs FP16); FP32: 12 bits,
# two more than TF32 holds (more would make the exact sums need more than fp32's 24 bits at the suite's K).
PATH_BITS = {"BF16": (7, 2.0 ** 20), "TF32_FP16": (10, 1.0), "FP32": (12, 1.0)}


def output_scale(case: str) -> float:
    """Factor applied to atol for a case. atol is stated for unit-scale data; the large-magnitude case scales both
    operands by 1e2, so its outputs (and rounding errors) are 1e4 larger. The near-zero case keeps atol as is:
    near-zero outputs are decided by atol."""
    return CASE_SCALE[case] ** 2 if case == "large" else 1.0


def storage_sizes(p: Problem) -> dict[str, int]:
    if isinstance(p, Gemm):
        sizes = {"a": p.a_extent(), "b": p.b_extent()}
        if p.bias:
            sizes["bias"] = p.N
    else:
        sizes = {"a": p.N * p.c_stored * p.H * p.W, "b": p.K * (p.c_stored // p.groups) * p.R * p.S}
        if p.bias:
            sizes["bias"] = p.K
    return sizes


def fan_in(p: Problem) -> int:
    return p.K if isinstance(p, Gemm) else (p.C // p.groups) * p.R * p.S


def make_inputs(p: Problem, seed: int, case: str = "normal", precision: str = "FP32") -> dict[str, torch.Tensor]:
    """Seeded input storages (CPU, problem dtype). Activations ~ N(0, 1); weights and bias ~ U(+-1/sqrt(fan_in)),
    as torch initialises Linear/Conv layers, so outputs are O(1). `case` scales them: near_zero (1e-3) or
    large (1e2); `shifted` draws another family from the seed (activations N(mu, sigma) with mu in +-2, sigma in
    0.25..2, a tenth of them zeroed; weights with a random bound and offset), so a kernel cannot tell the checks
    by their input statistics; `rescaled` moves the scale from the weights to the activations (weights N(0, 1),
    far outside any layer's initial bound, activations N(0, 1) / sqrt(fan_in)), each operand negated by a coin
    from the seed: outputs stay O(1), but no kernel that recognises the weights' range passes it. `path_bits`
    (`path_bits_inputs`) needs the `precision` path's own significand bits and exponent range."""
    g = torch.Generator().manual_seed(seed)
    if case == "path_bits":
        return path_bits_inputs(p, g, precision)
    scale = CASE_SCALE[case]
    bound = 1.0 / math.sqrt(fan_in(p))
    weight_like = isinstance(p, Conv) or p.op in ("addmm", "mm")  # mm in the suite is always a bias-free Linear
    mu, sigma, wb, woff = (torch.rand(4, generator=g) * torch.tensor([4.0, 1.75, 2.0, 1.0]) +
                           torch.tensor([-2.0, 0.25, 0.25, -0.5])).tolist() if case == "shifted" else (0, 1, 1, 0)
    signs = (torch.randint(0, 2, (3,), generator=g) * 2 - 1).tolist() if case == "rescaled" else (1, 1, 1)
    out = {}
    for i, (role, n) in enumerate(storage_sizes(p).items()):
        if case == "rescaled":
            t = torch.randn(n, generator=g) * signs[i] * (bound if role == "a" or (role == "b" and not weight_like) else 1.0)
        elif role == "a" or (role == "b" and not weight_like):
            t = torch.randn(n, generator=g) * sigma + mu
            if case == "shifted":
                t = t * (torch.rand(n, generator=g) > 0.1)
        else:
            t = ((torch.rand(n, generator=g) * 2 - 1) * wb + woff * bound) * bound
        out[role] = (t * scale).to(TORCH_DTYPE[p.dtype])
    return out


def path_bits_inputs(p: Problem, g: torch.Generator, precision: str) -> dict[str, torch.Tensor]:
    """Inputs whose products and sums are exact in fp32 and whose outputs live in the low significand bits of the
    path: activations s * (1 + j * 2^-m), j in 0..15 (exactly representable with the path's m bits, nothing more);
    weights +-beta * q, q in {1, 1.25, 1.5, 1.75}, in pairs of equal magnitude and opposite sign along the reduction,
    so the large part s * sum(w) cancels and the output is s * 2^-m * sum(w * j), O(1) (border outputs of a padded
    convolution keep part of the large term). Any rounding of the inputs to fewer bits (TF32 for FP32, BF16 for
    TF32) moves the outputs by their own size; a smaller exponent range (FP16 for BF16) overflows to inf."""
    bits, s = PATH_BITS[precision]
    k = fan_in(p)
    unit = 2.0 ** -round(math.log2(9.0 * math.sqrt(max(k, 2) / 2)))     # output grid: rms output about 1
    beta = unit * 2.0 ** bits / s
    dt = TORCH_DTYPE[p.dtype]
    sizes = storage_sizes(p)
    out = {"a": (s * (1 + torch.randint(0, 16, (sizes["a"],), generator=g) * 2.0 ** -bits)).to(dt)}
    if isinstance(p, Gemm):                      # (batch, reduction, n); a broadcast B is one batch
        shape = (1 if p.b_strides[0] == 0 else p.batch, p.K, p.N)
    else:                                         # (out channels, reduction)
        shape = (p.K, (p.C // p.groups) * p.R * p.S)
    half = (shape[0], shape[1] // 2, *shape[2:])
    w = (1 + torch.randint(0, 4, half, generator=g) / 4) * (torch.randint(0, 2, half, generator=g) * 2 - 1) * beta
    w = torch.stack([w, -w], dim=2).flatten(1, 2)                                  # pairs along the reduction
    if shape[1] % 2:
        w = torch.cat([w, torch.zeros(shape[0], 1, *shape[2:])], dim=1)
    b = torch.zeros(sizes["b"], dtype=torch.float64)
    if isinstance(p, Gemm):
        torch.as_strided(b, shape, p.b_strides).copy_(w)
    else:
        b.view(p.K, p.c_stored // p.groups, p.R, p.S)[:, :p.C // p.groups].copy_(w.view(p.K, -1, p.R, p.S))
    out["b"] = b.to(dt)
    if "bias" in sizes:
        out["bias"] = (torch.randint(-8, 9, (sizes["bias"],), generator=g) * unit).to(dt)
    return out


def views(p: Problem, bufs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The operands as the aten op sees them (strided views over the storages)."""
    if isinstance(p, Gemm):
        a = torch.as_strided(bufs["a"], (p.batch, p.M, p.K), p.a_strides)
        b = torch.as_strided(bufs["b"], (p.batch, p.K, p.N), p.b_strides)
        return {"a": a, "b": b, **({"bias": bufs["bias"]} if p.bias else {})}
    x = bufs["a"].view(p.N, p.c_stored, p.H, p.W)[:, :p.C]
    w = bufs["b"].view(p.K, p.c_stored // p.groups, p.R, p.S)[:, :p.C // p.groups]
    return {"a": x, "b": w, **({"bias": bufs["bias"]} if p.bias else {})}


def kernel_storages(p: Problem, layout: str, bufs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The storages as a kernel of that operand layout reads them (strategy knob `layout`): nchw, the op's own;
    nhwc, the activations NHWC and the weights KRSC, as cuDNN's layout-transform kernels leave them."""
    if layout == "nchw" or not isinstance(p, Conv):
        return bufs
    x = bufs["a"].view(p.N, p.c_stored, p.H, p.W).permute(0, 2, 3, 1)
    w = bufs["b"].view(p.K, p.c_stored // p.groups, p.R, p.S).permute(0, 2, 3, 1)
    return {**bufs, "a": x.contiguous().view(-1), "b": w.contiguous().view(-1)}


def reference(p: Problem, bufs: dict[str, torch.Tensor]) -> torch.Tensor:
    """The original aten op on the given storages (on their device, with the current precision flags)."""
    v = views(p, bufs)
    if isinstance(p, Gemm):
        if p.op == "addmm":
            return torch.addmm(v["bias"], v["a"][0], v["b"][0], beta=p.beta, alpha=p.alpha).unsqueeze(0)
        if p.op == "mm":
            return torch.mm(v["a"][0], v["b"][0]).unsqueeze(0)
        out = torch.bmm(v["a"], v["b"])
        return out + v["bias"] if p.bias else out
    if p.dims == 1:
        y = F.conv1d(v["a"][:, :, 0, :], v["b"][:, :, 0, :], v.get("bias"), p.stride[1], p.pad[1], p.dil[1], p.groups)
        return y.unsqueeze(2)
    return F.conv2d(v["a"], v["b"], v.get("bias"), p.stride, p.pad, p.dil, p.groups)


def to_numpy(t: torch.Tensor) -> np.ndarray:
    """Raw numpy buffer: float32 as is, bf16/fp16 as uint16 bits."""
    t = t.detach().contiguous().cpu()
    if t.dtype in (torch.bfloat16, torch.float16):
        return t.view(torch.int16).numpy().view(np.uint16)
    return t.numpy()


def from_numpy(a: np.ndarray, dtype: str) -> torch.Tensor:
    t = torch.from_numpy(np.ascontiguousarray(a))
    if dtype in ("bfloat16", "float16"):
        return t.view(torch.int16).view(TORCH_DTYPE[dtype])
    return t


def vortex_inputs(p: Problem, precision: str, bufs: dict[str, torch.Tensor]) -> dict[str, np.ndarray]:
    """float32 buffers for the Vortex side, inputs rounded to the path's precision (TF32_FP16: fp16)."""
    out = {}
    for role, t in bufs.items():
        t = t.float()
        if precision == "TF32_FP16":
            t = t.half().float()
        out[role] = t.contiguous().numpy().astype(np.float32)
    return out


def path_reference(p: Problem, vin: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The exact (float64) result on the operands as the Vortex path rounds them (`vortex_inputs`), and the
    magnitude |A||B| + |bias| per output element that bounds the rounding error of an fp32 accumulation."""
    exact = {k: torch.from_numpy(np.asarray(v, dtype=np.float64)) for k, v in vin.items()}
    ref = reference(p, exact).numpy()
    mag = reference(p, {k: v.abs() for k, v in exact.items()}).numpy()
    return ref, np.abs(mag)


def path_bits_magnitude(p: Problem, vin: dict[str, np.ndarray], precision: str) -> np.ndarray:
    """What bounds an fp32 accumulation's rounding error on `path_bits` inputs: |A - s||B| (the part of the products
    that does not cancel) plus the largest partial sum the cancelling part s*w can reach in an order that does not
    add the pairs together (s * max|B| * sqrt(K)). |A||B| would count the cancelled part K times over and, growing
    with K, let inputs rounded to fewer bits through."""
    s = PATH_BITS[precision][1]
    _, mag = path_reference(p, {**vin, "a": np.asarray(vin["a"], dtype=np.float64) - s})
    return mag + s * float(np.abs(vin["b"]).max()) * math.sqrt(fan_in(p))


def round_output(dtype: str, y: torch.Tensor) -> torch.Tensor:
    """The Vortex fp32 result in the output dtype of the op (bf16 outputs are rounded on the host)."""
    return y.to(TORCH_DTYPE[dtype]) if dtype != "float32" else y
