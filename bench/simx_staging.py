"""How many of a committed rebuild's final pairs run on SimX with the same staging as their CUDA half (issue 43)?

For each final pair: the candidate a SimX sweep or check generates for a core of 16 warps x 16 threads with the given
distinct local memory (the bytes the local-memory probe measures: 4096 on upstream v2.x SimX at LMEM_LOG_SIZE 14,
16384 with the project's fix, 65536 with the fix at LMEM_LOG_SIZE 16), and which of the pair's staging it keeps.

usage: python bench/simx_staging.py [REBUILD_TGZ] [USABLE_BYTES,...]
  (default bench/results/rebuild_h200_h/rebuild.tgz; 4096,16384,65536)
"""

import json
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from vxsynth.kernels.candidate import load  # noqa: E402
from vxsynth.simx.experiments import staging, sweep_candidate  # noqa: E402
from vxsynth.targets.vortex_host import VortexConfig  # noqa: E402


def main(tgz: Path, sizes: list[int]) -> None:
    print(f"# {tgz.relative_to(ROOT)}; core 16 warps x 16 threads; distinct local memory {sizes} B")
    with tempfile.TemporaryDirectory() as tmp:
        with tarfile.open(tgz) as t:
            t.extractall(tmp, filter="data")
        slices = sorted(p for p in (Path(tmp) / "data" / "suite").iterdir() if (p / "result.json").exists())
        same = {n: 0 for n in sizes}
        some = {n: 0 for n in sizes}
        ring = {n: 0 for n in sizes}
        staged_pairs = 0
        for d in slices:
            tag = json.loads((d / "result.json").read_text())["final"]["check2_record"].split("-")[-2]
            c = load(d / "candidates" / tag)
            cuda = [k for k in ("stage_a", "stage_b", "double_buffer") if getattr(c.strategy, k)]
            staged_pairs += bool(cuda)
            cells = []
            for n in sizes:
                v, _ = sweep_candidate(c.problem, c.precision, c.strategy, [VortexConfig(warps=16, threads=16, local_mem=n)])
                st = staging(v)
                same[n] += st["same_as_pair"]
                some[n] += bool({"stage_a", "stage_b"} & set(st["kept"]))
                full = "ring" not in st or st["ring"]["vortex"] == st["ring"]["cuda"]
                ring[n] += st["same_as_pair"] and full
                cells.append(f"{n}: {st['vortex_local_mem_bytes']:6d} B "
                             + ("same" if st["same_as_pair"] else "drops " + ",".join(st["dropped"]))
                             + (f" ring {st['ring']['vortex']}/{st['ring']['cuda']}" if "ring" in st else ""))
            print(f"{d.name:48s} {c.strategy.threads:4d} thr cuda {','.join(cuda) or 'none':28s} " + " | ".join(cells))
        print(f"# {len(slices)} final pairs, {staged_pairs} stage at least one operand on CUDA")
        for n in sizes:
            print(f"# {n} B distinct: {same[n]} of {len(slices)} keep the pair's staging; "
                  f"{some[n]} keep at least one staged operand; {ring[n]} keep it with the CUDA half's stage-ring depth")


if __name__ == "__main__":
    main(Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else ROOT / "bench/results/rebuild_h200_h/rebuild.tgz",
         [int(x) for x in sys.argv[2].split(",")] if len(sys.argv) > 2 else [4096, 16384, 65536])
