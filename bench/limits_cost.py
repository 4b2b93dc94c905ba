"""What one candidate's gates cost on the CPU, to compare a tree before and after a change to its limits (the compile
limits and the jail's output quota of issue 39): the sandbox rules (preprocessor views), the build of both halves
(nvcc when present, rv32, host) and one jailed Vortex window run of the fp32_linear base of tests/attacks.yaml;
median wall seconds of fresh runs (no compile cache).

usage: python bench/limits_cost.py [--src TREE] [-n 5]
  TREE: the vxsynth source tree to time (default: this one), e.g. the commit before:
  git archive <commit> | tar -x -C /tmp/before && python bench/limits_cost.py --src /tmp/before
"""

from __future__ import annotations

import argparse
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
    ap.add_argument("-n", type=int, default=5)
    args = ap.parse_args()
    sys.path.insert(0, str(args.src.resolve()))
    from vxsynth.checks import gates
    from vxsynth.checks.run import CheckEnv
    from vxsynth.kernels import tensors as T
    from vxsynth.targets import sandbox
    from vxsynth.targets.vortex_host import HostExecutor, VortexConfig

    conf = lambda g: yaml.safe_load((args.src / "conf" / g / "default.yaml").read_text())  # noqa: E731
    policy = conf("sandbox")
    spec = yaml.safe_load((HERE / "tests" / "attacks.yaml").read_text())["bases"]["fp32_linear"]
    work = Path(tempfile.mkdtemp(prefix="vx-limits-cost-"))
    env = CheckEnv(HostExecutor(VortexConfig(), cache_dir=work / "rt"), conf("precision"))
    times: dict[str, list[float]] = {"sandbox": [], "build": [], "vortex run": []}
    for i in range(args.n + 1):                      # the first round builds the host runtime: not counted
        c = gates.base(spec)
        vin = T.vortex_inputs(c.problem, c.precision, T.make_inputs(c.problem, 0))
        t0 = time.perf_counter()
        assert sandbox.check(c, c.problem, c.precision, policy["rules"]) == []
        t1 = time.perf_counter()
        b = gates.build(c, env, policy["objects"], work / f"b{i}", judge_cuda=True)
        t2 = time.perf_counter()
        assert not b.error, b.error
        r = env.vortex.run(c, vin, work / f"r{i}", exe=b.exe)
        t3 = time.perf_counter()
        assert r.ok, r.error
        if i:
            for v, dt in zip(times.values(), (t1 - t0, t2 - t1, t3 - t2)):
                v.append(dt)
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"{args.src}: one candidate (fp32_linear), median of {args.n}: "
          + ", ".join(f"{k} {v * 1e3:.0f} ms" for k, v in med.items()) + f"; total {sum(med.values()) * 1e3:.0f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
