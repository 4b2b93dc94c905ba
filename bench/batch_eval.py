"""Seconds per candidate of batched evaluation on the GPU host, against one candidate at a time.

Candidates: the valid single edits (then pairs of edits) of the slice's start strategy. For each batch size: a cold
compile cache, `evaluate_batch` (parallel generate/build/check on the CPU pool, CUDA runs through the persistent
GPU workers, one ncu process for the survivors). The baseline evaluates a few candidates one at a time the old way
(no cache, one process per CUDA check, one ncu process each). Printed per run: wall seconds per candidate, the
measuring wall, and per candidate the compile, check 1 (CUDA runs), check 2 (Vortex runs), reference op seconds
(these run in parallel, so their sum exceeds the wall).

usage: python bench/batch_eval.py CONFIG.json SLICES_DIR OUT_DIR SLICE [SIZE ...]   (default sizes 8 16)
"""

import dataclasses
import json
import statistics
import sys
import time
from pathlib import Path

from vxsynth.agent.profile_guided import EDITS
from vxsynth.reconstruct.loop import evaluate_batch, initial_strategy, validator
from vxsynth.reconstruct.setup import loop_config, loop_env, records_in
from vxsynth.records import CheckRecord
from vxsynth.signature import measure
from vxsynth.trail import TrailRow


def neighbours(s0, valid, n):
    out, seen = [], {s0.hash()}
    for depth in (1, 2):
        for i, (_, f, _) in enumerate(EDITS):
            for s in ([f(s0)] if depth == 1 else [g(f(s0)) if f(s0) else None for _, g, _ in EDITS[i + 1:]]):
                if s is not None and s.hash() not in seen and valid(s) is None:
                    seen.add(s.hash())
                    out.append(s)
                if len(out) == n:
                    return out
    return out


def run(label, rec, items, env, cfg, ref, out):
    t = time.perf_counter()
    rows = evaluate_batch(rec, items, 0, env, cfg, "bench", out, out / "work", ref,
                           TrailRow.parent_with(10.0))
    wall = time.perf_counter() - t
    n = len(rows)
    timing = [CheckRecord.load(out / "checks" / f"{r.check1_record}.json").timing
              for r in rows if r.check1_record]
    per = lambda k: statistics.mean(x[k] for x in timing) if timing else float("nan")   # noqa: E731
    measured = sum(r.t_measure_s for r in rows)
    print(f"{label:<28} n {n:>2}  wall {wall:6.1f} s = {wall / n:5.2f} s/candidate  (ncu wall {measured:5.1f} s = "
          f"{measured / n:4.2f} s/cand; per candidate: compile {statistics.mean(r.t_compile_s for r in rows):4.2f}, "
          f"check 1 {per('cuda_s'):4.2f}, check 2 {per('vortex_s'):4.2f}, reference {per('reference_s'):4.2f}); "
          f"decisions {sorted(r.decision for r in rows)}", flush=True)
    return rows


def main() -> None:
    cfg = json.loads(Path(sys.argv[1]).read_text())
    out = Path(sys.argv[3])
    sizes = [int(x) for x in sys.argv[5:]] or [8, 16]
    env, why = loop_env(cfg, cfg["platform"], out / "env")
    assert why is None, why
    (rec,) = records_in(Path(sys.argv[2]), [sys.argv[4]])
    lcfg = dataclasses.replace(loop_config(cfg), sanitize=False)
    valid = validator(rec.problem, rec.precision, env)
    s0, _ = initial_strategy(rec, lcfg, valid)
    cands = neighbours(s0, valid, max(sizes))
    ref = measure.reference(rec, cfg["platform"], out / "ref", repeats=1).values
    print(f"# {rec.slice_id}; {len(cands)} candidates (edits of the start); workers {lcfg.workers or 'all cores'}; "
          f"GPU workers {env.checks.pool.stats()['workers']}")
    print(f"# command: python bench/batch_eval.py CONFIG.json SLICES_DIR OUT_DIR {' '.join(sys.argv[4:])}")
    items = lambda k: [(i + 1, s, {}, f"e{i}", "", None) for i, s in enumerate(cands[:k])]   # noqa: E731
    one = dataclasses.replace(env, measure_batch=None, checks=dataclasses.replace(env.checks, pool=None, compile_cache=None))
    base = [run(f"one at a time (candidate {i})", rec, [it], one, lcfg, ref, out / f"one{i}") for i, it in enumerate(items(3))]
    for k in sizes:
        env.checks.compile_cache = out / f"cubins{k}"          # cold
        run(f"batch of {k}", rec, items(k), env, dataclasses.replace(lcfg, batch=k), ref, out / f"batch{k}")
    warm = run(f"batch of {sizes[-1]} again (warm cache)", rec, items(sizes[-1]), env, lcfg, ref, out / "again")
    print(f"# baseline wall per candidate: {statistics.mean(r.wall_s for b in base for r in b):.2f} s; "
          f"GPU worker pool {env.checks.pool.stats()}; warm rerun compile per candidate "
          f"{statistics.mean(r.t_compile_s for r in warm):.2f} s")


if __name__ == "__main__":
    main()
