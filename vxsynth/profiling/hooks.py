"""Forward hooks that mark every module's forward with its dotted path.

`with_modules` gives class names only in eager mode, so each module pushes its own range: a profiler
`record_function` (pass 1) and/or an NVTX range (pass 2, seen by ncu).
"""

from __future__ import annotations

import contextlib

import torch

MODULE_PREFIX = "module::"


@contextlib.contextmanager
def module_ranges(model: torch.nn.Module, *, profiler: bool = True, nvtx: bool = False):
    stack: list = []
    handles = []

    def pre(path):
        def hook(_m, _args):
            rf = None
            if profiler:
                rf = torch.profiler.record_function(MODULE_PREFIX + path)
                rf.__enter__()
            if nvtx:
                torch.cuda.nvtx.range_push(MODULE_PREFIX + path)
            stack.append(rf)
        return hook

    def post(_m, _args, _out):
        rf = stack.pop()
        if nvtx:
            torch.cuda.nvtx.range_pop()
        if rf is not None:
            rf.__exit__(None, None, None)

    for path, mod in model.named_modules():
        if path:
            handles.append(mod.register_forward_pre_hook(pre(path)))
            handles.append(mod.register_forward_hook(post))
    try:
        yield
    finally:
        for h in handles:
            h.remove()
