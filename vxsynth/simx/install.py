"""Detect a Vortex installation (configured path or VORTEX_HOME), what it is and what it can do.

Files are looked up in the tree itself and, for an out-of-tree build, in the source tree its `config.mk` names; an
installed layout (`make install`: kernel/lib32, runtime/lib) is accepted too. The API generation is decided from
evidence (the kernel entry point the headers declare, which file prints the counters), not from the folder names,
and SimX counts as present only once its libraries are built. Whether the kernel compiler really builds a kernel,
and how much local memory the simulator keeps distinct, is measured by `vxsynth.simx.probe`.
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from vxsynth.errors import VxError

# file -> where it may live (in-source / out-of-tree build first, installed layout second), by component.
LAYOUT = {
    "v2.2": {
        "kernel library": {"vx_spawn.h": ["kernel/include/vx_spawn.h"],
                           "libvortex.a": ["kernel/libvortex.a", "kernel/lib32/libvortex.a"],
                           "link32.ld": ["kernel/scripts/link32.ld"], "vxbin.py": ["kernel/scripts/vxbin.py"],
                           "VX_config.h": ["hw/VX_config.h", "kernel/include/VX_config.h"]},
        "runtime": {"vortex.h": ["runtime/include/vortex.h"],
                    "libvortex.so": ["runtime/libvortex.so", "runtime/lib/libvortex.so"]},
        "SimX (built)": {"libsimx.so": ["runtime/libsimx.so", "runtime/lib/libsimx.so"],
                         "libvortex-simx.so": ["runtime/libvortex-simx.so", "runtime/lib/libvortex-simx.so"]},
    },
    "v3": {
        "kernel library": {"vx_spawn.h": ["sw/kernel/include/vx_spawn.h"], "libvortex.a": ["sw/kernel/libvortex.a"],
                           "link32.ld": ["sw/kernel/scripts/link32.ld"], "vxbin.py": ["sw/kernel/scripts/vxbin.py"],
                           "VX_config.h": ["hw/VX_config.h", "sw/common/VX_config.h"]},
        "runtime": {"vortex.h": ["sw/runtime/include/vortex.h"], "libvortex.so": ["sw/runtime/libvortex.so"]},
        "SimX (built)": {"libvortex-simx.so": ["sw/runtime/libvortex-simx.so"]},
    },
}
# What rebuilding SimX for another configuration needs (sweeps): the driver and simulator sources and their libraries.
REBUILD = {
    "v2.2": {"driver Makefile": "runtime/simx/Makefile", "simulator Makefile": "sim/simx/Makefile",
             "softfloat": "third_party/softfloat/build/Linux-x86_64-GCC/softfloat.a",
             "ramulator": "third_party/ramulator/libramulator.so"},
    "v3": {"driver Makefile": "sw/runtime/simx/Makefile", "simulator Makefile": "sim/simx/Makefile"},
}


@dataclass(frozen=True)
class Installation:
    root: Path
    api: str                       # "v2.2" (v2 line: main() + vx_spawn_threads) or "v3"
    compiler: list[str]            # kernel compiler command prefix
    compiler_kind: str             # "llvm-vortex" or "riscv-gcc"
    tooldir: Path | None = None
    files: dict = field(default_factory=dict)      # file name -> path (LAYOUT)
    source: Path | None = None     # the tree holding the sources (out-of-tree builds: the one config.mk names)
    cannot_rebuild: tuple = ()     # why SimX cannot be rebuilt per configuration (empty: it can)
    evidence: dict = field(default_factory=dict)   # why the API generation is what it is

    def path(self, name: str) -> Path:
        return Path(self.files[name])


def _source_of(root: Path) -> Path | None:
    """The source tree an out-of-tree build was configured from (`VORTEX_HOME ?= ...` in its config.mk)."""
    mk = root / "config.mk"
    m = re.search(r"^VORTEX_HOME\s*\??=\s*(\S+)", mk.read_text(errors="replace"), re.M) if mk.exists() else None
    src = Path(m[1]) if m else None
    return src if src and src.is_dir() and src.resolve() != root.resolve() else None


def api_of(roots: list[Path]) -> tuple[str | None, dict]:
    """The API generation from evidence in the trees, and the evidence."""
    def first(*rel):
        return next((r / p for r in roots for p in rel if (r / p).exists()), None)

    if first("sw/runtime", "VX_config.toml"):
        return "v3", {"layout": "sw/runtime or VX_config.toml"}
    spawn = first("kernel/include/vx_spawn.h")
    if spawn is None:
        return None, {}
    if first("kernel/include/vx_spawn2.h", "runtime/include/vortex2.h"):
        raise VxError(f"{spawn.parents[2]} is an intermediate v2 tree (vx_spawn2.h / vortex2.h): not supported; "
                      "use a v2.2-line commit (main() + vx_spawn_threads) or v3")
    if "vx_spawn_threads" not in spawn.read_text(errors="replace"):
        raise VxError(f"{spawn} declares no vx_spawn_threads: not the v2.2 kernel API this project generates for")
    perf = first("runtime/stub/perf.cpp", "runtime/stub/utils.cpp")
    return "v2.2", {"entry": f"vx_spawn_threads in {spawn}", "counters printed by": str(perf) if perf else "unknown"}


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
                      "missing: toolchain, kernel library, runtime, SimX (built)")
    root = Path(home).expanduser()
    if not root.is_dir():
        raise VxError(f"VORTEX_HOME={root} does not exist; point it at a built Vortex tree")
    source = _source_of(root)
    roots = [root] + ([source] if source else [])
    found, evidence = api_of(roots) if api == "auto" else (api, {"configured": f"simx.api={api}"})
    if found not in LAYOUT:
        raise VxError(f"{root} is neither a v2.2 (kernel/, runtime/) nor a v3 (sw/, VX_config.toml) Vortex tree")
    files, missing = {}, []
    for comp, names in LAYOUT[found].items():
        absent = []
        for name, rels in names.items():
            hit = next((r / p for r in roots for p in rels if (r / p).exists()), None)
            if hit is None:
                absent.append(" or ".join(rels))
            else:
                files[name] = str(hit)
        if absent:
            missing.append(f"{comp} ({', '.join(absent)})")
    td = Path(tooldir or os.environ["TOOLDIR"]) if (tooldir or os.environ.get("TOOLDIR")) else None
    tc = _toolchain(td)
    if tc is None:
        missing.insert(0, "toolchain (llvm-vortex or riscv32 gcc under TOOLDIR, or riscv*-unknown-elf-gcc on PATH)")
    if missing:
        raise VxError(f"Vortex {found} installation at {root} is incomplete: missing " + "; ".join(missing)
                      + (" (build SimX: make -C runtime/simx)" if any(m.startswith("SimX") for m in missing) else ""))
    src = source or root
    cannot = tuple(f"{what} ({rel})" for what, rel in REBUILD[found].items() if not (src / rel).exists())
    return Installation(root, found, tc[0], tc[1], td, files, src, cannot, evidence)
