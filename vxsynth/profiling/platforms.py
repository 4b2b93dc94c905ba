"""Platform checks: refuse to profile on a machine that is not the requested platform."""

from __future__ import annotations

import glob
import shutil

from vxsynth.errors import VxError


def cuda():
    """torch.cuda when this machine has an NVIDIA GPU torch can use, else None; without a GPU device node (/dev/nvidia<N>,
    a Jetson's /dev/nvhost-*, WSL's /dev/dxg) there is none to find, and torch is not imported to say so."""
    if not any(glob.glob(p) for p in ("/dev/nvidia[0-9]*", "/dev/nvhost-*", "/dev/dxg")):
        return None
    import torch

    return torch.cuda if torch.cuda.is_available() else None


def other_machine(pcfg: dict) -> str | None:
    """Why this machine is not platform `pcfg['name']` (no GPU, or another GPU); None when it is, or for the CPU."""
    name = pcfg["name"]
    if pcfg["device"] == "cpu":
        return None
    if (c := cuda()) is None:
        return f"platform {name!r} needs an NVIDIA GPU but this machine has none"
    gpu = c.get_device_name(0)
    if pcfg.get("gpu_name") and pcfg["gpu_name"].lower() not in gpu.lower():
        return f"platform {name!r} expects a GPU named like {pcfg['gpu_name']!r} but found {gpu!r}"
    return None


def check_platform(pcfg: dict) -> None:
    """Raise a one-line VxError when this machine cannot profile platform `pcfg['name']`."""
    name = pcfg["name"]
    if why := other_machine(pcfg):
        raise VxError(f"{why}; run on the {name} host (or use platform=cpu)")
    ncu = (pcfg.get("ncu") or {}).get("binary")
    if ncu and not shutil.which(ncu):
        raise VxError(f"platform {name!r} needs Nsight Compute but `{ncu}` is not on PATH; install it or set "
                      f"platform.ncu.binary")
