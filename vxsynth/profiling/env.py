"""The environment record: what ran the profile (GPU, driver, CUDA, torch, ncu, lerobot, precision flags)."""

from __future__ import annotations

import importlib.metadata as md
import platform as pyplatform
import shutil
import subprocess
from datetime import datetime, timezone

import torch


def _cmd(args: list[str]) -> str | None:
    if not shutil.which(args[0]):
        return None
    try:
        out = subprocess.run(args, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None


def _version(pkg: str) -> str | None:
    try:
        return md.version(pkg)
    except md.PackageNotFoundError:
        return None


def ncu_version(binary: str = "ncu") -> str | None:
    out = _cmd([binary, "--version"])
    return out.splitlines()[-1].strip() if out else None


def environment(platform: str, ncu_binary: str | None = None) -> dict:
    cuda = torch.cuda.is_available()
    env = {
        "platform": platform,
        "recorded_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "python": pyplatform.python_version(),
        "machine": pyplatform.machine(),
        "torch": torch.__version__,
        "cuda_runtime": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if cuda else None,
        "gpu": torch.cuda.get_device_name(0) if cuda else None,
        "sm_count": torch.cuda.get_device_properties(0).multi_processor_count if cuda else None,
        "capability": ".".join(map(str, torch.cuda.get_device_capability(0))) if cuda else None,
        "driver": _cmd(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]) if cuda else None,
        "ncu": ncu_version(ncu_binary) if ncu_binary else None,
        "lerobot": _version("lerobot"), "transformers": _version("transformers"), "diffusers": _version("diffusers"),
        "precision_flags": {
            "cuda.matmul.allow_tf32": torch.backends.cuda.matmul.allow_tf32,
            "cudnn.allow_tf32": torch.backends.cudnn.allow_tf32,
            "float32_matmul_precision": torch.get_float32_matmul_precision(),
            "cudnn.benchmark": torch.backends.cudnn.benchmark,
        },
    }
    return env
