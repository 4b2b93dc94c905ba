"""The reconstruction loop of one slice.

Round r: the agent proposes an edit of the current strategy (or a free-form source pair) -> CUDA and Vortex
candidates from that one strategy -> sandbox rules -> RISC-V cross-compile -> check 1 -> check 2 -> if both pass,
the CUDA candidate's signature (ncu) -> keep the revision only if D improves by more than the threshold, else revert
to the parent; a failed check rejects the round, a crash fails only that round, an agent reply that gives no
candidate is a "failed" round. Every attempt is a row of the revision trail (with its sources on disk); a rerun
resumes from the trail. Without a GPU the loop can only build and check round 0 (D is not measurable).
"""

from __future__ import annotations

import json
import math
import random
import time
import traceback
from dataclasses import MISSING, asdict, dataclass, field, replace
from pathlib import Path
from typing import Callable

import pandas as pd

from vxsynth.agent.base import Agent, Context
from vxsynth.checks import gates, run as checks
from vxsynth.errors import VxError
from vxsynth.kernels.candidate import Candidate, make
from vxsynth.kernels.problem import from_dict
from vxsynth.kernels.strategy import Strategy, check
from vxsynth.reconstruct.start import informed
from vxsynth.signature.components import COMPONENTS
from vxsynth.signature.distance import comparable, distance, signed_gap
from vxsynth.signature.measure import Measurement
from vxsynth.store import schemas
from vxsynth.store.io import read_table, sha256_obj, write_json, write_table
from vxsynth.targets import sandbox, sanitizer
from vxsynth.targets.vortex_host import lmem_per_block, occupancy_error

MOVE = 0.01  # a component "moved" when its |gap| changed by more than this


@dataclass
class LoopConfig:
    rounds: int = 12
    wall_s: float = 900.0
    threshold: float = 0.005
    order: str = "cuda_first"
    seed: int = 0
    initial: dict = field(default_factory=dict)
    start: dict = field(default_factory=dict)     # conf/start: the structure-informed start's rules ({}: default start)
    sanitize: bool = True                         # compute-sanitizer memcheck + racecheck before a revision is kept

    @classmethod
    def from_dict(cls, d: dict) -> "LoopConfig":
        """The settings, each checked against its field's type (a bad value is a one-line VxError naming it)."""
        kinds = {"int": int, "float": (int, float), "str": str, "bool": bool, "dict": dict}
        for k, v in d.items():
            f = cls.__dataclass_fields__.get(k)
            want = kinds.get(str(f.type)) if f else None
            if want and (not isinstance(v, want) or (want is int and isinstance(v, bool))):
                raise VxError(f"loop.{k}={v!r} must be {f.type}, e.g. loop.{k}={f.default if f.default_factory is MISSING else '{}'}")
        if d.get("order", "cuda_first") not in ("cuda_first", "vortex_first"):
            raise VxError(f"loop.order={d['order']!r}: use cuda_first or vortex_first")
        return cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__})


@dataclass
class LoopEnv:
    checks: checks.CheckEnv
    rules: list[dict]
    measure: Callable[[Candidate, Path, dict, Path], Measurement] | None = None  # (candidate, CUDA job, record,
                                                                                 # saved candidate); None: no GPU
    reference: Callable[[dict], Measurement] | None = None
    component_set: tuple = tuple(COMPONENTS)
    measured_with: dict = field(default_factory=dict)
    objects: dict | None = None       # conf/sandbox object rules (None: conf/sandbox/default.yaml)


def initial_strategy(record: dict, cfg: LoopConfig, valid: Callable[[Strategy], str | None]) -> tuple[Strategy, dict]:
    """The start (structure-informed from the reference kernel, or the plain default), with `initial` overrides on
    top, and its provenance."""
    s, prov = informed(record, cfg.start, valid)
    if cfg.initial:
        s = Strategy.from_dict({**s.to_dict(), **cfg.initial})
        prov["overrides"] = cfg.initial
    return s, prov


