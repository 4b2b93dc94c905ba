"""Platform checks: refuse to profile on a machine that is not the requested platform."""

from __future__ import annotations

import shutil

import torch

from vxsynth.errors import VxError


def check_platform(pcfg: dict) -> None:
    """Raise a one-line VxError when this machine cannot profile platform `pcfg['name']`."""
    name = pcfg["name"]
    if pcfg["device"] == "cpu":
        return
    if not torch.cuda.is_available():
        raise VxError(f"platform {name!r} needs an NVIDIA GPU but this machine has none; run on the {name} host "
                      f"(or use platform=cpu)")
    gpu = torch.cuda.get_device_name(0)
    if pcfg.get("gpu_name") and pcfg["gpu_name"].lower() not in gpu.lower():
        raise VxError(f"platform {name!r} expects a GPU named like {pcfg['gpu_name']!r} but found {gpu!r}; "
                      f"pick the matching platform")
    ncu = (pcfg.get("ncu") or {}).get("binary")
    if ncu and not shutil.which(ncu):
        raise VxError(f"platform {name!r} needs Nsight Compute but `{ncu}` is not on PATH; install it or set "
                      f"platform.ncu.binary")
