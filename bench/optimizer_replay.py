"""How many proposals the optimizer needs to reach the best point of the recorded H200 replay table (the Pi0 attention
bmm, 80 valid points: tests/fixtures/h200/replay), per sampler, over seeds; CPU only (D from the table).

usage: PYTHONPATH=. python bench/optimizer_replay.py [SEEDS]   (default 10)
"""

import statistics
import sys
from pathlib import Path

from tests.test_optimizer import _table, _to_best, search
from vxsynth.agent.optimizer import OptunaSearch
from vxsynth.reconstruct.setup import records_in

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    seeds = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    table, meta = _table()
    (rec,) = records_in(ROOT / "data" / "slices", [meta["slice_id"]])
    print(f"# {meta['slice_id']}: {len(table)} valid points, best D {min(r.D for r in table.values()):.4f}; seeds 0-{seeds - 1}")
    print(f"# command: PYTHONPATH=. python bench/optimizer_replay.py {seeds}")
    for name, kw in [("tpe + guided mutation, local 2 (default)", {"local": 2}),
                     ("tpe + guided mutation, whole space", {}), ("tpe alone, local 2", {"mutate": 0.0, "local": 2}),
                     ("tpe alone, whole space", {"mutate": 0.0}), ("random", {"sampler": "random", "mutate": 0.0})]:
        n = [_to_best(search(OptunaSearch(meta["space"], seed=s, **kw), rec, len(table) - 1)) for s in range(seeds)]
        print(f"{name:<42} proposals to the best point {n}: min {min(n)}, mean {statistics.mean(n):.1f}, max {max(n)}")


if __name__ == "__main__":
    main()