def validator(problem, precision: str, env: LoopEnv) -> Callable[[Strategy], str | None]:
    vcfg = env.checks.vortex.cfg
    tensor_ok = precision in ("BF16", "TF32_FP16")

    def why(s: Strategy) -> str | None:
        r = check(problem, s, max_threads=min(1024, vcfg.warps * vcfg.threads), tensor_ok=tensor_ok)
        if r:
            return r
        try:
            return occupancy_error(make(problem, s, precision, lmem_per_block(s.threads, vcfg)), vcfg)
        except ValueError as e:
            return str(e)
    return why


def _gaps(values: dict, ref: dict, comps) -> dict:
    return {c: signed_gap(c, values.get(c, math.nan), ref.get(c, math.nan)) for c in COMPONENTS if c in comps}


def reconstruct(record: dict, cfg: LoopConfig, env: LoopEnv, agent: Agent, out_dir: Path,
                log: Callable[[str], None] = print, work_dir: Path | None = None) -> dict:
    sid, precision = record["slice_id"], record["precision"]
    problem = from_dict(record["problem"])
    out_dir.mkdir(parents=True, exist_ok=True)
    work_dir = Path(work_dir or out_dir / "work")
    run_id = sha256_obj({"slice": record, "cfg": asdict(cfg), "agent": getattr(agent, "identity", agent.name)})[:12]
    trail_path = out_dir / "trail.parquet"
    rows: list[dict] = []
    if trail_path.exists():
        old = read_table(trail_path, schemas.TRAIL)
        same_set = all(comparable(tuple(json.loads(c)), tuple(env.component_set)) for c in old["component_set"])
        if len(old) and (old["run_id"] == run_id).all() and same_set:
            rows = old.to_dict("records")
            log(f"[{sid}] resuming after round {int(old['round'].max())}")
    ref = _reference(record, env, out_dir)
    ref_values = ref.get("values", {})
    noise = float((ref.get("settings") or {}).get("noise_D") or 0.0)   # largest D between repeated reference measurements
    valid = validator(problem, precision, env)
    tried = {r["strategy_hash"] for r in rows}
    t_start = time.perf_counter()

    def current_state():
        base = [r for r in rows if r["decision"] in ("initial", "kept")]
        if not base:
            return None
        r = base[-1]
        return r, Strategy.from_dict(json.loads(r["strategy"]))

    start_path = out_dir / "start.json"
    if not rows:
        s0, prov = initial_strategy(record, cfg, valid)
        write_json(start_path, prov)
        summary = "; ".join(f"{k['knob']}={k['value']} ({k['fact']})" for k in prov["knobs"]) or "the plain default strategy"
        rows.append(_evaluate(record, problem, s0, 0, -1, Strategy().diff(s0), f"{prov['kind']} start",
                              f"{prov['kind']} start: {summary}", env, cfg, run_id, out_dir, work_dir, ref_values, None))
        _save(rows, trail_path)
        log(_describe(sid, rows[-1]))
    for rnd in range(int(max(r["round"] for r in rows)) + 1, cfg.rounds + 1):
        if time.perf_counter() - t_start > cfg.wall_s:
            log(f"[{sid}] wall-time budget of {cfg.wall_s:.0f} s reached")
            break
        state = current_state()
        if state is None or env.measure is None:
            break  # nothing measurable to improve on
        cur_row, cur = state
        if math.isnan(cur_row["D"]):
            break
        folder = out_dir / "candidates" / f"r{int(cur_row['round']):03d}"
        ctx = Context(record, problem, precision, cur, json.loads(cur_row["gaps"]), rows, tried, valid, cfg.order,
                      random.Random(f"{cfg.seed}-{rnd}"), ((folder / "kernel.cu").read_text(), (folder / "kernel_vx.c").read_text()))
        prop = agent.propose(ctx)
        if prop is None:
            log(f"[{sid}] {getattr(agent, 'stopped', None) or 'no untried valid edit left'}")
            break
        if prop.call:
            write_json(out_dir / "candidates" / f"r{rnd:03d}" / "agent.json", prop.call)
        if prop.failure:
            row = _done(_row(record, prop.strategy, rnd, int(cur_row["round"]), {}, prop.name, prop.reason, env, cfg,
                             run_id, source_kind=""), "failed", prop.failure, time.perf_counter())
        else:
            tried.add(prop.strategy.hash())
            row = _evaluate(record, problem, prop.strategy, rnd, int(cur_row["round"]), prop.edit, prop.name, prop.reason,
                            env, cfg, run_id, out_dir, work_dir, ref_values, cur_row, prop.sources, noise)
        row["agent_call"] = json.dumps({k: v for k, v in prop.call.items() if k not in ("messages", "reply")}, sort_keys=True)
        rows.append(row)
        _save(rows, trail_path)
        log(_describe(sid, row))
    return _result(record, rows, ref, cfg, env, agent, out_dir)


