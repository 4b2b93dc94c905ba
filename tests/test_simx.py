"""SimX target, offline: PERF parsers (every documented format, failures), command and flag construction per API
generation, installation detection, the host driver compiled against our runtime declarations, grid windows,
configuration sweeps. Integration runs need a Vortex installation and are skipped with the reason otherwise."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.conftest import RECORDED, slice_record
from vxsynth.errors import VxError
from vxsynth.kernels import tensors as T
from vxsynth.kernels.candidate import make
from vxsynth.kernels.problem import Conv, Gemm, from_dict
from vxsynth.kernels.strategy import Strategy
from vxsynth.simx import build as B
from vxsynth.simx.experiments import respond, run as run_experiments
from vxsynth.simx.install import Installation, detect
from vxsynth.simx.perf import PerfError, parse, vortex_signature
from vxsynth.targets.vortex_host import HostExecutor, VortexConfig, lmem_per_block, windows

FX = Path(__file__).parent / "fixtures" / "simx"
API = Path(__file__).resolve().parent.parent / "vxsynth" / "targets" / "vortex_api"


def test_v3_counters():
    core = parse((FX / "v3_core.txt").read_text())
    assert core["format"] == "v3" and (core["instrs"], core["cycles"], core["ipc"]) == (482756, 150340, 3.211)
    assert core["stalls"]["lsu"] == 30 and core["inst_mix"]["fpu"] == 23 and core["branches"]["divergent"] == 0
    dc = parse((FX / "v3_dcache.txt").read_text())
    assert vortex_signature(dc)["dcache_hit_rate"] == pytest.approx(87.5) and dc["dcache"]["miss_r_hit"] == 88
    mem = vortex_signature(parse((FX / "v3_mem.txt").read_text()))
    assert mem["coalescer_misses"] == 300 and mem["memory_requests"] == 1500 and mem["memory_latency"] == 120.5
    assert "l2cache" in parse((FX / "v3_l2_disabled.txt").read_text())["disabled"]
    assert vortex_signature(parse((FX / "v3_tcu_unsupported.txt").read_text()))["tcu"] == "not applicable"


def test_late_v2_counters():
    c = parse((FX / "v2late_core.txt").read_text())
    assert c["format"] == "v2-late" and set(c["per_core"]) == {0, 1} and c["per_core"][1]["cycles"] == 150001
    assert c["scheduler"]["warp_efficiency"] == 3.8 and c["roofline"]["intensity"] == 2.0


def test_v22_counters():
    core = parse((FX / "v22_core.txt").read_text())
    assert core["format"] == "v2.2" and core["ipc"] == pytest.approx(3.211095)
    assert core["core"]["scoreboard_stalls"] == 300 and core["core"]["scoreboard_stalls_pct"] == 15
    assert core["scheduler"] == {"idle": 100, "idle_pct": 5, "stalls": 200, "stalls_pct": 10}
    assert core["core"]["load_latency"] == 35
    sig = vortex_signature(parse((FX / "v22_mem.txt").read_text()))
    assert sig["dcache_hit_rate"] == pytest.approx(87.5) and sig["l2_hit_rate"] == pytest.approx(50.0)
    assert sig["coalescer_misses"] == 300 and sig["memory_requests"] == 1500 and sig["memory_latency"] == 120


@pytest.mark.parametrize("name,match", [("fail_negative.txt", "negative"), ("fail_divergent.txt", "no `PERF: instrs"),
                                        ("fail_garbled.txt", "garbled")])
def test_failed_runs_are_errors(name, match):
    with pytest.raises(PerfError, match=match):
        parse((FX / name).read_text())


def test_flags_per_api_generation():
    cfg = {"cores": 2, "warps": 8, "threads": 16, "dcache_size": 32768, "l2": True, "l2_size": 2097152, "lmem_log_size": 15}
    v2, v3 = B.config_flags(cfg, "v2.2"), B.config_flags(cfg, "v3")
    assert "-DNUM_CORES=2" in v2 and "-DL2_ENABLE" in v2 and "-DL2_CACHE_SIZE=2097152" in v2 and "-DPERF_ENABLE" in v2
    assert "-DVX_CFG_NUM_WARPS=8" in v3 and "-DVX_CFG_L2_ENABLE" in v3 and "-DVX_CFG_L2_SIZE=2097152" in v3
    assert not any("L2" in f for f in B.config_flags({**cfg, "l2": False}, "v2.2"))
    assert B.config_id(cfg) != B.config_id({**cfg, "dcache_size": 65536})


def _installation(root: Path, api: str, kind: str) -> Installation:
    from vxsynth.simx.install import LAYOUT

    files = {n: str(root / rels[0]) for comp in LAYOUT[api].values() for n, rels in comp.items()}
    return Installation(root, api, [f"/tools/{kind}/cc"], kind, Path("/tools"), files, root)


@pytest.mark.parametrize("api,kind", [("v2.2", "llvm-vortex"), ("v3", "llvm-vortex"), ("v2.2", "riscv-gcc"), ("v3", "riscv-gcc")])
def test_build_commands_per_api(api, kind, tmp_path):
    inst = _installation(tmp_path / "vortex", api, kind)
    cmds = B.kernel_build(inst, {"warps": 16}, tmp_path / "k.c", tmp_path / "k.elf", tmp_path / "k.vxbin")
    cc, vxbin = " ".join(cmds[0]), cmds[1]
    kdir = "kernel" if api == "v2.2" else "sw/kernel"
    assert f"{kdir}/scripts/link32.ld" in cc and "--defsym=STARTUP_ADDR=0x80000000" in cc and f"{kdir}/libvortex.a" in cc
    assert vxbin[1].endswith(f"{kdir}/scripts/vxbin.py")
    if kind == "llvm-vortex":
        assert ("+vortex" if api == "v2.2" else "+xvortex") in cmds[0]
    else:
        assert "-march=rv32imf" in cmds[0]
    drv = B.driver_build(inst, {"warps": 16}, tmp_path / "cfg")
    assert drv[-1][2].endswith("runtime/simx" if api == "v2.2" else "sw/runtime/simx")
    assert drv[-1][3] == f"DESTDIR={tmp_path / 'cfg'}" and drv[-1][4] == "CONFIGS=-DNUM_WARPS=16 -DPERF_ENABLE" \
        if api == "v2.2" else drv[-1][4].startswith("CONFIGS=-DVX_CFG_NUM_WARPS=16")
    env = B.run_env(inst, tmp_path / "drv", 2)
    assert env["VORTEX_DRIVER"] == "simx" and env["VORTEX_PROFILING"] == "2"
    assert env["LD_LIBRARY_PATH"].split(":")[0] == str(tmp_path / "drv")
    assert B.PERF_CLASSES[api]["core"] == 1


def _tree(root: Path, api: str, installed: bool = False) -> None:
    from vxsynth.simx.install import LAYOUT, REBUILD

    rels = [r[-1] if installed else r[0] for comp in LAYOUT[api].values() for r in comp.values()]
    for p in rels + ([] if installed else list(REBUILD[api].values())):
        (root / p).parent.mkdir(parents=True, exist_ok=True)
        (root / p).write_text("int vx_spawn_threads(void);" if p.endswith("vx_spawn.h") else "")
    if api == "v3":
        (root / "VX_config.toml").write_text("")


def test_detection_names_what_is_missing(tmp_path, monkeypatch):
    monkeypatch.delenv("VORTEX_HOME", raising=False)
    monkeypatch.delenv("TOOLDIR", raising=False)
    with pytest.raises(VxError, match="set VORTEX_HOME"):
        detect(None)
    (tmp_path / "v2" / "kernel" / "include").mkdir(parents=True)
    (tmp_path / "v2" / "runtime").mkdir()
    with pytest.raises(VxError, match=r"v2\.2 installation .* missing kernel library .*runtime .*SimX \(built\)"):
        (tmp_path / "v2" / "kernel" / "include" / "vx_spawn.h").write_text("int vx_spawn_threads(void);")
        detect(str(tmp_path / "v2"))
    for api in ("v2.2", "v3"):
        _tree(tmp_path / api, api)
        monkeypatch.setenv("PATH", "/nonexistent")
        with pytest.raises(VxError, match="missing toolchain"):
            detect(str(tmp_path / api))
        monkeypatch.setenv("TOOLDIR", str(tmp_path / "tools"))
        (tmp_path / "tools" / "llvm-vortex" / "bin").mkdir(parents=True, exist_ok=True)
        (tmp_path / "tools" / "llvm-vortex" / "bin" / "clang").write_text("")
        inst = detect(str(tmp_path / api))
        assert inst.api == api and inst.compiler_kind == "llvm-vortex" and inst.cannot_rebuild == ()
        monkeypatch.delenv("TOOLDIR")


def test_detection_decides_from_evidence(tmp_path, monkeypatch):
    monkeypatch.setenv("TOOLDIR", str(tmp_path / "tools"))
    (tmp_path / "tools" / "llvm-vortex" / "bin").mkdir(parents=True)
    (tmp_path / "tools" / "llvm-vortex" / "bin" / "clang").write_text("")
    built = tmp_path / "v2"
    _tree(built, "v2.2")
    (built / "runtime" / "libsimx.so").unlink()                              # configured, SimX never built
    with pytest.raises(VxError, match=r"missing SimX \(built\) \(runtime/libsimx.so.*make -C runtime/simx"):
        detect(str(built))
    (built / "runtime" / "libsimx.so").write_text("")
    (built / "kernel" / "include" / "vx_spawn.h").write_text("int vx_spawn_tasks(void);")   # another kernel API
    with pytest.raises(VxError, match="declares no vx_spawn_threads"):
        detect(str(built))
    (built / "kernel" / "include" / "vx_spawn.h").write_text("int vx_spawn_threads(void);")
    (built / "runtime" / "include" / "vortex2.h").write_text("")
    with pytest.raises(VxError, match="intermediate v2 tree"):
        detect(str(built))
    (built / "runtime" / "include" / "vortex2.h").unlink()
    # an out-of-tree build: libraries in the build folder, headers and scripts in the source tree config.mk names
    src, out = tmp_path / "src", tmp_path / "build"
    _tree(src, "v2.2")
    for lib in ("kernel/libvortex.a", "runtime/libvortex.so", "runtime/libsimx.so", "runtime/libvortex-simx.so"):
        (out / lib).parent.mkdir(parents=True, exist_ok=True)
        (src / lib).rename(out / lib)
    (out / "config.mk").write_text(f"VORTEX_HOME ?= {src}\nXLEN ?= 32\n")
    inst = detect(str(out))
    assert inst.source == src and inst.path("libvortex.so") == out / "runtime" / "libvortex.so"
    assert inst.path("link32.ld") == src / "kernel" / "scripts" / "link32.ld" and "vx_spawn_threads" in inst.evidence["entry"]
    # an installed layout (make install): runs at its built configuration, cannot be rebuilt per configuration
    _tree(tmp_path / "inst", "v2.2", installed=True)
    inst = detect(str(tmp_path / "inst"))
    assert inst.path("libvortex.a").parent.name == "lib32" and any("Makefile" in m for m in inst.cannot_rebuild)


def test_simx_host_driver_compiles_against_our_runtime_declarations(tmp_path):
    r = subprocess.run(["gcc", "-std=c11", "-Wall", "-Werror", f"-I{API / 'runtime'}", f"-I{API}", "-c",
                        str(API / "simx_driver.c"), "-o", str(tmp_path / "d.o")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    syms = subprocess.run(["nm", "-u", str(tmp_path / "d.o")], capture_output=True, text=True).stdout
    for fn in ("vx_dev_open", "vx_mem_alloc", "vx_copy_to_dev", "vx_upload_kernel_file", "vx_start", "vx_ready_wait",
               "vx_copy_from_dev", "vx_dev_close"):
        assert fn in syms


def test_grid_windows_cover_the_right_blocks(tmp_path):
    """A window of blocks computes exactly its tiles at the real shape (checked on the host executor)."""
    p = Conv(2, 1, 4, 13, 15, 40, 3, 3, (1, 1), (1, 1), (1, 1), 1, True, "float32")
    s = Strategy(block_m=32, block_n=16, thread_m=2, thread_n=1, raster="col")
    c = make(p, s, "FP32")
    assert c.meta["blocks"] == 7 * 3
    ex = HostExecutor(VortexConfig(max_blocks=6))
    wins = windows(c.meta["blocks"], 6)
    assert wins == [(0, 2), (9, 2), (19, 2)]
    bufs = T.make_inputs(p, 3)
    r = ex.run(c, T.vortex_inputs(p, "FP32", bufs), tmp_path)
    ref = T.reference(p, bufs).numpy()
    assert r.blocks == [[0, 2], [9, 2], [19, 2]] and 0 < r.covered_fraction < 1
    assert np.allclose(r.output[r.covered], ref[r.covered], atol=1e-4)
    assert np.isnan(r.output[~r.covered]).all()                       # nothing outside the window was written
    # block 0 in column raster is (tile m 0, tile n 0): pixels 0..31 of channels 0..15
    assert r.covered.reshape(40, -1)[:16, :32].all() and not r.covered.reshape(40, -1)[16:32, 32:64].any()


def test_cycle_budget_sizes_the_window():
    assert B.cycle_windows(1000, 1e6, 5e7) == [(0, 16), (492, 16), (984, 16)]
    assert B.cycle_windows(10, 1e3, 5e7) == [(0, 10)]
    assert B.cycle_windows(40, 5e7, 3e7) == [(39, 1)]          # not even three blocks fit: the edge block
    assert B.cycle_windows(40, 5e6, 3e7, together=8) == [(16, 8)]   # a parallelism sweep: one launch fills the core
    drawn = {B.cycle_windows(40, 5e7, 3e7, seed)[0] for seed in range(8)}
    assert len(drawn) > 1 and all(k == 1 and 0 <= b < 40 for b, k in drawn)


def test_cost_model_predicts_real_simx_runs_within_2x(h200_slices):
    """Instructions and cycles per block of seven real-slice candidates and 16 small problems measured on a real
    SimX (the 2-D convolutions whose Vortex half gathers its image from global memory included: before the gather
    term, their cycles were predicted 7-9x low; partial tiles: every block runs all K steps)."""
    from vxsynth.simx.executor import cycles_per_block, instrs_per_block

    runs = json.loads((FX / "cost_per_block.json").read_text())["runs"]
    cfg = VortexConfig(cores=1, warps=16, threads=16, local_mem=4096)
    for r in runs:
        rec = slice_record(h200_slices, r["slice"])
        res = RECORDED / "reconstruct" / r["slice"] / "result.json"
        s = Strategy.from_dict(json.loads(res.read_text())["final"]["strategy"]) if r["strategy"] == "final" else Strategy()
        c = make(rec.problem, s, rec.precision, lmem_per_block(s.threads, cfg), drop_staging=True)
        assert 0.5 <= r["instrs"] / instrs_per_block(c) <= 2.0, (r["slice"], r["instrs"] / instrs_per_block(c))
        assert 0.5 <= r["cycles"] / cycles_per_block(c) <= 2.0, (r["slice"], r["cycles"] / cycles_per_block(c))
    small = json.loads((FX / "cost_per_block.json").read_text())["small"]
    assert len(small) == 20
    for r in small:           # the small problems the model was fitted on, the gathers and dcache conflicts added later
        s = Strategy.from_dict(r["strategy"])
        c = make(from_dict(r["problem"]), s, r["precision"], lmem_per_block(s.threads, cfg), drop_staging=True)
        assert 0.5 <= r["instrs"] / instrs_per_block(c) <= 2.0 and 0.5 <= r["cycles"] / cycles_per_block(c) <= 2.0, r["from"]


def test_dcache_conflicts_bring_the_suite_within_2x(monkeypatch):
    """The 18 suite final pairs whose check ran on the real SimX: with the dcache-conflict term, cycles per block
    within 2x on 16 (the known exceptions: a bmm whose K is no multiple of block_k, an M=1 linear);
    without it the BF16 linears whose weight rows are 8 and 16 KB apart are predicted 2.2x and 5.8x low. The
    controlled runs agree: one block of 51x64xK at K 1024 / 1056 runs 6.66 / 2.39 M cycles, and only the row stride of
    a power of two is predicted slower."""
    from vxsynth.simx import executor as X

    fx = json.loads((FX / "cost_per_block.json").read_text())
    cfg = VortexConfig(cores=1, warps=16, threads=16, local_mem=4096)

    def ratios() -> dict:
        out = {}
        for r in fx["suite"]:
            s = Strategy.from_dict(r["strategy"])
            c = make(from_dict(r["problem"]), s, r["precision"], lmem_per_block(s.threads, cfg), drop_staging=True)
            out[r["slice"]] = r["cycles"] / X.cycles_per_block(c)
        return out

    within = {k for k, v in ratios().items() if 0.5 <= v <= 2.0}
    assert len(fx["suite"]) == 18 and len(within) == 16, sorted(set(ratios()) - within)
    conflicted = ["linear-bf16-51x1024x2048-h200-50afe8", "linear-bf16-51x1024x4096-h200-ef514c"]
    assert set(conflicted) <= within
    monkeypatch.setattr(X, "CONFLICT", 0.0)
    assert all(ratios()[k] > 2.0 for k in conflicted)
    pow2, past = (next(r for r in fx["small"] if r["from"].endswith(f"run {i}")) for i in (16, 17))
    c2, c1 = (make(from_dict(r["problem"]), Strategy.from_dict(r["strategy"]), r["precision"],
                   lmem_per_block(256, cfg), drop_staging=True) for r in (pow2, past))
    monkeypatch.undo()
    assert pow2["cycles"] > 2.5 * past["cycles"] and X.crowding(c1) == 1.0 and X.crowding(c2) >= 12
    assert X.cycles_per_block(c2) > 1.5 * X.cycles_per_block(c1)


def test_sweeps_expand_in_hydra_grammar_and_responses_are_judged():
    from flows.simx import expand

    base = {"cores": 1, "warps": 16, "threads": 16, "dcache_size": 16384, "l2": False, "l2_size": 1048576, "lmem_log_size": 14}
    cfgs = expand(["dcache_size=4096,16384,65536"], base)
    assert [c["dcache_size"] for c in cfgs] == [4096, 16384, 65536] and all(c["warps"] == 16 for c in cfgs)
    assert len(expand(["l2=true", "l2_size=262144,1048576"], base)) == 2
    with pytest.raises(VxError, match="not a SimX configuration knob"):
        expand(["bogus=1,2"], base)
    sample = parse((FX / "v3_dcache.txt").read_text())
    runs = iter([{"ok": True, "counters": {"signature": vortex_signature({**sample, "cycles": cyc, "dcache": {"reqs": 8192, "miss_r": miss}})}}
                 for cyc, miss in ((200000, 3000), (160000, 1024), (150000, 400))])
    df = run_experiments(cfgs, lambda cfg: next(runs), "s", "vxk_x")
    v = respond(df, "dcache_size")
    assert v["responds"] and v["cycle_change"] == pytest.approx(-0.25) and "responds as expected" in v["verdict"]
    flat = iter([{"ok": True, "counters": {"signature": vortex_signature(sample)}}] * 3)
    assert not respond(run_experiments(cfgs, lambda cfg: next(flat), "s", "x"), "dcache_size")["responds"]


@pytest.mark.skipif(not os.environ.get("VORTEX_HOME"), reason="no Vortex installation (set VORTEX_HOME to a built v2.2 or v3 tree)")
def test_simx_runs_a_candidate_and_reads_counters(tmp_path):
    from vxsynth.simx.executor import SimxExecutor

    inst = detect()
    p = Gemm("addmm", 1, 17, 24, 16, (0, 16, 1), (0, 1, 16), True, "float32")
    c = make(p, Strategy(block_m=16, block_n=16, thread_m=1, thread_n=1), "FP32")
    ex = SimxExecutor(inst, {"cores": 1, "warps": 16, "threads": 16, "dcache_size": 16384, "l2": False, "lmem_log_size": 14}, tmp_path)
    bufs = T.make_inputs(p, 0)
    r = ex.run(c, T.vortex_inputs(p, "FP32", bufs), tmp_path / "run", full=True)
    assert r.ok, r.error
    assert np.allclose(r.output, T.reference(p, bufs).numpy(), atol=1e-4)
    assert r.counters["signature"]["cycles"] > 0


def test_every_configured_sweep_expands_and_bad_ones_are_one_line_errors():
    """The configured sweeps are lists of quoted overrides (unquoted YAML splits `knob=a,b` into an int list)."""
    from flows import plans
    from flows.config import load
    from flows.simx import expand

    s = load([])["simx"]
    for name, sweep in s["sweeps"].items():
        cfgs = expand(sweep, s["config"])
        assert len(cfgs) >= 2 and len({B.config_id(c) for c in cfgs}) == len(cfgs), name
    with pytest.raises(VxError, match=r"simx.sweeps.dcache=\[4096, 8192\]: give a list of quoted overrides"):
        plans.simx(["simx.sweeps.dcache=[4096,8192]"], "matmul", "dcache")
    for bad in ("[normal]", "[normal,sideways]"):     # one case cannot tell a dead output; unknown case names
        with pytest.raises(VxError, match=r"simx.check_cases=.*give at least two distinct input cases"):
            plans.simx([f"simx.check_cases={bad}"], "matmul", "dcache")
    with pytest.raises(VxError, match=r"simx.shorten='sometimes' must be true or false"):
        plans.simx_checks(["simx.shorten=sometimes"])
    with pytest.raises(VxError, match=r"simx.probe_s=-5 must be a number of seconds, 0 for no probe"):
        plans.simx_checks(["simx.probe_s=-5"])


def test_a_sweep_runs_one_candidate_fitted_to_its_most_restrictive_configuration(h200_slices):
    """The ACT linear's recorded final strategy (8320 B of tiles, 256 threads) on this SimX's measured 4 KB: with
    16 threads per warp one block per core, all 4 KB; with 32, two blocks share them. The candidate is generated for
    2 KB (B's and A's staging dropped), each launch holds two blocks, and a core too small is a one-line error."""
    from vxsynth.simx.experiments import sweep_candidate

    rec = slice_record(h200_slices, "linear-fp32-302x512x3200")
    s = Strategy.from_dict(json.loads((RECORDED / "reconstruct" / rec.slice_id / "result.json").read_text())["final"]["strategy"])
    base = VortexConfig(warps=16, threads=16, local_mem=4096)
    c, together = sweep_candidate(rec.problem, rec.precision, s, [base, VortexConfig(warps=16, threads=32, local_mem=4096)])
    assert together == 2 and c.meta["vortex_local_mem_bytes"] <= 2048 and "stage_a" in c.meta["vortex_differs"]["staging"]
    alone, one = sweep_candidate(rec.problem, rec.precision, s, [base])
    assert one == 1 and alone.meta["vortex_local_mem_bytes"] <= 4096
    with pytest.raises(VxError, match="blocks of 256 threads; a configuration with 8 warps x 16 threads"):
        sweep_candidate(rec.problem, rec.precision, s, [base, VortexConfig(warps=8, threads=16, local_mem=4096)])


def test_check_predictions_take_the_simx_speed_measured_on_this_host_not_its_latest_load(tmp_path):
    """Wall seconds per million SimX cycles vary with the host (3.0-5.9 loaded, 1.2-2.0 idle: bench/results/
    simx_checks_heldout_cpu.txt). Once three runs of at least 1 M cycles were measured on this configuration,
    predictions take their lower quartile: a burst of slow runs under transient load (issue 43: the latest runs at
    5.2-5.4 predicted checks the host then ran at 2.4-2.9), or a one-block probe's start-up-dominated run, does not
    move it."""
    import time

    from vxsynth.simx.executor import SimxExecutor
    from vxsynth.store.io import write_json

    ex = SimxExecutor(Installation(tmp_path, "v2.2", ["riscv64-unknown-elf-gcc"], "riscv-gcc"), {"cores": 1}, tmp_path)
    drv = tmp_path / "driver"
    ex.driver_dir = lambda: drv
    (drv / "measured").mkdir(parents=True)
    assert ex.seconds_per_mcycle(4.0) == (4.0, "simx.s_per_mcycle")
    for i, v in enumerate([2.6, 2.4, 2.9]):
        write_json(drv / "measured" / f"{i}.json", {"cycles_per_block": 1e6, "cycles": 3e7, "s_per_mcycle": v})
    write_json(drv / "measured" / "short.json", {"cycles_per_block": 1e5, "cycles": 1e5, "s_per_mcycle": 0.9})
    assert ex.seconds_per_mcycle(4.0) == (2.4, "25% quantile of 3 runs measured on this host")
    time.sleep(0.01)
    for i, v in enumerate([5.2, 5.4, 5.3, None]):                # the latest runs, under load; one with no cycles
        write_json(drv / "measured" / f"late{i}.json", {"cycles_per_block": 1e6, "cycles": 2e7, "s_per_mcycle": v})
    (drv / "measured" / "trunc.json").write_text("{trunc")                 # unreadable: left out, no error
    speed, where = ex.seconds_per_mcycle(4.0)
    assert speed == 2.6 and where == "25% quantile of 6 runs measured on this host"   # not the latest runs' 5.3
    assert ex.seconds_per_mcycle(4.0, min_cycles=5e7)[0] == 4.0             # none long enough: the configured figure


def test_a_long_reduction_is_shortened_in_whole_tiles_with_the_ops_strides(h200_slices):
    """The suite slices whose one SimX block takes minutes: a GEMM's K loses whole block_k tiles (the ragged tail
    kept, strides unchanged, so rows stay as far apart in memory), a convolution's input channels halve; every
    shortening is one the strategy still implements, and it cuts the predicted cycles about in proportion."""
    from vxsynth.simx.executor import cycles_per_block
    from vxsynth.simx.final_check import shorter

    cfg = VortexConfig(cores=1, warps=16, threads=16, local_mem=4096)
    bmm = slice_record(h200_slices, "matmul-fp32-8x302x64x302")          # K 302: a ragged last tile of 6
    p, s = bmm.problem, Strategy(block_k=8)
    got = shorter(p, s)
    assert [k for _, _, _, k in got] == [150, 78, 38, 22, 14]      # 18, 9, 4, 2, 1 of its 37 tiles of 8, and the tail 6
    assert all(q.K % 8 == 6 and q.a_strides == p.a_strides and q.b_strides == p.b_strides and q.M == p.M for q, *_ in got)
    conv = slice_record(h200_slices, "conv1d-tf32-2048to2048k5l16")
    p = conv.problem
    s = Strategy.from_dict(json.loads((RECORDED / "reconstruct" / conv.slice_id / "result.json").read_text())["final"]["strategy"])
    got = shorter(p, s)
    assert got and got[0][1:] == ("C", 2048, 1024) and all(q.K == p.K and q.R == p.R and q.c_stored == 2048 for q, *_ in got)
    full, half = (cycles_per_block(make(q, s, conv.precision, lmem_per_block(s.threads, cfg), drop_staging=True))
                  for q in (p, got[0][0]))
    assert 0.4 < half / full < 0.6


@pytest.mark.parametrize("layout,conv_form", [("nhwc", "implicit"), ("nchw", "implicit"), ("nchw", "direct")])
def test_a_shortened_convolution_reads_its_channels_at_the_ops_strides_and_computes_them(tmp_path, layout, conv_form):
    """A convolution shortened to its first C channels keeps the image and weights laid out with all of them (pixels
    and filters as far apart as in the op: the dcache's conflicts depend on it), and its pair computes the convolution
    of exactly those channels (check 2 on the host executor); emitted with its own strides, not the full problem's."""
    from dataclasses import replace

    from vxsynth.checks.run import CheckEnv, run
    from tests.conftest import conf

    full = Conv(2, 1, 24, 7, 9, 16, 3, 3, (1, 1), (1, 1), (1, 1), 1, True, "float32")
    short = replace(full, C=6, c_layout=24)
    s = Strategy(block_m=16, block_n=16, thread_m=2, thread_n=2, block_k=8, layout=layout, conv_form=conv_form,
                 stage_a=conv_form == "implicit", stage_b=conv_form == "implicit")
    assert T.storage_sizes(short) == T.storage_sizes(full)
    bufs = T.make_inputs(short, 3)
    v = T.views(short, bufs)
    assert v["a"].shape == (1, 6, 7, 9) and v["a"].stride() == (24 * 63, 63, 9, 1) and v["b"].stride() == (216, 9, 3, 1)
    c = make(short, s, "FP32")
    assert c.vortex_source != make(replace(full, C=6), s, "FP32").vortex_source
    rec = run(c, "conv", "r0", CheckEnv(HostExecutor(VortexConfig()), conf("precision")), tmp_path, None)["vortex_ref"]
    assert rec.verdict == "pass", rec.reason
    ref = T.reference(short, bufs)
    x, w = bufs["a"].view(1, 24, 7, 9), bufs["b"].view(16, 24, 3, 3)
    assert torch.allclose(ref, torch.nn.functional.conv2d(x[:, :6], w[:, :6], bufs["bias"], 1, 1))


def test_the_report_says_when_a_simx_check_ran_on_a_shortened_reduction():
    """A real SimX check (the H200 final pair of the ACT conv2d 256->256, one block of which was predicted at 366 s):
    it ran on half the input channels, and the report's line and the check's reason say so."""
    from vxsynth.report.build import _simx_check

    c = json.loads((FX / "check_shortened_conv2d.json").read_text())
    assert c["verdict"] == "pass" and c["reduction"]["full_predicted_s"] > 300 >= c["cost"]["predicted_s"]
    assert "on C 128 of 256" in _simx_check(c, short=True) and "checked on C 128 of 256" in c["reason"]
    whole = {**c, "reduction": None}
    assert " of 256" not in _simx_check(whole, short=True)
