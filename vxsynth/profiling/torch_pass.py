"""Profiling pass 1: run N inferences under torch.profiler and return the Chrome trace."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, record_function

from vxsynth.profiling.hooks import module_ranges
from vxsynth.workloads.builders import run_inference

INFERENCE_PREFIX = "inference#"


def profile_inferences(policy, batch, *, device: str, warmup: int, iters: int, call: str = "predict_action_chunk") -> dict:
    """Warm up, then profile `iters` inferences, each inside an `inference#i` range."""
    cuda = device.startswith("cuda")
    for _ in range(warmup):
        run_inference(policy, batch, call)
    if cuda:
        torch.cuda.synchronize()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with module_ranges(policy), profile(activities=activities, record_shapes=True) as prof:
        for i in range(iters):
            with record_function(f"{INFERENCE_PREFIX}{i}"):
                run_inference(policy, batch, call)
            if cuda:
                torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(path))
        return json.loads(path.read_text())
