"""What the output checks of one candidate cost with its Vortex cases run one after another and at once (the loop runs
a lone start's cases at once, a batch's candidates on the cores it leaves idle): the informed start of each named
slice, every input case, host executor, no GPU (check 2's Vortex side, the bulk of a check on a GPU host too); wall
seconds of `checks.run` (compiled once, uncounted), and whether both give the same record.

usage: python bench/check_parallel.py CONFIG.json SLICES_DIR SLICE... [--parallel N] [-n 2]
CONFIG.json is the composed config (`vxsynth config > cfg.json`); N defaults to this machine's cores (at most the
number of cases).
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from vxsynth.checks.run import CheckEnv, run
from vxsynth.kernels.candidate import make
from vxsynth.reconstruct.loop import LoopEnv, validator
from vxsynth.reconstruct.start import informed
from vxsynth.records import SliceRecord
from vxsynth.targets.vortex_host import HostExecutor, VortexConfig


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("config"), ap.add_argument("slices_dir"), ap.add_argument("slice", nargs="+")
    ap.add_argument("--parallel", type=int, default=0)
    ap.add_argument("-n", type=int, default=2)
    a = ap.parse_args()
    missing = [s for s in a.slice if not (Path(a.slices_dir) / s / "slice.json").is_file()]
    if missing:
        sys.exit(f"check_parallel: no slice.json for {', '.join(missing)} in {a.slices_dir} (`vxsynth slice` writes them)")
    cfg = json.loads(Path(a.config).read_text())
    work = Path(tempfile.mkdtemp(prefix="vx-check-parallel-"))
    env = CheckEnv(HostExecutor(VortexConfig.from_dict(cfg["target"]), cache_dir=work / "rt"), cfg["precision"])
    par = a.parallel or min(len(env.cases), os.cpu_count() or 1)
    print(f"# {len(env.cases)} cases, {os.cpu_count()} cores; median of {a.n} after one uncounted run (builds); "
          f"one after another vs {par} at once")
    for sid in a.slice:
        rec = SliceRecord.load(Path(a.slices_dir) / sid / "slice.json")
        s, _ = informed(rec, cfg["start"], validator(rec.problem, rec.precision, LoopEnv(env, [])))
        c = make(rec.problem, s, rec.precision)
        times, recs = {}, {}
        for p in (1, par):
            e = replace(env, vortex_parallel=p)
            t = []
            for i in range(a.n + 1):
                t0 = time.perf_counter()
                recs[p] = run(c, sid, f"p{p}-{i}", e, work / sid / f"p{p}-{i}", None, seed=11)["vortex_ref"]
                t.append(time.perf_counter() - t0)
            times[p] = statistics.median(t[1:])
        same = [x["vortex_ref"]["max_abs_err"] for x in recs[1].cases] == [x["vortex_ref"]["max_abs_err"] for x in recs[par].cases]
        print(f"{sid:<46} {recs[1].verdict}/{recs[par].verdict} same errors {same}  one after another {times[1]:6.2f} s  "
              f"{par} at once {times[par]:6.2f} s  ({times[1] / times[par]:.2f}x)", flush=True)


if __name__ == "__main__":
    main()
