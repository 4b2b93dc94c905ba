"""The suite report: the suite table, the per-component agreement table (`agreement_table`), the three layers of
acceptance evidence per slice, plots (`plots`), Markdown, a static HTML page, and parquet tables that pandas/duckdb read
directly."""

from __future__ import annotations

import base64
import html
import json
import math
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from vxsynth.kernels.problem import from_dict
from vxsynth.metrics import components as sig
from vxsynth.metrics.components import COMPONENTS
from vxsynth.report.agreement_table import agreement, agreement_html, agreement_md
from vxsynth.report.plots import plots
from vxsynth.store import schemas
from vxsynth.store.io import read_json, read_table, replace_dir, write_table, write_text
from vxsynth.store.measured import final_measurement


def _maybe(path: Path):
    return read_json(path) if path.exists() else None


def _check_summary(suite_dir: Path, sid: str, rec_id: str) -> dict:
    if not rec_id:
        return {"verdict": "not run", "max_abs": math.nan, "max_rel": math.nan, "tol": ""}
    r = _maybe(suite_dir / sid / "checks" / f"{rec_id}.json")
    if r is None:
        return {"verdict": "record missing", "max_abs": math.nan, "max_rel": math.nan, "tol": ""}
    kind = r["kind"]
    cases = [c for c in r["cases"] if kind in c]
    normal = [c for c in cases if c["case"] == "normal"] or cases   # errors of the unit-scale case (all cases in the record)
    abs_ = [c[kind]["max_abs_err"] for c in normal]
    rel = [c[kind]["max_rel_err"] for c in normal]
    return {"verdict": r["verdict"] if kind != "vortex_ref" else f"{r['verdict']} (vortex vs reference)",
            "max_abs": max(abs_) if abs_ else math.nan, "max_rel": max(rel) if rel else math.nan,
            "tol": _tolerance(r["tolerance"], [w for c in normal for w in c[kind].get("worst", [])[:1]]),
            "id": r["check_id"], "reason": r["reason"]}


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
    extra = [{"slice_id": s, "models": "", "family": r["family"], "precision": r["precision"], "share": math.nan}
             for s in ran if s not in set(index["slice_id"]) and (r := _maybe(suite_dir / s / "result.json"))]
    index = index[index["slice_id"].isin(ran)]
    return pd.concat([index, pd.DataFrame(extra)], ignore_index=True) if extra else index


