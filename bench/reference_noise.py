"""How much the reference signature moves between repeated measurements through the one harness (H200).

Per slice: the reference op measured N times (`measure.reference(repeats=N)`): per-component median and spread
(max - min), the largest D between two repeats (`noise_D`, what the keep rule adds to its threshold), and the wall
seconds. Runs bare (no Prefect/Hydra); needs a GPU with ncu.

usage: python bench/reference_noise.py N SLICE_PREFIX... > bench/results/reference_noise_h200.txt
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from vxsynth.reconstruct.setup import records_in  # noqa: E402
from vxsynth.signature import measure  # noqa: E402


def main() -> None:
    n, prefixes = int(sys.argv[1]), sys.argv[2:]
    pcfg = yaml.safe_load((ROOT / "conf" / "platform" / "h200.yaml").read_text())
    print(f"# command: python bench/reference_noise.py {' '.join(sys.argv[1:])}")
    noise = []
    for rec in records_in(ROOT / "data" / "slices", prefixes):
        with tempfile.TemporaryDirectory() as tmp:
            m = measure.reference(rec, pcfg, Path(tmp), repeats=n)
        if not m.ok:
            print(f"{rec.slice_id}: failed: {m.error[:200]}")
            continue
        s = m.settings
        noise.append(s["noise_D"])
        print(f"{rec.slice_id}  kernel {m.kernel[:60]}  repeats {s['repeats']}  noise_D {s['noise_D']:.4f}  "
              f"wall {m.wall_s:.1f} s  main kernel matches {s['replay_main_kernel_matches']}")
        print("  " + json.dumps({c: [round(m.values[c], 4), round(s["spread"][c], 4)] for c in s["spread"]}))
    if noise:
        noise.sort()
        print(f"# noise_D over {len(noise)} slices: median {noise[len(noise) // 2]:.4f}, max {noise[-1]:.4f} "
              f"(per component: [median, spread])")


if __name__ == "__main__":
    main()
