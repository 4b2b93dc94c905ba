"""Check 2 of a slice's final pair on the real SimX: the reconstruction's final strategy, generated for the SimX
configuration's measured local memory, run for the check's input cases at once (one simulator process per case),
its windows sized by the cycle budget. The summary says what was covered and what it cost.

A check predicted over its time limit even at one block (a long reduction: one block of a large-K GEMM or a wide
convolution simulates for minutes) checks the same strategy on a shortened reduction instead: a GEMM's K cut to fewer
whole block_k tiles (its ragged last tile kept; A's and B's strides as the op has them, so rows sit as far apart), a
convolution's first input channels (halved, quartered, ...). A convolution whose Vortex half reads an operand from
global memory in its K loop keeps its image and weights laid out with all channels, so pixels and filters sit as far
apart (the dcache's conflicts depend on it); one that stages both operands is shortened as a plain convolution of
fewer channels (its cycles per channel follow the tiles, and the stored layout's index arithmetic costs 1.3x per
channel). The summary names the reduction checked and its full length.

Before a check predicted to take longer than a probe, or whose windows launch several blocks at once, one block of
the same strategy runs on the longest reduction (the full one first) predicted within `probe_s`: its measured /
predicted cycles scale the cost model for the check and its shortened reductions (the model's IPC is off by up to 5x
on some tiles); the shortened reductions run the full one's access pattern (as above)."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

from vxsynth.checks import run as checks
from vxsynth.kernels import tensors as T
from vxsynth.kernels.candidate import Candidate, vortex_lowering
from vxsynth.kernels.problem import Conv, Gemm, Problem
from vxsynth.kernels.strategy import Strategy, check as strategy_error
from vxsynth.records import CheckRecord, LoopResult, SliceRecord
from vxsynth.simx.build import config_id
from vxsynth.simx.executor import SimxExecutor, measured_per_block
from vxsynth.simx.experiments import sweep_candidate
from vxsynth.store.io import read_json, write_json


def final_strategy(slice_id: str, suites: list[Path]) -> tuple[Strategy, str]:
    """The final strategy of the slice's reconstruction (the first suite folder that has one), else the default."""
    for s in suites:
        if (Path(s) / slice_id / "result.json").exists():
            return LoopResult.load(Path(s) / slice_id / "result.json").final.strategy, str(Path(s) / slice_id)
    return Strategy(), "default strategy (no reconstruction)"


def check2(c: Candidate, ex: SimxExecutor, sid: str, tolerances: dict, cases: tuple, work: Path, records: Path) -> CheckRecord:
    """Check 2 of `c` on `ex`'s SimX for the input `cases`, the cases' simulator runs at once; one record per
    candidate source, configuration and cases (a second call reads it, once every case's run completed)."""
    if old := _recorded(checks.record_path(records, sid, _tag(c, ex, cases), "vortex_ref")):
        return old
    env = checks.CheckEnv(ex, tolerances, cases=cases, vortex_parallel=min(len(cases), os.cpu_count() or 1))
    return checks.run(c, sid, _tag(c, ex, cases), env, work, records)["vortex_ref"]


def predicted_s(c: Candidate, ex: SimxExecutor, s_per_mcycle: float) -> tuple[float, float]:
    """Predicted wall seconds of one case's SimX run of `c` (its windows' cycles at `s_per_mcycle`; the cases run at
    once), and the cycles per block behind it (measured once the candidate has run here, else the cost model's)."""
    wins, per_block = ex.windows(c)
    return sum(k for _, k in wins) * per_block * s_per_mcycle / 1e6, per_block


