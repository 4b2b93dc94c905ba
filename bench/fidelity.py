"""The H200 fidelity figures of issue 13, over every GPU of the host: per slice D of the default start, of the
structure-informed start and final, candidates evaluated, seconds per candidate, the three largest remaining gaps,
both checks of the final pair; the median final D; and the order ablation (cuda_first vs vortex_first: final D and
DRAM-bandwidth gap) on the first `--ablation` slices. Column `no-growth`: the lowest D in the slice's trail among
candidates that pass both checks with no component's |gap| above the informed start's (what `loop.gap_guard=0`
would let the loop keep, noise aside), and its round. Column `final vs reference`: the final CUDA kernel's duration
and DRAM bytes over the reference kernel's.

Jobs (slice, order) are dealt to one worker process per GPU (CUDA_VISIBLE_DEVICES); each runs the loop with the
config's agent and budgets, writes OUT/<order>/<slice>/bench.json, and skips jobs already done (an interrupted bench
resumes; so does each loop, from its trail). A resume goes on only with the config the run began with
(OUT/config.json), and its workers (this script as it was then) import the core package the run began with, whatever
the tree holds now: the first run copies vxsynth/, conf/ and this script to OUT/code and records the package's hash
(OUT/code.json). One run's figures come from one reconstruction code on one chip, even when its calls span sessions
whose tree moved on.

usage: python bench/fidelity.py CONFIG.json SLICES_DIR OUT [--gpus N] [--ablation K] [--no-default-start] [--report] SLICE...
       (--report: only print the report of the jobs already in OUT)
"""

import argparse
import dataclasses
import hashlib
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def worker(cfg_path: str, slices: str, out: Path, jobs: list, default_start: bool = True) -> None:
    import vxsynth
    from vxsynth.kernels.strategy import Strategy
    from vxsynth.reconstruct.loop import evaluate_batch
    from vxsynth.reconstruct.setup import loop_config, loop_env, records_in, run_slice

    print(f"# vxsynth from {Path(vxsynth.__file__).parent}, worker {Path(__file__).resolve()}", flush=True)
    cfg = json.loads(Path(cfg_path).read_text())
    env, why = loop_env(cfg, cfg["platform"], out / "work" / f"gpu{os.environ.get('CUDA_VISIBLE_DEVICES', '')}")
    if why is not None:     # a bench.json without D would count as done and be skipped by every later resume
        sys.exit(f"fidelity: no slice run, the GPU steps cannot run here: {why}")
    for sid, order in jobs:
        dest = out / order / sid
        if (dest / "bench.json").exists():
            continue
        (rec,) = records_in(Path(slices), [sid])
        shared = out / "cuda_first" / sid / "reference.json"
        if order != "cuda_first" and shared.exists() and not (dest / "reference.json").exists():
            dest.mkdir(parents=True, exist_ok=True)      # both orders judged against the same reference measurement
            shutil.copy(shared, dest / "reference.json")
        lcfg = dataclasses.replace(loop_config(cfg), order=order)
        t = time.perf_counter()
        res = run_slice(cfg, rec, dest, env=env, loop=lcfg, log=lambda s: print(s, flush=True)).to_dict()
        res["bench_wall_s"] = time.perf_counter() - t
        if order == "cuda_first" and default_start:        # the plain default strategy, measured once against the same reference
            ref = json.loads((dest / "reference.json").read_text())["values"]
            row = evaluate_batch(rec, [(1, Strategy(), {}, "default start", "", None)], 0,
                                  env, dataclasses.replace(lcfg, sanitize=False), "default", dest / "default",
                                  dest / "default" / "work", ref, None)[0]
            res["default_start"] = {"D": row.D, "gaps": row.gaps, "check1": row.check1, "check2": row.check2,
                                    "reason": row.reason}
        (dest / "bench.json").write_text(json.dumps(res, indent=1, default=str))
    print("worker done", flush=True)


