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
from pathlib import Path

from hydra.core.override_parser.overrides_parser import OverridesParser
from prefect import flow, get_run_logger

from flows import plans
from flows.config import ROOT, data_dir
from tasks.simx import simx_build, simx_check, simx_run
from vxsynth.errors import VxError
from vxsynth.kernels import tensors as T
from vxsynth.simx.executor import SimxExecutor
from vxsynth.simx.final_check import check2, final_strategy
from vxsynth.simx.sweep import conclude, merged_check, plan as sweep_plan, summary, swept_knob, write_index
from vxsynth.store import schemas
from vxsynth.store.io import write_json, write_table

CACHE = ROOT / "scratch" / "simx-cache"
CFG_KEYS = ("simx", "precision")   # the config the simx stage reads (conf/ deps in dvc.yaml)


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


@flow(name="simx", log_prints=True)
def simx_flow(overrides: list[str], slice_id: str, sweep: str) -> dict:
    log = get_run_logger()
    cfg, inst, rec = plans.simx(overrides, slice_id, sweep)
    s = cfg["simx"]
    budget, timeout_s = float(s["cycle_budget"]), float(s["timeout_s"])
    strategy, origin = final_strategy(rec.slice_id, suites(cfg))
    configs = expand(s["sweeps"][sweep], s["config"])
    knob = swept_knob(s["sweeps"][sweep])
    log.info(f"{rec.slice_id}: {len(configs)} SimX configurations ({sweep}) with Vortex {inst.api} at {inst.root}")
    built = [f.result() for f in [simx_build.submit(inst, c, str(CACHE), budget, timeout_s) for c in [s["config"], *configs]]]
    p = sweep_plan(rec, strategy, knob, s["config"], configs, built,
                   lambda conf: SimxExecutor(inst, conf, CACHE, budget, timeout_s))
    out = data_dir(cfg) / "simx" / rec.slice_id
    work = ROOT / "scratch" / "simx" / rec.slice_id
    chk = merged_check({sha: check2(c, SimxExecutor(inst, conf, CACHE, budget, timeout_s), rec.slice_id,
                                    cfg["precision"], tuple(s["check_cases"]), work / "check", out / "checks")
                        for sha, (conf, c) in p.to_check.items()})
    log.info(f"check 2 on SimX: {chk.verdict} {chk.reason}")
    results, verdict = [], p.skipped
    if verdict is None:
        futures = [simx_run.submit(inst, conf, str(CACHE), c,
                                   T.vortex_inputs(c.problem, c.precision, T.make_inputs(c.problem, 0)),
                                   str(work / str(i)), budget, timeout_s, p.together, p.windows)
                   for i, (conf, c) in enumerate(zip(configs, p.candidates))]
        results = [f.result() for f in futures]
        df, verdict = conclude(p, results, rec.slice_id)
        write_table(out / f"{sweep}.parquet", df, schemas.SIMX)
    done = summary(rec, sweep, inst, verdict, origin, chk, p, built, results)
    write_json(out / f"{sweep}.json", done)
    write_index(out, done)
    log.info(done["verdict"])
    return done


@flow(name="simx-checks", log_prints=True)
def simx_checks_flow(overrides: list[str], ids: list[str] | None = None) -> list[dict]:
    """Check 2 of every selected slice's final pair on SimX (data/simx/<slice>/check.json), as many slices at once as
    the cores hold their input cases."""
    log = get_run_logger()
    cfg, inst, recs = plans.simx_checks(overrides, ids)
    where = [str(p) for p in suites(cfg)]
    out = [f.result() for f in [simx_check.submit(r, cfg, inst, where, str(CACHE), str(data_dir(cfg) / "simx" / r.slice_id),
                                                  str(ROOT / "scratch" / "simx" / r.slice_id / "final"))
                                for r in recs]]
    for r in out:
        cost = r.get("cost", {})
        log.info(f"{r['slice_id']}: check 2 on SimX {r['verdict']} ({r['reason'][:200]})"
                 + (f"; covered {r['covered_fraction']:.3f}, {cost['wall_s']:.0f} s (predicted {cost['predicted_s']:.0f} s)"
                    if cost else ""))
    return out


def checks_failed(results: list[dict]) -> bool:
    """Whether any slice's SimX check failed or could not run: the CLI's exit status, and what keeps a rebuild from
    recording the simx stage in dvc.lock."""
    return any(r["verdict"] in ("fail", "error") for r in results)


def checks_runner(cfg: dict):
    """The checks flow with one thread per slice whose input cases fit the cores at once."""
    from prefect.task_runners import ThreadPoolTaskRunner
    import os
    per = max(1, len(cfg["simx"]["check_cases"]))
    return simx_checks_flow.with_options(task_runner=ThreadPoolTaskRunner(max_workers=max(1, (os.cpu_count() or 1) // per)))
