"""Runners that execute a candidate on the tensors of an intercepted call: the CUDA kernel in-process (candidates
are loaded only after they passed the isolated checks), or the Vortex host executor standing in for a device."""

from __future__ import annotations

import itertools
import tempfile
from pathlib import Path

import torch

from vxsynth.kernels import tensors as T
from vxsynth.kernels.candidate import Candidate
from vxsynth.kernels.problem import Conv
from vxsynth.targets import tensor_map


def _out_shape(c: Candidate, tensors: list[torch.Tensor], op: str) -> tuple:
    p = c.problem
    if isinstance(p, Conv):
        return (p.N, p.K, p.Q) if op == "aten::conv1d" else p.out_shape
    x, w = tensors[0], tensors[1]
    if op == "aten::linear":
        return (*x.shape[:-1], w.shape[0])
    return torch.broadcast_shapes(x.shape[:-2], w.shape[:-2]) + (x.shape[-2], w.shape[-1])


def span_bytes(t: torch.Tensor) -> int:
    """Bytes from a tensor's first element to past its last, by its own strides: what a kernel reading the view may
    touch (more than numel's bytes for a view with gaps, such as a slice of a wider matrix)."""
    if t.numel() == 0:
        return 0
    return (1 + sum((n - 1) * st for n, st in zip(t.shape, t.stride()))) * t.element_size()


def operand_buffers(a: torch.Tensor, b: torch.Tensor) -> dict:
    """{operand: (address, bytes its view spans)}: the buffers the launcher checks the tensor maps against."""
    return {"a": (a.data_ptr(), span_bytes(a)), "b": (b.data_ptr(), span_bytes(b))}


def cuda_runner(c: Candidate, cubin: Path, op: str):
    """Launch the compiled candidate on the call's own device tensors (on torch's current stream)."""
    import cupy as cp

    from vxsynth.targets.cuda_worker import kernel, workspace

    smem = int(c.meta["launch"].get("smem_bytes", 0))
    fn = kernel(str(cubin), c.name, smem)

    def run(tensors: list[torch.Tensor]) -> torch.Tensor:
        a, b = tensors[0], tensors[1]
        if c.strategy.layout != "nchw":     # an NHWC convolution: the kernel reads the transformed layout
            kb = T.kernel_storages(c.problem, c.strategy.layout, {"a": a.contiguous().view(-1), "b": b.contiguous().view(-1)})
            a, b = kb["a"], kb["b"]
        bias = tensors[2] if len(tensors) > 2 else torch.zeros(1, dtype=a.dtype, device=a.device)
        fill = 0.0 if c.meta["launch"].get("zero_output") else float("nan")    # split-K adds into zeros
        out = torch.full(_out_shape(c, tensors, op), fill, dtype=a.dtype, device=a.device)
        with cp.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream):
            ws = workspace(c.meta["launch"].get("workspace_words", 0))
            maps = tensor_map.kernel_args(c.meta["launch"].get("tensor_maps", []), c.problem.dtype, operand_buffers(a, b))
            fn(tuple(c.meta["launch"]["grid"]), tuple(c.meta["launch"]["block"]),
               (cp.uint64(a.data_ptr()), cp.uint64(b.data_ptr()), cp.uint64(bias.data_ptr()), cp.uint64(out.data_ptr()))
               + ((ws,) if ws is not None else ()) + maps, shared_mem=smem)
        return out
    return run


def vortex_runner(c: Candidate, executor, op: str, log: list[str]):
    """Run the candidate's Vortex kernel (full grid) on the host executor for each call; log its kernel name."""
    work = Path(tempfile.mkdtemp(prefix="vxdispatch-"))
    exe, err = executor.build(c, work)
    if exe is None:
        raise RuntimeError(err)
    counter = itertools.count()

    def run(tensors: list[torch.Tensor]) -> torch.Tensor:
        sizes = T.storage_sizes(c.problem)
        bufs = T.kernel_storages(c.problem, c.strategy.layout,
                                 {role: t.as_strided((sizes[role],), (1,)) for role, t in zip(("a", "b", "bias"), tensors)})
        r = executor.run(c, T.vortex_inputs(c.problem, c.precision, bufs), work / f"call{next(counter)}", full=True, exe=exe)
        if not r.ok:
            raise RuntimeError(r.error)
        log.append(f"{c.name}: {r.stdout.strip()}")
        y = T.round_output(c.problem.dtype, torch.from_numpy(r.output))
        return y.reshape(_out_shape(c, tensors, op)).to(tensors[0].dtype)
    return run
