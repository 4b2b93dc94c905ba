"""The suite report: the suite table, the per-component agreement table (`agreement_table`), the three layers of
acceptance evidence per slice, plots (`plots`), and parquet tables that pandas/duckdb read directly. What the page shows
is one typed value (`model.Report`), rendered as Markdown and as a static HTML page (`render`)."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from vxsynth.metrics import components as sig
from vxsynth.metrics.components import COMPONENTS, DURATION
from vxsynth.records import CheckRecord, LoopResult, SliceRecord, SliceStatus
from vxsynth.report.model import applicability as _applicability  # noqa: F401 (tests read the sweeps' lines here)
from vxsynth.report.model import report_model
from vxsynth.report.model import simx_check as _simx_check
from vxsynth.report.plots import plots
from vxsynth.report.render import html_page, markdown
from vxsynth.signature.distance import distance
from vxsynth.store import schemas
from vxsynth.store.io import read_json, read_table, replace_dir, write_table, write_text
from vxsynth.store.measured import final_measurement


def _maybe(path: Path):
    return read_json(path) if path.exists() else None


def _result(slice_dir: Path) -> LoopResult | None:
    return LoopResult.load(slice_dir / "result.json") if (slice_dir / "result.json").exists() else None


def _check_summary(suite_dir: Path, sid: str, rec_id: str) -> dict:
    if not rec_id:
        return {"verdict": "not run", "max_abs": math.nan, "max_rel": math.nan, "tol": ""}
    path = suite_dir / sid / "checks" / f"{rec_id}.json"
    if not path.exists():
        return {"verdict": "record missing", "max_abs": math.nan, "max_rel": math.nan, "tol": ""}
    r = CheckRecord.load(path)
    kind = r.kind
    cases = [c for c in r.cases if kind in c]
    normal = [c for c in cases if c["case"] == "normal"] or cases   # errors of the unit-scale case (all cases in the record)
    abs_ = [c[kind]["max_abs_err"] for c in normal]
    rel = [c[kind]["max_rel_err"] for c in normal]
    return {"verdict": r.verdict if kind != "vortex_ref" else f"{r.verdict} (vortex vs reference)",
            "max_abs": max(abs_) if abs_ else math.nan, "max_rel": max(rel) if rel else math.nan,
            "tol": _tolerance(r.tolerance, [w for c in normal for w in c[kind].get("worst", [])[:1]]),
            "id": r.check_id, "reason": r.reason}


def _tolerance(t: dict, worst: list[dict]) -> str:
    """The rule an element is judged by; with an accumulation bound (check 2), the bound and what it allowed at the
    element closest to failing, where atol alone would mislead."""
    rule = f"atol {t['atol']:g} rtol {t['rtol']:g}"
    if not t.get("accum"):
        return rule
    w = max(worst, key=lambda w: float(w["abs_err"]) / max(float(w["allowed"]), 1e-300), default=None)
    at = f"; worst element {float(w['abs_err']):.2e} of {float(w['allowed']):.2e} allowed" if w else ""
    k = "√K" if t.get("accum_growth") == "sqrt(K)" else "K"
    return f"{rule} + accumulation bound {t['accum']:g}·{k}·2⁻²⁴·(|A||B|+|bias|){at}"


def _index(slices_dir: Path, suite_dir: Path) -> pd.DataFrame:
    """The suite index rows of the slices `suite_dir` holds results for; a result whose slice is not in this suite
    (a recorded reconstruction) gets a row from its own result.json."""
    index = read_table(slices_dir / "suite.parquet", schemas.SUITE)
    ran = sorted(p.name for p in suite_dir.glob("*/") if (p / "result.json").exists() or (p / "status.json").exists()) \
        if suite_dir.is_dir() else []
    extra = [{"slice_id": s, "models": "", "family": r.family, "precision": r.precision, "share": math.nan}
             for s in ran if s not in set(index["slice_id"]) and (r := _result(suite_dir / s))]
    index = index[index["slice_id"].isin(ran)]
    return pd.concat([index, pd.DataFrame(extra)], ignore_index=True) if extra else index


def collect(slices_dir: Path, suite_dir: Path, simx_dirs: list[Path]) -> tuple[pd.DataFrame, pd.DataFrame, list[dict]]:
    """The suite table, per-component rows and per-slice evidence; SimX sweeps from the first of `simx_dirs` that
    has them for the slice."""
    rows, comps, evidence = [], [], []
    for s in _index(slices_dir, suite_dir).itertuples():
        path = slices_dir / s.slice_id / "slice.json"
        rec = SliceRecord.load(path) if path.exists() else None
        res = _result(suite_dir / s.slice_id)
        status_json = suite_dir / s.slice_id / "status.json"
        status = SliceStatus.load(status_json) if status_json.exists() else None
        trail = read_table(suite_dir / s.slice_id / "trail.parquet", schemas.TRAIL) if (suite_dir / s.slice_id / "trail.parquet").exists() else None
        final = res.final if res else None
        c1 = _check_summary(suite_dir, s.slice_id, final.check1_record if final else "")
        c2 = _check_summary(suite_dir, s.slice_id, final.check2_record if final else "")
        dec = res.decisions if res else {}
        rows.append({
            "slice_id": s.slice_id, "models": s.models, "family": s.family, "op": rec.op_call["op"] if rec else "",
            "shape": rec.problem.label() if rec else s.slice_id.split("-")[2],
            "precision": s.precision, "gpu_share": s.share,
            "check1": c1["verdict"], "check1_max_abs": c1["max_abs"], "check1_max_rel": c1["max_rel"], "check1_tol": c1["tol"],
            "check2": c2["verdict"], "check2_max_abs": c2["max_abs"], "check2_max_rel": c2["max_rel"], "check2_tol": c2["tol"],
            "D_initial": _nan(res and res.initial.D), "D_final": _nan(res and final.D),
            "D_final_now": rescored(suite_dir / s.slice_id, res) if res else math.nan,
            "rounds": res.rounds if res else 0, "kept": dec.get("kept", 0), "reverted": dec.get("reverted", 0),
            "rejected": dec.get("rejected", 0), "crashed": dec.get("crashed", 0), "failed": dec.get("failed", 0),
            "status": status.status if status else "reconstructed" if res else "not reconstructed",
            "simx_check2": _simx_check(sxc := _first(simx_dirs, s.slice_id, "check.json"), short=True),
            **dict(zip(("time_vs_reference", "time_note"), time_vs_reference(suite_dir / s.slice_id, res))),
        })
        ref = res.reference if res else {}
        for c in COMPONENTS:
            comps.append({"slice_id": s.slice_id, "component": c, "reference": _nan(ref.get(c)),
                          "initial": _nan(res and res.initial.values.get(c)), "final": _nan(res and final.values.get(c)),
                          "gap_before": _nan(res and res.initial.gaps.get(c)), "gap_after": _nan(res and final.gaps.get(c))})
        evidence.append({"slice_id": s.slice_id, "record": rec, "result": res, "status": status, "checks": [c1, c2],
                         "trail": trail, "simx": _first(simx_dirs, s.slice_id, "summary.json"), "simx_check": sxc,
                         "nan_reasons": nan_reasons(suite_dir / s.slice_id, res)})
    return pd.DataFrame(rows, columns=schemas.REPORT.names), pd.DataFrame(comps, columns=schemas.COMPONENTS.names), evidence


def nan_reasons(slice_dir: Path, res: LoopResult | None) -> dict[str, dict]:
    """Why components are NaN under the current component rules, from each side's recorded raw metrics: the
    reference's (reference.json) and the final candidate's (its kept measurement in measured/, where the run kept one)."""
    sides = {"reference": _maybe(slice_dir / "reference.json"),
             "final": res and final_measurement(slice_dir, res.final.cuda_sha256, res.final.vortex_sha256, res.measured_with)}
    return {side: sig.compute(m["metrics"], m["settings"]["chip"], m["settings"]["components"])[1]
            if m and m.get("metrics") else {} for side, m in sides.items()}


def rescored(slice_dir: Path, res: LoopResult) -> float:
    """The final pair's D with each side's NaN components decided anew under today's component rules (`nan_reasons`),
    as the agreement table's cells are; differs from the recorded D where a rule changed after the run. A side without
    kept raw metrics keeps its recorded values."""
    why = nan_reasons(slice_dir, res)
    now = lambda side, values: {c: math.nan if c in why[side] else v for c, v in values.items()}  # noqa: E731
    return distance(now("final", res.final.values), now("reference", res.reference), tuple(res.component_set)).D


def time_vs_reference(slice_dir: Path, res: LoopResult | None) -> tuple[float, str]:
    """The final pair's CUDA kernel duration over the reference kernel's (ncu's gpu__time_duration in the harness,
    the reference's first repeat), and how it was taken; NaN with the reason when either side was not measured."""
    if res is None:
        return math.nan, "not reconstructed"
    ref, fin = _maybe(slice_dir / "reference.json"), final_measurement(slice_dir, res.final.cuda_sha256,
                                                                     res.final.vortex_sha256, res.measured_with)
    for side, m in (("reference", ref), ("final pair", fin)):
        t = ((m or {}).get("metrics") or {}).get(DURATION)
        if not isinstance(t, (int, float)) or not t > 0:
            return math.nan, f"{side}: {DURATION} not measured" + ("" if m else " (no kept measurement)")
    return fin["metrics"][DURATION] / ref["metrics"][DURATION], f"ncu {DURATION}, {res.measured_with.get('measured_in', 'isolated')}"


def _first(dirs: list[Path], sid: str, name: str) -> dict | None:
    """The slice's `name` in the first of `dirs` that has it."""
    return next((_maybe(d / sid / name) for d in dirs if (d / sid / name).exists()), None)


def _nan(v) -> float:
    return math.nan if v is None or v is False else float(v)


def coverage(slices_dir: Path) -> pd.DataFrame:
    """Share of each model's GPU time covered by its slices (and its family op calls)."""
    index = read_table(slices_dir / "suite.parquet", schemas.SUITE)
    ranking = read_table(slices_dir / "ranking.parquet", schemas.RANKING)
    rows = []
    for (platform, wl), g in ranking.groupby(["platform", "workload"]):
        covered = 0.0
        for s in index.itertuples():
            rec = SliceRecord.load(slices_dir / s.slice_id / "slice.json")
            covered += sum(o["share"] for o in rec.occurrences if o["workload"] == wl and rec.platform == platform)
        rows.append({"platform": platform, "model": wl, "gpu_time_ms": g["gpu_time_us"].sum() / 1e3,
                     "family_share": g.loc[g["family"] != "(not sliced)", "share"].sum(), "covered_by_slices": covered,
                     "slices": int(sum(wl in m.split(",") for m in index["models"]))})
    return pd.DataFrame(rows)


@dataclass
class Part:
    """One block of results: the local run, or the committed H200 reconstructions (with where they came from)."""
    title: str
    note: str
    table: pd.DataFrame
    comps: pd.DataFrame
    evidence: list[dict]
    plots: dict


def _provenance(recorded: Path, evidence: list[dict]) -> str:
    """Where committed reconstructions came from: directory, git commit, how they were measured."""
    try:
        rev = subprocess.run(["git", "log", "-1", "--format=%h %cs", "--", "."], cwd=recorded, capture_output=True,
                             text=True, timeout=20).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        rev = ""
    how = {json.dumps(e["result"].measured_with, sort_keys=True) for e in evidence if e["result"]}
    w = json.loads(next(iter(how))) if len(how) == 1 else {}
    m = (f"measured on {w.get('platform')} with {w.get('binary')} (metric set {w.get('metric_set')}, cache control "
         f"{w.get('cache_control')}, clock control {w.get('clock_control')})") if w else "measurement settings in each result.json"
    return (f"Recorded, not rerun here: committed in `{'/'.join(recorded.parts[-4:])}/`" + (f" (git {rev})" if rev else "")
            + f"; {m}.")


def build(slices_dir: Path, suite_dir: Path, simx_dirs: list[Path], out_dir: Path, context: dict,
          recorded_dir: Path | None = None) -> pd.DataFrame:
    """Write the report of the run in `suite_dir` and, beside it, of the committed reconstructions in `recorded_dir`;
    SimX sweeps from `simx_dirs` (this run's first, then the committed ones)."""
    table, comps, evidence = collect(slices_dir, suite_dir, simx_dirs)
    total = len(read_table(slices_dir / "suite.parquet", schemas.SUITE))
    context = {**context, "slices in this report": f"{len(table)} of the {total} in the suite"}
    cov = coverage(slices_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        parts = [Part("This run", f"Reconstructed by this run on platform {context.get('measurement platform', '?')}.",
                      table, comps, evidence, plots(table, comps, evidence, tmp / "plots"))]
        if recorded_dir is not None and any(recorded_dir.glob("*/result.json")):
            rt, rc, re_ = collect(slices_dir, recorded_dir, simx_dirs)
            parts.append(Part("Recorded H200 reconstructions", _provenance(recorded_dir, re_), rt, rc, re_,
                              plots(rt, rc, re_, tmp / "plots", prefix="recorded-")))
            write_table(tmp / "recorded_report.parquet", rt, schemas.REPORT)
        write_table(tmp / "suite_report.parquet", table, schemas.REPORT)
        write_table(tmp / "components.parquet", comps, schemas.COMPONENTS)
        write_table(tmp / "coverage.parquet", cov, schemas.COVERAGE)
        report = report_model(parts, cov, context)          # one model, rendered twice
        write_text(tmp / "report.md", markdown(report))
        write_text(tmp / "index.html", html_page(report, tmp / "plots"))
        replace_dir(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return table