def _reference(record: dict, env: LoopEnv, out_dir: Path) -> dict:
    path = out_dir / "reference.json"
    if path.exists():
        return json.loads(path.read_text())
    if env.reference is None:
        ref = {"ok": False, "values": {c: math.nan for c in COMPONENTS}, "error": "no GPU: reference not measured",
               "recorded_in_workload": record["reference_signature"]}
    else:
        m = env.reference(record)
        ref = {"ok": m.ok, "values": m.values, "nan_reasons": m.nan_reasons, "metrics": m.metrics, "kernel": m.kernel,
               "settings": m.settings, "error": m.error, "wall_s": m.wall_s, "kernels_seen": m.kernels_seen,
               "recorded_in_workload": record["reference_signature"]}
    write_json(path, ref)
    return ref


def _row(record, s: Strategy, rnd: int, parent: int, edit: dict, edit_name: str, reason: str, env: LoopEnv,
         cfg: LoopConfig, run_id: str, source_kind: str = "generated") -> dict:
    """A trail row before evaluation: nothing checked or measured yet."""
    return {"slice_id": record["slice_id"], "run_id": run_id, "order": cfg.order, "round": rnd, "parent": parent,
            "strategy_hash": s.hash(), "strategy": json.dumps(s.to_dict(), sort_keys=True), "diff": json.dumps(edit),
            "edit": edit_name, "edit_reason": reason, "cuda_sha256": "", "vortex_sha256": "",
            "check1": "not run", "check2": "not run", "check1_record": "", "check2_record": "",
            **{c: math.nan for c in COMPONENTS}, "component_set": json.dumps(list(env.component_set)), "gaps": "{}",
            "D": math.nan, "decision": "rejected", "reason": "", "improved": "[]", "worsened": "[]",
            "t_generate_s": 0.0, "t_compile_s": 0.0, "t_checks_s": 0.0, "t_measure_s": 0.0, "wall_s": 0.0,
            "measured_with": json.dumps(env.measured_with, sort_keys=True), "source_kind": source_kind,
            "agent_call": "{}"}