def figures(slices_dir: Path, suite: Path, slices: list) -> None:
    """The report's lines for `slices` as run (cuda_first): final kernel time against the reference's, the
    per-component agreement (cells within tolerance; DRAM bandwidth alone), the largest |gap| of any component."""
    from vxsynth.report.agreement_table import agreement
    from vxsynth.report.build import collect
    from vxsynth.report.model import speed
    from vxsynth.signature.agreement import summary

    if not (slices_dir / "suite.parquet").exists():
        print(f"# no report figures: {slices_dir} has no suite.parquet (the slicing stage's index)")
        return
    table, comps, evidence = collect(slices_dir, suite, [])
    table, comps = table[table["slice_id"].isin(slices)], comps[comps["slice_id"].isin(slices)]
    cells = agreement(comps, [e for e in evidence if e["slice_id"] in slices])
    n = summary({c: x.ok for c, x in row.items()} for row in cells.values())
    (k, m), (kd, md) = n["all"], n["dram_bw"]
    counted = [cells.get(r.slice_id, {}).get(r.component, None) for r in comps.itertuples()]
    gap = comps["gap_after"][[c is not None and c.ok is not None for c in counted]].abs().max()  # cells counted only
    print(f"# {speed(table)}\n# cells within tolerance: {k} of {m}" + (f" ({k / m:.0%})" if m else "")
          + f"; DRAM bandwidth {kd} of {md}; largest |gap| of any component {gap:.3f}")
    print("# cells within tolerance per component: "
          + ", ".join(f"{c} {k}/{m}" for c, (k, m) in n.items() if c != "all" and m))


def no_growth(trail: Path) -> str:
    """The best trail candidate passing both checks whose every |gap| is at most the start's (round 0): 'D (rN)'."""
    import pandas as pd

    t = pd.read_parquet(trail)
    gaps = [json.loads(g) if isinstance(g, str) and g else (g or {}) for g in t["gaps"]]
    start = gaps[0]
    ok = [(r.D, r.round) for r, g in zip(t.itertuples(), gaps) if r.check1 == "pass" and r.check2 == "pass" and r.D == r.D
          and all(abs(v) <= abs(start[k]) + 1e-12 for k, v in g.items() if v == v and start.get(k) == start.get(k))]
    return "{:.4f} (r{})".format(*min(ok)) if ok else "n/a"


def time_and_bytes(folder: Path, r: dict) -> str:
    """Kernel duration, DRAM bytes, tensor-pipe activity and DRAM bandwidth of the final pair's CUDA kernel over the
    reference's, from the measurements the loop kept (`measured/`, `reference.json`): 't x / bytes y / tp z / bw w'
    (tp n/a where the reference uses no tensor pipe)."""
    from vxsynth.metrics.components import PRIMARY
    from vxsynth.store.measured import final_measurement

    m = final_measurement(folder, r["final"]["cuda_sha256"], r["final"]["vortex_sha256"], r["measured_with"])
    if m is None:
        return "n/a"
    ref, fin = json.loads((folder / "reference.json").read_text())["metrics"], m["metrics"]
    ratio = lambda k: f"{fin[k] / ref[k]:4.2f}x" if ref.get(k) and fin.get(k) is not None else " n/a "  # noqa: E731
    t, b = "gpu__time_duration.sum", "dram__bytes.sum"
    return (f"t {fin[t] / ref[t]:4.1f}x / bytes {fin[b] / ref[b]:4.2f}x / tp {ratio(PRIMARY['tensor_pipe'])}"
            f" / bw {ratio(PRIMARY['dram_bw'])}")


