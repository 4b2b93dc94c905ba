"""bench/fidelity.py on real data: the re-scored D of its report (`report.build.rescored`) on the committed H200
outputs, and no slice marked done on a host that cannot run its GPU steps."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys

import pytest

from tests.conftest import ROOT


def test_rescored_d_leaves_out_coalescing_of_a_few_bias_loads(i37):
    """conv1d 1024->1024 L16 on the H200: final D 0.1152 as the loop scored it, with coalescing 25% (its bias LDGs)
    against the reference's 99.7% (544 LDGs beside LDGSTS); re-scored under today's rules both sides' coalescing is NaN
    and D is the mean of the other gaps. A slice whose coalescing was already NaN on both sides keeps its D."""
    from vxsynth.records import LoopResult
    from vxsynth.report.build import rescored

    folder = i37 / "conv1d-tf32-1024to1024k5l16-h200-424588"
    r = json.loads((folder / "bench.json").read_text())
    assert r["final"]["D"] == pytest.approx(0.1152, abs=1e-4) and r["final"]["gaps"]["gld_coalescing"] < -0.7
    others = [v for c, v in r["final"]["gaps"].items() if c != "gld_coalescing" and not math.isnan(v)]
    assert rescored(folder, LoopResult.load(folder / "result.json")) == pytest.approx(sum(abs(v) for v in others) / len(others))
    assert rescored(folder, LoopResult.load(folder / "result.json")) == pytest.approx(0.0451, abs=1e-4)
    same = i37 / "linear-bf16-51x1024x2048-h200-50afe8"
    r2 = json.loads((same / "bench.json").read_text())
    assert rescored(same, LoopResult.load(same / "result.json")) == pytest.approx(r2["final"]["D"])


def test_no_slice_is_marked_done_where_the_gpu_steps_cannot_run(h200_slices, tmp_path):
    """On this GPU-less host an h200 config ends the worker at once with the reason, and writes no bench.json that a
    later resume on the H200 would skip as done."""
    cfg = tmp_path / "h200.json"
    cfg.write_text(subprocess.run([sys.executable, "-m", "flows.cli", "config", "platform=h200"], cwd=ROOT,
                                  capture_output=True, text=True, check=True).stdout)
    out = tmp_path / "fid"
    p = subprocess.run([sys.executable, str(ROOT / "bench" / "fidelity.py"), str(cfg), str(h200_slices), str(out),
                        "--gpus", "1", "--ablation", "0", "linear-fp32-100x512x512"], capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0 and "# worker 0 ended with rc 1" in p.stdout
    log = (out / "worker0.log").read_text().strip().splitlines()
    code = (out / "code").resolve()
    assert log == [f"# vxsynth from {code / 'vxsynth'}, worker {code / 'bench' / 'fidelity.py'}",
                   "fidelity: no slice run, the GPU steps cannot run here: platform 'h200' needs an NVIDIA GPU but "
                   "this machine has none; run on the h200 host (or use platform=cpu)"]
    assert not list(out.rglob("bench.json"))


def test_a_resumed_output_refuses_another_platforms_config(h200_slices, tmp_path):
    """An output folder run with the H100 config is not resumed with the H200's: one line naming what differs, before
    any worker starts, and nothing in the folder is touched."""
    out = tmp_path / "fid"
    cfgs = {}
    for platform in ("h100", "h200"):
        cfgs[platform] = tmp_path / f"{platform}.json"
        cfgs[platform].write_text(subprocess.run([sys.executable, "-m", "flows.cli", "config", f"platform={platform}"],
                                                 cwd=ROOT, capture_output=True, text=True, check=True).stdout)
    run = lambda cfg: subprocess.run([sys.executable, str(ROOT / "bench" / "fidelity.py"), str(cfg), str(h200_slices),  # noqa: E731
                                      str(out), "--gpus", "1", "--ablation", "0", "linear-fp32-100x512x512"],
                                     capture_output=True, text=True, timeout=300)
    assert run(cfgs["h100"]).returncode == 0
    _refused(lambda: run(cfgs["h200"]), out, f"fidelity: {out} was run with another config (differs in platform; "
             f"platform h100 then, h200 now): give a new OUT, or the config it was run with ({out / 'config.json'})")


def test_a_resumed_output_runs_the_code_it_began_with(h200_slices, tmp_path):
    """The first run copies vxsynth/, conf/ and bench/fidelity.py to OUT/code and records the package's hash
    (OUT/code.json); its workers, and a resume's, run and import that copy whatever the tree holds (a run spanning
    sessions keeps one code). A copy changed since, or a run begun before the copies with other code, stops in one
    line before any worker starts, the folder as it was."""
    sys.path.insert(0, str(ROOT / "bench"))
    import fidelity

    cfg = tmp_path / "h100.json"
    cfg.write_text(subprocess.run([sys.executable, "-m", "flows.cli", "config", "platform=h100"], cwd=ROOT,
                                  capture_output=True, text=True, check=True).stdout)
    out = tmp_path / "fid"
    code = out / "code"
    run = lambda: subprocess.run([sys.executable, str(ROOT / "bench" / "fidelity.py"), str(cfg), str(h200_slices),  # noqa: E731
                                  str(out), "--gpus", "1", "--ablation", "0", "linear-fp32-100x512x512"],
                                 capture_output=True, text=True, timeout=300)
    imported = lambda: [s for s in (out / "worker0.log").read_text().splitlines() if s.startswith("# vxsynth from")][-1]  # noqa: E731
    assert run().returncode == 0
    now = fidelity.code_hash()
    assert json.loads((out / "code.json").read_text()) == {"vxsynth_sha256": now} and fidelity.code_hash(code) == now
    assert (code / "conf" / "sandbox" / "default.yaml").is_file() and not list(code.rglob("__pycache__/*.py"))
    at = code.resolve()
    assert imported() == f"# vxsynth from {at / 'vxsynth'}, worker {at / 'bench' / 'fidelity.py'}"
    assert (code / "bench" / "fidelity.py").read_bytes() == (ROOT / "bench" / "fidelity.py").read_bytes()
    # the run began with other code than the tree's: it resumes with that code, and says so
    (code / "vxsynth" / "run_mark.py").write_text("MARK = 1\n")
    began = fidelity.code_hash(code)
    (out / "code.json").write_text(json.dumps({"vxsynth_sha256": began}))
    p = run()
    assert p.returncode == 0 and (f"# resumed with the vxsynth the run began with (sha256 {began[:12]}, {code}), not "
                                  f"the tree's ({now[:12]})") in p.stdout.splitlines()
    assert imported().startswith(f"# vxsynth from {(code / 'vxsynth').resolve()}, worker ")
    # the copy changed since the run began
    (code / "vxsynth" / "run_mark.py").write_text("MARK = 2\n")
    _refused(run, out, f"fidelity: {code} changed since the run began (sha256 {fidelity.code_hash(code)[:12]} now, "
                       f"{began[:12]} in {out / 'code.json'}): give a new OUT")
    # a run begun before the copies (code.json only) under other code
    shutil.rmtree(code)
    (out / "code.json").write_text(json.dumps({"vxsynth_sha256": "0" * 64}))
    _refused(run, out, f"fidelity: {out} was run with other vxsynth code (sha256 000000000000 then, {now[:12]} now) and "
                       "holds no copy of it: give a new OUT, or run it with the vxsynth/ it began with (its "
                       "bench/results row names the tree)")


def _refused(run, out, why: str) -> None:
    """`run()` stops in the one line `why` before any worker starts, and leaves `out` as it was."""
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    p = run()
    assert p.returncode == 1 and not p.stdout and p.stderr.strip().splitlines() == [why]
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before


def test_timing_and_probe_reach_of_the_r18_rebuild(r18, tmp_path):
    """bench/rebuild_timing.py and bench/probe_rerank.py on the committed H100 rebuild r18 (fidelity_h100_r18): round
    0's checks of the conv1d 2048->2048 start took 2.6 s (its cases at once), its search ran two batches; the probe's
    fastest variant was within 1.2x of the reference's ncu time on 12 of the 13 slices probed (not Pi0's 51x1024x4096,
    1.37x). A folder that is not a rebuild's gets one line."""
    run = r18
    bench = lambda name, *a: subprocess.run([sys.executable, str(ROOT / "bench" / name), *map(str, a)],  # noqa: E731
                                            capture_output=True, text=True, cwd=ROOT, timeout=120)
    rows = {ln.split()[0]: ln.split()[1:] for ln in bench("rebuild_timing.py", run).stdout.splitlines()[1:]}
    assert len(rows) == 12 and "conv2d-tf32-128to128k3x3i60x80-h200-00da6c" not in rows      # cut mid-slice: no result
    probe_s, events, ncu, r0_checks, _, batches = rows["conv1d-tf32-2048to2048k5l16-h200-2c2c11"][:6]
    assert float(r0_checks) == pytest.approx(2.6, abs=0.05) and int(batches) == 2
    assert float(probe_s) == pytest.approx(float(events) + float(ncu), abs=0.11)
    reach = bench("probe_rerank.py", run / "cuda_first").stdout.splitlines()
    assert reach[-1].endswith("within 1.2x of the reference's ncu time on 12, within 1.5x on 13")
    assert next(ln for ln in reach if ln.startswith("linear-bf16-51x1024x4096")).split()[-1] == "1.37"
    for name, arg in (("rebuild_timing.py", tmp_path), ("probe_rerank.py", tmp_path)):
        p = bench(name, arg)
        assert p.returncode == 1 and len(p.stderr.strip().splitlines()) == 1 and str(tmp_path) in p.stderr