def _evaluate(record, problem, s: Strategy, rnd: int, parent: int, edit: dict, edit_name: str, reason: str,
              env: LoopEnv, cfg: LoopConfig, run_id: str, out_dir: Path, work_dir: Path, ref: dict,
              cur_row: dict | None, sources: tuple[str, str] | None = None, noise: float = 0.0) -> dict:
    """Generate (or take the free-form `sources` of) one candidate, and judge it: sandbox, build, checks, D, keep."""
    sid, precision = record["slice_id"], record["precision"]
    tag = f"r{rnd:03d}"
    folder = out_dir / "candidates" / tag
    work = work_dir / tag
    t0 = time.perf_counter()
    row = _row(record, s, rnd, parent, edit, edit_name, reason, env, cfg, run_id,
               "free-form" if sources else "generated")
    try:
        c = make(problem, s, precision, lmem_per_block(s.threads, env.checks.vortex.cfg))
        if sources:
            c = replace(c, cuda_source=sources[0], vortex_source=sources[1])
            row["strategy_hash"] = sha256_obj([s.hash(), c.cuda_sha256, c.vortex_sha256])[:12]
        c.save(folder)
        row.update(cuda_sha256=c.cuda_sha256, vortex_sha256=c.vortex_sha256, t_generate_s=time.perf_counter() - t0)
        bad = sandbox.check(c, problem, precision, env.rules)
        if bad:
            return _done(row, "rejected", "sandbox: " + "; ".join(map(str, bad)), t0)
        t1 = time.perf_counter()
        b = gates.build(c, env.checks, env.objects, work, cfg.order)
        row["edit_reason"] += "".join(f" | {n}" for n in b.notes)
        if b.error:
            return _done(row, "rejected", b.error, t0, t_compile=time.perf_counter() - t1)
        cubin, exe = b.cubin, b.exe
        row["t_compile_s"] = time.perf_counter() - t1
        t2 = time.perf_counter()
        recs = checks.run(c, sid, tag, env.checks, work, out_dir / "checks", cubin=cubin, vortex_exe=exe)
        row["t_checks_s"] = time.perf_counter() - t2
        k1, k2 = ("check1", "check2") if env.checks.cuda else ("vortex_ref", None)
        row["check1"] = recs[k1]["verdict"] if env.checks.cuda else "not run (no GPU)"
        row["check1_record"] = recs[k1]["check_id"] if env.checks.cuda else ""
        if k2:
            row.update(check2=recs[k2]["verdict"], check2_record=recs[k2]["check_id"])
        else:
            row.update(check2=f"vortex vs reference: {recs[k1]['verdict']}", check2_record=recs[k1]["check_id"])
        failed = [r for r in recs.values() if r["verdict"] != "pass"]
        if failed:
            crashed = any("CUDA run failed" in r["reason"] or "vortex host run failed" in r["reason"] for r in failed)
            return _done(row, "crashed" if crashed else "rejected", "; ".join(f"{r['kind']}: {r['reason']}" for r in failed), t0)
        if env.measure is None:
            return _done(row, "initial" if rnd == 0 else "unmeasured", "checks pass; no GPU to measure D", t0)
        t3 = time.perf_counter()
        m = env.measure(c, work / "cuda" / "job.json", record, folder)
        if not m.ok:
            return _done(row, "crashed", f"measurement failed: {m.error}", t0, t_measure_s=time.perf_counter() - t3)
        values, dist, again = m.values, distance(m.values, ref, env.component_set), ""
        if cur_row is not None and rnd > 0 and cfg.threshold < cur_row["D"] - dist.D <= cfg.threshold + noise:
            m2 = env.measure(c, work / "cuda" / "job.json", record, folder)
            if m2.ok:   # an improvement within the reference's measured noise: measured again, the mean decides
                first = cur_row["D"] - dist.D
                values = {k: (v + m2.values.get(k, math.nan)) / 2 for k, v in m.values.items()}
                dist = distance(values, ref, env.component_set)
                again = (f"; re-measured: the first improvement {first:.4f} was within threshold + reference noise "
                         f"D {noise:.4f}, the mean of 2 measurements decides")
        row["t_measure_s"] = time.perf_counter() - t3
        gaps = _gaps(values, ref, env.component_set)
        row.update({c_: values[c_] for c_ in COMPONENTS}, D=dist.D, gaps=json.dumps(gaps, sort_keys=True))
        if cur_row is not None:
            old = json.loads(cur_row["gaps"])
            better = [k for k in gaps if k in old and abs(gaps[k]) < abs(old[k]) - MOVE]
            worse = [k for k in gaps if k in old and abs(gaps[k]) > abs(old[k]) + MOVE]
            row.update(improved=json.dumps(better), worsened=json.dumps(worse))
        if rnd == 0:
            return _done(row, "initial", f"D = {dist.D:.4f}", t0)
        delta = cur_row["D"] - dist.D
        if delta > cfg.threshold:
            bad = _sanitize(work / "cuda" / "job.json", out_dir / "checks" / f"{recs['check1']['check_id']}.json") \
                if cfg.sanitize and sanitizer.available() else None
            if bad:
                return _done(row, "rejected", f"compute-sanitizer: {bad}", t0)
            return _done(row, "kept", f"D {cur_row['D']:.4f} -> {dist.D:.4f} (improved by {delta:.4f}){again}", t0)
        return _done(row, "reverted", f"D {dist.D:.4f} vs parent {cur_row['D']:.4f}: improvement {delta:+.4f} "
                                      f"not above {cfg.threshold}{again}", t0)
    except Exception as e:  # noqa: BLE001 - a broken round is recorded, never stops the loop
        return _done(row, "crashed", f"{type(e).__name__}: {e} @ {traceback.format_exc(limit=2).splitlines()[-1]}", t0)


