"""Rules on what the compilers built (conf/sandbox `objects`): judged on the object, not on the source text.

Vortex objects (host x86-64 and rv32imf): the global symbols they define and import must be on the target's
allowlist (an undefined `system`, `remove`, `kill`, `fopen` or a defined `malloc` that would interpose the runtime
is a rejection), no writable or thread-local section with content (state kept between launches), no
constructor/destructor tables (code before main), no more read-only data than max_rodata_bytes (literal tables),
and none of the listed instructions (system calls). CUDA: the PTX of the same nvcc run, with no calls, no module
variables, and tensor-core math only on precision paths that allow it; a CUDA half that is not what its strategy
generates must have the instruction forms of the strategy's own kernel (shared memory, cp.async, ldmatrix, mma,
atomics), or the trail and report would describe a kernel that is not the one measured.
"""

from __future__ import annotations

import re
from pathlib import Path

from vxsynth.targets import proc


class Violation(str):
    """The error of a build that compiled but broke an object rule: the sandbox's gate ("object"), not the
    compiler's. A `str` so that every caller that reports errors keeps doing so."""


def violation(target: str, bad: list[str]) -> Violation:
    return Violation(f"object rules ({target}): " + "; ".join(bad))


def keep(error: str, said: str) -> str:
    """`said` (an error restated), still a Violation when `error` was one."""
    return Violation(said) if isinstance(error, Violation) else said


CACHE_FORMAT = 2    # build caches record whether an object rule rejected a build (entries of format 1 are not read)


INIT_SECTIONS = (".init_array", ".fini_array", ".preinit_array", ".ctors", ".dtors", ".init", ".fini")
_SECTION = re.compile(r"^\s*\[\s*\d+\]\s+(\S+)\s+\S+\s+[0-9a-f]+\s+[0-9a-f]+\s+([0-9a-f]+)\s+[0-9a-f]+\s+([A-Za-z]*)", re.M)


def sections(readelf_out: str) -> list[tuple[str, int, str]]:
    """(name, size, flags) of every section in `readelf -SW` output."""
    return [(n, int(size, 16), flags) for n, size, flags in _SECTION.findall(readelf_out)]


def elf_object(obj: Path, rules: dict, prefix: str = "") -> list[str]:
    """Violations of an ELF object against a target's rules; `prefix` selects the binutils (riscv64-unknown-elf-)."""
    out: list[str] = []
    nm = proc.run([f"{prefix}nm", "-P", str(obj)], 60)
    se = proc.run([f"{prefix}readelf", "-SW", str(obj)], 60)
    dis = proc.run([f"{prefix}objdump", "-d", str(obj)], 60)
    if not (nm.ok and se.ok and dis.ok):
        return [f"cannot inspect the object ({(nm.error or se.error or dis.error)}): binutils {prefix or 'host'} missing?"]
    for line in nm.stdout.splitlines():
        parts = line.split()
        if len(parts) < 2:
            continue
        name, kind = parts[0], parts[1]
        if name.startswith(".L"):       # the compiler's anonymous constants: bounded by max_rodata_bytes
            continue
        if kind in "Uw" and name not in rules["import"]:
            out.append(f"imports {name} (not part of the kernel API)")
        elif kind in "TWVRDBCGSiu" and name not in rules["define"]:
            out.append(f"defines global symbol {name} ({kind}): only {', '.join(rules['define'])} may be defined")
        elif kind in "bdgsrv":
            out.append(f"defines static object {name} ({kind}): state or a table outside the kernel's frame")
    rodata = 0
    for name, size, flags in sections(se.stdout):
        if any(name == s or name.startswith(s + ".") for s in INIT_SECTIONS) and size:
            out.append(f"section {name}: code that runs before or after main")
        elif "T" in flags and size:
            out.append(f"section {name}: thread-local state")
        elif "W" in flags and "A" in flags and size:
            out.append(f"section {name} ({size} B): writable state kept between launches")
        elif name.startswith((".rodata", ".srodata")) and "A" in flags:
            rodata += size
    if rodata > rules["max_rodata_bytes"]:
        out.append(f"{rodata} B of read-only data (a table?) above {rules['max_rodata_bytes']} B")
    if rules.get("instrumented"):     # every function calls the coverage hook the lockstep check counts on
        dr = proc.run([f"{prefix}objdump", "-dr", str(obj)], 60)
        for name, body in re.findall(r"^[0-9a-f]+ <([^>]+)>:\n(.*?)(?=\n\n|\Z)", dr.stdout, re.M | re.S):
            if rules["instrumented"] not in body:
                out.append(f"function {name} is not instrumented ({rules['instrumented']} never called)")
    for pat in rules.get("instructions", []):
        m = re.search(rf"^\s+[0-9a-f]+:\s+(?:[0-9a-f]{{2,8}} )+\s*{pat}\b", dis.stdout, re.M)
        if m:
            out.append(f"contains the instruction {m.group(0).split()[-1]!r}")
    return out


def ptx(text: str, rules: dict, precision: str) -> list[str]:
    """Violations of a kernel's PTX."""
    out = [f"PTX {why}: {m.group(0).strip()[:60]!r}" for why, pat in rules["forbid"].items()
           if (m := re.search(pat, text, re.M))]
    if precision not in rules["tensor_core_paths"] and (m := re.search(rules["tensor_core"], text)):
        out.append(f"tensor-core instruction {m.group(0)!r} on the {precision} path, which requires FP32 math")
    return out


def strategy_forms(have: str, want: str, forms: dict[str, str]) -> list[str]:
    """Instruction forms (name -> PTX pattern) that the strategy's own kernel (`want`) has and this kernel (`have`)
    lacks, or the reverse."""
    out = []
    for what, pat in forms.items():
        h, w = bool(re.search(pat, have, re.M)), bool(re.search(pat, want, re.M))
        if h != w:
            out.append(f"does not match its strategy: {'this kernel has' if h else 'its strategy has'} {what}, "
                       f"{'its strategy' if h else 'this kernel'} none")
    return out
