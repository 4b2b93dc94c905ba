"""The SimX checks of a rebuild's final pairs (data/simx/<slice>/check.json), one line per slice: verdict, covered
fraction, blocks per case, cycles per block measured vs predicted, measured IPC (instructions per cycle; the cost
model takes 0.4-2.5, vxsynth/simx/executor.py), wall seconds of the check (its cases at once) vs
predicted, the reduction checked when it was shortened to fit simx.check_max_s, the probe's measured / predicted
cycles when one ran first (simx.probe_s); then the totals, how many checks took
at most --few seconds, and this host's SimX speed with the wall times the model's cycles predict at its median.

usage: python bench/simx_checks.py SIMX_DIR [--few 300]      e.g. scratch/fullsx/simx after
       vxsynth rebuild slicing.profiles=[data/recorded/h200] data_dir=scratch/fullsx simx.in_rebuild=true
"""

import argparse
import json
import statistics
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("simx_dir")
    ap.add_argument("--few", type=float, default=300.0, help="seconds that count as a few minutes")
    a = ap.parse_args()
    rows = [json.loads(p.read_text()) for p in sorted(Path(a.simx_dir).glob("*/check.json"))]
    print(f"{'slice':<46} {'verdict':<8} {'covered':>7} {'blocks':>6} {'Mcyc/blk meas':>13} {'pred':>6} {'wall s':>7} "
          f"{'pred s':>7} {'ipc':>5}  strategy")
    ran, walls, ratios, speeds, ipcs, probed = [], [], [], [], [], []
    for r in rows:
        if "cost" not in r:
            print(f"{r['slice_id'][:46]:<46} {r['verdict']:<8} {'':>7} {r.get('blocks', ''):>6} {'':>13} "
                  f"{r.get('cycles_per_block', 0) / 1e6:6.1f} {'':>7} {r.get('predicted_s', 0):7.0f} {'':>5}  {r['reason'][:90]}")
            continue
        c = r["cost"]
        cyc = c["cycles_per_block"]
        ran.append(r)
        walls.append(c["wall_s"])
        if cyc["measured"]:
            ratios.append(cyc["measured"] / cyc["predicted"])
        per_case = max(sum(k for _, k in e["vortex_windows"] or []) for e in r["cases"])
        cyc_runs = [e["vortex_cycles"] for e in r["cases"] if e.get("vortex_cycles")]
        ipc = sum(v["instrs"] for v in cyc_runs) / sum(v["cycles"] for v in cyc_runs) if cyc_runs else float("nan")
        ipcs += [ipc] if cyc_runs else []
        if c.get("s_per_million_cycles"):
            speeds.append((c["s_per_million_cycles"], per_case * cyc["predicted"] / 1e6, c["wall_s"]))
        print(f"{r['slice_id'][:46]:<46} {r['verdict']:<8} {r['covered_fraction']:7.3f} {per_case:>6} "
              f"{(cyc['measured'] or 0) / 1e6:13.1f} {cyc['predicted'] / 1e6:6.1f} {c['wall_s']:7.0f} {c['predicted_s']:7.0f} {ipc:5.2f}  "
              + (r["reason"][:90] if r["verdict"] != "pass" else
                 r["strategy_from"].split("/")[-2] if "/" in r["strategy_from"] else r["strategy_from"])
              + (f"  on {red['dim']} {red['checked']} of {red['full']}" if (red := r.get("reduction")) else "")
              + (f"  probe x{pr['ratio']:.2f}" + (f" on {pr['reduction']['dim']} {pr['reduction']['checked']}" if pr["reduction"] else "")
                 if (pr := r.get("probe")) and "ratio" in pr else ""))
        if (pr := r.get("probe")) and "ratio" in pr and cyc["measured"]:
            probed.append((cyc["measured"] / (cyc["predicted"] * pr["ratio"]), c["wall_s"] / c["predicted_s"], pr["wall_s"]))
    skipped = [r for r in rows if "cost" not in r]
    print(f"# {len(rows)} slices: {len(ran)} checked on SimX ({sum(r['verdict'] == 'pass' for r in ran)} pass), "
          f"{len(skipped)} not run ({', '.join(r['slice_id'][:30] for r in skipped) or 'none'})")
    if ran:
        print(f"# check wall time: median {statistics.median(walls):.0f} s, max {max(walls):.0f} s, total {sum(walls):.0f} s; "
              f"{sum(w <= a.few for w in walls)} of {len(ran)} within {a.few:.0f} s; covered fraction median "
              f"{statistics.median(r['covered_fraction'] for r in ran):.3f}")
    if short := [r for r in ran if r.get("reduction")]:
        print(f"# {len(short)} checked on a shortened reduction (one block of the full one predicted at "
              + ", ".join(f"{r['reduction']['full_predicted_s']:.0f}" for r in short) + " s), at "
              + ", ".join(f"{r['reduction']['checked'] / r['reduction']['full']:.2f}" for r in short) + " of it")
    if ratios:
        print(f"# cycles per block measured/predicted: {min(ratios):.2f}-{max(ratios):.2f} "
              f"({sum(0.5 <= x <= 2 for x in ratios)} of {len(ratios)} within 2x); measured IPC {min(ipcs):.2f}-{max(ipcs):.2f}")
    if probed:     # the probe's ratio applied to the model's cycles of what was checked
        cy, wa, ps = ([v[i] for v in probed] for i in range(3))
        print(f"# {len(probed)} probed first (one block, simx.probe_s): cycles per block measured / the model's x the probe's "
              f"ratio {min(cy):.2f}-{max(cy):.2f} ({sum(0.5 <= x <= 2 for x in cy)} of {len(cy)} within 2x); check wall "
              f"seconds measured / predicted after the probe {min(wa):.2f}-{max(wa):.2f} ({sum(0.5 <= x <= 2 for x in wa)} within 2x); "
              f"the probes took {min(ps):.0f}-{max(ps):.0f} s, {sum(ps):.0f} s in all")
    if speeds:     # what a check predicts once this host's speed is measured: the model's cycles at the median speed
        med = statistics.median(v for v, _, _ in speeds)
        at_med = [mcyc * med / wall for _, mcyc, wall in speeds if wall]
        print(f"# wall seconds per million cycles (one case): {min(v for v, _, _ in speeds):.2f}-{max(v for v, _, _ in speeds):.2f}, "
              f"median {med:.2f}; wall predicted from the model's cycles at that median / measured: "
              f"{min(at_med):.2f}-{max(at_med):.2f} ({sum(0.5 <= x <= 2 for x in at_med)} of {len(at_med)} within 2x)")


if __name__ == "__main__":
    main()
