"""Which components put one MMA form's D above another's: the speed probe's ncu-measured finalists of each slice of a
rebuild (`speed_probe.json`, which keeps each finalist's signature), grouped by the probe's own forms (`speed.form`:
MMA form x load path, e.g. wgmma+tma, tile+cp.async) with their instruction family (HGMMA, HMMA, FFMA). Per slice and form, the finalist nearest the reference
(lowest D): its time against the reference's (ncu), D, and its signed gap per component (signature.distance's
normalisation: candidate - reference, rates in fractions, bandwidth and intensity relative); then, per reference MMA
family, the median gap per component of each form's nearest finalist, and the component that separates the forms
most. Reads the rebuild's folders only (CPU).

usage: python bench/probe_signatures.py RUN/cuda_first
"""

import json
import math
import statistics
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from vxsynth.kernels.strategy import Strategy  # noqa: E402
from vxsynth.metrics.components import COMPONENTS  # noqa: E402
from vxsynth.reconstruct.speed import form as probe_form, mma_family  # noqa: E402
from vxsynth.signature.distance import signed_gap  # noqa: E402


def form(s: Strategy) -> str:
    """'HMMA tile+cp.async': the instruction family and the probe's form."""
    return f"{mma_family(s)} {'+'.join(probe_form(s))}"


def nearest_by_form(probe: dict, reference: dict) -> dict[str, dict]:
    """form -> {strategy, ratio, D, gaps} of the finalist nearest the reference among those measured with ncu."""
    out: dict[str, dict] = {}
    for v in probe["variants"]:
        sig = v.get("signature")
        if not sig or v.get("D") is None:
            continue
        s = Strategy.from_dict(v["strategy"])
        gaps = {c: signed_gap(c, sig["values"][c], reference[c]) for c in COMPONENTS
                if sig["values"].get(c) is not None and reference.get(c) is not None}
        gaps = {c: g for c, g in gaps.items() if not math.isnan(g)}       # unmeasurable on either side
        row = {"strategy": s, "ratio": v.get("ncu_ratio"), "D": v["D"], "gaps": gaps}
        if form(s) not in out or v["D"] < out[form(s)]["D"]:
            out[form(s)] = row
    return out


def main(run: Path) -> None:
    probes = sorted(run.glob("*/speed_probe.json"))
    if not probes:
        sys.exit(f"probe_signatures: no */speed_probe.json under {run}: name a rebuild's cuda_first folder (unpack its outputs.tgz)")
    shown = [c for c in COMPONENTS if c != "gld_coalescing"]
    head = f"{'slice / form':<44} {'ref':>5} {'t/ref':>5} {'D':>6} " + " ".join(f"{c[:9]:>9}" for c in shown)
    print(f"# python bench/probe_signatures.py {run}\n# signed gap per component of each form's nearest finalist (candidate - reference)\n{head}")
    by_family: dict[str, dict[str, list[dict]]] = defaultdict(lambda: defaultdict(list))
    kept = 0
    for path in probes:
        probe = json.loads(path.read_text())
        ref_path = path.with_name("reference.json")
        reference = json.loads(ref_path.read_text()).get("values") or {} if ref_path.exists() else {}
        rows = nearest_by_form(probe, reference)
        if not rows:
            continue          # a probe written before finalists kept their signatures, or no finalist measured
        kept += 1
        family = probe.get("reference_family") or "none"
        print(path.parent.name)
        for f, r in sorted(rows.items(), key=lambda kv: kv[1]["D"]):
            by_family[family][f].append(r)
            ratio = f"{r['ratio']:.2f}" if r["ratio"] else "  n/a"
            print(f"  {f:<42} {family:>5} {ratio:>5} {r['D']:>6.3f} "
                  + " ".join(f"{r['gaps'][c]:>+9.3f}" if c in r["gaps"] else f"{'nan':>9}" for c in shown))
    if not kept:
        sys.exit(f"probe_signatures: no probe under {run} kept its finalists' signatures (rebuilds before 5e45b55 did not)")
    print(f"# median signed gap of each form's nearest finalist, per reference family ({kept} slices)")
    for family, forms in sorted(by_family.items()):
        medians = {f: {c: statistics.median(r["gaps"][c] for r in rs if c in r["gaps"])
                       for c in shown if any(c in r["gaps"] for r in rs)} for f, rs in forms.items()}
        for f, m in sorted(medians.items()):
            d = statistics.median(r["D"] for r in forms[f])
            print(f"  {family:>5} {f:<14} slices {len(forms[f]):>2}  D {d:.3f}  "
                  + " ".join(f"{c[:9]}={m[c]:+.3f}" for c in shown if c in m))
        if len(medians) > 1:
            common = set.intersection(*(set(m) for m in medians.values()))
            spread = {c: max(m[c] for m in medians.values()) - min(m[c] for m in medians.values()) for c in common}
            c = max(spread, key=spread.get)
            print(f"  {family:>5} the forms differ most in {c} (medians {spread[c]:.3f} apart)")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__.strip().splitlines()[-1])
    main(Path(sys.argv[1]))
