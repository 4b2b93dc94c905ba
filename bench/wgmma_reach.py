"""Which tensor-core suite slices the warpgroup-MMA form can reach (CPU only, no GPU): the committed H200 profiles
sliced as the suite does, each TF32/BF16 slice's informed start (the loop's own start), and the nearest wgmma strategy
to it that the loop's validity rule admits (CUDA rules and the default Vortex core; `strategy.wgmma_variant`, as the
speed probe calls it), and which of its operands the Tensor Memory Accelerator can fill (`tma`: the operands a tensor
map describes, `geometry.tensor_maps`). Prints one line per slice: the variant and its TMA operands, or why there is
none.

usage: python bench/wgmma_reach.py [--out bench/results/wgmma_reach_cpu.txt]
"""

import sys
import tempfile
from pathlib import Path

import yaml

from vxsynth.checks.run import CheckEnv
from vxsynth.kernels.geometry import tensor_maps
from vxsynth.kernels.strategy import wgmma_variant
from vxsynth.reconstruct.loop import LoopEnv, validator
from vxsynth.reconstruct.start import informed
from vxsynth.records import SliceRecord
from vxsynth.slicing.stage import run as slice_run
from vxsynth.targets.vortex_host import HostExecutor, VortexConfig

ROOT = Path(__file__).resolve().parent.parent


def conf(group: str, name: str = "default") -> dict:
    return yaml.safe_load((ROOT / "conf" / group / f"{name}.yaml").read_text())


def main() -> None:
    out = Path(sys.argv[sys.argv.index("--out") + 1]) if "--out" in sys.argv else None
    lines = ["$ python bench/wgmma_reach.py   (CPU; the committed H200 profiles, data/recorded/h200)"]
    env = LoopEnv(CheckEnv(HostExecutor(VortexConfig()), conf("precision")), [])
    reach = total = tma = 0
    with tempfile.TemporaryDirectory() as tmp:
        profiles = sorted(p for p in (ROOT / "data" / "recorded" / "h200").iterdir() if (p / "op_calls.parquet").exists())
        slice_run(profiles, Path(tmp) / "slices", conf("slicing"), conf("precision"), log=lambda s: None)
        for path in sorted((Path(tmp) / "slices").glob("*/slice.json")):
            rec = SliceRecord.load(path)
            if rec.precision == "FP32":
                continue
            valid = validator(rec.problem, rec.precision, env)
            start = informed(rec, conf("start", "informed"), valid)[0]
            near = start if start.tensor_core else start.with_(tensor_core=True)
            v = wgmma_variant(rec.problem, near, valid)
            why = None if v else f"none valid; the nearest by the CUDA rules alone: {wgmma_variant(rec.problem, near)}"
            ops = [m["operand"] for m in tensor_maps(rec.problem, v)] if v and valid(v.with_(tma=True)) is None else []
            total += 1
            reach += why is None
            tma += bool(ops)
            lines.append(f"{rec.slice_id[:48]:49s} " + (f"wgmma {v}; tma: {'+'.join(ops) or 'none'}" if why is None else why))
    lines.append(f"tensor-core slices with a valid wgmma variant of their informed start: {reach} of {total}")
    lines.append(f"... whose variant the Tensor Memory Accelerator can fill (one operand or both): {tma} of {total}")
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if out:
        out.write_text(text)


if __name__ == "__main__":
    main()