def collect(slices_dir: Path, suite_dir: Path, simx_dirs: list[Path]) -> tuple[pd.DataFrame, pd.DataFrame, list[dict]]:
    """The suite table, per-component rows and per-slice evidence; SimX sweeps from the first of `simx_dirs` that
    has them for the slice."""
    rows, comps, evidence = [], [], []
    for s in _index(slices_dir, suite_dir).itertuples():
        path = slices_dir / s.slice_id / "slice.json"
        rec = read_json(path) if path.exists() else {"op_call": {"op": ""}, "problem": None}
        res = _maybe(suite_dir / s.slice_id / "result.json")
        status = _maybe(suite_dir / s.slice_id / "status.json") or {}
        trail = read_table(suite_dir / s.slice_id / "trail.parquet", schemas.TRAIL) if (suite_dir / s.slice_id / "trail.parquet").exists() else None
        final = res["final"] if res else {}
        c1 = _check_summary(suite_dir, s.slice_id, final.get("check1_record", ""))
        c2 = _check_summary(suite_dir, s.slice_id, final.get("check2_record", ""))
        dec = res["decisions"] if res else {}
        rows.append({
            "slice_id": s.slice_id, "models": s.models, "family": s.family, "op": rec["op_call"]["op"],
            "shape": from_dict(rec["problem"]).label() if rec["problem"] else s.slice_id.split("-")[2],
            "precision": s.precision, "gpu_share": s.share,
            "check1": c1["verdict"], "check1_max_abs": c1["max_abs"], "check1_max_rel": c1["max_rel"], "check1_tol": c1["tol"],
            "check2": c2["verdict"], "check2_max_abs": c2["max_abs"], "check2_max_rel": c2["max_rel"], "check2_tol": c2["tol"],
            "D_initial": _nan(res and res["initial"]["D"]), "D_final": _nan(res and final["D"]),
            "rounds": int(res["rounds"]) if res else 0, "kept": dec.get("kept", 0), "reverted": dec.get("reverted", 0),
            "rejected": dec.get("rejected", 0), "crashed": dec.get("crashed", 0), "failed": dec.get("failed", 0),
            "status": status.get("status", "reconstructed" if res else "not reconstructed"),
            "simx_check2": _simx_check(sxc := _first(simx_dirs, s.slice_id, "check.json"), short=True),
        })
        ref = (res or {}).get("reference", {})
        for c in COMPONENTS:
            comps.append({"slice_id": s.slice_id, "component": c, "reference": _nan(ref.get(c)),
                          "initial": _nan(res and res["initial"]["values"].get(c)), "final": _nan(res and final["values"].get(c)),
                          "gap_before": _nan(res and res["initial"]["gaps"].get(c)), "gap_after": _nan(res and final["gaps"].get(c))})
        evidence.append({"slice_id": s.slice_id, "record": rec, "result": res, "status": status, "checks": [c1, c2],
                         "trail": trail, "simx": _first(simx_dirs, s.slice_id, "summary.json"), "simx_check": sxc,
                         "nan_reasons": _nan_reasons(suite_dir / s.slice_id, res)})
    return pd.DataFrame(rows, columns=schemas.REPORT.names), pd.DataFrame(comps, columns=schemas.COMPONENTS.names), evidence


def _nan_reasons(slice_dir: Path, res: dict | None) -> dict[str, dict]:
    """Why components are NaN under the current component rules, from each side's recorded raw metrics: the
    reference's (reference.json) and the final candidate's (its kept measurement in measured/, where the run kept one)."""
    sides = {"reference": _maybe(slice_dir / "reference.json"), "final": res and final_measurement(slice_dir, res)}
    return {side: sig.compute(m["metrics"], m["settings"]["chip"], m["settings"]["components"])[1]
            if m and m.get("metrics") else {} for side, m in sides.items()}


def _first(dirs: list[Path], sid: str, name: str) -> dict | None:
    """The slice's `name` in the first of `dirs` that has it."""
    return next((_maybe(d / sid / name) for d in dirs if (d / sid / name).exists()), None)


def _simx_check(c: dict | None, short: bool = False) -> str:
    """Check 2 of the final pair on SimX: verdict, covered fraction, cost (`vxsynth simx check`)."""
    if not c:
        return "not run" if short else ("not run: no SimX check of this slice's final pair (needs a Vortex installation; "
                                        "`vxsynth simx check --slice <id>`)")
    if "cost" not in c:
        return f"{c['verdict']}: {c['reason']}"
    cost, cyc = c["cost"], c["cost"]["cycles_per_block"]
    red = c.get("reduction")
    head = (f"{c['verdict']} (covered {c['covered_fraction']:.3f} of {c['blocks']} blocks"
            + (f", on {red['dim']} {red['checked']} of {red['full']}" if red else "") + f", {cost['wall_s']:.0f} s)")
    if short:
        return head
    return (f"`{c['check_id']}`: {head}; {c['reason'] if c['verdict'] != 'pass' else 'within tolerance'}; cases "
            + ", ".join(f"{e['case']} windows {e['vortex_windows']}" for e in c["cases"])
            + f"; cycles per block {_fmt(cyc['measured'], '.3g')} measured, {_fmt(cyc['predicted'], '.3g')} predicted; "
            f"config {c['config']}; strategy: {_where(c['strategy_from'])}")


