"""The informed start's K tile on every suite slice, with `target.unstaged_fallback` off and on (CPU, no GPU): the
reference's K tile where its name states one, the start's block_k and stages either way, and why a tile was refused.

usage: python bench/start_tiles.py CONFIG.json SLICES_DIR
CONFIG.json is the composed config (`vxsynth config > cfg.json`); SLICES_DIR holds slice records (`vxsynth slice
slicing.profiles=[data/recorded/h200]` writes the default suite to data/slices). Runs bare (no Prefect/Hydra).
"""

import json
import sys
from pathlib import Path

from vxsynth.checks.run import CheckEnv
from vxsynth.reconstruct.loop import LoopEnv, validator
from vxsynth.reconstruct.setup import records_in
from vxsynth.reconstruct.start import informed
from vxsynth.records import SliceRecord
from vxsynth.targets.vortex_host import HostExecutor, VortexConfig


def _start(rec: SliceRecord, cfg: dict, fallback: bool):
    vcfg = VortexConfig.from_dict({**cfg["target"], "unstaged_fallback": fallback})
    env = LoopEnv(CheckEnv(HostExecutor(vcfg), cfg["precision"]), [])
    s, prov = informed(rec, cfg["start"], validator(rec.problem, rec.precision, env))
    k = next((k for k in prov["knobs"] if k["knob"] == "block_k"), None)
    return s, k


def main() -> None:
    cfg = json.loads(Path(sys.argv[1]).read_text())
    print(f"{'slice':<50} {'ref K':>5}  {'off: K st':>9}  {'on: K st':>8}  why refused (off)")
    named = cut = taken = changed = 0
    for rec in records_in(Path(sys.argv[2]), None):
        off, k_off = _start(rec, cfg, False)
        on, k_on = _start(rec, cfg, True)
        target = k_off["target"] if k_off and "name" in k_off["fact"] else None
        named += target is not None
        cut += target is not None and off.block_k != target
        taken += target is not None and off.block_k != target and on.block_k == target
        changed += off.block_k != on.block_k
        why = k_off.get("why_not", "") if k_off and not k_off["mirrored"] else ""
        print(f"{rec.slice_id:<50} {target or '-':>5}  {off.block_k:>5} {off.stages:>3}  {on.block_k:>4} {on.stages:>3}  {why[:70]}")
    print(f"\nslices whose reference names a K tile: {named}; start below it with the fallback off: {cut}, "
          f"of which the fallback takes it: {taken}; starts whose K tile the fallback changes: {changed}")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main()
