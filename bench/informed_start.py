"""Structure-informed start vs the default start on real slices, and where the existing loop takes the informed
start with a fixed budget. Prints, per slice: D of the default start, D of the informed start, D final, rounds,
the knobs the informed start took and the three largest remaining gaps.

usage: python bench/informed_start.py CONFIG.json SLICES_DIR OUT_DIR SLICE_ID_OR_PREFIX ...
CONFIG.json is the composed config (`vxsynth config platform=h200 > cfg.json`); `loop.rounds` / `loop.wall_s` there
are the budget of the informed run, `loop.initial` knob overrides apply to the informed start alone (a variant of it).
Runs bare (no Prefect/Hydra). The reference is measured once per slice; a second run into the same OUT_DIR with
another `loop.initial` measures only its informed start (the reference and the default start are resumed).
"""

import dataclasses
import json
import shutil
import statistics
import sys
import time
from pathlib import Path

from vxsynth.reconstruct.setup import loop_config, loop_env, records_in, run_slice


def _d(x):
    return float("nan") if x is None else x


def main() -> None:
    cfg = json.loads(Path(sys.argv[1]).read_text())
    out = Path(sys.argv[3])
    env, why = loop_env(cfg, cfg["platform"], out / "work")
    print(f"GPU steps: {'run' if why is None else 'skipped: ' + why}", flush=True)
    informed_cfg = loop_config(cfg)
    default_cfg = dataclasses.replace(informed_cfg, rounds=0, start={}, initial={})   # `initial` overrides the informed start only
    rows = []
    for rec in records_in(Path(sys.argv[2]), sys.argv[4:]):
        sid = rec.slice_id
        t = time.perf_counter()
        res_i = run_slice(cfg, rec, out / "informed" / sid, env=env, loop=informed_cfg, log=lambda s: print(s, flush=True)).to_dict()
        t_i = time.perf_counter() - t
        (out / "default" / sid).mkdir(parents=True, exist_ok=True)
        if (out / "informed" / sid / "reference.json").exists():   # the same reference measurement for both starts
            shutil.copy(out / "informed" / sid / "reference.json", out / "default" / sid / "reference.json")
        res_d = run_slice(cfg, rec, out / "default" / sid, env=env, loop=default_cfg, log=lambda s: print(s, flush=True)).to_dict()
        gaps = sorted(((c, g) for c, g in res_i["final"]["gaps"].items() if g == g), key=lambda cg: -abs(cg[1]))[:3]
        rows.append({"slice": sid, "D_default": _d(res_d["initial"]["D"]), "D_informed": _d(res_i["initial"]["D"]),
                     "D_final": _d(res_i["final"]["D"]), "rounds": res_i["rounds"], "kept": res_i["decisions"].get("kept", 0),
                     "checks_final": [res_i["final"]["check1"], res_i["final"]["check2"]], "wall_s": round(t_i, 1),
                     "start": {k["knob"]: k["value"] for k in res_i["start"]["knobs"]} if res_i.get("start") else {},
                     "largest_gaps": [[c, round(g, 4)] for c, g in gaps]})
    print(f"\n{'slice':<44}{'D default':>10}{'D informed':>11}{'D final':>9}{'rounds':>7}{'kept':>5}  checks (final)")
    for r in rows:
        print(f"{r['slice'][:43]:<44}{r['D_default']:>10.4f}{r['D_informed']:>11.4f}{r['D_final']:>9.4f}{r['rounds']:>7}"
              f"{r['kept']:>5}  {r['checks_final']}")
    for r in rows:
        print(f"  {r['slice'][:43]}: largest remaining gaps {r['largest_gaps']}; start {r['start']}")
    measured = [r for r in rows if r["D_informed"] == r["D_informed"] and r["D_default"] == r["D_default"]]
    if measured:
        print(f"\nslices measured: {len(measured)}; informed below default on {sum(r['D_informed'] < r['D_default'] for r in measured)}; "
              f"median D default {statistics.median(r['D_default'] for r in measured):.4f}, informed "
              f"{statistics.median(r['D_informed'] for r in measured):.4f}, final {statistics.median(r['D_final'] for r in measured):.4f}")
    (out / "informed_start.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
