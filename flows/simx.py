"""SimX flow: run a slice's final Vortex candidate over a Hydra sweep of SimX configurations (decision
applicability). Configurations fan out in parallel (CPU work); each driver build is cached per configuration."""

from __future__ import annotations

import itertools
from pathlib import Path

from hydra.core.override_parser.overrides_parser import OverridesParser
from prefect import flow, get_run_logger, task

from flows import plans
from flows.config import ROOT, data_dir
from vxsynth.errors import VxError
from vxsynth.kernels import tensors as T
from vxsynth.kernels.candidate import make
from vxsynth.kernels.problem import from_dict
from vxsynth.kernels.strategy import Strategy
from vxsynth.simx import experiments
from vxsynth.simx.executor import SimxExecutor
from vxsynth.store import schemas
from vxsynth.store.io import read_json, write_json, write_table


def expand(sweep: list[str], base: dict) -> list[dict]:
    """Configurations of a sweep in Hydra's override grammar (`knob=a,b,c`, `range(...)`), over `base`."""
    axes = []
    for o in OverridesParser.create().parse_overrides(list(sweep)):
        if o.key_or_group not in base:
            raise VxError(f"sweep knob {o.key_or_group!r} is not a SimX configuration knob; use one of {sorted(base)}")
        values = list(o.sweep_iterator()) if o.is_sweep_override() else [o.value()]
        axes.append([(o.key_or_group, v) for v in values])
    return [{**base, **dict(combo)} for combo in itertools.product(*axes)]


@task(name="simx-run", task_run_name="simx {cfg}")
def simx_run(inst, cfg: dict, candidate, inputs: dict, work: str, budget: float, timeout_s: float) -> dict:
    ex = SimxExecutor(inst, cfg, ROOT / "scratch" / "simx-cache", budget, timeout_s)
    r = ex.run(candidate, inputs, Path(work))
    return {"ok": r.ok, "error": r.error, "counters": r.counters, "blocks": r.blocks,
            "covered_fraction": r.covered_fraction if r.ok else float("nan"), "api": inst.api}


@flow(name="simx", log_prints=True)
def simx_flow(overrides: list[str], slice_id: str, sweep: str) -> dict:
    log = get_run_logger()
    cfg, inst, rec = plans.simx(overrides, slice_id, sweep)
    s = cfg["simx"]
    res_path = data_dir(cfg) / "suite" / rec["slice_id"] / "result.json"
    strategy = Strategy.from_dict(read_json(res_path)["final"]["strategy"]) if res_path.exists() else Strategy()
    c = make(from_dict(rec["problem"]), strategy, rec["precision"])
    bufs = T.make_inputs(c.problem, 0)
    inputs = T.vortex_inputs(c.problem, c.precision, bufs)
    configs = expand(s["sweeps"][sweep], s["config"])
    log.info(f"{rec['slice_id']}: {len(configs)} SimX configurations ({sweep}) with Vortex {inst.api} at {inst.root}")
    futures = [simx_run.submit(inst, conf, c, inputs, str(ROOT / "scratch" / "simx" / rec["slice_id"] / str(i)),
                               float(s["instr_budget"]), float(s["timeout_s"])) for i, conf in enumerate(configs)]
    results = iter([f.result() for f in futures])
    df = experiments.run(configs, lambda _: next(results), rec["slice_id"], c.name)
    out = data_dir(cfg) / "simx" / rec["slice_id"]
    write_table(out / f"{sweep}.parquet", df, schemas.SIMX)
    knob = [o.split("=")[0] for o in s["sweeps"][sweep] if "," in o or "range(" in o][-1]
    verdict = experiments.respond(df, knob)
    summary = {"slice_id": rec["slice_id"], "sweep": sweep, "api": inst.api, **verdict}
    write_json(out / "summary.json", summary)
    log.info(summary["verdict"])
    return summary
