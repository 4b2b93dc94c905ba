"""What judging one candidate costs, every gate included (sandbox rules, both builds, the jailed runs and output
checks of every input case, compute-sanitizer on a GPU), to compare a tree before and after a change to the checker
(issue 39's defences): the slice `Evaluator`'s judge (`gates.judge` in older trees) of each unmodified base of tests/attacks.yaml, fresh work folder, no compile
cache; median wall seconds.

usage: python bench/judge_cost.py [--src TREE] [--gpu] [-n 3]
  TREE: the vxsynth source tree to time (default: this one), e.g. the tree before issue 39:
  git archive 63ad737 vxsynth conf | tar -x -C /tmp/before && python bench/judge_cost.py --src /tmp/before
"""

from __future__ import annotations

import argparse
import inspect
import statistics
import sys
import tempfile
import time
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent.parent


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--src", type=Path, default=HERE)
    ap.add_argument("--gpu", action="store_true")
    ap.add_argument("-n", type=int, default=3)
    args = ap.parse_args()
    sys.path.insert(0, str(args.src.resolve()))
    from vxsynth.checks import gates
    from vxsynth.checks.run import CheckEnv
    from vxsynth.kernels.problem import from_dict
    from vxsynth.targets.vortex_host import HostExecutor, VortexConfig

    conf = lambda g: yaml.safe_load((args.src / "conf" / g / "default.yaml").read_text())  # noqa: E731
    policy = conf("sandbox")
    bases = yaml.safe_load((HERE / "tests" / "attacks.yaml").read_text())["bases"]
    work = Path(tempfile.mkdtemp(prefix="vx-judge-cost-"))
    env = CheckEnv(HostExecutor(VortexConfig(timeout_s=120), cache_dir=work / "rt"), conf("precision"), cuda=args.gpu,
                   device="cuda" if args.gpu else "cpu")
    try:                                   # trees since issue 40: the slice's Evaluator; before: gates.judge
        from vxsynth.reconstruct.evaluate import Evaluator
    except ImportError:
        Evaluator = None
    slice_given = Evaluator is not None or "problem" in inspect.signature(gates.judge).parameters   # issue 39 hole 5
    cases = getattr(env, "cases", ())
    print(f"# {args.src}: judge per unmodified base, {'GPU' if args.gpu else 'CPU'}, {len(cases)} input cases "
          f"({', '.join(cases)}), median of {args.n} (a first, uncounted round builds the host runtime)")
    total = []
    for name, spec in bases.items():
        times = []
        for i in range(args.n + 1):
            c = gates.base(spec)
            t = time.perf_counter()
            if Evaluator is not None:
                v = Evaluator(name, from_dict(spec["problem"]), spec["precision"], env, policy["rules"],
                              policy["objects"]).judge(c, work / f"{name}{i}")
                assert v.passed, v.reason
            else:
                args_ = (c, from_dict(spec["problem"]), spec["precision"]) if slice_given else (c,)
                v = gates.judge(*args_, env, policy["rules"], policy["objects"], work / f"{name}{i}")
                assert v["outcome"] == "accepted", v
            if i:
                times.append(time.perf_counter() - t)
        total.append(statistics.median(times))
        print(f"{name:12s} {spec['precision']:9s} judge {total[-1]:6.2f} s  (runs {', '.join(f'{x:.2f}' for x in times)})",
              flush=True)
    print(f"sum of medians {sum(total):.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
