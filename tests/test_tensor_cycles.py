"""bench/tensor_cycles.py on the H100 run r23's probes: which candidate instructions spend the reference's tensor-pipe
cycles per FLOP, how it names the instructions, and its one-line answer where there is nothing to read."""

from __future__ import annotations

import statistics
import subprocess
import sys
from collections import defaultdict

from tests.conftest import ROOT
from vxsynth.kernels.strategy import Strategy

sys.path.insert(0, str(ROOT / "bench"))
import tensor_cycles  # noqa: E402


def _groups(run) -> dict[tuple[str, str], list[float]]:
    out = defaultdict(list)
    for p in sorted((run / "cuda_first").glob("*/speed_probe.json")):
        family, rows = tensor_cycles.ratios(p.parent)
        for inst, x in rows:
            out[family, inst].append(x)
    return out


def test_hmma_references_are_matched_per_flop_by_hmma_kernels_only(r23):
    """Against sm80 HMMA references (11 conv1d slices) the warp-tile and plain mma.sync kernels spend the reference's
    tensor-pipe cycles per FLOP (medians 0.97 and 1.01), every wgmma shape about two thirds (0.64-0.76): at equal time
    and busy SMs a wgmma kernel reads a lower tensor pipe than an HMMA reference."""
    g = _groups(r23)
    hmma = {inst: statistics.median(xs) for (fam, inst), xs in g.items() if fam == "HMMA"}
    assert 0.9 < hmma["HMMA tile"] < 1.1 and 0.9 < hmma["HMMA sync"] < 1.1 and len(g["HMMA", "HMMA tile"]) > 50
    wgmma = {inst: x for inst, x in hmma.items() if inst.startswith("HGMMA")}
    assert len(wgmma) >= 3 and max(wgmma.values()) < 0.8


def test_a_one_warpgroup_m64n32_reference_spends_more_than_two_warpgroups_of_m64n16(r23):
    """conv1d 2048->2048's reference is one warpgroup of m64n32 (sm90 xmma 64x32 tile, warpgroupsize 1x1x1); the
    probe's kernels of two warpgroups of m64n16 (the 64x32 tile on the mma.sync start's thread tile) spend about three
    quarters of its tensor-pipe cycles per FLOP, the mma.sync tile kernels more than it."""
    g = _groups(r23)
    ref = "HGMMA 1 WG m64n32"
    assert statistics.median(g[ref, "HGMMA 2 WG m64n16"]) < 0.85
    assert statistics.median(g[ref, "HMMA tile"]) > 1.0


def test_instruction_names():
    s = Strategy(tensor_core=True, mma="wgmma", block_m=64, block_n=32, block_k=32, thread_m=2, thread_n=4, stages=4)
    assert tensor_cycles.instruction(s) == "HGMMA 2 WG m64n16"
    assert tensor_cycles.instruction(s.with_(thread_n=8, wgmma_pending=1)) == "HGMMA 1 WG m64n32 pending 1"
    assert tensor_cycles.instruction(s.with_(mma="tile", warps_m=4, stages=4)) == "HMMA tile"
    name = "sm90_xmma_fprop_implicit_gemm_f32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize64x32x32_warpgroupsize1x1x1_g1_execute"
    assert tensor_cycles.reference_instruction(name, "HGMMA") == "HGMMA 1 WG m64n32"
    assert tensor_cycles.reference_instruction("nvjet_sm90_tst_64x8_64x16_4x1_v_bz_TNT", "HGMMA") == "HGMMA nvjet 64x8"
    assert tensor_cycles.per_flop({"tensor_pipe": 20.0, "arith_intensity": 30.0}, 64) is None   # no bandwidth


def test_a_folder_without_probes_gets_one_line(tmp_path):
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "tensor_cycles.py"), str(tmp_path)], capture_output=True,
                       text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "no */speed_probe.json" in r.stderr
