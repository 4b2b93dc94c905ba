"""Wall time of the profiling stage per workload (both passes) and its overhead over one plain inference.

usage: python bench/profile_stage.py PLATFORM.json OUT_ROOT WORKLOAD.json [WORKLOAD.json ...]
The JSON files are composed configs (`vxsynth config --group platform platform=h200 > h200.json`, likewise
`--group workload workload=act`). Prints one row per workload.
"""

import json
import sys
from pathlib import Path

from vxsynth.profiling.stage import profile_workload
from vxsynth.workloads.spec import WorkloadSpec


def main() -> None:
    pcfg = json.loads(Path(sys.argv[1]).read_text())
    root = Path(sys.argv[2])
    rows = []
    for w in sys.argv[3:]:
        wcfg = json.loads(Path(w).read_text())
        s = profile_workload(pcfg, wcfg, root / WorkloadSpec.from_config(wcfg).label, log=lambda m: print(m, flush=True))
        rows.append(s)
    print(f"\n{'workload':<16}{'build s':>9}{'infer s':>9}{'pass1 s':>9}{'pass2 s':>9}{'total s':>9}{'overhead':>10}")
    for s in rows:
        p2 = s.get("t_pass2_s", 0.0)
        print(f"{s['workload']:<16}{s['t_build_s']:>9.1f}{s['t_inference_s']:>9.3f}{s['t_pass1_s']:>9.1f}{p2:>9.1f}"
              f"{s['t_total_s']:>9.1f}{(s['t_pass1_s'] + p2) / s['t_inference_s']:>9.0f}x")


if __name__ == "__main__":
    main()
