"""Check 2 (the Vortex half against the path reference, on the host executor) of a committed rebuild's final pairs
under today's cases and bound: do the checks that close issue 39's holes still accept the pairs the project made?

usage: python bench/final_pair_checks.py [REBUILD_TGZ] [CASES]
  (default bench/results/rebuild_h200_h/rebuild.tgz; cases comma-separated, default path_bits,normal,shifted)
Prints per slice: final tag, verdict, the worst element's error over what the bound allowed, wall seconds.
"""

import json
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from vxsynth.checks.run import CheckEnv, run  # noqa: E402
from vxsynth.kernels.candidate import load  # noqa: E402
from vxsynth.targets.vortex_host import HostExecutor, VortexConfig  # noqa: E402


def main(tgz: Path, cases: tuple[str, ...]) -> None:
    env = CheckEnv(HostExecutor(VortexConfig(timeout_s=300)),
                   yaml.safe_load((ROOT / "conf" / "precision" / "default.yaml").read_text()), cases=cases)
    print(f"# {tgz.relative_to(ROOT)}; cases {','.join(cases)}; seed 99; host executor")
    with tempfile.TemporaryDirectory() as tmp:
        with tarfile.open(tgz) as t:
            t.extractall(tmp, filter="data")
        passed = 0
        slices = sorted(p for p in (Path(tmp) / "data" / "suite").iterdir() if (p / "result.json").exists())
        for d in slices:
            tag = json.loads((d / "result.json").read_text())["final"]["check2_record"].split("-")[-2]
            t0 = time.perf_counter()
            rec = run(load(d / "candidates" / tag), d.name, tag, env, Path(tmp) / "work" / d.name, None, seed=99)["vortex_ref"]
            worst = max((float(w["abs_err"]) / float(w["allowed"]) for e in rec.cases for w in e["vortex_ref"]["worst"]),
                        default=0.0)
            passed += rec.verdict == "pass"
            print(f"{d.name:48s} {tag} {rec.verdict:4s} worst err/allowed {worst:.3f} {time.perf_counter() - t0:5.1f} s"
                  + ("" if rec.verdict == "pass" else f"  {rec.reason[:100]}"), flush=True)
        print(f"# {passed} of {len(slices)} final pairs pass")


if __name__ == "__main__":
    main(Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else ROOT / "bench/results/rebuild_h200_h/rebuild.tgz",
         tuple(sys.argv[2].split(",")) if len(sys.argv) > 2 else ("path_bits", "normal", "shifted"))
