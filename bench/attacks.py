"""Attack corpus benchmark: every attack of tests/attacks.yaml (plus the unmodified bases as controls) through every
gate (`vxsynth.checks.gates`); prints tried / rejected / accepted / crashed with the gate and reason per case, and the
md5 of a canary directory before and after. Also the cost of the jail per Vortex run (jailed vs bare, same binary).

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

from vxsynth.checks.gates import attack, base, judge  # noqa: E402
from vxsynth.checks.run import CheckEnv  # noqa: E402
from vxsynth.kernels import tensors as T  # noqa: E402
from vxsynth.targets import jail  # noqa: E402
from vxsynth.targets.vortex_host import HostExecutor, VortexConfig, windows, write_inputs  # noqa: E402


def digest(d: Path) -> str:
    return hashlib.md5(b"".join(p.name.encode() + p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file())).hexdigest()


def jail_cost(env: CheckEnv, c, work: Path, n: int = 5) -> tuple[float, float]:
    """Median wall seconds of the same Vortex run, jailed and bare (the bare run is our own unmodified candidate)."""
    exe, err = env.vortex.build(c, work / "cost")
    assert exe is not None, err
    vin = T.vortex_inputs(c.problem, c.precision, T.make_inputs(c.problem, 0))
    files = write_inputs(vin, work / "cost" / "in")
    wins = ",".join(f"{s}:{k}" for s, k in windows(c.meta["blocks"], env.vortex.cfg.max_blocks))
    args = ["out.bin", str(c.meta["arg_layout"]["vortex"]["out"]["elements"]), str(c.strategy.threads), wins]
    jailed, bare = [], []
    for i in range(n):
        t = time.perf_counter()
        r = jail.run(exe, args + [f"/in/{Path(f).name}" if f != "-" else "-" for f in files],
                     {Path(f).name: Path(f) for f in files if f != "-"}, work / "cost" / f"j{i}", 120)
        jailed.append(time.perf_counter() - t)
        assert r.ok, r.error
        d = work / "cost" / f"b{i}"
        d.mkdir()
        t = time.perf_counter()
        subprocess.run([str(exe), *args, *files], cwd=d, check=True, capture_output=True)
        bare.append(time.perf_counter() - t)
    return statistics.median(jailed), statistics.median(bare)


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
    cases = [({"id": f"control_{k}", "class": "control", "side": "both", "expect": "accepted", "base": k}, c)
             for k, c in bases.items()]
    for a in corpus["attacks"]:
        if a.get("gpu") and not args.gpu:
            continue
        for k in ([a["base"]] if "base" in a else list(bases)):
            cases.append(({**a, "base": k}, attack(bases[k], a, str(canary))))
    t0 = time.perf_counter()
    for i, (a, c) in enumerate(cases):
        v = judge(c, env, policy["rules"], policy["objects"], work / f"case{i}")
        ok = v["outcome"] == "accepted" if a["class"] == "control" else v["outcome"] == "rejected"
        outcomes[(a["class"] == "control", v["outcome"])] += 1
        lines.append(f"{'ok ' if ok else 'BAD'} {a['id']:<28} {a['base']:<12} {a['side']:<6} expect {a['expect']:<10} "
                     f"-> {v['outcome']:<8} {v['gate']:<9} {v['reason'][:150]}")
        print(lines[-1], flush=True)
    after = digest(canary)
    attacks = [a for a, _ in cases if a["class"] != "control"]
    j, b = jail_cost(env, bases["fp32_linear"], work)
    summary = [
        f"host: {'GPU (' + args.gpu * 'CUDA runs' + ')' if args.gpu else 'CPU only (CUDA halves compiled and judged, not run)'}",
        f"attacks tried {len(attacks)}: rejected {outcomes[(False, 'rejected')]}, accepted {outcomes[(False, 'accepted')]}, "
        f"crashed {outcomes[(False, 'crashed')]}",
        f"controls {len(cases) - len(attacks)}: accepted {outcomes[(True, 'accepted')]}",
        f"canary directory md5 before {before} after {after}: {'unchanged' if before == after else 'CHANGED'}",
        f"jail cost per Vortex run (fp32_linear window, median of 5): jailed {j * 1e3:.1f} ms, bare {b * 1e3:.1f} ms, "
        f"+{(j / b - 1) * 100:.0f}%",
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