def _where(path: str) -> str:
    """A folder recorded as an absolute path of the machine that wrote it, shown from its data directory on
    (data/recorded/h200/reconstruct/<slice>); anything else as recorded."""
    parts = Path(path).parts
    if not Path(path).is_absolute() or "data" not in parts:
        return path
    return "/".join(parts[len(parts) - 1 - parts[::-1].index("data"):])


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
            rec = read_json(slices_dir / s.slice_id / "slice.json")
            covered += sum(o["share"] for o in rec["occurrences"] if o["workload"] == wl and rec["platform"] == platform)
        rows.append({"platform": platform, "model": wl, "gpu_time_ms": g["gpu_time_us"].sum() / 1e3,
                     "family_share": g.loc[g["family"] != "(not sliced)", "share"].sum(), "covered_by_slices": covered,
                     "slices": int(sum(wl in m.split(",") for m in index["models"]))})
    return pd.DataFrame(rows)


def _traded(res: dict | None) -> str:
    if not res:
        return "not reconstructed"
    before, after = res["initial"]["gaps"], res["final"]["gaps"]
    better = [c for c in after if c in before and abs(after[c]) < abs(before[c]) - 0.01]
    worse = [c for c in after if c in before and abs(after[c]) > abs(before[c]) + 0.01]
    return f"improved: {', '.join(better) or 'none'}; traded away: {', '.join(worse) or 'none'}"


def _fmt(v, spec=".4f") -> str:
    return "n/a" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, spec)


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
    how = {json.dumps(e["result"]["measured_with"], sort_keys=True) for e in evidence if e["result"]}
    w = json.loads(next(iter(how))) if len(how) == 1 else {}
    m = (f"measured on {w.get('platform')} with {w.get('binary')} (metric set {w.get('metric_set')}, cache control "
         f"{w.get('cache_control')}, clock control {w.get('clock_control')})") if w else "measurement settings in each result.json"
    return (f"Recorded, not rerun here: committed in `{'/'.join(recorded.parts[-4:])}/`" + (f" (git {rev})" if rev else "")
            + f"; {m}.")


def _shown(table: pd.DataFrame) -> pd.DataFrame:
    """The suite table as the page shows it: one column per question, so that it fits a 1400-px window."""
    return pd.DataFrame({
        "slice": table["slice_id"], "models": table["models"], "op": table["op"] + " " + table["shape"],
        "precision": table["precision"], "status": table["status"],
        "check 1": [f"{v} ({_fmt(e, '.2e')}, {t})" for v, e, t in zip(table["check1"], table["check1_max_abs"], table["check1_tol"])],
        "check 2": [f"{v} ({_fmt(e, '.2e')}, {t})" for v, e, t in zip(table["check2"], table["check2_max_abs"], table["check2_tol"])],
        "check 2 on SimX": table["simx_check2"],
        "D initial -> final": [f"{_fmt(a)} -> {_fmt(b)}" for a, b in zip(table["D_initial"], table["D_final"])],
        "rounds (kept/rev/rej/crash/failed reply)": [f"{r.rounds} ({r.kept}/{r.reverted}/{r.rejected}/{r.crashed}/{r.failed})"
                                                     for r in table.itertuples()]})


def _md_part(p: Part) -> list[str]:
    L = [f"## {p.title}", "", p.note, "", "Check errors are those of the unit-scale input case; every case is in the check record.", "",
         _shown(p.table).map(lambda v: v.replace("|", "\\|") if isinstance(v, str) else v).to_markdown(index=False)]
    L += agreement_md(agreement(p.comps, p.evidence))
    if "suite" in p.plots:
        L += ["", f"![D per round](plots/{p.plots['suite'][0]})"]
    L += ["", f"### Evidence per slice ({p.title.lower()})", ""]
    for e in p.evidence:
        sid, res = e["slice_id"], e["result"]
        L += [f"#### {sid}", "", "**Numeric** (replay with `vxsynth check replay <id>`):", ""]
        for c in e["checks"]:
            if "id" in c:
                L.append(f"- `{c['id']}`: {c['verdict']} — max abs {_fmt(c['max_abs'], '.3e')}, max rel {_fmt(c['max_rel'], '.3e')}, {c['tol']}")
        L.append(f"- check 2 on SimX: {_simx_check(e['simx_check'])}")
        if e["status"].get("error"):
            L.append(f"- reconstruction failed: {e['status']['error']}")
        L += ["", f"**Behaviour**: {_traded(res)}", ""]
        L.append(p.comps[p.comps["slice_id"] == sid].drop(columns="slice_id").to_markdown(index=False, floatfmt=".4g"))
        if sid in p.plots:
            L += ["", f"![{sid}](plots/{p.plots[sid][0]})"]
        L += ["", "**Decision applicability** (SimX configuration sweeps):", "", *[f"- {x}" for x in _applicability(e["simx"])], ""]
    return L