def shorter(p: Problem, s: Strategy, stored: bool = True) -> list[tuple[Problem, str, int, int]]:
    """Shorter reductions of `p` that `s` still implements, longest first, as (problem, dimension, full, checked):
    GEMM K with half, a quarter, ... of its whole block_k tiles (the remainder kept); a convolution's input channels
    halved while they stay even (groups 1), stored with all of them (`c_layout`) when `stored` (see `keeps_layout`)."""
    out = []
    if isinstance(p, Gemm):
        tiles, rest = divmod(p.K, s.block_k)
        t = tiles // 2
        while t >= 1:
            out.append((replace(p, K=t * s.block_k + rest), "K", p.K, t * s.block_k + rest))
            t //= 2
    elif isinstance(p, Conv) and p.groups == 1:
        c = p.C
        while c % 2 == 0 and c > 2:
            c //= 2
            out.append((replace(p, C=c, c_layout=p.c_stored if stored else 0), "C", p.C, c))
    return [o for o in out if strategy_error(o[0], s) is None and keeps_pattern(p, o[0], s)]


def keeps_layout(c: Candidate) -> bool:
    """Whether a shortened convolution of `c` keeps the stored layout of all its channels: when its Vortex half reads
    the image or the weights from global memory in the K loop, whose dcache conflicts follow the strides (halving
    the stored channels moved a conv1d's cycles per channel 2.6x). A Vortex half staging both operands copies each
    tile once per k-tile: a plain shortened convolution runs the full one's cycles per channel (conv1d k5 L16, one
    block: 4.77e4 at C 256 vs 4.79e4 at C 512), the stored layout's extra index arithmetic 1.29-1.32x of them
    (C 128 and 256 of 256 and 512, C 1024 of 2048; bench/results/simx_shortened_conv_cpu.txt)."""
    vs, _ = vortex_lowering(c.problem, c.strategy, c.meta.get("lmem_per_block"), c.meta.get("drop_staging", False))
    return not (vs.stage_a and vs.stage_b)


def keeps_pattern(full: Problem, short: Problem, s: Strategy) -> bool:
    """Whether a shortened convolution's K tiles access memory as the full one's do: at least one whole k-tile per
    filter tap. NHWC (k = tap * C + c): the shortened C holds whole k-tiles (a k-tile spanning two taps is another
    access pattern: a probe at C 8 ran at IPC 0.25 against 0.66 at C 32, issue 43), as many as whole as the full C
    has; NCHW (taps innermost): at least one whole k-tile. GEMMs keep theirs (K cut in whole tiles); the direct form
    has no k-tiles."""
    if not isinstance(full, Conv) or s.conv_form != "implicit":
        return True
    taps, bk = full.R * full.S, s.block_k
    if s.layout == "nhwc":
        return short.C >= min(full.C, bk) and (full.C % bk != 0 or short.C % bk == 0)
    return short.C * taps >= min(full.C * taps, bk)


def probe(record: SliceRecord, strategy: Strategy, c: Candidate, ex: SimxExecutor, probe_s: float, speed: float,
          work: Path) -> dict | None:
    """Run one block of `strategy` on the longest reduction of `c`'s problem (the full one first) predicted within
    `probe_s` seconds; its measured / predicted cycles per block, or None when even the shortest is predicted longer.
    The ratio calibrates `ex` for `c` (its shortened reductions are calibrated by the caller)."""
    options = [(c, None)] + [(_on(p, record.precision, strategy, ex), {"dim": dim, "full": whole, "checked": part})
                             for p, dim, whole, part in shorter(c.problem, strategy, keeps_layout(c))]
    for cand, reduction in options:
        if ex.predicted(cand) * speed / 1e6 <= probe_s:
            break
    else:
        return None
    one = SimxExecutor(ex.inst, ex.target, ex.cache, 1.0, ex.timeout_s)       # a budget of 1 cycle: one block
    r = one.run(cand, T.vortex_inputs(cand.problem, cand.precision, T.make_inputs(cand.problem, 0)), work)
    if not r.ok:
        return {"reduction": reduction, "error": r.error[:300]}
    measured = measured_per_block(r.counters["windows"])[1]
    out = {"reduction": reduction, "predicted": ex.predicted(cand), "measured": measured, "wall_s": r.wall_s,
           "ratio": measured / ex.predicted(cand)}
    ex.calibrate(c, out["ratio"])
    return out


