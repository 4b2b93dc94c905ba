"""Attack corpus benchmark: every attack of tests/attacks.yaml (plus the unmodified bases as controls) through every
gate of the slice's `Evaluator` (the loop's own); prints tried / rejected / accepted / crashed with the gate and reason per case, and the
md5 of a canary directory before and after. Also what the jail and the lockstep check cost per Vortex run.

usage: python bench/attacks.py [--gpu] [--out bench/results/attacks_<host>.txt]
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from vxsynth.checks.gates import attack, base, every_base  # noqa: E402
from vxsynth.kernels.problem import from_dict  # noqa: E402
from vxsynth.checks.run import CheckEnv  # noqa: E402
from vxsynth.reconstruct.evaluate import Evaluator  # noqa: E402
from vxsynth.kernels import tensors as T  # noqa: E402
from vxsynth.targets import jail  # noqa: E402
from vxsynth.targets.vortex_host import HostExecutor, VortexConfig, windows, write_inputs  # noqa: E402


def digest(d: Path) -> str:
    return hashlib.md5(b"".join(p.name.encode() + p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file())).hexdigest()


def run_cost(cfg: VortexConfig, c, work: Path, n: int = 5) -> tuple[float, float]:
    """Median wall seconds of one Vortex window run of `c`, jailed and bare (same binary, built with `cfg`)."""
    exe, err = HostExecutor(cfg, cache_dir=work / "cache").build(c, work)
    assert exe is not None, err
    vin = T.vortex_inputs(c.problem, c.precision, T.make_inputs(c.problem, 0))
    files = write_inputs(vin, work / "in")
    wins = ",".join(f"{s}:{k}" for s, k in windows(c.meta["blocks"], cfg.max_blocks))
    args = ["out.bin", str(c.meta["arg_layout"]["vortex"]["out"]["elements"]), str(c.strategy.threads), wins]
    jailed, bare = [], []
    for i in range(n):
        t = time.perf_counter()
        r = jail.run(exe, args + [f"/in/{Path(f).name}" if f != "-" else "-" for f in files],
                     {Path(f).name: Path(f) for f in files if f != "-"}, work / f"j{i}", 300)
        jailed.append(time.perf_counter() - t)
        assert r.ok, r.error
        d = work / f"b{i}"
        d.mkdir()
        t = time.perf_counter()
        subprocess.run([str(exe), *args, *files], cwd=d, check=True, capture_output=True)
        bare.append(time.perf_counter() - t)
    return statistics.median(jailed), statistics.median(bare)


def costs(bases: dict, work: Path) -> list[str]:
    """What the jail and the lockstep check add per Vortex run, on the small base and on the ACT linear slice shape."""
    act = base({"problem": {"kind": "gemm", "op": "addmm", "batch": 1, "M": 302, "N": 512, "K": 3200, "a_strides": [0, 3200, 1],
                            "b_strides": [0, 1, 3200], "bias": True, "dtype": "float32"}, "precision": "FP32"})
    out = []
    for name, c in (("fp32_linear", bases["fp32_linear"]), ("act_linear_302x512x3200", act)):
        j, b = run_cost(VortexConfig(), c, work / f"cost-{name}")
        j0, _ = run_cost(VortexConfig(lockstep=False), c, work / f"cost-{name}-nolock")
        out.append(f"cost per Vortex run, {name} (window of {VortexConfig().max_blocks} blocks, median of 5): "
                   f"bare {b * 1e3:.0f} ms, jailed {j * 1e3:.0f} ms (jail {(j / b - 1) * 100:+.0f}%); "
                   f"jailed without the lockstep check {j0 * 1e3:.0f} ms (lockstep {(j / j0 - 1) * 100:+.0f}%)")
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpu", action="store_true", help="run CUDA candidates (H200 host) and the gpu: true attacks")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    corpus = yaml.safe_load((ROOT / "tests" / "attacks.yaml").read_text())
    policy = yaml.safe_load((ROOT / "conf" / "sandbox" / "default.yaml").read_text())
    tol = yaml.safe_load((ROOT / "conf" / "precision" / "default.yaml").read_text())
    env = CheckEnv(HostExecutor(VortexConfig(timeout_s=60)), tol, cuda=args.gpu, device="cuda" if args.gpu else "cpu")
    work = Path(tempfile.mkdtemp(prefix="vx-attacks-"))
    canary = work / "canary"
    canary.mkdir()
    (canary / "precious.txt").write_text("must survive\n")
    before = digest(canary)
    bases = {k: base(v) for k, v in corpus["bases"].items()}
    lines, outcomes = [], Counter()
    cases = [({"id": f"control_{k}", "class": "control", "side": "both", "expect": "passed", "base": k}, c)
             for k, c in bases.items()]
    for a in corpus["attacks"]:
        if a.get("gpu") and not args.gpu:
            continue
        for k in ([a["base"]] if "base" in a else every_base(corpus)):
            cases.append(({**a, "base": k}, attack(bases[k], a, str(canary))))
    t0 = time.perf_counter()
    for i, (a, c) in enumerate(cases):
        spec = corpus["bases"][a["base"]]
        v = Evaluator(f"attack-{a['base']}", from_dict(spec["problem"]), spec["precision"], env, policy["rules"],
                      policy["objects"]).judge(c, work / f"case{i}")
        ok = v.outcome == ("passed" if a["class"] == "control" else "rejected")
        outcomes[(a["class"] == "control", v.outcome)] += 1
        lines.append(f"{'ok ' if ok else 'BAD'} {a['id']:<28} {a['base']:<12} {a['side']:<6} expect {a['expect']:<10} "
                     f"-> {v.outcome:<8} {v.gate:<9} seed {v.seed:<10} {v.reason[:150]}")
        print(lines[-1], flush=True)
    after = digest(canary)
    attacks = [a for a, _ in cases if a["class"] != "control"]
    summary = [
        f"host: {'GPU (' + args.gpu * 'CUDA runs' + ')' if args.gpu else 'CPU only (CUDA halves compiled and judged, not run)'}",
        f"attacks tried {len(attacks)}: rejected {outcomes[(False, 'rejected')]}, passed {outcomes[(False, 'passed')]}, "
        f"crashed {outcomes[(False, 'crashed')]}",
        f"controls {len(cases) - len(attacks)}: passed {outcomes[(True, 'passed')]}",
        f"canary directory md5 before {before} after {after}: {'unchanged' if before == after else 'CHANGED'}",
        *costs(bases, work),
        f"wall {time.perf_counter() - t0:.0f} s",
    ]
    print("\n".join(summary))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text("$ python bench/attacks.py" + " --gpu" * args.gpu + "\n" + "\n".join(lines + [""] + summary) + "\n")
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