def test_spread_between_two_rebuilds_of_the_same_slices(r18, r19, tmp_path):
    """bench/run_spread.py on the committed H100 rebuilds r18 and r19: 12 slices finished in both; the same probe
    finalist measured in both runs differs by at most 0.01 in D; the cells it counts are the report's (67% and 60%,
    `fidelity_h100_r19/report.txt`); the linear 51x4096x1024 started from the same strategy in both and ended apart.
    Folders that are not rebuilds get one line; a slice whose result cannot be read, a line naming it and the run."""
    run = lambda *a: subprocess.run([sys.executable, str(ROOT / "bench" / "run_spread.py"), *map(str, a)],  # noqa: E731
                                    capture_output=True, text=True, cwd=ROOT, timeout=120)
    out = run(r18, r19).stdout.splitlines()
    rows = {ln.split()[0]: ln.split()[1:] for ln in out[1:] if not ln.startswith("#")}
    assert len(rows) == 12 and out[-4] == "# 12 slices in both runs; 7 started from the same strategy"
    same, d0, d = rows["linear-bf16-51x4096x1024-h200-77565c"][:3]
    assert same == "yes" and d == "0.0284/0.0409"
    finalists = out[-3].split("|D a - D b| median ")[1]
    assert float(finalists.split(",")[0]) < 0.002 and float(finalists.split("max ")[1]) < 0.01
    assert "cells 67% a, 60% b" in out[-1] and "median final D 0.0373 a, 0.0411 b" in out[-1]
    p = run(tmp_path, r19)
    assert p.returncode == 1 and len(p.stderr.strip().splitlines()) == 1 and str(tmp_path) in p.stderr
    bad = tmp_path / "bad"
    shutil.copytree(r19, bad)
    (bad / "cuda_first" / "linear-bf16-51x4096x1024-h200-77565c" / "result.json").write_text("{truncated")
    out = run(r18, bad).stdout.splitlines()
    assert [ln.split()[1] for ln in out if ln.startswith("linear-bf16-51x4096x1024")] == ["unreadable:"]
    assert "# 11 slices in both runs" in out[-4]


