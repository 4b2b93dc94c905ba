"""SimX flow: run a slice's final Vortex candidate (its reconstruction in the suite, else the committed H200 one,
else the default strategy) over a Hydra sweep of SimX configurations (decision
applicability). Each configuration is its own SimX build (cached by configuration; with the project's local-memory
fix, `vxsynth.simx.build.LMEM_FIX`) with its local memory measured; the candidate is generated once for the most
restrictive configuration of the sweep (a local-memory sweep: one per configuration, for what it offers), checked
against the reference operator on SimX output (check 2), then run on every configuration over the same launch windows
(sized by the costliest configuration), counters summed over them; verdicts compare per-block figures. The summary
records each row's windows and whether the candidate kept the pair's staging."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

from hydra.core.override_parser.overrides_parser import OverridesParser
from prefect import flow, get_run_logger, task

from flows import plans
from flows.config import ROOT, data_dir
from vxsynth.errors import VxError
from vxsynth.kernels import tensors as T
from vxsynth.simx import experiments
from vxsynth.simx.executor import SimxExecutor, cycles_per_block, instrs_per_block
from vxsynth.simx.final_check import check2, check_final, final_strategy
from vxsynth.store import schemas
from vxsynth.store.io import read_json, write_json, write_table

CACHE = ROOT / "scratch" / "simx-cache"


def suites(cfg: dict) -> list[Path]:
    """Where a slice's final pair is looked up: this data_dir's suite, then the committed H200 reconstructions."""
    return [data_dir(cfg) / "suite", ROOT / "data" / "recorded" / "h200" / "reconstruct"]


def expand(sweep: list[str], base: dict) -> list[dict]:
    """Configurations of a sweep in Hydra's override grammar (`knob=a,b,c`, `range(...)`), over `base`."""
    axes = []
    for o in OverridesParser.create().parse_overrides(list(sweep)):
        if o.key_or_group not in base:
            raise VxError(f"sweep knob {o.key_or_group!r} is not a SimX configuration knob; use one of {sorted(base)}")
        values = list(o.sweep_iterator()) if o.is_sweep_override() else [o.value()]
        axes.append([(o.key_or_group, v) for v in values])
    return [{**base, **dict(combo)} for combo in itertools.product(*axes)]


@task(name="simx-build", task_run_name="simx build {cfg}")
def simx_build(inst, cfg: dict, budget: float, timeout_s: float) -> dict:
    """Build SimX for one configuration (cached) and measure its local memory; the core candidates fit."""
    ex = SimxExecutor(inst, cfg, CACHE, budget, timeout_s)
    return {"local_memory": ex.local_memory(), "vortex_config": ex.vortex_config()}


@task(name="simx-run", task_run_name="simx {cfg}")
def simx_run(inst, cfg: dict, candidate, inputs: dict, work: str, budget: float, timeout_s: float, together: int,
             windows: list | None = None) -> dict:
    r = SimxExecutor(inst, cfg, CACHE, budget, timeout_s).run(candidate, inputs, Path(work), counters=True,
                                                             together=together, windows=windows)
    return {"ok": r.ok, "error": r.error, "counters": r.counters, "blocks": r.blocks, "wall_s": r.wall_s,
            "covered_fraction": r.covered_fraction if r.ok else float("nan"), "api": inst.api}


def swept_knob(sweep: list[str]) -> str:
    """The knob a sweep varies (its last `knob=a,b,...` or `range(...)` override)."""
    return [o.split("=")[0] for o in sweep if "," in o or "range(" in o][-1]


def sweep_candidates(rec: dict, strategy, knob: str, base, cores: list) -> tuple[list, int]:
    """The candidate each configuration runs (`cores`: their Vortex configurations, local memory as measured; `base`:
    the one check 2 runs on) and the blocks each launch holds. One candidate for every configuration, fitted to the
    most restrictive (the base's included), except in a local-memory sweep (`experiments.PER_CONFIG`): there each configuration runs the
    candidate generated for what it offers (the staging its local memory holds), else that sweep could not respond."""
    if knob not in experiments.PER_CONFIG:
        c, together = experiments.sweep_candidate(rec, strategy, [base, *cores])
        return [c] * len(cores), together
    together = experiments.sweep_candidate(rec, strategy, cores)[1]
    return [experiments.sweep_candidate(rec, strategy, [v])[0] for v in cores], together