def report(out: Path, slices: list, ablation: int, slices_dir: Path) -> None:
    from vxsynth.records import LoopResult
    from vxsynth.report.build import rescored

    def load(order, sid):
        f = out / order / sid / "bench.json"
        return json.loads(f.read_text()) if f.exists() else None

    f = lambda x: f"{x:.4f}" if isinstance(x, (int, float)) and x == x else "  nan "   # noqa: E731

    def grown(start: dict, final: dict) -> str:
        """The component whose |gap| grew most (or shrank least) from `start` to `final`."""
        up = [(abs(final[k]) - abs(v), k) for k, v in start.items() if k in final and v == v and final[k] == final[k]]
        top = max(up, default=None)
        return f"{top[1]} {top[0]:+.3f}" if top else "n/a"
    print(f"{'slice':<44} {'D default':>9} {'informed':>9} {'final':>8} {'rescored':>8} {'no-growth':>12} {'final vs reference':>40} {'cands':>5} {'s/cand':>6}  checks  largest gaps")
    finals, again, missing, starts, setup = [], [], [], [], {}
    for sid in slices:
        r = load("cuda_first", sid)
        if r is None:
            missing.append(sid)
            continue
        s = r["summary"]
        finals.append(r["final"]["D"])
        starts.append(r["initial"]["D"])
        for k, v in (s.get("setup_s") or {}).items():
            setup.setdefault(k, []).append(v)
        again.append(rescored(out / "cuda_first" / sid, LoopResult.load(out / "cuda_first" / sid / "result.json")))
        gaps = ", ".join(f"{k} {v:+.3f}" for k, v in s["largest_gaps"])
        print(f"{sid[:44]:<44} {f(r.get('default_start', {}).get('D')):>9} {f(r['initial']['D']):>9} {f(r['final']['D']):>8} {f(again[-1]):>8} "
              f"{no_growth(out / 'cuda_first' / sid / 'trail.parquet'):>12} {time_and_bytes(out / 'cuda_first' / sid, r):>40} {s['candidates']:>5} {r['bench_wall_s'] / max(1, s['candidates']):6.2f}  {r['final']['check1']}/{r['final']['check2']}  {gaps}"
              f"  | grown vs informed: {grown(r['initial']['gaps'], r['final']['gaps'])}, "
              f"vs default: {grown(r.get('default_start', {}).get('gaps', {}), r['final']['gaps'])}")
    done = [d for d in finals if d is not None]
    if done:
        print(f"# median final D {statistics.median(done):.4f} over {len(done)} slices; below 0.05: "
              f"{sum(d <= 0.05 for d in done)}, above 0.08: {sum(d > 0.08 for d in done)}; max {max(done):.4f}; "
              f"not run: {missing or 'none'}")
        began = [d for d in starts if d is not None and d == d]
        print(f"# the starts (column informed): median D {statistics.median(began) if began else math.nan:.4f}; set-up "
              "before the search, median s (a resumed slice's reused reference counts about 0): " + ", ".join(f"{k} {statistics.median(v):.1f}" for k, v in sorted(setup.items())))
        now = [d for d in again if d == d]
        if now:
            print(f"# the same final pairs re-scored under today's component rules (column rescored): median D "
                  f"{statistics.median(now):.4f} over {len(now)}; below 0.05: {sum(d <= 0.05 for d in now)}, "
                  f"above 0.08: {sum(d > 0.08 for d in now)}; max {max(now):.4f}")
        figures(slices_dir, out / "cuda_first", slices)
    print(f"\n{'ablation (same slices)':<44} {'cuda_first D':>12} {'vortex_first D':>14} {'dram_bw gap c/v':>16}")
    for sid in slices[:ablation]:
        c, v = load("cuda_first", sid), load("vortex_first", sid)
        if c and v:
            print(f"{sid[:44]:<44} {f(c['final']['D']):>12} {f(v['final']['D']):>14} "
                  f"{f(c['final']['gaps'].get('dram_bw')):>8}/{f(v['final']['gaps'].get('dram_bw'))}")


def same_config(config: Path, out: Path) -> None:
    """A resumed OUT goes on only with the config it was run with (its platform above all: an H100's slices and an
    H200's in one report would mix two chips); the first run records it as OUT/config.json."""
    seen = out / "config.json"
    try:
        cfg, was = json.loads(config.read_text()), json.loads(seen.read_text()) if seen.exists() else None
    except (OSError, ValueError) as e:
        sys.exit(f"fidelity: cannot read {config} or {seen} ({e}): give a config of `vxsynth config`, or a new OUT")
    if was is not None and was != cfg:
        keys = sorted(k for k in cfg.keys() | was.keys() if cfg.get(k) != was.get(k))
        name = lambda c: (c.get("platform") or {}).get("name")  # noqa: E731
        sys.exit(f"fidelity: {out} was run with another config (differs in {', '.join(keys)}; platform {name(was)} then, "
                 f"{name(cfg)} now): give a new OUT, or the config it was run with ({seen})")
    seen.write_text(json.dumps(cfg, indent=1))