def _on(p: Problem, precision: str, strategy: Strategy, ex: SimxExecutor) -> Candidate:
    """The candidate of `strategy` for the slice's shortened problem `p`, generated as its whole one is."""
    return sweep_candidate(p, precision, strategy, [ex.vortex_config()])[0]


def _several_per_launch(c: Candidate, ex: SimxExecutor) -> bool:
    """Whether the cost model sizes `c`'s windows at more than one block per launch (a miss then multiplies)."""
    return max(k for _, k in ex.windows(c)[0]) > 1


def _tag(c: Candidate, ex: SimxExecutor, cases: tuple) -> str:
    """One check record per candidate source, configuration and input cases."""
    return f"simx-{c.vortex_sha256[:10]}-{config_id(ex.target)}" + ("" if cases == checks.CASES else f"-{len(cases)}cases")


def _recorded(path: Path) -> CheckRecord | None:
    """A check record whose simulator runs all completed (one cut short, killed or timed out, is run again)."""
    old = CheckRecord.load(path) if path.exists() else None
    return old if old and all(e.get("vortex_windows") for e in old.cases) else None


def check_final(record: SliceRecord, suites: list[Path], ex: SimxExecutor, tolerances: dict, cases: tuple, out: Path,
                work: Path, max_s: float, s_per_mcycle: float, shorten: bool = True, probe_s: float = 0.0,
                coverage: float = 0.0) -> dict:
    """Check the slice's final pair on SimX; writes and returns out/check.json. A check predicted to take longer
    than `max_s` (one block of a large-K, register-spilling tile can take a quarter of an hour) is not run, and one
    whose runs outlast the executor's timeout is stopped there: the summary says so and what it would take. The
    prediction runs at this host's measured SimX speed once runs were measured here, else at `s_per_mcycle`.
    `shorten`: a check over `max_s` runs on the longest shortened reduction predicted within it (`shorter`).
    `probe_s` (0: none): a check predicted over it, or whose windows launch several blocks at once (calibrated, they
    resize), of a candidate not measured here, is first calibrated by `probe`. The host speed is the executor's
    estimate from every run measured here, taken once (a probe's own run, under the load of its moment, does not move
    it). `coverage` (simx.check_coverage): the fraction of the output's blocks the check aims to cover; its windows
    grow beyond the cycle budget towards it while one case stays within `max_s`; the summary says whether it was met."""
    sid = record.slice_id
    strategy, origin = final_strategy(sid, suites)
    c, _ = sweep_candidate(record.problem, record.precision, strategy, [ex.vortex_config()])
    speed, speed_from = ex.seconds_per_mcycle(s_per_mcycle)
    need, per_block = predicted_s(c, ex, speed)
    done = _recorded(checks.record_path(out / "checks", sid, _tag(c, ex, cases), "vortex_ref"))
    calibration = None
    if probe_s and (need > probe_s or _several_per_launch(c, ex)) and not done and not ex.measured(c):
        calibration = probe(record, strategy, c, ex, probe_s, speed, work / "probe")
        need, per_block = predicted_s(c, ex, speed)                # its cycles count; its wall time does not
    full, reduction, tried = (need, per_block), None, []
    if need > max_s and shorten and not done:
        tried = shorter(c.problem, strategy, keeps_layout(c))
        for p, dim, whole, part in tried:
            cs = _on(p, record.precision, strategy, ex)
            if calibration and "ratio" in calibration:
                ex.calibrate(cs, calibration["ratio"])
            n, b = predicted_s(cs, ex, speed)
            if n <= max_s:
                c, need, per_block = cs, n, b
                reduction = {"dim": dim, "full": whole, "checked": part, "full_predicted_s": full[0],
                             "full_cycles_per_block": full[1]}
                break

    def not_run(reason: str) -> dict:
        summary = {"slice_id": sid, "strategy_from": origin, "strategy": strategy.to_dict(), "candidate": c.name,
                   "vortex_sha256": c.vortex_sha256, "config": ex.target, "verdict": "not run", "blocks": c.meta["blocks"],
                   "predicted_s": need, "cycles_per_block": per_block, "reduction": reduction, "probe": calibration,
                   "reason": reason}
        write_json(out / "check.json", summary)
        return summary

    if need > max_s and not _recorded(checks.record_path(out / "checks", sid, _tag(c, ex, cases), "vortex_ref")):   # a finished check is kept
        return not_run(f"one case needs about {need:.0f} s on this SimX ({per_block / 1e6:.0f} M cycles for one block of "
                       f"{c.strategy.threads} threads at {speed:.2g} s per million cycles, {speed_from}), over simx.check_max_s="
                       f"{max_s:g}" + (f", and so is its shortest reduction ({tried[-1][1]} {tried[-1][3]} of {tried[-1][2]})"
                                          if tried else "") + "; give a larger simx.check_max_s to run it")
    target = None
    if coverage:
        blocks = c.meta["blocks"]
        room = max_s * 1e6 / speed                         # cycles one case may simulate within max_s
        wanted = min(1.0, coverage) * blocks * per_block
        if not done and min(wanted, room) > ex.budget:
            ex = ex.with_budget(min(wanted, room))
            need, per_block = predicted_s(c, ex, speed)
        target = {"target": coverage, "cycle_budget": ex.budget,
                  "predicted_blocks": sum(k for _, k in ex.windows(c)[0]), "blocks": blocks}
    rec = check2(c, ex, sid, tolerances, cases, work, out / "checks")
    reason = rec.reason
    if reduction:
        reason += (f" (checked on {reduction['dim']} {reduction['checked']} of {reduction['full']}: one block of the full "
                   f"reduction predicted at {reduction['full_predicted_s']:.0f} s)")
    if any(w in reason for w in ("timed out", "vx_ready_wait")):   # the cost model was low for this candidate:
                                                                   # the run timeout (ours, or the driver's) bounds it
        return not_run(f"did not finish within the {ex.timeout_s:.0f} s run timeout (predicted {need:.0f} s): {reason}")
    runs = [e for e in rec.cases if e.get("vortex_cycles")]
    cycles = sum(e["vortex_cycles"]["cycles"] for e in runs)
    blocks = sum(e["vortex_cycles"]["blocks"] for e in runs)
    wall = max((e.get("vortex_s", 0.0) for e in rec.cases), default=0.0)      # the cases ran at once
    summary = {"slice_id": sid, "strategy_from": origin, "strategy": strategy.to_dict(), "candidate": c.name,
               "vortex_sha256": c.vortex_sha256, "config": ex.target, "api": ex.inst.api, "installation": str(ex.inst.root),
               "verdict": rec.verdict, "reason": reason, "check_id": rec.check_id, "cases": [
                   {k: e.get(k) for k in ("case", "covered_fraction", "vortex_windows", "vortex_s", "vortex_cycles")}
                   for e in rec.cases],
               "covered_fraction": min((e.get("covered_fraction", 0.0) for e in rec.cases), default=0.0),
               "blocks": c.meta["blocks"], "vortex_differs": c.meta["vortex_differs"], "reduction": reduction,
               "probe": calibration,
               "coverage": None if target is None else {
                   **target, "met": min((e.get("covered_fraction", 0.0) for e in rec.cases), default=0.0) >= coverage},
               "cost": {"cycle_budget": ex.budget, "cycles_per_block": {"predicted": ex.predicted(c),
                                                                        "measured": cycles / blocks if blocks else None},
                        "wall_s": wall, "predicted_s": need, "predicted_at_s_per_mcycle": {"value": speed, "from": speed_from},
                        "s_per_million_cycles": (sum(e.get("vortex_s", 0.0) for e in runs) / cycles * 1e6
                                                                 if cycles else None),
                        "cases_at_once": min(len(cases), os.cpu_count() or 1)}}
    write_json(out / "check.json", summary)
    return summary
