"""Issue 43, offline: SimX runs the pair's strategy (the project's local-memory fix of SimX, recorded in each build;
what a sweep kept or dropped of the pair's staging, said in the summary and the report), sweeps over the same windows
in every configuration with verdicts on per-block figures, a local-memory sweep that can respond, host-speed and
probe rules, and the check coverage target. The same on a real SimX: tests/test_simx_real.py."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import RECORDED, check_record, slice_record
from vxsynth.errors import VxError
from vxsynth.kernels.candidate import make
from vxsynth.kernels.problem import Conv
from vxsynth.kernels.strategy import Strategy
from vxsynth.simx import build as B
from vxsynth.simx import experiments as E
from vxsynth.simx.install import Installation
from vxsynth.targets.vortex_host import VortexConfig

UPSTREAM_LOCAL_MEM = """class LocalMem::Impl {
protected:
\tuint64_t to_local_addr(uint64_t addr) {
\t\tuint32_t total_lines = config_.capacity / config_.line_size;
\t\tuint32_t line_bits = log2ceil(total_lines);
\t\tuint32_t offset = bit_getw(addr, 0, line_bits-1);
\t\treturn offset;
\t}
public:
"""


def _tree(root: Path, local_mem: str = UPSTREAM_LOCAL_MEM) -> Installation:
    sim = root / "sim" / "simx"
    sim.mkdir(parents=True)
    (sim / "local_mem.cpp").write_text(local_mem)
    (sim / "local_mem.h").write_text("// header\n")
    (sim / "Makefile").write_text("# sim\n")
    (root / "runtime" / "simx").mkdir(parents=True)
    (root / "runtime" / "simx" / "Makefile").write_text("# driver\n")
    return Installation(root, "v2.2", ["cc"], "riscv-gcc", source=root)


def test_the_local_memory_fix_is_applied_to_a_private_copy_and_recorded(tmp_path):
    """The upstream to_local_addr keeps log2(capacity/4) bits of a byte address (a quarter distinct): the build of each
    configuration compiles a patched copy (the installation untouched), links its own libsimx.so, and records it; a
    SimX whose code differs is built as it is and the record says why; the fix has its own cache id."""
    inst = _tree(tmp_path / "vx")
    dest = tmp_path / "build"
    src, rec = B.patched_sources(inst, {"warps": 16}, dest)
    assert src == dest / "simx-src" and rec[0]["applied"] and rec[0]["id"] == "lmem-addr-v1"
    patched = (src / "local_mem.cpp").read_text()
    assert "log2ceil(config_.capacity)" in patched and "line_bits" not in patched
    assert (src / "local_mem.h").is_symlink() and (tmp_path / "vx/sim/simx/local_mem.cpp").read_text() == UPSTREAM_LOCAL_MEM
    assert rec[0]["sha256_before"] != rec[0]["sha256_after"]
    cmds = B.driver_build(inst, {"warps": 16}, dest, src)
    assert cmds[0][:2] == ["make", "-C"] and cmds[0][2].endswith("sim/simx") and f"SRC_DIR={src}" in cmds[0]
    assert cmds[0][-1] == f"{dest}/libsimx.so" and cmds[-1][2].endswith("runtime/simx")
    assert len(B.driver_build(inst, {"warps": 16}, dest)) == 1                       # unpatched: the driver's make only
    off, why = B.patched_sources(inst, {"lmem_fix": False}, tmp_path / "off")
    assert off is None and not why[0]["applied"] and "off" in why[0]["reason"]
    other = _tree(tmp_path / "v3", "uint64_t to_local_addr(uint64_t addr) { return addr & mask_; }")
    none, why = B.patched_sources(other, {}, tmp_path / "o")
    assert none is None and "not the code the fix is for" in why[0]["reason"]
    cfg = {"cores": 1, "warps": 16, "threads": 16, "lmem_log_size": 14}
    assert B.config_id(cfg) == B.config_id({**cfg, "lmem_fix": True}) != B.config_id({**cfg, "lmem_fix": False})
    from vxsynth.store.io import sha256_obj                              # the id builds had before the fix existed
    assert B.config_id({**cfg, "lmem_fix": False}) == sha256_obj({k: cfg.get(k) for k in B.KNOBS if k != "l2_size"})[:10]
    assert not any("lmem_fix" in f for f in B.config_flags({**cfg, "lmem_fix": True}, "v2.2"))


def _act_linear(h200_slices):
    rec = slice_record(h200_slices, "linear-fp32-302x512x3200")
    s = Strategy.from_dict(json.loads((RECORDED / "reconstruct" / rec.slice_id / "result.json").read_text())["final"]["strategy"])
    return rec, s


def test_a_sweep_says_which_staging_it_kept_and_when_it_ran_a_variant(h200_slices):
    """The ACT linear's final pair stages 8320 B of tiles: on the fixed SimX (16 KB distinct) the sweep runs the pair's
    staging; on the upstream SimX (4 KB) it drops B's and A's staging, and the summary and the report's decision-
    applicability line say that these figures describe a variant, not the pair."""
    from vxsynth.report.build import _applicability

    rec, s = _act_linear(h200_slices)
    fixed, _ = E.sweep_candidate(rec.problem, rec.precision, s, [VortexConfig(warps=16, threads=16, local_mem=16384)])
    st = E.staging(fixed)
    assert st["same_as_pair"] and st["kept"] == [k for k in ("stage_a", "stage_b", "double_buffer") if getattr(s, k)]
    assert st["vortex_local_mem_bytes"] == 8320 and not st["dropped"]
    upstream, _ = E.sweep_candidate(rec.problem, rec.precision, s, [VortexConfig(warps=16, threads=16, local_mem=4096)])
    sv = E.staging(upstream)
    assert not sv["same_as_pair"] and "stage_a" in sv["dropped"] and sv["vortex_local_mem_bytes"] <= 4096
    assert "4096 B per block" in sv["why"]
    row = lambda st, w: {"config": {"dcache_size": 4096}, "ok": True, "windows": w, "staging": st}   # noqa: E731
    base = {"verdict": "v", "check2": {"verdict": "pass"}, "strategy_from": "x", "cost": {"windows": [[5, 1]]}}
    pair = {**base, "staging": st, "runs_the_pair": True, "rows": [row(st, [[5, 1]]), row(st, [[5, 1]])]}
    variant = {**base, "staging": sv, "runs_the_pair": False, "rows": [row(sv, [[5, 1]]), row(sv, [[5, 1]])]}
    old = dict(base)
    lines = _applicability({"sweeps": {"dcache": pair, "l2": variant, "warps": old}})
    assert "ran the pair's staging" in lines[0] and "every configuration ran windows [[5, 1]]" in lines[0]
    assert "NOT the pair" in lines[1] and "stage_a" in lines[1] and "2 of 2 configurations" in lines[1]
    assert "unknown staging" in lines[2] and "first configuration only" in lines[2]


def test_configurations_that_straddle_the_budget_run_the_same_windows_and_are_judged_per_block():
    """Issue 43's linear-bf16-51x4096x1024 dcache sweep: each configuration sized its own windows, the 64 KB row ran 3
    blocks where the others ran 1, and totals gave "cycles +182.2%: does not respond". Windows are now sized once by the
    costliest configuration; and a verdict over rows of different windows compares per block and says so."""
    blocks, budget = 64, 2e7
    straddle = [9e6, 9e6, 6e6]                        # 2, 2, 3 blocks fit: one block, one block, three windows
    alone = [B.cycle_windows(blocks, p, budget) for p in straddle]
    assert sum(k for _, k in alone[0]) == 1 and sum(k for _, k in alone[2]) == 3
    common = E.common_windows(blocks, straddle, budget)
    assert common == alone[0] and sum(k for _, k in common) == 1
    cfgs = [{"dcache_size": d} for d in (4096, 16384, 65536)]

    def rows(windows, cycles, hits):
        it = iter([{"ok": True, "blocks": w, "counters": {"signature": {"cycles": c, "instrs": 1000, "ipc": 0.5,
                                                                        "dcache_hit_rate": h}}}
                   for w, c, h in zip(windows, cycles, hits)])
        return E.run(cfgs, lambda _: next(it), "linear-bf16-51x4096x1024", "vxk")

    old = rows([[[63, 1]], [[63, 1]], [[0, 1], [31, 1], [63, 1]]], [4.0e6, 3.9e6, 11.29e6], [1.27, 3.29, 9.46])
    v = E.respond(old, "dcache_size")
    assert v["cycle_change"] == pytest.approx(11.29e6 / 3 / 4.0e6 - 1) and not v["same_windows"]
    assert "rows ran different windows" in v["verdict"] and "cycles per block -5.9%" in v["verdict"]
    same = rows([[[63, 1]]] * 3, [4.0e6, 3.9e6, 3.764e6], [1.27, 3.29, 9.46])
    v = E.respond(same, "dcache_size")
    assert v["same_windows"] and v["responds"] and v["windows"] == [[[63, 1]]] * 3
    assert v["verdict"] == ("dcache_size 4096 -> 65536: dcache_hit_rate 1.27 -> 9.46, cycles per block -5.9%: "
                            "responds as expected")
    l2 = E.run([{"l2": False}, {"l2": True}], lambda c: {"ok": True, "blocks": [[0, 2]] if c["l2"] else [[0, 1]],
               "counters": {"signature": {"cycles": 1.8e6 if c["l2"] else 1e6, "memory_requests": 1000 if c["l2"] else 900}}},
               "s", "x")
    v = E.respond(l2, "l2")                            # per block: 900 -> 500 requests, 1e6 -> 0.9e6 cycles
    assert v["memory_requests"] == [900, 500] and v["responds"] and "memory_requests/block" in v["verdict"]


def test_a_local_memory_sweep_runs_what_each_configuration_offers(h200_slices):
    """lmem_log_size 12, 13, 14 on the fixed SimX: the ACT linear's 8320 B of tiles fit only 16 KB, so the smaller
    ones run candidates that drop staging and the sweep can respond (cycles per block should fall); a strategy whose
    tiles fit the smallest runs one candidate everywhere: the sweep's plan says "not applicable" instead of judging it,
    and checks each distinct candidate once, on the first configuration that runs it."""
    from flows.simx import expand
    from vxsynth.simx.sweep import plan, sweep_candidates, swept_knob
    from flows.config import load

    s = load([])["simx"]
    assert swept_knob(s["sweeps"]["lmem"]) == "lmem_log_size" and "lmem_log_size" in E.PER_CONFIG
    cfgs = expand(s["sweeps"]["lmem"], s["config"])
    cores = [VortexConfig.from_dict({**c, "local_mem": 1 << c["lmem_log_size"]}) for c in cfgs]
    rec, strat = _act_linear(h200_slices)
    cands, together = sweep_candidates(rec.problem, rec.precision, strat, "lmem_log_size", cores[-1], cores)
    st = [E.staging(c) for c in cands]
    assert [x["same_as_pair"] for x in st] == [False, False, True] and together == 1
    assert st[0]["vortex_local_mem_bytes"] <= 4096 < st[1]["vortex_local_mem_bytes"] <= 8192 < st[2]["vortex_local_mem_bytes"]
    assert len({c.cuda_source for c in cands}) == 1 and len({c.vortex_sha256 for c in cands}) == 3
    small = Strategy(block_m=16, block_n=16, thread_m=1, thread_n=1, block_k=8)
    same, _ = sweep_candidates(rec.problem, rec.precision, small, "lmem_log_size", cores[-1], cores)
    assert len({c.vortex_sha256 for c in same}) == 1
    one, _ = sweep_candidates(rec.problem, rec.precision, strat, "dcache_size", cores[-1], cores)      # other sweeps: the most restrictive
    assert len({c.vortex_sha256 for c in one}) == 1 and one[0].vortex_sha256 == cands[0].vortex_sha256
    assert E.EXPECT["lmem_log_size"][0] == "cycles_per_block"

    class Model:                                   # the executor's cost model: cycles per block by staged bytes
        budget = 2e7

        def __init__(self, conf):
            self.conf = conf

        def expected(self, c):
            return 1e6 * (2 - c.meta["vortex_local_mem_bytes"] / 8320)

    built = [{"vortex_config": c} for c in [cores[-1], *cores]]
    staged = plan(rec, strat, "lmem_log_size", cfgs[-1], cfgs, built, Model)
    assert staged.skipped is None and [conf for conf, _ in staged.to_check.values()] == cfgs   # each checked where it runs
    assert staged.per_block[0] > staged.per_block[2] and len({json.dumps(staged.windows)}) == 1
    fits = plan(rec, small, "lmem_log_size", cfgs[-1], cfgs, built, Model)
    assert len(fits.to_check) == 1 and "not applicable" in fits.skipped["verdict"] and not fits.skipped["applicable"]
    dc = plan(rec, strat, "dcache_size", cfgs[-1], cfgs, built, Model)
    assert dc.skipped is None and [conf for conf, _ in dc.to_check.values()] == [cfgs[-1]]    # once, on the base


def test_a_shortened_convolution_keeps_a_whole_k_tile_per_filter_tap():
    """A probe at C 8 of an NHWC conv with block_k 32 ran at IPC 0.25 against 0.66 at C 32 (a k-tile spanning filter
    taps): shortenings keep C at whole k-tiles (NHWC, taps outer) or at least one k-tile (NCHW, taps inner)."""
    from vxsynth.simx.final_check import keeps_pattern, shorter

    p = Conv(2, 1, 512, 30, 40, 256, 3, 3, (1, 1), (1, 1), (1, 1), 1, True, "float32")
    nhwc = Strategy(block_m=64, block_n=64, thread_m=4, thread_n=4, block_k=32, layout="nhwc")
    got = [q.C for q, *_ in shorter(p, nhwc)]
    assert got == [256, 128, 64, 32]                                  # not 16, 8, 4: they split a k-tile over taps
    nchw = Strategy(block_m=64, block_n=64, thread_m=4, thread_n=4, block_k=32, layout="nchw")
    assert [q.C for q, *_ in shorter(p, nchw)][-1] == 4               # 4 x 9 taps >= one k-tile of 32
    odd = Conv(2, 1, 24, 7, 9, 16, 3, 3, (1, 1), (1, 1), (1, 1), 1, True, "float32")
    s8 = Strategy(block_m=16, block_n=16, thread_m=1, thread_n=1, block_k=16, layout="nhwc")
    assert keeps_pattern(odd, Conv(2, 1, 16, 7, 9, 16, 3, 3, (1, 1), (1, 1), (1, 1), 1, True, "float32", c_layout=24), s8)
    assert not keeps_pattern(p, Conv(2, 1, 8, 30, 40, 256, 3, 3, (1, 1), (1, 1), (1, 1), 1, True, "float32",
                                     c_layout=512), nhwc)


def test_a_check_grows_its_windows_to_the_coverage_target_within_its_time_limit(h200_slices, tmp_path, monkeypatch):
    """simx.check_coverage: a final-pair check's windows grow beyond the cycle budget towards the target fraction of
    the output's blocks while one case stays within check_max_s, and check.json says whether it was met."""
    from flows import plans
    from vxsynth.simx import final_check as F
    from vxsynth.simx.executor import SimxExecutor

    inst = Installation(tmp_path, "v2.2", ["riscv64-unknown-elf-gcc"], "riscv-gcc")
    ex = SimxExecutor(inst, {"cores": 1, "warps": 16, "threads": 16, "lmem_log_size": 14}, tmp_path, cycle_budget=2e6)
    (tmp_path / "drv" / "measured").mkdir(parents=True)
    monkeypatch.setattr(SimxExecutor, "driver_dir", lambda self: tmp_path / "drv")
    monkeypatch.setattr(SimxExecutor, "local_memory", lambda self: {"usable": 16384, "declared": 16384})
    seen = []

    def fake_check2(c, e, sid, tol, cases, work, records):
        wins = e.windows(c, seed=1)[0]
        seen.append((e.budget, wins))
        n = sum(k for _, k in wins)
        return check_record(reason="ok", cases=[
            {"case": "normal", "covered_fraction": n / c.meta["blocks"], "vortex_windows": wins, "vortex_s": 1.0,
             "vortex_cycles": {"cycles": 1e6 * n, "blocks": n}}])

    monkeypatch.setattr(F, "check2", fake_check2)
    rec = slice_record(h200_slices, "linear-fp32-100x512x512")
    suites = [RECORDED / "reconstruct"]
    args = (rec, suites, ex, {}, ("normal", "near_zero"), tmp_path / "out", tmp_path / "w")
    plain = F.check_final(*args, 300.0, 4.0, True, 0.0, 0.0)
    cov = F.check_final(*args, 300.0, 4.0, True, 0.0, 0.5)
    blocks = cov["blocks"]
    assert plain["coverage"] is None and cov["coverage"]["target"] == 0.5
    assert seen[1][0] > seen[0][0] and cov["covered_fraction"] > plain["covered_fraction"]
    assert cov["covered_fraction"] >= 0.5 - 3 / blocks and cov["cost"]["cycle_budget"] == seen[1][0]
    per_block = cov["cost"]["cycles_per_block"]["predicted"]
    assert 2e6 < 3 * per_block and blocks * per_block > 3e6        # the budget fits under 3 blocks, the target 3 M cycles
    tight = F.check_final(*args, 12.0, 4.0, True, 0.0, 1.0)       # 12 s at 4 s per M cycles: 3 M cycles per case
    assert tight["cost"]["cycle_budget"] == pytest.approx(3e6) and tight["coverage"]["met"] is False
    assert tight["covered_fraction"] < 1.0
    with pytest.raises(VxError, match=r"simx.check_coverage=2 must be a fraction"):
        plans.simx_checks(["simx.check_coverage=2"])


def test_the_sweep_flow_gives_every_row_the_same_windows_and_records_what_it_ran(tmp_path, prefect, h200_slices,
                                                                                 monkeypatch):
    """The `vxsynth simx sweep` flow end to end, SimX replaced by a model (cycles per block by data-cache size and by
    the local memory the candidate stages): configurations whose expected cycles straddle the budget run one set of
    windows; summary.json has each row's windows, the candidate's local memory and staging; an lmem sweep runs a
    candidate per configuration, says which rows ran a variant, and responds."""
    import numpy as np

    import flows.simx as FS
    from flows.config import load
    from vxsynth.report.build import _applicability
    from vxsynth.simx.executor import SimxExecutor
    from vxsynth.targets.vortex_host import VortexRun

    rec = slice_record(h200_slices, "linear-fp32-302x512x3200")
    cfg = load([f"data_dir={tmp_path / 'data'}", "simx.cycle_budget=2e7"])
    monkeypatch.setattr(FS.plans, "simx", lambda overrides, sid, sweep: (cfg, Installation(tmp_path, "v2.2", ["cc"],
                                                                                           "riscv-gcc"), rec))
    monkeypatch.setattr(FS, "check2", lambda c, ex, *a: check_record(check_id=f"simx-{c.vortex_sha256[:6]}"))
    monkeypatch.setattr(SimxExecutor, "driver_dir", lambda self: tmp_path / "drv" / B.config_id(self.target))
    monkeypatch.setattr(SimxExecutor, "local_memory", lambda self: {"usable": 1 << self.target["lmem_log_size"],
                                                                    "declared": 1 << self.target["lmem_log_size"]})

    def per_block(self, c):          # 4 KB dcache: 9 M cycles (2 blocks fit 2e7), 64 KB: 6 M (3 fit); unstaged: slower
        base = {4096: 9e6, 16384: 7e6, 65536: 6e6}[self.target["dcache_size"]]
        return base * (1.0 + 0.5 * (c.meta["vortex_local_mem_bytes"] < 6000))

    monkeypatch.setattr(SimxExecutor, "expected", per_block)

    def run(self, c, inputs, work, counters=False, together=1, windows=None, **kw):
        wins = windows if windows is not None else self.windows(c, together=together)[0]
        n = sum(k for _, k in wins)
        hit = {4096: 2.0, 16384: 5.0, 65536: 9.0}[self.target["dcache_size"]]
        sig = {"cycles": int(per_block(self, c) * n), "instrs": 1000 * n, "ipc": 0.5, "dcache_hit_rate": hit}
        out = np.zeros(4)
        return VortexRun(True, out, np.ones(4, bool), [list(w) for w in wins], counters={"signature": sig})

    monkeypatch.setattr(SimxExecutor, "run", run)
    s = FS.simx_flow([], rec.slice_id, "dcache")
    alone = [B.cycle_windows(100, p, 2e7) for p in (9e6, 6e6)]
    assert sum(k for _, k in alone[0]) != sum(k for _, k in alone[1])          # sized alone they would differ
    assert len({json.dumps(r["windows"]) for r in s["rows"]}) == 1 and s["windows"] == s["rows"][0]["windows"]
    assert s["responds"] and s["runs_the_pair"] and s["vortex_local_mem_bytes"] == 8320
    assert s["staging"]["kept"] == ["stage_a", "stage_b"] and not s["staging"]["dropped"]
    assert [r["config"] for r in s["rows"]] == [{"dcache_size": 4096}, {"dcache_size": 16384}, {"dcache_size": 65536}]
    lm = FS.simx_flow([], rec.slice_id, "lmem")
    assert [r["staging"]["same_as_pair"] for r in lm["rows"]] == [False, False, True] and not lm["runs_the_pair"]
    b = [r["vortex_local_mem_bytes"] for r in lm["rows"]]
    assert b[0] <= 4096 < b[1] <= 8192 < b[2] == 8320
    assert lm["responds"] and "cycles per block -33.3%" in lm["verdict"], lm["verdict"]
    index = json.loads((tmp_path / "data" / "simx" / rec.slice_id / "summary.json").read_text())
    lines = _applicability(index)
    assert "ran the pair's staging" in lines[0] and "every configuration ran windows" in lines[0]
    assert "NOT the pair" in lines[1] and "2 of 3 configurations" in lines[1]
    assert "ran a variant of the pair" in index["verdict"]


def test_the_threads_and_warps_sweeps_give_each_block_room_for_the_pairs_staging(h200_slices):
    """At 32 threads (or 32 warps) a core holds two of the ACT linear's 256-thread blocks: with 16 KB of local memory
    each gets 8 KB and the swept candidate drops the B tile's staging (every threads sweep of 2026-12-04 ran such a
    variant); the configured sweeps give the core 32 KB, so both rows run the pair's own staging."""
    from flows.config import load
    from flows.simx import expand
    from vxsynth.simx.sweep import sweep_candidates, swept_knob

    s = load([])["simx"]
    rec, strat = _act_linear(h200_slices)
    base = VortexConfig.from_dict({**s["config"], "local_mem": 1 << s["config"]["lmem_log_size"]})
    for name in ("threads", "warps"):
        cfgs = expand(s["sweeps"][name], s["config"])
        cores = [VortexConfig.from_dict({**c, "local_mem": 1 << c["lmem_log_size"]}) for c in cfgs]
        cands, _ = sweep_candidates(rec.problem, rec.precision, strat, swept_knob(s["sweeps"][name]), base, cores)
        assert all(E.staging(c)["same_as_pair"] for c in cands), name
        small = [VortexConfig.from_dict({**c, "local_mem": 1 << 14}) for c in cfgs]
        cut, _ = sweep_candidates(rec.problem, rec.precision, strat, swept_knob(s["sweeps"][name]), base, small)
        assert not E.staging(cut[0])["same_as_pair"] and E.staging(cut[0])["dropped"], name
