"""The reconstruction loop of one slice.

Round r: the agent proposes an edit of the current strategy (or a free-form source pair) -> CUDA and Vortex
candidates from that one strategy -> the slice's `Evaluator` (sandbox rules, both builds, checks 1 and 2; the same
gates and verdicts the attack corpus gets) -> if both pass, the CUDA candidate's signature (ncu) -> keep the revision
only if D improves by more than the threshold (and compute-sanitizer finds nothing), else revert to the parent; a
rejected candidate or a crash fails only that round, an agent reply that gives no
candidate is a "failed" round. With `batch` > 1 the agent proposes that many rounds at once, evaluated together
(`evaluate_batch`); at most one of them, the best, is kept. Every attempt is a row of the revision trail (with its sources on disk); a rerun
resumes from the trail. Without a GPU the loop can only build and check round 0 (D is not measurable).
"""

from __future__ import annotations

import json
import math
import os
import random
import time
import traceback
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Callable

from vxsynth import trail
from vxsynth.agent.base import Agent, Context
from vxsynth.checks import run as checks
from vxsynth.errors import VxError
from vxsynth.kernels.candidate import Candidate, make
from vxsynth.kernels.strategy import Strategy, check
from vxsynth.metrics.components import COMPONENTS
from vxsynth.reconstruct import speed
from vxsynth.reconstruct.evaluate import Evaluation, Evaluator
from vxsynth.reconstruct.settings import LoopConfig
from vxsynth.reconstruct.start import informed
from vxsynth.records import CheckRecord, LoopResult, Revision, SliceRecord
from vxsynth.signature.distance import comparable, distance, excess, gap_noise, signed_gap
from vxsynth.signature.measure import Measurement
from vxsynth.store.io import read_json, sha256_obj, write_json
from vxsynth.store.measured import measured_key
from vxsynth.targets.launch import Launch
from vxsynth.targets.vortex_host import lmem_per_block, occupancy_error
from vxsynth.trail import TrailRow

MOVE = 0.01  # a component "moved" when its |gap| changed by more than this


@dataclass
class LoopEnv:
    checks: checks.CheckEnv
    rules: list[dict]
    measure: Callable[[Candidate, Launch, SliceRecord, Path, Path], Measurement] | None = None  # (candidate, its
                               # checked launch, record, saved candidate, its work folder); None: no GPU
    reference: Callable[[SliceRecord], Measurement] | None = None
    measure_batch: Callable[[list, SliceRecord, Path], list[Measurement]] | None = None   # ([(candidate, checked
                               # launch)], record, the first one's work folder): one ncu process for a batch
    component_set: tuple = tuple(COMPONENTS)
    measured_with: dict = field(default_factory=dict)
    objects: dict | None = None       # conf/sandbox object rules (None: conf/sandbox/default.yaml)
    time_kernels: Callable | None = None   # (problem, precision, work) -> speed-probe timer on this GPU; None: no GPU
    ncu_kernels: Callable | None = None    # (record, work) -> the probe's ncu timer of its finalists; None: events only


def initial_strategy(record: SliceRecord, cfg: LoopConfig, valid: Callable[[Strategy], str | None]) -> tuple[Strategy, dict]:
    """The start (structure-informed from the reference kernel, or the plain default), with `initial` overrides on
    top, and its provenance."""
    s, prov = informed(record, cfg.start, valid)
    if cfg.initial:
        s = Strategy.from_dict({**s.to_dict(), **cfg.initial})
        prov["overrides"] = cfg.initial
    return s, prov


def pair(problem, s: Strategy, precision: str, vcfg) -> Candidate:
    """Both halves of `s`, the Vortex half lowered to the core's local memory. With `vcfg.unstaged_fallback` a tile
    too large for it even with synchronous staging reads its operands from global memory there (recorded in
    `vortex_differs`), so the CUDA half may keep the reference's tile (its K tile, above all); without, such a
    strategy fails the occupancy rule."""
    return make(problem, s, precision, lmem_per_block(s.threads, vcfg), drop_staging=vcfg.unstaged_fallback)


