"""Commands that build a Vortex candidate and the SimX driver for one target configuration, per API generation.

Hardware parameters are compiled into the SimX library, so each configuration gets its own driver build (cached by
configuration hash), built with the same CONFIGS as the kernel (vortex.md 3.3, 5.3, 5.4).
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import numpy as np

from vxsynth.simx.install import Installation
from vxsynth.store.io import sha256_obj

# target knob -> (v2.2 macro, v3 macro); booleans become bare -D flags.
KNOBS = {
    "cores": ("NUM_CORES", "VX_CFG_NUM_CORES"),
    "warps": ("NUM_WARPS", "VX_CFG_NUM_WARPS"),
    "threads": ("NUM_THREADS", "VX_CFG_NUM_THREADS"),
    "dcache_size": ("DCACHE_SIZE", "VX_CFG_DCACHE_SIZE"),
    "l2": ("L2_ENABLE", "VX_CFG_L2_ENABLE"),
    "l2_size": ("L2_CACHE_SIZE", "VX_CFG_L2_SIZE"),
    "lmem_log_size": ("LMEM_LOG_SIZE", "VX_CFG_LMEM_LOG_SIZE"),
}


def config_flags(cfg: dict, api: str, perf: bool = True) -> list[str]:
    col = 0 if api == "v2.2" else 1
    flags = []
    for knob, macros in KNOBS.items():
        if knob not in cfg or cfg[knob] is None:
            continue
        v = cfg[knob]
        if isinstance(v, bool):
            if v:
                flags.append(f"-D{macros[col]}")
        elif knob != "l2_size" or cfg.get("l2"):
            flags.append(f"-D{macros[col]}={int(v)}")
    if perf:
        flags.append("-DPERF_ENABLE")
    return flags


def config_id(cfg: dict) -> str:
    """Configurations that build the same SimX share an id (the L2 size counts only with the L2 on; a build with the
    local-memory fix has its own id, so a cached build without it is never taken for one with it)."""
    key = {k: cfg.get(k) for k in KNOBS if k != "l2_size" or cfg.get("l2")}
    return sha256_obj({**key, "patches": [LMEM_FIX["id"]]} if lmem_fix(cfg) else key)[:10]


# The project's fix of SimX's local-memory addressing (issue 43). Upstream v2.x `sim/simx/local_mem.cpp`
# `to_local_addr` keeps log2(capacity / line_size) low bits of a *byte* address, so only capacity / 4 bytes stay
# distinct (16 KB declared, 4 KB usable: the rest aliases onto the first quarter; the probe measures it). The fix keeps
# log2(capacity) bits (LMEM_BASE_ADDR is capacity-aligned up to LMEM_LOG_SIZE 16). Applied to a private copy of the
# simulator sources of each configuration's build (the installation's tree is not modified); build.json records it.
LMEM_FIX = {
    "id": "lmem-addr-v1",
    "file": "sim/simx/local_mem.cpp",
    "why": "to_local_addr keeps log2(capacity/line_size) bits of a byte address: only a quarter of the local memory "
           "is distinct; keep log2(capacity) bits",
    "pattern": re.compile(r"uint64_t to_local_addr\(uint64_t addr\) \{\s*uint32_t total_lines = config_\.capacity / "
                          r"config_\.line_size;\s*uint32_t line_bits = log2ceil\(total_lines\);\s*uint32_t offset = "
                          r"bit_getw\(addr, 0, line_bits-1\);\s*return offset;\s*\}"),
    "replacement": ("uint64_t to_local_addr(uint64_t addr) {\n"
                    "\t\t// vxsynth lmem-addr-v1: keep log2(capacity) bits of the byte address (upstream kept\n"
                    "\t\t// log2(capacity / line_size): only a quarter of the local memory was distinct)\n"
                    "\t\tuint32_t addr_bits = log2ceil(config_.capacity);\n"
                    "\t\treturn bit_getw(addr, 0, addr_bits-1);\n\t}"),
}


def lmem_fix(cfg: dict) -> bool:
    """Whether this configuration's SimX is built with the local-memory fix (`lmem_fix`, default on)."""
    return bool(cfg.get("lmem_fix", True))


