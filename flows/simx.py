"""SimX flow: run a slice's final Vortex candidate (its reconstruction in the suite, else the committed H200 one,
else the default strategy) over a Hydra sweep of SimX configurations (decision
applicability). Each configuration is its own SimX build (cached by configuration) with its local memory measured;
the candidate is generated once for the most restrictive configuration of the sweep, checked against the reference
operator on the base configuration's SimX output (check 2), then run on every configuration with counters summed
over its launch windows."""

from __future__ import annotations

import itertools
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
def simx_run(inst, cfg: dict, candidate, inputs: dict, work: str, budget: float, timeout_s: float, together: int) -> dict:
    r = SimxExecutor(inst, cfg, CACHE, budget, timeout_s).run(candidate, inputs, Path(work), counters=True,
                                                             together=together)
    return {"ok": r.ok, "error": r.error, "counters": r.counters, "blocks": r.blocks, "wall_s": r.wall_s,
            "covered_fraction": r.covered_fraction if r.ok else float("nan"), "api": inst.api}


@flow(name="simx", log_prints=True)
def simx_flow(overrides: list[str], slice_id: str, sweep: str) -> dict:
    log = get_run_logger()
    cfg, inst, rec = plans.simx(overrides, slice_id, sweep)
    s = cfg["simx"]
    budget, timeout_s = float(s["cycle_budget"]), float(s["timeout_s"])
    strategy, origin = final_strategy(rec["slice_id"], suites(cfg))
    configs = expand(s["sweeps"][sweep], s["config"])
    log.info(f"{rec['slice_id']}: {len(configs)} SimX configurations ({sweep}) with Vortex {inst.api} at {inst.root}")
    built = [f.result() for f in [simx_build.submit(inst, c, budget, timeout_s) for c in [s["config"], *configs]]]
    c, together = experiments.sweep_candidate(rec, strategy, [b["vortex_config"] for b in built])
    out = data_dir(cfg) / "simx" / rec["slice_id"]
    chk = check2(c, SimxExecutor(inst, s["config"], CACHE, budget, timeout_s), rec["slice_id"], cfg["precision"],
                 tuple(s["check_cases"]), ROOT / "scratch" / "simx" / rec["slice_id"] / "check", out / "checks")
    log.info(f"check 2 on SimX ({s['config']}): {chk['verdict']} {chk.get('reason', '')}")
    inputs = T.vortex_inputs(c.problem, c.precision, T.make_inputs(c.problem, 0))
    futures = [simx_run.submit(inst, conf, c, inputs, str(ROOT / "scratch" / "simx" / rec["slice_id"] / str(i)),
                               budget, timeout_s, together) for i, conf in enumerate(configs)]
    results = [f.result() for f in futures]
    it = iter(results)
    df = experiments.run(configs, lambda _: next(it), rec["slice_id"], c.name)
    write_table(out / f"{sweep}.parquet", df, schemas.SIMX)
    knob = [o.split("=")[0] for o in s["sweeps"][sweep] if "," in o or "range(" in o][-1]
    verdict = experiments.respond(df, knob)
    ok = [r for r in results if r["ok"]]
    summary = {"slice_id": rec["slice_id"], "sweep": sweep, "api": inst.api, "installation": str(inst.root), **verdict,
               "strategy_from": origin,
               "check2": {"verdict": chk["verdict"], "check_id": chk["check_id"], "reason": chk.get("reason", "")},
               "vortex_differs": c.meta["vortex_differs"], "local_memory": [b["local_memory"] for b in built[1:]],
               "cost": {"predicted_per_block": {"instrs": instrs_per_block(c), "cycles": cycles_per_block(c)},
                        "cycle_budget": budget, "blocks_per_launch_at_least": together,
                        "windows": ok[0]["counters"]["windows"] if ok else [],
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
                      "verdict": "; ".join(f"[{k}] {v['verdict']} (check 2 on SimX: {v['check2']['verdict']})"
                                           for k, v in sorted(sweeps.items()))})


@task(name="simx-check", task_run_name="simx check {rec[slice_id]}")
def simx_check(rec: dict, cfg: dict, inst) -> dict:
    """Check 2 of one slice's final pair on the base configuration's SimX; a failure is that slice's only."""
    s = cfg["simx"]
    timeout = min(float(s["timeout_s"]), 2 * float(s["check_max_s"]))   # a check whose prediction was low stops there
    ex = SimxExecutor(inst, s["config"], CACHE, float(s["cycle_budget"]), timeout)
    try:
        return check_final(rec, suites(cfg), ex, cfg["precision"], tuple(s["check_cases"]),
                           data_dir(cfg) / "simx" / rec["slice_id"], ROOT / "scratch" / "simx" / rec["slice_id"] / "final",
                           float(s["check_max_s"]), float(s["s_per_mcycle"]), s["shorten"], float(s["probe_s"]))
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