def validator(problem, precision: str, env: LoopEnv) -> Callable[[Strategy], str | None]:
    vcfg = env.checks.vortex.cfg
    tensor_ok = precision in ("BF16", "TF32_FP16")

    def why(s: Strategy) -> str | None:
        r = check(problem, s, max_threads=min(1024, vcfg.warps * vcfg.threads), tensor_ok=tensor_ok)
        if r:
            return r
        try:
            return occupancy_error(pair(problem, s, precision, vcfg), vcfg)
        except ValueError as e:
            return str(e)
    return why


def _gaps(values: dict, ref: dict, comps) -> dict:
    return {c: signed_gap(c, values.get(c, math.nan), ref.get(c, math.nan)) for c in COMPONENTS if c in comps}


def reconstruct(record: SliceRecord, cfg: LoopConfig, env: LoopEnv, agent: Agent, out_dir: Path,
                log: Callable[[str], None] = print, work_dir: Path | None = None) -> LoopResult:
    sid, precision = record.slice_id, record.precision
    problem = record.problem
    out_dir.mkdir(parents=True, exist_ok=True)
    work_dir = Path(work_dir or out_dir / "work")
    valid = validator(problem, precision, env)
    t_ref = time.perf_counter()
    ref = _reference(record, env, out_dir)       # first: the probe's start aims at this GPU's reference time
    setup = {"reference_s": time.perf_counter() - t_ref}
    t_setup = time.perf_counter()
    s0, prov = initial_strategy(record, cfg, valid)
    if cfg.start.get("speed_probe") and env.time_kernels is not None and prov["kind"] == "informed" and not cfg.initial:
        s0, prov = speed.start(record, s0, prov, valid, env.time_kernels(problem, precision, work_dir / "speed"), out_dir,
                               env.ncu_kernels(record, work_dir / "speed-ncu") if env.ncu_kernels else None,
                               ref if ref.get("ok") else None, cfg.threshold)
    setup["start_s"] = time.perf_counter() - t_setup
    # the trail's identity: the start strategy itself, not the rules that chose it (an unchanged start keeps its trail)
    settings = {k: v for k, v in asdict(cfg).items() if k not in ("start", "initial")}
    run_id = sha256_obj({"slice": record.to_dict(), "cfg": settings, "start": s0.to_dict(),
                         "agent": getattr(agent, "identity", agent.name)})[:12]
    trail_path = out_dir / "trail.parquet"
    rows: list[TrailRow] = []
    if trail_path.exists():
        old = trail.load(trail_path)
        same_id = all(r.run_id == run_id for r in old)
        same_set = all(comparable(tuple(r.component_set), tuple(env.component_set)) for r in old)
        same_way = all(r.measured_with == env.measured_with for r in old)
        if old and same_id and same_set and same_way:
            rows = old
            log(f"[{sid}] resuming after round {max(r.round for r in old)}")
        elif old:
            why = ("its slice record, start strategy, loop settings or agent differ" if not same_id
                   else "its signature components differ" if not same_set else "its measurement settings differ")
            log(f"[{sid}] earlier trail ({len(old)} rows) not resumed: {why}; starting from round 0")
    resumed = len(rows)
    ref_values = ref.get("values", {})
    noise = float((ref.get("settings") or {}).get("noise_D") or 0.0)   # largest D between repeated reference measurements
    tried = {r.strategy_hash for r in rows}
    spent_path = out_dir / "spent.json"      # wall seconds of earlier runs of this loop: a resumed run gets what is left
    spent = json.loads(spent_path.read_text()) if rows and spent_path.exists() else {}
    earlier_s = float(spent.get("wall_s", 0.0)) if spent.get("run_id") == run_id else 0.0
    t_start = time.perf_counter()

    def save() -> None:
        trail.save(rows, trail_path)
        write_json(spent_path, {"run_id": run_id, "wall_s": earlier_s + time.perf_counter() - t_start})

    def current_state():
        base = [r for r in rows if r.base]
        return (base[-1], base[-1].strategy) if base else None

    start_path = out_dir / "start.json"
    if not rows:
        write_json(start_path, prov)
        summary = "; ".join(f"{k['knob']}={k['value']} ({k['fact']})" for k in prov["knobs"]) or "the plain default strategy"
        rows += evaluate_batch(record, [(0, s0, Strategy().diff(s0), f"{prov['kind']} start",
                                                  f"{prov['kind']} start: {summary}", None)], -1, env, cfg, run_id,
                                out_dir, work_dir, ref_values, None)
        rows[-1].batch = 0
        save()
        log(rows[-1].describe())
    limits = None
    if cfg.gap_guard is not None and not math.isnan(rows[0].D):
        nz = gap_noise(ref_values, (ref.get("settings") or {}).get("spread") or {})
        limits = {c: abs(g) + max(cfg.gap_guard, nz.get(c, 0.0)) for c, g in rows[0].gaps.items()
                  if not math.isnan(g)}
    rnd = max(r.round for r in rows) + 1
    while rnd <= cfg.rounds:
        if earlier_s + time.perf_counter() - t_start > cfg.wall_s:
            log(f"[{sid}] wall-time budget of {cfg.wall_s:.0f} s reached")
            break
        state = current_state()
        if state is None or env.measure is None:
            break  # nothing measurable to improve on
        cur_row, cur = state
        if math.isnan(cur_row.D):
            break
        ctx = Context(record, problem, precision, cur, cur_row.gaps, rows, tried, valid, cfg.order,
                      random.Random(f"{cfg.seed}-{rnd}"), _sources(out_dir, cur_row, cur, problem, precision, env), limits)
        batch, failed, calls, stop = [], [], {}, None
        for r in range(rnd, min(rnd + max(1, cfg.batch), cfg.rounds + 1)):
            prop = agent.propose(ctx)
            if prop is None:
                stop = getattr(agent, "stopped", None) or "no untried valid edit left"
                break
            calls[r] = prop.call
            if prop.call:
                write_json(out_dir / "candidates" / f"r{r:03d}" / "agent.json", prop.call)
            if prop.failure:
                failed.append((r, _done(_row(record, prop.strategy, r, cur_row.round, {}, prop.name, prop.reason,
                                             env, cfg, run_id, source_kind=""), "failed", prop.failure, time.perf_counter())))
            else:
                tried.add(prop.strategy.hash())
                batch.append((r, prop))
        done = dict(failed)
        if batch:
            evaluated = evaluate_batch(record, [(r, p.strategy, p.edit, p.name, p.reason, p.sources)
                                                          for r, p in batch], cur_row.round, env, cfg, run_id,
                                        out_dir, work_dir, ref_values, cur_row, noise, limits)
            done.update(zip([r for r, _ in batch], evaluated))
        for r in sorted(done):
            row = done[r]
            row.batch = rnd
            row.agent_call = {k: v for k, v in calls[r].items() if k not in ("messages", "reply")}
            rows.append(row)
            log(row.describe())
        save()
        if stop:
            log(f"[{sid}] {stop}")
            break
        rnd += len(done)
    return _result(record, rows, ref, cfg, env, agent, out_dir, time.perf_counter() - t_start, len(rows) - resumed,
                   earlier_s, {**setup, "round0_s": rows[0].wall_s if rows else math.nan})


