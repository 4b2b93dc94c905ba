"""The SimX cost model (`vxsynth.simx.executor`) against the real-SimX runs recorded in
tests/fixtures/simx/cost_per_block.json (real slices, the small problems of bench/simx_fit.py, then the suite's final
pairs checked on SimX): measured / predicted instructions and cycles per block, and the dcache crowding of each. CPU
only.

usage: python bench/simx_model.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from vxsynth.kernels.candidate import make  # noqa: E402
from vxsynth.kernels.problem import from_dict  # noqa: E402
from vxsynth.kernels.strategy import Strategy  # noqa: E402
from vxsynth.reconstruct.setup import records_in  # noqa: E402
from vxsynth.simx.executor import crowding, cycles_per_block, instrs_per_block  # noqa: E402
from vxsynth.targets.vortex_host import VortexConfig, lmem_per_block  # noqa: E402


def main() -> None:
    fx = json.loads((ROOT / "tests" / "fixtures" / "simx" / "cost_per_block.json").read_text())
    cfg = VortexConfig(cores=1, warps=16, threads=16, local_mem=4096)
    print(f"# {fx['what']}\n# command: python bench/simx_model.py")
    for r in fx["runs"]:
        (rec,) = records_in(ROOT / "data" / "slices", [r["slice"]])
        res = ROOT / "data" / "recorded" / "h200" / "reconstruct" / r["slice"] / "result.json"
        s = Strategy.from_dict(json.loads(res.read_text())["final"]["strategy"]) if r["strategy"] == "final" else Strategy()
        c = make(rec.problem, s, rec.precision, lmem_per_block(s.threads, cfg), drop_staging=True)
        print(f"{r['slice']:<46} {r['strategy']:<8} instrs {r['instrs'] / instrs_per_block(c):5.2f}  "
              f"cycles {r['cycles'] / cycles_per_block(c):5.2f}  (measured / predicted)")
    for r in fx["small"]:
        s = Strategy.from_dict(r["strategy"])
        c = make(from_dict(r["problem"]), s, r["precision"], lmem_per_block(s.threads, cfg), drop_staging=True)
        print(f"{r['from']:<46} {c.problem.kind:<8} instrs {r['instrs'] / instrs_per_block(c):5.2f}  "
              f"cycles {r['cycles'] / cycles_per_block(c):5.2f}  crowding {crowding(c):5.2f}")
    ratios = []
    for r in fx["suite"]:
        s = Strategy.from_dict(r["strategy"])
        c = make(from_dict(r["problem"]), s, r["precision"], lmem_per_block(s.threads, cfg), drop_staging=True)
        ratios.append(r["cycles"] / cycles_per_block(c))
        print(f"{r['slice']:<46} suite    instrs {r['instrs'] / instrs_per_block(c):5.2f}  "
              f"cycles {ratios[-1]:5.2f}  crowding {crowding(c):5.2f}")
    print(f"# suite: cycles measured / predicted {min(ratios):.2f}-{max(ratios):.2f}, "
          f"{sum(0.5 <= x <= 2 for x in ratios)} of {len(ratios)} within 2x")


if __name__ == "__main__":
    main()
