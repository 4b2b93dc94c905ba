"""Bare-host entry (no Prefect/DVC/Hydra): `python -m vxsynth.profiling PLATFORM.json WORKLOAD.json OUT_DIR`.

The JSON files are the composed `platform` and `workload` configs (`vxsynth config platform=h200 workload=act`).
"""

import json
import sys
from pathlib import Path

from vxsynth.errors import VxError
from vxsynth.profiling.stage import profile_workload


def main() -> int:
    if len(sys.argv) != 4:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    try:
        pcfg, wcfg = (json.loads(Path(p).read_text()) for p in sys.argv[1:3])
        summary = profile_workload(pcfg, wcfg, Path(sys.argv[3]), log=lambda s: print(s, flush=True))
    except VxError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(json.dumps(summary, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