SAME_REFERENCE = ("platform", "metric_set", "cache_control", "clock_control", "replay_mode")


def _reference(record: SliceRecord, env: LoopEnv, out_dir: Path) -> dict:
    """The slice's reference signature: the one measured by an earlier run when it succeeded the way this run
    measures (platform, metric set, ncu cache/clock control and replay mode; in the harness, with the repeats' spread
    taken right: recorded since `repeats_in`), else measured now."""
    path = out_dir / "reference.json"
    if path.exists() and env.reference is not None:
        old = json.loads(path.read_text())
        settings = old.get("settings") or {}
        harness = env.measured_with.get("measured_in") == "isolated"
        if old.get("ok") and all(settings.get(k) == env.measured_with.get(k) for k in SAME_REFERENCE) \
                and (settings.get("repeats_in") or not harness):
            return old
    if env.reference is None:
        ref = {"ok": False, "values": {c: math.nan for c in COMPONENTS}, "error": "no GPU: reference not measured",
               "recorded_in_workload": record.reference_signature}
    else:
        m = env.reference(record)
        ref = {"ok": m.ok, "values": m.values, "nan_reasons": m.nan_reasons, "metrics": m.metrics, "kernel": m.kernel,
               "settings": m.settings, "error": m.error, "wall_s": m.wall_s, "kernels_seen": m.kernels_seen,
               "recorded_in_workload": record.reference_signature}
    write_json(path, ref)
    return ref


