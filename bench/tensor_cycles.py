"""Which MMA instructions spend the reference's tensor-pipe cycles per FLOP: over the speed probe's ncu-measured
finalists of one or more rebuilds (`speed_probe.json` keeps each finalist's signature), the tensor-pipe cycles per
tensor FLOP of each candidate over its slice's reference kernel's, grouped by the reference's instruction (read off its
name: sm90 xmma's warpgroup layout and tile give its wgmma shape; nvjet names give the tile only) and the
candidate's: HMMA by probe form (sync, tile, wmma), HGMMA by its wgmma shape (warpgroups per block, m64nN, groups
left pending).

The tensor-pipe component is active cycles per active SM cycle, so per slice and kernel
  cycles per FLOP  ~  tensor_pipe x busy SMs x duration / FLOPs  =  tensor_pipe x busy SMs / (intensity x DRAM bandwidth)
(FLOPs = arithmetic intensity x DRAM bytes, both components; busy SMs as the probe counts them,
`speed.Footprint.busy`). A group whose median stays off 1 spends other tensor-pipe cycles per FLOP than the
reference, which no grid or duration can make up: the shape to pick is one whose median is near 1. Reads the
rebuilds' folders only (CPU).

usage: python bench/tensor_cycles.py RUN/cuda_first...
"""

import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from vxsynth.kernels.strategy import Strategy, wgmma_grid  # noqa: E402
from vxsynth.reconstruct.speed import Footprint, mma_family  # noqa: E402
from vxsynth.slicing.hints import parse  # noqa: E402


def per_flop(values: dict, busy: int) -> float | None:
    """Tensor-pipe cycles per FLOP up to one constant per chip, from a signature's values and the SMs its grid keeps
    busy; None where one is missing."""
    tp, ai, bw = (values.get(c) for c in ("tensor_pipe", "arith_intensity", "dram_bw"))
    if not tp or not ai or not bw:
        return None
    return tp * busy / (ai * bw)


def instruction(s: Strategy) -> str:
    """'HGMMA 2 WG m64n16 pending 1', 'HMMA tile': the candidate's tensor-core instruction as the groups read."""
    if s.mma != "wgmma":
        return f"{mma_family(s)} {s.mma}"
    wg_m, wg_n = wgmma_grid(s)
    return f"HGMMA {wg_m * wg_n} WG m64n{s.block_n // wg_n}" + (f" pending {s.wgmma_pending}" if s.wgmma_pending else "")


def reference_instruction(kernel: str, family: str) -> str:
    """'HGMMA 1 WG m64n32' (sm90 xmma: its warpgroups along M x N and tile N), 'HGMMA nvjet 64x128' (tile only),
    else the probe's family name of the reference ('HMMA')."""
    h = parse(kernel)
    if "warpgroups" in h:
        wm, wn = h["warpgroups"][:2]
        return f"HGMMA {wm * wn} WG m64n{h['tile'][1] // wn}"
    if h.get("grammar") == "nvjet":
        return f"HGMMA nvjet {h['tile'][0]}x{h['tile'][1]}"
    return family


def ratios(slice_dir: Path) -> tuple[str, list[tuple[str, float]]]:
    """The reference's instruction and (instruction, cycles per FLOP over the reference's) of each measured finalist."""
    probe = json.loads((slice_dir / "speed_probe.json").read_text())
    measured = json.loads((slice_dir / "reference.json").read_text())
    ref = measured["values"]
    family = reference_instruction(measured.get("kernel", ""), probe.get("reference_family", "?"))
    if "blocks" not in (probe.get("reference_footprint") or {}):
        return family, []
    foot = Footprint(**probe["reference_footprint"])
    r = per_flop(ref, foot.busy(foot.blocks))
    out = []
    for v in probe["variants"]:
        c = per_flop((v.get("signature") or {}).get("values") or {}, foot.busy(v.get("blocks", 0)))
        if r and c:
            out.append((instruction(Strategy.from_dict(v["strategy"])), c / r))
    return family, out


def main(runs: list[Path]) -> int:
    probes = sorted(p for run in runs for p in run.glob("*/speed_probe.json") if (p.parent / "reference.json").exists())
    if not probes:
        print(f"tensor_cycles: no */speed_probe.json under {' '.join(map(str, runs))}: name rebuilds' cuda_first "
              "folders (unpack their outputs.tgz)", file=sys.stderr)
        return 2
    groups: dict[tuple[str, str], list[float]] = defaultdict(list)
    slices: dict[tuple[str, str], set] = defaultdict(set)
    for p in probes:
        family, rows = ratios(p.parent)
        for inst, x in rows:
            groups[family, inst].append(x)
            slices[family, inst].add(p.parent.name)
    print(f"# python bench/tensor_cycles.py {' '.join(map(str, runs))}: {len(probes)} probed slices")
    print(f"{'reference instruction':22} {'candidate instruction':28} {'kernels':>7} {'slices':>6} {'median':>6}  range")
    for (family, inst), xs in sorted(groups.items()):
        print(f"{family:22} {inst:28} {len(xs):7d} {len(slices[family, inst]):6d} {statistics.median(xs):6.2f}  "
              f"{min(xs):.2f}-{max(xs):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main([Path(a) for a in sys.argv[1:]]))