def _applicability(simx: dict | None) -> list[str]:
    """One line per SimX sweep of the slice: the verdict, check 2 on SimX, the strategy it ran."""
    if not simx:
        return ["missing: no SimX configuration experiment has run for this slice (needs a Vortex installation; "
                "`vxsynth simx sweep --slice <id> --sweep dcache`)"]
    return [f"[{k}] {v['verdict']}; check 2 on SimX: {v['check2']['verdict']}; strategy: {_where(v.get('strategy_from', ''))}"
            + _sweep_detail(v) for k, v in sorted(simx.get("sweeps", {}).items())] or [simx["verdict"]]


def _sweep_detail(v: dict) -> str:
    """What a sweep ran (the pair's staging, or a variant that drops some: then said so first) and each row's windows
    (issue 43). Sweeps recorded before these were kept say that they are unknown."""
    st = v.get("staging")
    if st is None:
        ran = "; ran: unknown staging (recorded before it was kept: may be an unstaged variant of the pair)"
    elif v.get("runs_the_pair", st.get("same_as_pair")):
        ran = (f"; ran the pair's staging ({', '.join(st['kept']) or 'none staged'}, "
               f"{st['vortex_local_mem_bytes']} B of local memory per block)")
    else:
        drops = sorted({d for r in v.get("rows", []) for d in r.get("staging", {}).get("dropped", [])} | set(st["dropped"]))
        ran = (f"; NOT the pair: the Vortex half drops {', '.join(drops)} in "
               + (f"{sum(not r['staging']['same_as_pair'] for r in v['rows'])} of {len(v['rows'])} configurations"
                  if v.get("rows") else "this sweep")
               + f" ({st.get('why', 'its tiles outgrow the local memory per block')}): these figures describe that variant")
    rows = v.get("rows")
    if not rows:
        return ran + (f"; windows {v['cost']['windows']} (first configuration only)" if v.get("cost", {}).get("windows") else "")
    wins = [json.dumps(r["windows"]) for r in rows if r["ok"]]
    where = (f"; every configuration ran windows {wins[0]}" if wins and len(set(wins)) == 1 else
             "; windows per configuration: " + ", ".join(f"{json.dumps(r['config'])} {json.dumps(r['windows'])}" for r in rows))
    return ran + where


def markdown(parts: list[Part], cov: pd.DataFrame, context: dict) -> str:
    L = ["# vxsynth suite report", ""]
    L += [f"- **{k}**: {v}" for k, v in context.items()]
    local = parts[0].table
    L += ["", "## Counts (this run)", "", local.groupby(["family", "precision"]).size().rename("slices").reset_index().to_markdown(index=False)
          if len(local) else "no slice reconstructed", "", "## Coverage of each model's GPU time", "", cov.to_markdown(index=False, floatfmt=".3f"), ""]
    for p in parts:
        L += _md_part(p)
    return "\n".join(L) + "\n"


def _img(path: Path, alt: str) -> str:
    """A plot embedded in the page (the HTML is one self-contained file)."""
    return f"<img alt='{html.escape(alt)}' src='data:image/png;base64,{base64.b64encode(path.read_bytes()).decode()}'>"


