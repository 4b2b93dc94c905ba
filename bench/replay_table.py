"""Measure every point of a small strategy sub-space of one slice on the GPU host: the replay table the optimizer is
tested on (tests/test_optimizer.py) and a map of how D varies over the knobs.

Points: the product of SPACE's values over the slice's start strategy (`initial_strategy`). Invalid points are
listed with their reason; valid ones are evaluated with the batched evaluator (checks, one ncu process per batch).
Writes OUT.parquet (strategy, hash, valid, checks, the ten components, D) and OUT.json (slice, reference, space,
start, measured_with); prints the D distribution. With `--dry` only counts the valid points (any machine).

usage: python bench/replay_table.py CONFIG.json SLICES_DIR SLICE OUT [--dry]
"""

import dataclasses
import itertools
import json
import sys
import time
from pathlib import Path

import pandas as pd

from vxsynth.reconstruct.loop import evaluate_batch, initial_strategy, validator
from vxsynth.reconstruct.setup import loop_config, loop_env, records_in
from vxsynth.metrics.components import COMPONENTS
from vxsynth.signature import measure
from vxsynth.trail import TrailRow

SPACE = {"block_m": [32, 64], "block_n": [32, 64], "thread_m": [2, 4], "thread_n": [2, 4],
         "mapping": ["coalesced", "strided"], "vector": [1, 2], "tensor_core": [False, True]}
BATCH = 16


def _outcome(r: TrailRow | None) -> dict:
    """A point's checks, decision and measured components (None where it was not evaluated)."""
    if r is None:
        return dict.fromkeys(("check1", "check2", "decision", "D", *COMPONENTS))
    return {"check1": r.check1, "check2": r.check2, "decision": r.decision, "D": r.D, **r.values}


def main() -> None:
    cfg = json.loads(Path(sys.argv[1]).read_text())
    dry = "--dry" in sys.argv
    out = Path(sys.argv[4])
    if dry:
        cfg = {**cfg, "gpu": False}
    env, why = loop_env(cfg, cfg["platform"], out.parent / "replay-env")
    (rec,) = records_in(Path(sys.argv[2]), [sys.argv[3]])
    p = rec.problem
    lcfg = dataclasses.replace(loop_config(cfg), sanitize=False, batch=BATCH)
    valid = validator(p, rec.precision, env)
    s0, _ = initial_strategy(rec, lcfg, valid)
    points = [s0.with_(**dict(zip(SPACE, v))) for v in itertools.product(*SPACE.values())]
    reasons = [valid(s) for s in points]
    print(f"# {rec.slice_id}: {len(points)} points, {sum(r is None for r in reasons)} valid; start {s0}")
    if dry:
        return
    assert why is None, why
    ref = measure.reference(rec, cfg["platform"], out.parent / "replay-ref", repeats=int(cfg["loop"]["reference_repeats"]))
    ok = [s for s, r in zip(points, reasons) if r is None]
    rows, t = [], time.perf_counter()
    for i in range(0, len(ok), BATCH):
        items = [(j + 1, s, {}, "table", "", None) for j, s in enumerate(ok[i:i + BATCH])]
        rows += evaluate_batch(rec, items, 0, env, lcfg, "table", out.parent / f"replay-{i}",
                                out.parent / f"replay-{i}" / "work", ref.values, TrailRow.parent_with(10.0))
        print(f"  {len(rows)} of {len(ok)} evaluated, {time.perf_counter() - t:.0f} s", flush=True)
    by = {r.strategy_hash: r for r in rows}
    table = pd.DataFrame([{"strategy": json.dumps(s.to_dict(), sort_keys=True), "strategy_hash": s.hash(),
                           "valid": r or "", **_outcome(by.get(s.hash()))}
                          for s, r in zip(points, reasons)])
    table.to_parquet(out.with_suffix(".parquet"), index=False)
    out.with_suffix(".json").write_text(json.dumps({
        "slice_id": rec.slice_id, "space": SPACE, "start": s0.to_dict(), "reference": ref.values,
        "reference_settings": ref.settings, "measured_with": env.measured_with,
        "command": "python bench/replay_table.py CONFIG.json SLICES_DIR " + " ".join(sys.argv[3:])}, indent=1, default=str))
    d = table["D"].dropna().sort_values()
    print(f"# measured {len(d)} points in {time.perf_counter() - t:.0f} s; D min {d.min():.4f} median {d.median():.4f} "
          f"max {d.max():.4f}; best {table.loc[d.index[0], 'strategy']}")


if __name__ == "__main__":
    main()
