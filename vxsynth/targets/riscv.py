"""Cross-compile check: every Vortex candidate must compile for the Vortex ISA (rv32imf, ilp32f) with a real RISC-V
gcc against vxsynth's own declarations of the Vortex kernel API (`vortex_api/riscv`), and its object must pass the
`vortex_rv32` object rules (conf/sandbox)."""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from vxsynth.targets import limits, objcheck, proc
from vxsynth.targets.sandbox import default_policy

API = Path(__file__).parent / "vortex_api"
FLAGS = ["-march=rv32imf", "-mabi=ilp32f", "-O3", "-mcmodel=medany", "-ffreestanding", "-fno-exceptions",
         "-fdata-sections", "-ffunction-sections", "-std=gnu11"]


@dataclass
class CrossResult:
    ok: bool
    error: str = ""
    instructions: int = 0
    fma: int = 0
    calls: tuple = ()
    wall_s: float = 0.0


def compiler(prefix: str = "riscv64-unknown-elf-") -> str | None:
    return shutil.which(prefix + "gcc")


def cross_compile(source: str, workdir: Path, prefix: str = "riscv64-unknown-elf-", rules: dict | None = None,
                  budget: limits.Budget | None = None) -> CrossResult:
    """Compile `source` for rv32imf as a compile of its candidate under `budget` (a fresh configured one when None)."""
    gcc = compiler(prefix)
    if gcc is None:
        return CrossResult(False, f"{prefix}gcc not found; install Debian's gcc-riscv64-unknown-elf")
    workdir.mkdir(parents=True, exist_ok=True)
    src, obj = workdir / "kernel_vx.c", workdir / "kernel_vx.rv32.o"
    src.write_text(source)
    r = (budget or limits.Budget()).run([gcc, *FLAGS, f"-I{API / 'riscv'}", f"-I{API}", "-c", str(src), "-o", str(obj)],
                                        120)
    if not r.ok:
        return CrossResult(False, f"rv32imf compile failed ({r.error}): {proc.tail(r.stderr)}", wall_s=r.wall_s)
    bad = objcheck.elf_object(obj, rules or default_policy()["objects"]["vortex_rv32"], prefix)
    if bad:
        return CrossResult(False, objcheck.violation("vortex_rv32", bad), wall_s=r.wall_s)
    d = proc.run([prefix + "objdump", "-d", str(obj)], 60)
    text = d.stdout
    ins = re.findall(r"^\s+[0-9a-f]+:\s+[0-9a-f]+\s+(\S+)", text, re.M)
    calls = tuple(sorted(set(re.findall(r"<([\w.]+)>$", "\n".join(l for l in text.splitlines() if "call" in l or "jal\t" in l), re.M))))
    return CrossResult(True, "", len(ins), sum(i.startswith("fmadd") for i in ins), calls, r.wall_s)
