"""What one SimX check of a real slice costs, and how well the budget model predicts it.

Per slice: the final strategy of its committed H200 reconstruction (else the default strategy), generated for this
SimX's measured local memory; check 2 on SimX (4 input cases, the default cycle budget, windows drawn per case),
then one counters run (core + mem classes). Prints, per slice, the windows and covered fraction, instructions and
cycles per block measured vs predicted (`vxsynth.simx.executor`), wall seconds per window and for the whole check.
Needs a built SimX (VORTEX_HOME, TOOLDIR).

usage: python bench/simx_cost.py [--budget CYCLES] SLICE_PREFIX... > bench/results/simx_cost.txt
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from vxsynth.checks import run as checks  # noqa: E402
from vxsynth.kernels import tensors as T  # noqa: E402
from vxsynth.kernels.candidate import make  # noqa: E402
from vxsynth.kernels.strategy import Strategy  # noqa: E402
from vxsynth.reconstruct.setup import records_in  # noqa: E402
from vxsynth.simx.executor import SimxExecutor, cycles_per_block, instrs_per_block, measured_per_block  # noqa: E402
from vxsynth.simx.install import detect  # noqa: E402
from vxsynth.targets.vortex_host import lmem_per_block  # noqa: E402

RECORDED = ROOT / "data" / "recorded" / "h200" / "reconstruct"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("slices", nargs="+")
    ap.add_argument("--budget", type=float, default=None, help="cycle budget per run (default: conf/simx)")
    a = ap.parse_args()
    conf = yaml.safe_load((ROOT / "conf" / "simx" / "default.yaml").read_text())
    budget = a.budget or float(conf["cycle_budget"])
    tol = yaml.safe_load((ROOT / "conf" / "precision" / "default.yaml").read_text())
    ex = SimxExecutor(detect(), conf["config"], ROOT / "scratch" / "simx-cache", budget, 1800)
    lm = ex.local_memory()
    print(f"# SimX {ex.inst.api} at {ex.inst.root}; config {conf['config']}; cycle budget {budget:.3g}; local memory "
          f"{lm['usable']} of {lm['declared']} B usable (probe)")
    print(f"# command: python bench/simx_cost.py {' '.join(sys.argv[1:])}")
    ratios = {"instrs": [], "cycles": []}
    for rec in records_in(ROOT / "data" / "slices", a.slices):
        sid = rec.slice_id
        res = RECORDED / sid / "result.json"
        s = Strategy.from_dict(json.loads(res.read_text())["final"]["strategy"]) if res.exists() else Strategy()
        c = make(rec.problem, s, rec.precision, lmem_per_block(s.threads, ex.vortex_config()),
                 drop_staging=True)
        t0 = time.perf_counter()
        chk = checks.run(c, sid, "cost", checks.CheckEnv(ex, tol), ROOT / "scratch" / "simx-cost" / sid, None)["vortex_ref"]
        t_check = time.perf_counter() - t0
        r = ex.run(c, T.vortex_inputs(c.problem, c.precision, T.make_inputs(c.problem, 0)),
                   ROOT / "scratch" / "simx-cost" / sid / "counters", counters=True)
        if not r.ok:
            print(f"{sid}: counters run failed: {r.error[:300]}")
            continue
        n = sum(x["blocks"] for x in r.counters["windows"])
        mi, mc = measured_per_block(r.counters["windows"])
        pi, pc = instrs_per_block(c), cycles_per_block(c)
        ratios["instrs"].append(mi / pi)
        ratios["cycles"].append(mc / pc)
        print(f"{sid}  strategy {'recorded final' if res.exists() else 'default'} {json.dumps(s.to_dict())}")
        print(f"  blocks {c.meta['blocks']}, windows {r.blocks} (covered fraction {r.covered_fraction:.3f}); "
              f"vortex differs: {json.dumps(c.meta['vortex_differs'])}")
        print(f"  per block: instrs {mi:.4g} measured / {pi:.4g} predicted = {mi / pi:.2f}; cycles {mc:.4g} / {pc:.4g} "
              f"= {mc / pc:.2f}; IPC {mi / mc:.2f}")
        print(f"  counters run (2 classes): {r.wall_s:.1f} s for {n} blocks = {r.wall_s / 2 / n:.1f} s per block per run; "
              f"{r.wall_s / 2 / (mc * n / 1e6):.2f} s per million cycles")
        print(f"  check 2 on SimX: {chk.verdict} ({chk.reason[:120]}), {len(chk.cases)} cases in {t_check:.1f} s, "
              f"covered per case {[round(e.get('covered_fraction', 0), 3) for e in chk.cases]}")
    for k, v in ratios.items():
        if v:
            print(f"# {k} measured/predicted: median {statistics.median(v):.2f}, range {min(v):.2f}-{max(v):.2f} "
                  f"(within 2x: {sum(0.5 <= x <= 2 for x in v)} of {len(v)})")


if __name__ == "__main__":
    main()