def test_finalists_by_form_on_the_r20_probes(r20, h200_slices, tmp_path):
    """bench/probe_finalists.py on the committed H100 rebuild r20: today's finalists keep every variant each probe
    measured and add the nearest of each form near the reference's time (and of each thread count of the
    reference's family), a TMA-fed wgmma kernel for bmm 8x51x355x256 (its probe measured none); a folder with no probes, or slices that are not the rebuild's, is one line."""
    run = lambda *a: subprocess.run([sys.executable, str(ROOT / "bench" / "probe_finalists.py"), *map(str, a)],  # noqa: E731
                                    capture_output=True, text=True, cwd=ROOT, timeout=300)
    p = run(r20 / "cuda_first", h200_slices)
    rows = {ln.split()[0]: ln.split()[1:] for ln in p.stdout.splitlines()[1:] if not ln.startswith("#")}
    assert p.returncode == 0 and len(rows) == 12 and all(r[2] == "0" for r in rows.values())
    saved, today, _, *forms = rows["matmul-bf16-8x51x355x256-h200-542242"]
    assert "wgmma/tma" in forms and int(today) == int(saved) + len(forms)
    assert any(int(r[1]) > int(r[0]) for k, r in rows.items() if not k.startswith("matmul"))
    broken = tmp_path / "broken"
    shutil.copytree(r20 / "cuda_first" / "matmul-bf16-8x51x355x256-h200-542242", broken / "matmul-bf16-8x51x355x256-h200-542242")
    (broken / "matmul-bf16-8x51x355x256-h200-542242" / "speed_probe.json").write_text("{truncated")
    for bad in ((tmp_path, h200_slices), (r20 / "cuda_first", tmp_path), (broken, h200_slices)):
        p = run(*bad)
        assert p.returncode == 1 and len(p.stderr.strip().splitlines()) == 1 and str(tmp_path) in p.stderr


def test_tensor_pipe_per_flop_follows_the_mma_instructions(r20):
    """bench/grid_busy.py on the committed H100 rebuild r20: where reference and final kernel issue the same MMA
    instructions the busy-SM model predicts the tensor-pipe ratio within 30% in the median; wgmma finals of HMMA
    (mma.sync/xmma) references spend about half as many tensor-pipe cycles per FLOP as the model expects."""
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "grid_busy.py"), str(r20 / "cuda_first")],
                         capture_output=True, text=True, cwd=ROOT, timeout=120).stdout.splitlines()
    pairs = {ln.split(":")[0]: float(ln.split("median ")[1].split()[0]) for ln in out if ln.startswith("# reference")}
    assert abs(math.log(pairs["# reference HGMMA, final HGMMA"])) < math.log(1.3)
    assert pairs["# reference HMMA, final HGMMA"] < 0.7
    rows = [ln for ln in out[1:] if not ln.startswith("#")]
    assert len(rows) == 12 and all(ln.split()[-1] in {"HMMA/HGMMA", "HGMMA/HGMMA", "HMMA/HMMA"} for ln in rows)
