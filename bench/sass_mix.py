"""Static SASS instruction mix of saved CUDA candidates and of their strategies with knobs changed (no GPU needed:
nvcc -cubin for sm_90a, then cuobjdump -sass). Counts each opcode once per appearance in the code, not per execution.

    python bench/sass_mix.py DIR [DIR ...] [--vary KNOB=VALUE[,KNOB=VALUE]] ... [--top N]
      DIR = data/suite/<slice>/candidates/rNNN, or a suite folder (every finished slice's final round)
    CUOBJDUMP (environment): the cuobjdump to use (default: the one on PATH)
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
_INSTR = re.compile(r"^\s+/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P[0-9T]\s+)?([A-Z0-9_]+)", re.M)


def mix(src: str, work: Path, tag: str) -> collections.Counter:
    cu, cubin = work / f"{tag}.cu", work / f"{tag}.cubin"
    cu.write_text(src)
    subprocess.run([nvcc(), "-arch=sm_90a", "-cubin", "-o", str(cubin), str(cu)], check=True, capture_output=True)
    sass = subprocess.run([os.environ.get("CUOBJDUMP", "cuobjdump"), "-sass", str(cubin)], check=True,
                          capture_output=True, text=True).stdout
    return collections.Counter(_INSTR.findall(sass))


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("dirs", nargs="+")
    ap.add_argument("--vary", action="append", default=[])
    ap.add_argument("--top", type=int, default=8)
    a = ap.parse_args(argv)
    tool = os.environ.get("CUOBJDUMP", "cuobjdump")
    if nvcc() is None or shutil.which(tool) is None:
        print(f"sass_mix: needs nvcc and {tool} on PATH (or CUOBJDUMP=/path/to/cuobjdump)", file=sys.stderr)
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
            key = " ".join(f"{op} {m[op]}" for op in KEY)
            top = ", ".join(f"{op} {n}" for op, n in m.most_common(a.top))
            print(f"  {name:24s} {sum(m.values()):5d} instructions; {key}; most: {top}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