def patched_sources(inst: Installation, cfg: dict, dest: Path) -> tuple[Path | None, list[dict]]:
    """The simulator sources this configuration's SimX is built from, and what was patched (the build's provenance).
    With the fix on, `dest`/simx-src holds links to every file of the installation's sim/simx but local_mem.cpp,
    which is a patched copy; (None, record) when the fix is off or its code is not the one it fixes (then the record
    says so and the installation's sources are built as they are)."""
    src = next((r / "sim" / "simx" for r in (inst.source, inst.root) if r and (r / "sim/simx/local_mem.cpp").exists()), None)
    rec = {"id": LMEM_FIX["id"], "file": LMEM_FIX["file"], "why": LMEM_FIX["why"]}
    if not lmem_fix(cfg):
        return None, [{**rec, "applied": False, "reason": "lmem_fix is off in this configuration"}]
    if src is None:
        return None, [{**rec, "applied": False, "reason": "no sim/simx/local_mem.cpp in the installation"}]
    text = (src / "local_mem.cpp").read_text()
    new, n = LMEM_FIX["pattern"].subn(LMEM_FIX["replacement"], text)
    if n != 1:
        return None, [{**rec, "applied": False, "source": str(src / "local_mem.cpp"), "sha256_before": _sha(text),
                       "reason": "to_local_addr is not the code the fix is for (another SimX version): built unpatched"}]
    out = dest / "simx-src"
    out.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        if f.name != "local_mem.cpp":
            (out / f.name).symlink_to(f.resolve())
    (out / "local_mem.cpp").write_text(new)
    return out, [{**rec, "applied": True, "source": str(src / "local_mem.cpp"), "sha256_before": _sha(text),
                  "sha256_after": _sha(new)}]


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def driver_build(inst: Installation, cfg: dict, dest: Path, sim_src: Path | None = None) -> list[list[str]]:
    """Build the SimX simulator library and driver for this configuration into `dest` (their own folder, so every
    configuration is a real rebuild and nothing in the tree is overwritten). `sim_src`: simulator sources to build
    libsimx.so from instead of the installation's (`patched_sources`); the driver then links that library."""
    flags = " ".join(config_flags(cfg, inst.api))
    rt = "runtime/simx" if inst.api == "v2.2" else "sw/runtime/simx"
    where = next((r / rt for r in (inst.root, inst.source) if r and (r / rt / "Makefile").exists()), inst.root / rt)
    sim = []
    if sim_src is not None:
        mk = next((r / "sim" / "simx" for r in (inst.root, inst.source) if r and (r / "sim/simx/Makefile").exists()),
                  inst.root / "sim" / "simx")
        sim = [["make", "-C", str(mk), f"DESTDIR={dest}", f"SRC_DIR={sim_src}", f"CONFIGS={flags}", "PERF=1",
                f"{dest}/libsimx.so"]]
    return [*sim, ["make", "-C", str(where), f"DESTDIR={dest}", f"CONFIGS={flags}", "PERF=1"]]


def kernel_build(inst: Installation, cfg: dict, source: Path, elf: Path, vxbin: Path) -> list[list[str]]:
    """Compile + link a candidate kernel (C) for the Vortex ISA and wrap it as .vxbin."""
    common = ["-O3", "-mcmodel=medany", "-fno-exceptions", "-nostartfiles", "-nostdlib", "-fdata-sections",
              "-ffunction-sections", f"-I{inst.path('vx_spawn.h').parent}", f"-I{inst.path('VX_config.h').parent}",
              f"-I{Path(__file__).parent.parent / 'targets' / 'vortex_api'}",
              "-DXLEN_32", "-DNDEBUG", *config_flags(cfg, inst.api)]
    if inst.compiler_kind == "llvm-vortex":
        feature = "+vortex" if inst.api == "v2.2" else "+xvortex"
        td = inst.tooldir
        cc = [*inst.compiler, "--target=riscv32-unknown-elf", f"--sysroot={td / 'riscv32-gnu-toolchain' / 'riscv32-unknown-elf'}",
              f"--gcc-toolchain={td / 'riscv32-gnu-toolchain'}", "-Xclang", "-target-feature", "-Xclang", feature,
              "-march=rv32imaf", "-mabi=ilp32f"]
        libs = [str(inst.path("libvortex.a")), f"-L{td / 'libc32' / 'lib'}", "-lm", "-lc",
                str(td / "libcrt32" / "lib" / "baremetal" / "libclang_rt.builtins-riscv32.a")]
    else:
        cc = [*inst.compiler, "-march=rv32imf", "-mabi=ilp32f"]
        libs = [str(inst.path("libvortex.a")), "-lm", "-lc", "-lgcc"]
        if inst.api == "v3":
            common.append("-D__VORTEX__")
    link = ["-Wl,-Bstatic,--gc-sections,-T," + str(inst.path("link32.ld")) + ",--defsym=STARTUP_ADDR=0x80000000"]
    return [[*cc, *common, str(source), *link, *libs, "-o", str(elf)],
            ["python3", str(inst.path("vxbin.py")), str(elf), str(vxbin)]]


def host_build(inst: Installation, driver: Path, exe: Path) -> list[str]:
    return ["gcc", "-std=c11", "-O2", f"-I{inst.path('vortex.h').parent}", f"-I{driver.parent}", str(driver),
            f"-L{inst.path('libvortex.so').parent}", "-lvortex", "-lm", "-o", str(exe)]


def run_env(inst: Installation, driver_dir: Path, perf_class: int) -> dict:
    return {"LD_LIBRARY_PATH": f"{driver_dir}:{inst.path('libvortex.so').parent}", "VORTEX_DRIVER": "simx",
            "VORTEX_PROFILING": str(perf_class)}


# Counter classes to collect, one run each (the simulation is deterministic, runs are merged).
PERF_CLASSES = {"v2.2": {"core": 1, "mem": 2}, "v3": {"core": 1, "dcache": 4, "l2cache": 5, "mem": 7, "tcu": 11}}


def cycle_windows(blocks: int, cycles_per_block: float, budget: float, seed: int | None = None,
                  together: int = 1) -> list[tuple[int, int]]:
    """Ranges of linear block ids whose predicted simulated cycles stay within `budget`: the whole grid, or
    first/middle/last ranges; when not even three blocks fit, one block (drawn with a seed, as in the host
    executor's checks; else the last block, which holds the partial edge tiles). `together`: blocks that must run
    in one launch (to fill every resident slot of the largest configuration of a parallelism sweep): a window of
    that many middle blocks when the budget allows fewer."""
    from vxsynth.targets.vortex_host import windows

    fit = int(budget // max(cycles_per_block, 1.0))
    if together > 1 and fit < 3 * together and blocks > together:
        start = max(0, min(blocks - together, blocks // 2 - together // 2))
        return [(start, together)]
    if fit >= 3 or fit >= blocks:
        return windows(blocks, max(fit, 1), seed)
    if seed is None:
        return [(blocks - 1, 1)]
    return [(int(np.random.default_rng(seed).integers(0, blocks)), 1)]