def code_hash(root: Path = ROOT) -> str:
    """sha256 over the core package's files under `root`, path and bytes: the reconstruction code a run's slices are
    rebuilt with."""
    h = hashlib.sha256()
    for f in sorted(f for f in (root / "vxsynth").rglob("*") if f.is_file() and "__pycache__" not in f.parts):
        h.update(f.relative_to(root).as_posix().encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


def run_code(out: Path) -> Path:
    """The folder whose vxsynth/ the run's workers import. The first run copies the tree's vxsynth/, conf/ (the
    sandbox policy) and this script (the workers') to OUT/code and records the package's hash in OUT/code.json; a
    resume imports that copy, so a run that spans sessions keeps one reconstruction code while the tree moves on. A
    copy changed since stops the run; a run begun before the copies existed (code.json only) resumes only under the
    tree's same vxsynth."""
    seen, code = out / "code.json", out / "code"
    try:
        was = json.loads(seen.read_text())["vxsynth_sha256"] if seen.exists() else None
    except (OSError, ValueError, KeyError) as e:
        sys.exit(f"fidelity: cannot read {seen} ({e}): give a new OUT")
    tree = code_hash()
    if was is None:
        shutil.rmtree(code, ignore_errors=True)       # a copy cut before its code.json was written
        for part in ("vxsynth", "conf"):
            shutil.copytree(ROOT / part, code / part, ignore=shutil.ignore_patterns("__pycache__"))
        (code / "bench").mkdir()
        shutil.copy2(__file__, code / "bench" / "fidelity.py")     # the worker that calls that vxsynth
        seen.write_text(json.dumps({"vxsynth_sha256": code_hash(code)}) + "\n")
        return code
    if not (code / "vxsynth").is_dir():
        if was != tree:
            sys.exit(f"fidelity: {out} was run with other vxsynth code (sha256 {was[:12]} then, {tree[:12]} now) and "
                     f"holds no copy of it: give a new OUT, or run it with the vxsynth/ it began with (its bench/results "
                     f"row names the tree)")
        return ROOT
    if code_hash(code) != was:
        sys.exit(f"fidelity: {code} changed since the run began (sha256 {code_hash(code)[:12]} now, {was[:12]} in "
                 f"{seen}): give a new OUT")
    if was != tree:
        print(f"# resumed with the vxsynth the run began with (sha256 {was[:12]}, {code}), not the tree's "
              f"({tree[:12]})", flush=True)
    return code


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("config"), ap.add_argument("slices_dir"), ap.add_argument("out")
    ap.add_argument("--gpus", type=int, default=0, help="worker processes, one per GPU (0: every GPU here)")
    ap.add_argument("--ablation", type=int, default=6)
    ap.add_argument("--report", action="store_true", help="only print the report of the jobs already in OUT")
    ap.add_argument("--no-default-start", action="store_true",
                    help="skip measuring the plain default strategy per slice (column `D default`: nan)")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("slice", nargs="*")
    a = ap.parse_intermixed_args()
    out = Path(a.out)
    if a.worker:
        worker(a.config, a.slices_dir, out, json.loads(a.worker), not a.no_default_start)
        return
    if not a.slice:
        ap.error("give the slices (ids or unique prefixes)")
    from vxsynth.reconstruct.setup import records_in
    slices = [r.slice_id for r in records_in(Path(a.slices_dir), a.slice)]
    if a.report:
        report(out, slices, a.ablation, Path(a.slices_dir))
        return
    out.mkdir(parents=True, exist_ok=True)
    same_config(Path(a.config), out)
    code = run_code(out)
    jobs = [(s, "cuda_first") for s in slices] + [(s, "vortex_first") for s in slices[:a.ablation]]
    n = a.gpus
    if not n:
        import torch
        n = max(1, torch.cuda.device_count())
    pythonpath = os.pathsep.join(p for p in (str(code.resolve()), os.environ.get("PYTHONPATH", "")) if p)
    print(f"# command: python bench/fidelity.py {' '.join(sys.argv[1:])}\n# {len(jobs)} jobs on {n} GPU workers", flush=True)
    script = code / "bench" / "fidelity.py" if (code / "bench" / "fidelity.py").exists() else Path(__file__)
    procs = [(i, subprocess.Popen([sys.executable, str(script), a.config, a.slices_dir, str(out), "--worker", json.dumps(jobs[i::n])]
                              + ["--no-default-start"] * a.no_default_start,
                              env={**os.environ, "CUDA_VISIBLE_DEVICES": str(i), "PYTHONPATH": pythonpath},
                              stdout=open(out / f"worker{i}.log", "a"),
                              stderr=subprocess.STDOUT)) for i in range(n) if jobs[i::n]]
    for i, p in procs:
        if p.wait():
            print(f"# worker {i} ended with rc {p.returncode}: see {out / f'worker{i}.log'}", flush=True)
    report(out, slices, a.ablation, Path(a.slices_dir))


if __name__ == "__main__":
    main()
