"""Wrap PyTorch entry points so that a call matching a slice (op, shapes, dtypes, strides, op parameters) runs the
slice's generated kernel and every other call runs the original. Every call signature and decision is logged;
afterwards `prove` checks that the candidate really executed: the dispatch count equals the slice's calls per
inference and the candidate's kernel appears in the profiler trace (or the Vortex executor's run log)."""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass, field
from typing import Callable

import torch
import torch.nn.functional as F

KINETO_DTYPE = {torch.float32: "float", torch.bfloat16: "c10::BFloat16", torch.float16: "c10::Half"}


def _ints(v) -> tuple[int, ...]:
    if isinstance(v, str):
        v = json.loads(v) if v.startswith("[") else ([int(v)] if v else [])
    if isinstance(v, int):
        return (v,)
    return tuple(int(x) for x in v)


def _sig(op: str, tensors: list, params: tuple = ()) -> tuple:
    dims = tuple(tuple(t.shape) if isinstance(t, torch.Tensor) else () for t in tensors)
    dtypes = tuple(KINETO_DTYPE.get(t.dtype, str(t.dtype)) if isinstance(t, torch.Tensor) else "" for t in tensors)
    strides = tuple(tuple(t.stride()) if isinstance(t, torch.Tensor) else () for t in tensors)
    return (op, dims, dtypes, strides, params)


def slice_signature(op_call: dict) -> tuple:
    """The signature a slice's op call matches (from its recorded top-level aten op)."""
    op = op_call["op"]
    n = {"aten::linear": 3, "aten::matmul": 2, "aten::mm": 2, "aten::bmm": 2, "aten::addmm": 3}.get(op, 3)
    dims = tuple(tuple(d) for d in op_call["dims"][:n])
    dtypes = tuple(op_call["dtypes"][:n])
    strides = tuple(tuple(s) for s in op_call["strides"][:n])
    params: tuple = ()
    if op in ("aten::conv1d", "aten::conv2d"):
        a = op_call["args"]
        params = (_ints(a[3]), _ints(a[4]) if a[4] else None, _ints(a[5]), int(a[6] or 1))
    return (op, dims, dtypes, strides, params)


@dataclass
class Route:
    slice_id: str
    signature: tuple
    run: Callable[[list[torch.Tensor]], torch.Tensor]   # candidate on the call's tensors -> output
    kernel_name: str
    expected_per_inference: int
    dispatched: int = 0


@dataclass
class Replacement:
    routes: list[Route]
    log: list[dict] = field(default_factory=list)

    def _route(self, sig: tuple) -> Route | None:
        for r in self.routes:
            if r.signature[:4] == sig[:4] and (not r.signature[4] or _params_match(r.signature[4], sig[4])):
                return r
        return None

    def _call(self, op: str, tensors: list, params: tuple, original: Callable):
        sig = _sig(op, tensors, params)
        route = self._route(sig)
        self.log.append({"op": op, "dims": sig[1], "dtypes": sig[2], "strides": sig[3], "params": params,
                         "slice_id": route.slice_id if route else None, "dispatched": route is not None})
        if route is None:
            return original()
        route.dispatched += 1
        return route.run([t for t in tensors if isinstance(t, torch.Tensor)])

    @contextlib.contextmanager
    def active(self):
        orig = {"linear": F.linear, "conv1d": F.conv1d, "conv2d": F.conv2d, "matmul": torch.matmul,
                "mm": torch.mm, "bmm": torch.bmm, "addmm": torch.addmm}

        def linear(input, weight, bias=None):
            return self._call("aten::linear", [input, weight, bias], (), lambda: orig["linear"](input, weight, bias))

        def conv(kind):
            def f(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
                pad = None if isinstance(padding, str) else _ints(padding)
                params = (_ints(stride), pad, _ints(dilation), int(groups))
                return self._call(f"aten::{kind}", [input, weight, bias], params,
                                  lambda: orig[kind](input, weight, bias, stride, padding, dilation, groups))
            return f

        def binary(name):
            def f(a, b, *args, **kw):
                if args or kw:
                    return orig[name](a, b, *args, **kw)
                return self._call(f"aten::{name}", [a, b], (), lambda: orig[name](a, b))
            return f

        F.linear, F.conv1d, F.conv2d = linear, conv("conv1d"), conv("conv2d")
        torch.matmul, torch.mm, torch.bmm = binary("matmul"), binary("mm"), binary("bmm")
        try:
            yield self
        finally:
            F.linear, F.conv1d, F.conv2d = orig["linear"], orig["conv1d"], orig["conv2d"]
            torch.matmul, torch.mm, torch.bmm = orig["matmul"], orig["mm"], orig["bmm"]

    def prove(self, inferences: int, executed_kernels: list[str]) -> list[str]:
        """Reasons the dispatch is not proven (empty when it is)."""
        problems = []
        for r in self.routes:
            want = r.expected_per_inference * inferences
            if r.dispatched != want:
                problems.append(f"{r.slice_id}: dispatched {r.dispatched} times, expected {want} "
                                f"({r.expected_per_inference} calls per inference x {inferences})")
        for name in sorted({r.kernel_name for r in self.routes}):  # slices with one problem share one kernel
            dispatched = sum(r.dispatched for r in self.routes if r.kernel_name == name)
            seen = sum(1 for k in executed_kernels if name in k)
            if seen != dispatched:
                problems.append(f"kernel {name} executed {seen} times, dispatched {dispatched}")
        return problems


def _params_match(want: tuple, got: tuple) -> bool:
    stride, pad, dil, groups = want
    return got[0] == stride and got[2] == dil and got[3] == groups and (pad is None or got[1] is None or got[1] == pad)
