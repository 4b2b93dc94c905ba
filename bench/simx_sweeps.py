"""The SimX sweeps of a data folder (`vxsynth simx sweep` writes <dir>/<slice>/<sweep>.json), one line per slice and
sweep: the verdict (per block, over the windows every configuration shared), whether the swept candidate ran the pair's
staging and its Vortex local memory, the windows, the cycles per block of each configuration, check 2 on SimX and the
wall seconds of each configuration; then how many sweeps respond as expected, ran the pair, and shared their windows.

usage: python bench/simx_sweeps.py SIMX_DIR      e.g. data/recorded/simx
"""

import json
import sys
from pathlib import Path


def main(root: Path) -> None:
    sweeps = [json.loads(p.read_text()) for p in sorted(root.glob("*/*.json")) if p.name not in ("summary.json", "check.json")]
    for s in sweeps:
        rows = s.get("rows", [])
        cpb = ", ".join(f"{r['cycles_per_block'] / 1e6:.3f}" if r.get("cycles_per_block") else "-" for r in rows)
        wall = ", ".join(f"{w:.0f}" for w in s.get("cost", {}).get("wall_s_per_config", []))
        print(f"{s['slice_id']:<46} [{s['sweep']}] {s['verdict']}\n"
              f"    {'the pair' if s.get('runs_the_pair') else 'a variant'} ({s.get('vortex_local_mem_bytes')} B local memory,"
              f" kept {'+'.join(s.get('staging', {}).get('kept', [])) or 'no staging'}); windows {s.get('windows')};"
              f" Mcycles/block {cpb}; check 2 on SimX {s['check2']['verdict']}; wall per configuration {wall} s")
    responds = sum(bool(s.get("responds")) for s in sweeps)
    pair = sum(bool(s.get("runs_the_pair")) for s in sweeps)
    same = sum(len({json.dumps(r.get("windows")) for r in s.get("rows", [])}) <= 1 for s in sweeps)
    slices = len({s["slice_id"] for s in sweeps})
    print(f"\n{len(sweeps)} sweeps on {slices} slices: {responds} respond as expected, {pair} ran the pair's own staging, "
          f"{same} ran the same windows in every configuration")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
