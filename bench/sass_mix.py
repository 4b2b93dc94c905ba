"""Static SASS instruction mix of saved CUDA candidates and of their strategies with knobs changed (no GPU needed:
nvcc -cubin for sm_90a, then cuobjdump -sass). Counts each opcode once per appearance in the code, not per execution,
and the instructions of one iteration of the K loop (the innermost loop that issues tensor-core MMAs), with how
many of them the FMA pipe executes, and the registers per thread ptxas gave the kernel.

    python bench/sass_mix.py DIR [DIR ...] [--emit] [--vary KNOB=VALUE[,KNOB=VALUE]] ... [--top N]
      DIR = data/suite/<slice>/candidates/rNNN, or a suite folder (every finished slice's final round)
      --emit: also the saved strategy emitted by today's code (what an emitter change did to the same pair)
    CUOBJDUMP (environment): the cuobjdump to use (default: the one on PATH, else the one torch's triton bundles)
"""

import argparse
import collections
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, ".")
from bench.emit_speed import _candidates, _knobs  # noqa: E402
from vxsynth.kernels.candidate import make  # noqa: E402
from vxsynth.kernels.problem import from_dict  # noqa: E402
from vxsynth.kernels.strategy import Strategy  # noqa: E402
from vxsynth.targets.cuda import nvcc  # noqa: E402

KEY = ("HMMA", "LDSM", "LD", "LDS", "LDG", "LDGSTS")    # tensor math and the loads that feed it (LD: generic)
FMA_PIPE = ("FFMA", "FADD", "FMUL", "IMAD", "IMUL")    # what ncu's FMA pipe (sm__pipe_fma_cycles_active) executes
_INSTR = re.compile(r"^\s+/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P[0-9T]\s+)?([A-Z0-9_]+)", re.M)
_AT = re.compile(r"^\s+/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P[0-9T]\s+)?([A-Z0-9_]+)([^;]*);", re.M)


def k_loop(sass: str) -> list[tuple[str, str]] | None:
    """The instructions (opcode, operands) of the innermost loop (a backward branch and its target) that issues
    tensor-core MMAs (HMMA, HGMMA), or None."""
    code = [(int(a, 16), op, rest) for a, op, rest in _AT.findall(sass)]
    loops = []
    for a, op, rest in code:
        if op == "BRA" and (m := re.search(r"0x([0-9a-f]+)", rest)) and int(m[1], 16) < a:
            body = [(o, r) for b, o, r in code if int(m[1], 16) <= b <= a]
            if any(o in ("HMMA", "HGMMA") for o, _ in body):
                loops.append(body)
    return min(loops, key=len, default=None)


def load_use(loop: list[tuple[str, str]]) -> list[int]:
    """For each ldmatrix (LDSM) of a K loop: the instructions issued after it before the first that reads one of
    the registers it writes (what hides its latency within the warp), up to the loop's end."""
    out = []
    for i, (op, rest) in enumerate(loop):
        if op != "LDSM" or not (m := re.search(r"\sR(\d+),", rest)):
            continue
        n = int(x[1]) if (x := re.search(r"\.(\d)\s", rest)) else 1      # .x4: four registers from R(m)
        regs = {f"R{int(m[1]) + j}" for j in range(n)}
        use = next((j for j, (_, r) in enumerate(loop[i + 1:]) if regs & set(re.findall(r"R\d+", r.split(",", 1)[-1]))),
                   len(loop) - i - 1)
        out.append(use)
    return out


def cuobjdump() -> str | None:
    """CUOBJDUMP, the cuobjdump on PATH, or the one triton (installed with torch) bundles."""
    if os.environ.get("CUOBJDUMP"):
        return os.environ["CUOBJDUMP"]
    if shutil.which("cuobjdump"):
        return "cuobjdump"
    try:
        import triton
    except ImportError:
        return None
    bundled = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    return str(bundled) if bundled.is_file() else None


def mix(src: str, work: Path, tag: str) -> tuple[collections.Counter, list[tuple[str, str]] | None, str]:
    """Opcode counts, the K loop's instructions (`k_loop`) and the registers per thread of one CUDA source."""
    cu, cubin = work / f"{tag}.cu", work / f"{tag}.cubin"
    cu.write_text(src)
    subprocess.run([nvcc(), "-arch=sm_90a", "-cubin", "-o", str(cubin), str(cu)], check=True, capture_output=True)
    sass = subprocess.run([cuobjdump(), "-sass", str(cubin)], check=True,
                          capture_output=True, text=True).stdout
    res = subprocess.run([cuobjdump(), "-res-usage", str(cubin)], capture_output=True, text=True).stdout
    regs = m[1] if (m := re.search(r"REG:(\d+)", res)) else "?"
    return collections.Counter(_INSTR.findall(sass)), k_loop(sass), regs


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("dirs", nargs="+")
    ap.add_argument("--emit", action="store_true")
    ap.add_argument("--vary", action="append", default=[])
    ap.add_argument("--top", type=int, default=8)
    a = ap.parse_args(argv)
    if nvcc() is None or cuobjdump() is None:
        print("sass_mix: needs nvcc and cuobjdump on PATH (or CUOBJDUMP=/path/to/cuobjdump)", file=sys.stderr)
        return 2
    dirs = [d for x in a.dirs for d in _candidates(Path(x))]
    if not dirs:
        print(f"sass_mix: no candidate folders (kernel.cu + candidate.json) or finished slices under {' '.join(a.dirs)}",
              file=sys.stderr)
        return 2
    for d in dirs:
        saved = json.loads((d / "candidate.json").read_text())
        problem, strategy = from_dict(saved["problem"]), Strategy.from_dict(saved["strategy"])
        with tempfile.TemporaryDirectory() as tmp:
            rows = [("saved", mix((d / "kernel.cu").read_text(), Path(tmp), "saved"))]
            if a.emit:
                rows.append(("emitted today", mix(make(problem, strategy, saved["precision"]).cuda_source, Path(tmp), "emit")))
            for i, v in enumerate(a.vary):
                try:
                    c = make(problem, strategy.with_(**_knobs(v)), saved["precision"])
                except ValueError as e:                   # not a valid strategy for this slice
                    rows.append((v, str(e)))
                    continue
                rows.append((v, mix(c.cuda_source, Path(tmp), f"vary{i}")))
        print(f"{d.parent.parent.name} {d.name}")
        for name, m in rows:
            if isinstance(m, str):
                print(f"  {name:24s} {m}")
                continue
            m, loop, regs = m
            key = " ".join(f"{op} {m[op]}" for op in KEY + ("HGMMA",))
            top = ", ".join(f"{op} {n}" for op, n in m.most_common(a.top))
            ops = [o for o, _ in loop or []]
            dist = sorted(load_use(loop or []))
            per = (f"K loop {len(ops):4d} per iteration ({sum(o in FMA_PIPE for o in ops)} on the FMA pipe"
                   + (f", ldmatrix to first use {dist[0]}-{dist[-1]} instructions, median {dist[len(dist) // 2]}"
                      if dist else "") + ")" if loop else "K loop    - (no MMA loop)")
            print(f"  {name:24s} {regs} registers, {sum(m.values()):5d} instructions, {per}; {key}; most: {top}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