def _row(record: SliceRecord, s: Strategy, rnd: int, parent: int, edit: dict, edit_name: str, reason: str, env: LoopEnv,
         cfg: LoopConfig, run_id: str, source_kind: str = "generated") -> TrailRow:
    """A trail row before evaluation: nothing checked or measured yet."""
    return TrailRow(record.slice_id, run_id, cfg.order, rnd, parent, s.hash(), s, edit, edit_name, reason,
                    list(env.component_set), env.measured_with, source_kind)


@dataclass
class _Pending:
    """A candidate that passed both checks and waits for its measurement."""
    row: TrailRow
    c: Candidate
    evaluation: Evaluation
    folder: Path
    t0: float

    @property
    def launch(self) -> Launch | None:
        return self.evaluation.launch

    @property
    def work(self) -> Path:
        return self.evaluation.work


def evaluate_batch(record: SliceRecord, items: list, parent: int, env: LoopEnv, cfg: LoopConfig, run_id: str,
                    out_dir: Path, work_dir: Path, ref: dict, cur_row: TrailRow | None, noise: float = 0.0,
                    limits: dict | None = None) -> list[TrailRow]:
    """Judge a batch of candidates, items [(round, strategy, edit, edit name, reason, free-form sources)], all children
    of `parent`: generate, sandbox, build and check them in parallel (CPU pool; CUDA runs through the GPU workers),
    measure the survivors together (`env.measure_batch`: one ncu process), then keep at most one: the lowest D that
    beats the parent by more than the threshold (re-measured when within threshold + reference noise) and keeps
    every component's |gap| within `limits` (the gap guard; None: off). The cores the batch leaves idle run each
    candidate's Vortex cases at once (a lone start: every case)."""
    cores = cfg.workers or os.cpu_count() or 1
    jobs = max(1, min(len(items), cores))
    chk = replace(env.checks, vortex_parallel=max(env.checks.vortex_parallel, min(len(env.checks.cases), cores // jobs)))
    ev = Evaluator(record.slice_id, record.problem, record.precision, chk, env.rules, env.objects,
                   out_dir / "checks", cfg.order)
    stage = lambda it: _stage(ev, record, *it[:5], parent, env, cfg, run_id, out_dir, work_dir, it[5])  # noqa: E731
    with ThreadPoolExecutor(jobs) as ex:
        staged = list(ex.map(stage, items))
    pending = [p for p in staged if isinstance(p, _Pending)]
    if pending and env.measure is None:
        for p in pending:
            _done(p.row, "initial" if p.row.round == 0 else "unmeasured", "checks pass; no GPU to measure D", p.t0)
    elif pending:
        t = time.perf_counter()
        ms = _measured_before(pending, record, env, out_dir / "measured")
        share, ok = (time.perf_counter() - t) / len(pending), []
        for p, m in zip(pending, ms):
            p.row.t_measure_s = share
            if not m.ok:
                _done(p.row, "rejected" if m.wrong_output else "crashed", f"measurement failed: {m.error}", p.t0)
            else:
                _measured(p.row, m.values, ref, env, cur_row)
                ok.append(p)
        _decide(ok, record, env, cfg, ref, cur_row, noise, ev, limits)
    return [p.row if isinstance(p, _Pending) else p for p in staged]


def _measured_before(pending: list[_Pending], record: SliceRecord, env: LoopEnv, store: Path) -> list[Measurement]:
    """Measurements of the pending candidates, each kept in `store` (by its sources and the measurement settings) as
    soon as it is taken: a run killed after measuring and before its trail was written measures nothing again."""
    keys = [measured_key(p.c.cuda_sha256, p.c.vortex_sha256, env.measured_with) for p in pending]
    have = {k: Measurement(**json.loads((store / f"{k}.json").read_text())) for k in keys if (store / f"{k}.json").exists()}
    todo = [p for p, k in zip(pending, keys) if k not in have]
    for p, m in zip(todo, _measure_all(todo, record, env) if todo else []):
        k = keys[pending.index(p)]
        have[k] = m
        if m.ok:
            write_json(store / f"{k}.json", asdict(m))
    return [have[k] for k in keys]


def _measure_all(pending: list[_Pending], record: SliceRecord, env: LoopEnv) -> list[Measurement]:
    """One measurement per pending candidate: the batch at once when it can be, else (or when that breaks) one by
    one, a broken measurement failing only its own candidate."""
    if env.measure_batch and len(pending) > 1:
        try:
            return env.measure_batch([(p.c, p.launch) for p in pending], record, pending[0].work)
        except Exception:  # noqa: BLE001 - measured one by one below, where a failure is the candidate's own
            pass
    out = []
    for p in pending:
        try:
            out.append(env.measure(p.c, p.launch, record, p.folder, p.work))
        except Exception as e:  # noqa: BLE001 - a broken measurement fails its round, never the loop
            out.append(Measurement(False, error=f"{type(e).__name__}: {e}"))
    return out


def _sources(out_dir: Path, row: TrailRow, s: Strategy, problem, precision: str, env: LoopEnv) -> tuple[str, str]:
    """The current revision's CUDA and Vortex sources from its candidate folder; a generated pair whose folder is
    gone (outputs copied without it) is emitted again from its strategy, the same text by construction."""
    folder = out_dir / "candidates" / f"r{row.round:03d}"
    files = folder / "kernel.cu", folder / "kernel_vx.c"
    if all(f.exists() for f in files):
        return files[0].read_text(), files[1].read_text()
    if row.source_kind != "generated":
        raise VxError(f"{folder}: the free-form sources of round {row.round} are missing; copy that folder back "
                      f"from where the slice's outputs came, or move {out_dir} out of {out_dir.parent} (it is kept) to "
                      "start the slice again")
    c = pair(problem, s, precision, env.checks.vortex.cfg)
    return c.cuda_source, c.vortex_source


def _stage(ev: Evaluator, record: SliceRecord, rnd: int, s: Strategy, edit: dict, edit_name: str, reason: str, parent: int,
           env: LoopEnv, cfg: LoopConfig, run_id: str, out_dir: Path, work_dir: Path,
           sources: tuple[str, str] | None) -> TrailRow | _Pending:
    """Generate (or take the free-form `sources` of) one candidate and judge it (`Evaluator.check`). A finished row
    when it stops there, else what its measurement needs."""
    tag = f"r{rnd:03d}"
    folder = out_dir / "candidates" / tag
    t0 = time.perf_counter()
    row = _row(record, s, rnd, parent, edit, edit_name, reason, env, cfg, run_id,
               "free-form" if sources else "generated")
    try:
        c = pair(record.problem, s, record.precision, env.checks.vortex.cfg)
        if sources:
            c = replace(c, cuda_source=sources[0], vortex_source=sources[1])
            row.strategy_hash = sha256_obj([s.hash(), c.cuda_sha256, c.vortex_sha256])[:12]
        c.save(folder)
    except Exception as e:  # noqa: BLE001 - a strategy that cannot be emitted fails its round, never the loop
        return _done(row, "crashed", f"{type(e).__name__}: {e} @ {traceback.format_exc(limit=2).splitlines()[-1]}", t0)
    row.cuda_sha256, row.vortex_sha256, row.t_generate_s = c.cuda_sha256, c.vortex_sha256, time.perf_counter() - t0
    e = ev.check(c, tag, work_dir / tag)
    row.t_compile_s, row.t_checks_s = e.t_compile_s, e.t_checks_s
    row.edit_reason += "".join(f" | {n}" for n in e.notes)
    recs = e.records
    if recs:
        k1, k2 = ("check1", "check2") if env.checks.cuda else ("vortex_ref", None)
        row.check1 = recs[k1].verdict if env.checks.cuda else "not run (no GPU)"
        row.check1_record = recs[k1].check_id if env.checks.cuda else ""
        if k2:
            row.check2, row.check2_record = recs[k2].verdict, recs[k2].check_id
        else:
            row.check2, row.check2_record = f"vortex vs reference: {recs[k1].verdict}", recs[k1].check_id
    if not e.passed:
        return _done(row, e.outcome, e.reason, t0)
    return _Pending(row, c, e, folder, t0)


def _measured(row: TrailRow, values: dict, ref: dict, env: LoopEnv, cur_row: TrailRow | None) -> None:
    """The row's components, D, gaps and which gaps moved against the parent's."""
    gaps = _gaps(values, ref, env.component_set)
    row.values = {c_: values.get(c_, math.nan) for c_ in COMPONENTS}
    row.D, row.gaps = distance(values, ref, env.component_set).D, gaps
    if cur_row is not None:
        old = cur_row.gaps
        row.improved = [k for k in gaps if k in old and abs(gaps[k]) < abs(old[k]) - MOVE]
        row.worsened = [k for k in gaps if k in old and abs(gaps[k]) > abs(old[k]) + MOVE]


def _decide(measured: list[_Pending], record: SliceRecord, env: LoopEnv, cfg: LoopConfig, ref: dict, cur_row: TrailRow | None,
            noise: float, ev: Evaluator, limits: dict | None = None) -> None:
    """Keep rule over a measured batch: best D first; the first that beats the parent by more than the threshold
    (measured again when within threshold + noise, the mean deciding), has no |gap| above its limit (gap guard) and
    passes compute-sanitizer is kept."""
    kept = None
    for p in sorted(measured, key=lambda p: p.row.D):
        row = p.row
        if row.round == 0 or cur_row is None:
            _done(row, "initial", f"D = {row.D:.4f}", p.t0)
            continue
        if kept is not None:
            _done(row, "reverted", f"D {row.D:.4f}: round {kept} of the same batch was kept", p.t0)
            continue
        again = ""
        if cfg.threshold < cur_row.D - row.D <= cfg.threshold + noise:
            t = time.perf_counter()
            m2 = env.measure(p.c, p.launch, record, p.folder, p.work)
            row.t_measure_s += time.perf_counter() - t
            if m2.ok:   # an improvement within the reference's measured noise: measured again, the mean decides
                first = cur_row.D - row.D
                _measured(row, {k: (row.values[k] + m2.values.get(k, math.nan)) / 2 for k in COMPONENTS}, ref, env, cur_row)
                again = (f"; re-measured: the first improvement {first:.4f} was within threshold + reference noise "
                         f"D {noise:.4f}, the mean of 2 measurements decides")
        delta = cur_row.D - row.D
        over = excess(row.gaps, limits) if limits else {}
        if delta > cfg.threshold and over:
            _done(row, "reverted", f"D {row.D:.4f} beats the parent, but the gap guard holds: " + ", ".join(
                f"{c} |gap| {limits[c] + e:.4f} > {limits[c]:.4f}" for c, e in sorted(over.items())), p.t0)
            continue
        if delta > cfg.threshold:
            bad = ev.sanitize(p.evaluation) if cfg.sanitize else None
            if bad:
                _done(row, "rejected", f"compute-sanitizer: {bad}", p.t0)
                continue
            kept = row.round
            _done(row, "kept", f"D {cur_row.D:.4f} -> {row.D:.4f} (improved by {delta:.4f}){again}", p.t0)
        else:
            _done(row, "reverted", f"D {row.D:.4f} vs parent {cur_row.D:.4f}: improvement {delta:+.4f} "
                                   f"not above {cfg.threshold}{again}", p.t0)


def _done(row: TrailRow, decision: str, reason: str, t0: float) -> TrailRow:
    row.decision, row.reason, row.wall_s = decision, reason[:2000], time.perf_counter() - t0
    return row


def no_pair(res: LoopResult, out_dir: Path) -> str | None:
    """Why a loop's result holds no rebuilt pair (its start failed a check and no later candidate was kept), or None;
    where its checks did not run, the trail's reason for that round."""
    if res.kept_a_pair:
        return None
    final, said = res.final, []
    for c, verdict, rec_id in (("check1", final.check1, final.check1_record), ("check2", final.check2, final.check2_record)):
        rec = out_dir / "checks" / f"{rec_id or '-'}.json"     # a record is named by its check id
        why = CheckRecord.load(rec).reason if rec.is_file() else ""
        said.append(f"{c} {verdict}" + (f" ({why[:300]})" if why and verdict != "pass" else ""))
    path = out_dir / "trail.parquet"
    unrun = "not run" in (final.check1, final.check2) and path.exists()
    rows = [r for r in trail.load(path) if r.round == final.round] if unrun else []
    said += [f"round {r.round} {r.decision}: {r.reason.split(' @ ')[0][:300]}" for r in rows[-1:]]
    return "no candidate passed both checks: " + ", ".join(said)


def _revision(r: TrailRow, final: bool) -> Revision:
    extra = dict(strategy=r.strategy, cuda_sha256=r.cuda_sha256, vortex_sha256=r.vortex_sha256,
                 check1_record=r.check1_record, check2_record=r.check2_record) if final else {}
    return Revision(r.round if final else 0, _f(r.D), {c: _f(r.values[c]) for c in COMPONENTS}, r.gaps, r.check1,
                    r.check2, **extra)


def _result(record: SliceRecord, rows: list[TrailRow], ref: dict, cfg: LoopConfig, env: LoopEnv, agent: Agent,
            out_dir: Path, wall_s: float, new_rows: int, earlier_s: float, setup: dict) -> LoopResult:
    base = [r for r in rows if r.base]
    last = base[-1] if base else rows[0]
    res = LoopResult(
        record.slice_id, record.precision, record.family, cfg.order, agent.name, cfg.threshold,
        max(r.round for r in rows), dict(Counter(r.decision for r in rows)), _revision(rows[0], False),
        _revision(last, True), {c: _f(ref.get("values", {}).get(c, math.nan)) for c in COMPONENTS},
        ref.get("kernel", ""), list(env.component_set), env.checks.cuda, env.measured_with,
        {k: float(sum(getattr(r, k) for r in rows)) for k in ("t_generate_s", "t_compile_s", "t_checks_s", "t_measure_s", "wall_s")},
        start=read_json(out_dir / "start.json") if (out_dir / "start.json").exists() else None,
        summary={"candidates": sum(r.decision != "failed" for r in rows), "batch": cfg.batch,
                 "budget": {"rounds": cfg.rounds, "wall_s": cfg.wall_s}, "wall_s_this_run": wall_s,
                 "wall_s_total": earlier_s + wall_s,
                 "setup_s": setup,     # start (rules, speed probe) and reference before the budget; round 0 in it
                 "s_per_candidate_this_run": wall_s / max(1, new_rows),
                 "largest_gaps": sorted(([k, v] for k, v in last.gaps.items() if not math.isnan(v)),
                                        key=lambda kv: -abs(kv[1]))[:3]})
    write_json(out_dir / "result.json", res.to_dict())
    return res


def _f(v) -> float | None:
    v = float(v)
    return None if math.isnan(v) else v