def _sanitize(job: Path, record: Path) -> str | None:
    """memcheck + racecheck on the launch of a revision about to be kept; the result goes into its check 1
    record. None when clean, else what they found."""
    ok, results = sanitizer.check(job)
    rec = json.loads(record.read_text())
    rec["sanitizer"] = results
    write_json(record, rec)
    return None if ok else "; ".join(f"{r['tool']}: {r['summary']} {r['first']}".strip() for r in results if not r["ok"])


def _done(row: dict, decision: str, reason: str, t0: float, **extra) -> dict:
    row.update(extra, decision=decision, reason=reason[:2000], wall_s=time.perf_counter() - t0)
    return row


def _save(rows: list[dict], path: Path) -> None:
    write_table(path, pd.DataFrame(rows), schemas.TRAIL)


def _describe(sid: str, r: dict) -> str:
    moved = f" improved {json.loads(r['improved'])} worsened {json.loads(r['worsened'])}" if r["improved"] != "[]" or r["worsened"] != "[]" else ""
    d = f"D={r['D']:.4f} " if not math.isnan(r["D"]) else ""
    return f"[{sid}] round {r['round']:>2} {r['edit']:<20} {r['decision']:<9} {d}{r['reason'][:160]}{moved}"


def _result(record: dict, rows: list[dict], ref: dict, cfg: LoopConfig, env: LoopEnv, agent: Agent, out_dir: Path) -> dict:
    df = pd.DataFrame(rows)
    base = df[df["decision"].isin(["initial", "kept"])]
    first = df.iloc[0]
    last = base.iloc[-1] if len(base) else first
    res = {
        "slice_id": record["slice_id"], "precision": record["precision"], "family": record["family"],
        "order": cfg.order, "agent": agent.name, "threshold": cfg.threshold, "rounds": int(df["round"].max()),
        "decisions": {k: int(v) for k, v in df["decision"].value_counts().items()},
        "initial": {"round": 0, "D": _f(first["D"]), "values": {c: _f(first[c]) for c in COMPONENTS},
                    "gaps": json.loads(first["gaps"]), "check1": first["check1"], "check2": first["check2"]},
        "final": {"round": int(last["round"]), "D": _f(last["D"]), "values": {c: _f(last[c]) for c in COMPONENTS},
                  "gaps": json.loads(last["gaps"]), "strategy": json.loads(last["strategy"]),
                  "cuda_sha256": last["cuda_sha256"], "vortex_sha256": last["vortex_sha256"],
                  "check1": last["check1"], "check2": last["check2"], "check1_record": last["check1_record"],
                  "check2_record": last["check2_record"]},
        "reference": {c: _f(ref.get("values", {}).get(c, math.nan)) for c in COMPONENTS},
        "reference_kernel": ref.get("kernel", ""), "component_set": list(env.component_set),
        "gpu": env.checks.cuda, "measured_with": env.measured_with,
        "start": json.loads((out_dir / "start.json").read_text()) if (out_dir / "start.json").exists() else None,
        "time_s": {k: float(df[k].sum()) for k in ("t_generate_s", "t_compile_s", "t_checks_s", "t_measure_s", "wall_s")},
    }
    write_json(out_dir / "result.json", res)
    return res


def _f(v) -> float | None:
    v = float(v)
    return None if math.isnan(v) else v
