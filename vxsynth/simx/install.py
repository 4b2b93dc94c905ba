"""Detect a Vortex installation (configured path or VORTEX_HOME) and its API generation."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from vxsynth.errors import VxError

# Files each generation needs, by component (vortex.md sections 0, 3.3, 4.1, 4.2).
LAYOUT = {
    "v2.2": {"kernel library": ["kernel/include/vx_spawn.h", "kernel/libvortex.a", "kernel/scripts/link32.ld",
                                "kernel/scripts/vxbin.py"],
             "runtime": ["runtime/include/vortex.h", "runtime/libvortex.so"],
             "SimX driver": ["runtime/simx/Makefile"]},
    "v3": {"kernel library": ["sw/kernel/include/vx_spawn.h", "sw/kernel/libvortex.a", "sw/kernel/scripts/link32.ld",
                              "sw/kernel/scripts/vxbin.py"],
           "runtime": ["sw/runtime/include/vortex.h", "sw/runtime/libvortex.so"],
           "SimX driver": ["sw/runtime/simx/Makefile"]},
}


@dataclass(frozen=True)
class Installation:
    root: Path
    api: str                       # "v2.2" or "v3"
    compiler: list[str]            # kernel compiler command prefix
    compiler_kind: str             # "llvm-vortex" or "riscv-gcc"
    tooldir: Path | None = None
    extra: dict = field(default_factory=dict)

    def path(self, component: str, index: int = 0) -> Path:
        return self.root / LAYOUT[self.api][component][index]


def api_of(root: Path) -> str | None:
    if (root / "sw" / "runtime").is_dir() or (root / "VX_config.toml").exists():
        return "v3"
    if (root / "runtime").is_dir() and (root / "kernel").is_dir():
        return "v2.2"
    return None


def _toolchain(tooldir: Path | None) -> tuple[list[str], str] | None:
    if tooldir:
        clang = tooldir / "llvm-vortex" / "bin" / "clang"
        if clang.exists():
            return [str(clang)], "llvm-vortex"
        gcc = tooldir / "riscv32-gnu-toolchain" / "bin" / "riscv32-unknown-elf-gcc"
        if gcc.exists():
            return [str(gcc)], "riscv-gcc"
    for name in ("riscv32-unknown-elf-gcc", "riscv64-unknown-elf-gcc"):
        if shutil.which(name):
            return [shutil.which(name)], "riscv-gcc"
    return None


def detect(home: str | None = None, tooldir: str | None = None, api: str = "auto") -> Installation:
    """The installation at `home` (or $VORTEX_HOME); a one-line VxError names every missing part."""
    home = home or os.environ.get("VORTEX_HOME")
    if not home:
        raise VxError("no Vortex installation: set VORTEX_HOME (or simx.home) to a built Vortex tree (v2.2 or v3); "
                      "missing: toolchain, kernel library, runtime, SimX driver")
    root = Path(home).expanduser()
    if not root.is_dir():
        raise VxError(f"VORTEX_HOME={root} does not exist; point it at a built Vortex tree")
    found = api_of(root) if api == "auto" else api
    if found not in LAYOUT:
        raise VxError(f"{root} is neither a v2.2 (kernel/, runtime/) nor a v3 (sw/, VX_config.toml) Vortex tree")
    td = Path(tooldir or os.environ.get("TOOLDIR", "")) if (tooldir or os.environ.get("TOOLDIR")) else None
    missing = [f"{comp} ({', '.join(p for p in paths if not (root / p).exists())})"
               for comp, paths in LAYOUT[found].items() if not all((root / p).exists() for p in paths)]
    tc = _toolchain(td)
    if tc is None:
        missing.insert(0, "toolchain (llvm-vortex or riscv32 gcc under TOOLDIR, or riscv*-unknown-elf-gcc on PATH)")
    if missing:
        raise VxError(f"Vortex {found} installation at {root} is incomplete: missing " + "; ".join(missing))
    return Installation(root, found, tc[0], tc[1], td)