@flow(name="simx", log_prints=True)
def simx_flow(overrides: list[str], slice_id: str, sweep: str) -> dict:
    log = get_run_logger()
    cfg, inst, rec = plans.simx(overrides, slice_id, sweep)
    s = cfg["simx"]
    budget, timeout_s = float(s["cycle_budget"]), float(s["timeout_s"])
    strategy, origin = final_strategy(rec["slice_id"], suites(cfg))
    configs = expand(s["sweeps"][sweep], s["config"])
    knob = swept_knob(s["sweeps"][sweep])
    log.info(f"{rec['slice_id']}: {len(configs)} SimX configurations ({sweep}) with Vortex {inst.api} at {inst.root}")
    built = [f.result() for f in [simx_build.submit(inst, c, budget, timeout_s) for c in [s["config"], *configs]]]
    cands, together = sweep_candidates(rec, strategy, knob, built[0]["vortex_config"], [b["vortex_config"] for b in built[1:]])
    out = data_dir(cfg) / "simx" / rec["slice_id"]
    work = ROOT / "scratch" / "simx" / rec["slice_id"]
    checked = {}
    for conf, c in zip([s["config"]] if knob not in experiments.PER_CONFIG else configs, cands):
        if c.vortex_sha256 not in checked:       # check 2 of each distinct candidate, on the first configuration it runs
            checked[c.vortex_sha256] = check2(c, SimxExecutor(inst, conf, CACHE, budget, timeout_s), rec["slice_id"],
                                              cfg["precision"], tuple(s["check_cases"]), work / "check", out / "checks")
    chk = next(iter(checked.values()))
    if len(checked) > 1:
        bad = [v for v in checked.values() if v["verdict"] != "pass"]
        chk = {**(bad[0] if bad else chk), "reason": "; ".join(f"{v['check_id']}: {v['verdict']}" for v in checked.values())}
    log.info(f"check 2 on SimX: {chk['verdict']} {chk.get('reason', '')}")
    staged = [experiments.staging(c) for c in cands]
    per_block = [SimxExecutor(inst, conf, CACHE, budget, timeout_s).expected(c) for conf, c in zip(configs, cands)]
    wins = experiments.common_windows(cands[0].meta["blocks"], per_block, budget, together)
    if knob in experiments.PER_CONFIG and len({c.vortex_sha256 for c in cands}) == 1:
        results = []
        verdict = {"knob": knob, "responds": False, "applicable": False,
                   "verdict": (f"not applicable: every local-memory size runs the same candidate (its "
                               f"{staged[0]['vortex_local_mem_bytes']} B of tiles per block fit the smallest): local "
                               "memory has nothing to act on for this strategy")}
        df = None
    else:
        futures = [simx_run.submit(inst, conf, c, T.vortex_inputs(c.problem, c.precision, T.make_inputs(c.problem, 0)),
                                   str(work / str(i)), budget, timeout_s, together, wins)
                   for i, (conf, c) in enumerate(zip(configs, cands))]
        results = [f.result() for f in futures]
        it = iter(results)
        df = experiments.run(configs, lambda _: next(it), rec["slice_id"], cands[0].name)
        verdict = experiments.respond(df, knob)
    if df is not None:
        write_table(out / f"{sweep}.parquet", df, schemas.SIMX)
    ok = [r for r in results if r["ok"]]
    varied = sorted({k for conf in configs for k in conf if len({json.dumps(x.get(k)) for x in configs}) > 1})
    rows = []
    for conf, c, st, r in itertools.zip_longest(configs, cands, staged, results):
        n = sum(k for _, k in r["blocks"]) if r and r["ok"] else 0
        cyc = (r["counters"]["signature"]["cycles"] if r and r["ok"] else None)
        rows.append({"config": {k: conf.get(k) for k in varied}, "ok": bool(r and r["ok"]),
                     "error": (r or {}).get("error", "not run") if not (r and r["ok"]) else "",
                     "candidate": c.name, "vortex_local_mem_bytes": st["vortex_local_mem_bytes"], "staging": st,
                     "windows": r["blocks"] if r and r["ok"] else [], "blocks": n, "cycles": cyc,
                     "cycles_per_block": cyc / n if cyc and n else None})
    summary = {"slice_id": rec["slice_id"], "sweep": sweep, "api": inst.api, "installation": str(inst.root), **verdict,
               "strategy_from": origin,
               "check2": {"verdict": chk["verdict"], "check_id": chk["check_id"], "reason": chk.get("reason", "")},
               "vortex_differs": cands[0].meta["vortex_differs"], "local_memory": [b["local_memory"] for b in built[1:]],
               "vortex_local_mem_bytes": staged[0]["vortex_local_mem_bytes"], "staging": staged[0],
               "runs_the_pair": all(st["same_as_pair"] for st in staged), "windows": [list(w) for w in wins],
               "rows": rows,
               "cost": {"predicted_per_block": {"instrs": instrs_per_block(cands[0]), "cycles": cycles_per_block(cands[0])},
                        "expected_per_block_per_config": per_block,
                        "cycle_budget": budget, "blocks_per_launch_at_least": together,
                        "windows": [list(w) for w in wins],
                        "covered_fraction": ok[0]["covered_fraction"] if ok else math.nan,
                        "wall_s_per_config": [r["wall_s"] for r in results]}}
    write_json(out / f"{sweep}.json", summary)
    _index(out, summary)
    log.info(summary["verdict"])
    return summary


