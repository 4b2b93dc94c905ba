"""Reconstruct real slices and print, per slice: initial and final D, rounds, kept/reverted/rejected/crashed counts,
per-component gaps before and after, and wall time per round (the slice's wall, reference measurement included, over
its rounds) with each round's generate, compile, checks and ncu seconds (in a batch these overlap: they run in parallel).

usage: python bench/reconstruct.py CONFIG.json SLICES_DIR OUT_DIR [SLICE_ID_OR_PREFIX ...]
CONFIG.json is the composed config (`vxsynth config platform=h200 > cfg.json`). Runs bare (no Prefect/Hydra).
"""

import json
import sys
import time
from pathlib import Path

from vxsynth.metrics.components import COMPONENTS
from vxsynth.reconstruct.setup import loop_env, records_in, run_slice


def main() -> None:
    cfg = json.loads(Path(sys.argv[1]).read_text())
    out = Path(sys.argv[3])
    env, why = loop_env(cfg, cfg["platform"], out / "work")
    print(f"GPU steps: {'run' if why is None else 'skipped: ' + why}", flush=True)
    results = []
    for rec in records_in(Path(sys.argv[2]), sys.argv[4:] or None):
        t = time.perf_counter()
        res = run_slice(cfg, rec, out / rec.slice_id, env=env, log=lambda s: print(s, flush=True)).to_dict()
        res["bench_wall_s"] = time.perf_counter() - t
        results.append(res)
    print("\nslice                                     D initial  D final  rounds  kept rev rej crash  s/round wall (per round: gen/comp/chk/ncu)")
    for r in results:
        d = r["decisions"]
        n = max(1, r["rounds"] + 1)
        ts = r["time_s"]
        print(f"{r['slice_id'][:40]:<40} {r['initial']['D'] or float('nan'):>9.4f} {r['final']['D'] or float('nan'):>8.4f} "
              f"{r['rounds']:>6} {d.get('kept', 0):>5} {d.get('reverted', 0):>3} {d.get('rejected', 0):>3} {d.get('crashed', 0):>5}  "
              f"{r['bench_wall_s'] / n:5.1f} ({ts['t_generate_s'] / n:.2f}/{ts['t_compile_s'] / n:.1f}/{ts['t_checks_s'] / n:.1f}/{ts['t_measure_s'] / n:.1f})")
    for r in results:
        print(f"\n{r['slice_id']}: reference {r['reference_kernel'][:80]}")
        print(f"  {'component':<20}{'reference':>12}{'initial':>12}{'final':>12}{'gap before':>12}{'gap after':>12}")
        for c in COMPONENTS:
            v = [r["reference"].get(c), r["initial"]["values"].get(c), r["final"]["values"].get(c)]
            gb, ga = r["initial"]["gaps"].get(c), r["final"]["gaps"].get(c)
            fmt = lambda x: f"{x:>12.4g}" if x is not None and x == x else f"{'nan':>12}"
            print(f"  {c:<20}{fmt(v[0])}{fmt(v[1])}{fmt(v[2])}{fmt(gb)}{fmt(ga)}")
    (out / "bench_results.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