def _html_part(p: Part, plots_dir: Path) -> list[str]:
    esc = html.escape
    fmt = {"float_format": lambda x: f"{x:.4g}", "na_rep": "n/a", "index": False}
    H = [f"<h2>{esc(p.title)}</h2><p class='note'>{esc(p.note)}</p>",
         "<p>Check errors are those of the unit-scale input case; every case is in the check record.</p>",
         _shown(p.table).to_html(classes="suite", index=False), *agreement_html(agreement(p.comps, p.evidence))]
    if "suite" in p.plots:
        H.append(_img(plots_dir / p.plots["suite"][0], f"D per round: {p.title}"))
    for e in p.evidence:
        sid = e["slice_id"]
        H += [f"<section class='slice' id='{esc(sid)}'><h3>{esc(sid)}</h3><p><b>Numeric</b> (replay: <code>vxsynth check replay &lt;id&gt;</code>)</p><ul>"]
        for c in e["checks"]:
            if "id" in c:
                cls = "pass" if c["verdict"].startswith("pass") else "fail"
                H.append(f"<li class='{cls}'><code>{esc(c['id'])}</code>: {esc(c['verdict'])}, max abs {_fmt(c['max_abs'], '.3e')}, "
                         f"max rel {_fmt(c['max_rel'], '.3e')}, {esc(c['tol'])}</li>")
        sx = e["simx_check"]
        H.append(f"<li class='{'pass' if sx and sx['verdict'] == 'pass' else 'fail' if sx else ''}'>check 2 on SimX: "
                 f"{esc(_simx_check(sx))}</li>")
        if e["status"].get("error"):
            H.append(f"<li class='fail'>reconstruction failed: {esc(e['status']['error'])}</li>")
        H += ["</ul>", f"<p><b>Behaviour</b>: {esc(_traded(e['result']))}</p>",
              p.comps[p.comps["slice_id"] == sid].drop(columns="slice_id").to_html(**fmt)]
        if sid in p.plots:
            H.append(_img(plots_dir / p.plots[sid][0], f"signature {sid}"))
        H.append("<p><b>Decision applicability</b> (SimX configuration sweeps):</p><ul>"
                 + "".join(f"<li>{esc(x)}</li>" for x in _applicability(e["simx"])) + "</ul></section>")
    return H


CSS = ("body{font-family:sans-serif;margin:2em auto;max-width:1400px;padding:0 1em}"
       "table{border-collapse:collapse;font-size:12px;display:block;overflow-x:auto;max-width:100%}"
       "td,th{border:1px solid #ccc;padding:3px 6px;overflow-wrap:break-word;max-width:24em}th{background:#eee;white-space:nowrap}"
       ".pass{color:#060}.fail{color:#a00}.note{background:#f4f4ff;padding:.5em;border-left:4px solid #88f}"
       "img{max-width:100%;height:auto}.agree td{text-align:right}.agree td:first-child{text-align:left}"
       ".agree .in{background:#cfc}.agree .out{background:#fcc}.agree .na{background:#ddd;color:#666}")


def html_page(parts: list[Part], cov: pd.DataFrame, context: dict, plots_dir: Path) -> str:
    esc = html.escape
    H = ["<!doctype html><html><head><meta charset='utf-8'><title>vxsynth suite report</title>",
         f"<meta name='viewport' content='width=device-width'><style>{CSS}</style></head><body><h1>vxsynth suite report</h1><ul>"]
    H += [f"<li><b>{esc(str(k))}</b>: {esc(str(v))}</li>" for k, v in context.items()]
    local = parts[0].table
    H += ["</ul><h2>Counts (this run)</h2>",
          local.groupby(["family", "precision"]).size().rename("slices").reset_index().to_html(index=False) if len(local) else "<p>none</p>",
          "<h2>Coverage of each model's GPU time</h2>", cov.to_html(index=False, float_format=lambda x: f"{x:.3f}")]
    for p in parts:
        H += _html_part(p, plots_dir)
    H.append("</body></html>")
    return "\n".join(H)


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
        write_text(tmp / "report.md", markdown(parts, cov, context))
        write_text(tmp / "index.html", html_page(parts, cov, context, tmp / "plots"))
        replace_dir(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return table