def _index(out: Path, summary: dict) -> None:
    """summary.json: every sweep run for the slice, with one line per verdict (what the report shows)."""
    path = out / "summary.json"
    old = read_json(path) if path.exists() else {}
    sweeps = {**old.get("sweeps", {}), summary["sweep"]: summary}
    write_json(path, {"slice_id": summary["slice_id"], "sweeps": sweeps,
                      "verdict": "; ".join(f"[{k}] {v['verdict']} (check 2 on SimX: {v['check2']['verdict']}"
                                           + ("" if v.get("runs_the_pair", True) else
                                              "; ran a variant of the pair that drops "
                                              + ", ".join(v.get("staging", {}).get("dropped", [])) or "staging")
                                           + ")" for k, v in sorted(sweeps.items()))})


@task(name="simx-check", task_run_name="simx check {rec[slice_id]}")
def simx_check(rec: dict, cfg: dict, inst) -> dict:
    """Check 2 of one slice's final pair on the base configuration's SimX; a failure is that slice's only."""
    s = cfg["simx"]
    timeout = min(float(s["timeout_s"]), 2 * float(s["check_max_s"]))   # a check whose prediction was low stops there
    ex = SimxExecutor(inst, s["config"], CACHE, float(s["cycle_budget"]), timeout)
    try:
        return check_final(rec, suites(cfg), ex, cfg["precision"], tuple(s["check_cases"]),
                           data_dir(cfg) / "simx" / rec["slice_id"], ROOT / "scratch" / "simx" / rec["slice_id"] / "final",
                           float(s["check_max_s"]), float(s["s_per_mcycle"]), s["shorten"], float(s["probe_s"]),
                           float(s.get("check_coverage", 0.0)))
    except (VxError, OSError) as e:
        return {"slice_id": rec["slice_id"], "verdict": "error", "reason": f"{type(e).__name__}: {e}"}


@flow(name="simx-checks", log_prints=True)
def simx_checks_flow(overrides: list[str], ids: list[str] | None = None) -> list[dict]:
    """Check 2 of every selected slice's final pair on SimX (data/simx/<slice>/check.json), as many slices at once as
    the cores hold their input cases."""
    log = get_run_logger()
    cfg, inst, recs = plans.simx_checks(overrides, ids)
    out = [f.result() for f in [simx_check.submit(r, cfg, inst) for r in recs]]
    for r in out:
        cost = r.get("cost", {})
        log.info(f"{r['slice_id']}: check 2 on SimX {r['verdict']} ({r['reason'][:200]})"
                 + (f"; covered {r['covered_fraction']:.3f}, {cost['wall_s']:.0f} s (predicted {cost['predicted_s']:.0f} s)"
                    if cost else ""))
    return out


def checks_runner(cfg: dict):
    """The checks flow with one thread per slice whose input cases fit the cores at once."""
    from prefect.task_runners import ThreadPoolTaskRunner
    import os
    per = max(1, len(cfg["simx"]["check_cases"]))
    return simx_checks_flow.with_options(task_runner=ThreadPoolTaskRunner(max_workers=max(1, (os.cpu_count() or 1) // per)))
