"""bench/l2_reuse.py's first-order L2 model on the real BF16 linears and the H200 fidelity run of issue 37: the model
of each reference's tiling and cluster is near the hit rate ncu measured, and the reference's cluster lowers the
final pair's modelled rate (one cluster of blocks reads the shared A tile once)."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import ROOT, slice_record


def test_l2_model_of_the_references_tiling_and_the_finals_in_their_cluster(h200_slices, i37):
    sys.path.insert(0, str(ROOT / "bench"))
    from l2_reuse import hit_rate, reference_tiling, strategy_rate

    from vxsynth.kernels.strategy import Strategy
    from vxsynth.reconstruct.start import cluster_target

    for prefix in ("linear-bf16-51x1024x2048", "linear-bf16-51x1024x4096", "linear-bf16-51x256x1024"):
        rec = slice_record(h200_slices, prefix)
        r = json.loads((i37 / rec.slice_id / "result.json").read_text())
        ref = reference_tiling(rec)
        assert abs(hit_rate(rec.problem, *ref) - r["reference"]["l2_hit_rate"]) < 5, (prefix, ref)
        fin = Strategy.from_dict(r["final"]["strategy"])
        n, raster = cluster_target(rec)
        assert strategy_rate(rec.problem, fin.with_(cluster=n, raster=raster)) < strategy_rate(rec.problem, fin) - 10
    p = slice_record(h200_slices, "linear-bf16-51x1024x4096").problem     # 51 x 4096 A, 1024 x 4096 B, BF16
    a, b = 51 * 4096 * 2, 1024 * 4096 * 2
    assert hit_rate(p, 64, 32, 1, 4) == 100 * (8 * a - a) / (8 * a + b)    # 32 N tiles, one A read per cluster of 4


def test_bad_folder_is_one_line(h200_slices, tmp_path):
    p = subprocess.run([sys.executable, str(ROOT / "bench" / "l2_reuse.py"), str(h200_slices), str(tmp_path / "none")],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode != 0 and p.stdout == "" and len(p.stderr.strip().splitlines()) == 1 and "not a folder" in p.stderr
