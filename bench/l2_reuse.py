"""A first-order L2 model of the GEMM slices: how often a block's operand reads hit in L2, from the tiling alone, against
the hit rates ncu measured (issue 38: do clusters explain the BF16 linears' L2 gap?).

Each block reads its A tile (its rows, all of its K range) and its B tile once; a cluster of blocks that share an
operand's tile reads it once. Every byte's first read misses, every later one hits: hit = (reads - unique) / reads,
over A and B only (no output, split-K workspace or concurrent misses: an upper bound where many blocks start on the
same tile at once). Rows past M (N) that a box reads as zeros are not read. Per slice: the reference kernel's tiling
and cluster from its name (nvjet names the C^T of torch's product, `start.cluster_shape`), the final pair's strategy
of a fidelity run, and that strategy in the reference's cluster; beside each model the measured L2 hit rate.

usage: python bench/l2_reuse.py SLICES_DIR OUTPUTS_DIR   (CPU; OUTPUTS_DIR: bench/fidelity.py's output folder, e.g.
       bench/results/fidelity_h200_i37/outputs.tgz unpacked; slices without a final pair there are left out)
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from vxsynth.kernels.geometry import elem_bytes  # noqa: E402
from vxsynth.kernels.problem import Gemm  # noqa: E402
from vxsynth.kernels.strategy import Strategy, shared_operand  # noqa: E402
from vxsynth.reconstruct.start import cluster_shape, cluster_target, cublas_swap  # noqa: E402
from vxsynth.records import SliceRecord  # noqa: E402


def hit_rate(p: Gemm, bm: int, bn: int, cluster_m: int = 1, cluster_n: int = 1) -> float:
    """Modelled L2 hit rate (%) of A and B reads: blocks of bm x bn outputs, clusters of `cluster_n` blocks along N
    sharing A's tile and `cluster_m` along M sharing B's."""
    eb = elem_bytes(p)
    a = p.M * p.K * eb                        # one batch's operand: rows past M or N are not read
    b = p.N * p.K * eb
    reads = p.batch * (math.ceil(p.N / bn) / cluster_n * a + math.ceil(p.M / bm) / cluster_m * b)
    unique = (p.batch if p.a_strides[0] else 1) * a + (p.batch if p.b_strides[0] else 1) * b
    return 100.0 * (reads - unique) / reads


def reference_tiling(rec: SliceRecord) -> tuple[int, int, int, int] | None:
    """(block_m, block_n, cluster_m, cluster_n) of the reference kernel as its name gives them, or None."""
    h = rec.name_hints.get("parsed", {})
    if not h.get("tile"):
        return None
    t0, t1 = h["tile"][:2]
    bm, bn = (t1, t0) if cublas_swap(rec) else (t0, t1)
    return (bm, bn, *cluster_shape(rec))


def strategy_rate(p: Gemm, s: Strategy) -> float:
    shared = {"a": (1, s.cluster), "b": (s.cluster, 1)}[shared_operand(s)] if s.cluster > 1 else (1, 1)
    return hit_rate(p, s.block_m, s.block_n, *shared)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        sys.exit(__doc__.strip().splitlines()[-2].strip())
    slices, outputs = Path(argv[0]), Path(argv[1])
    if not slices.is_dir() or not outputs.is_dir():
        sys.exit(f"l2_reuse: {slices if not slices.is_dir() else outputs} is not a folder; give the slices and an "
                 "unpacked fidelity output folder")
    print(f"# python bench/l2_reuse.py {slices} {outputs}")
    print(f"{'slice':40s} {'reference tiling':>22s} {'model':>6s} {'ncu':>6s} | {'final tiling':>20s} {'model':>6s} "
          f"{'ncu':>6s} | {'in ref cluster':>14s} {'model':>6s}")
    for path in sorted(slices.glob("*/slice.json")):
        rec = SliceRecord.load(path)
        res = next(outputs.glob(f"*/{rec.slice_id}/result.json"), None)
        if not isinstance(rec.problem, Gemm) or res is None:
            continue
        r = json.loads(res.read_text())
        fin = Strategy.from_dict(r["final"]["strategy"])
        ref = reference_tiling(rec)
        ref_txt, ref_model = ("-", float("nan")) if ref is None else (
            f"{ref[0]}x{ref[1]} c{ref[2]}x{ref[3]}", hit_rate(rec.problem, *ref))
        cl = cluster_target(rec)
        alt = fin.with_(cluster=cl[0], raster=cl[1]) if cl else None
        print(f"{rec.slice_id[:40]:40s} {ref_txt:>22s} {ref_model:6.1f} {r['reference']['l2_hit_rate']:6.1f} | "
              f"{f'{fin.block_m}x{fin.block_n} c{fin.cluster} {fin.raster}':>20s} {strategy_rate(rec.problem, fin):6.1f} "
              f"{r['final']['values']['l2_hit_rate']:6.1f} | "
              + (f"{f'c{alt.cluster} {alt.raster}':>14s} {strategy_rate(rec.problem, alt):6.1f}" if alt else f"{'-':>14s}"))
    print("# model: A and B reads only, first touch misses (bench/l2_reuse.py); ncu: lts__t_sector_hit_rate.pct of the "
          "fidelity run's reference and final pair; c<m>x<n>: blocks per cluster along M and N")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
