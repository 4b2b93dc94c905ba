"""Bare-host entry (no Prefect/DVC/Hydra): `python -m vxsynth.reconstruct CONFIG.json SLICE.json OUT_DIR WORK_DIR`
reconstructs one slice on the GPU(s) this process sees (CUDA_VISIBLE_DEVICES); the flow runs one per GPU slot.

CONFIG.json is the composed config (`vxsynth config platform=h200`). Log lines go to stdout, the loop's result to
OUT_DIR/result.json; exit status 0 when the loop finished, 1 (with the error on stderr) when it failed. Started by the
flow, it ends when the flow's process does (`gpus.die_with_parent`)."""

import json
import sys
import traceback
from pathlib import Path

from vxsynth.reconstruct.gpus import die_with_parent
from vxsynth.reconstruct.setup import loop_env, run_slice
from vxsynth.records import SliceRecord


def main() -> int:
    if len(sys.argv) != 5:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    die_with_parent()
    cfg, rec = json.loads(Path(sys.argv[1]).read_text()), SliceRecord.load(Path(sys.argv[2]))
    out, work = Path(sys.argv[3]), Path(sys.argv[4])
    say = lambda s: print(s, flush=True)   # noqa: E731
    try:
        env, why = loop_env(cfg, cfg["platform"], work)
        if why:
            say(f"[{rec.slice_id}] GPU steps skipped: {why}")
        run_slice(cfg, rec, out, work, env, log=say)
    except Exception as e:  # noqa: BLE001 - the parent records the slice as failed with this
        print(f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=5)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
