"""The report as one typed value: what the page shows (the run's context, counts, coverage, and per block of results
the suite table, the agreement table, the D plot and each slice's evidence), built once from the collected results
(`build.collect`) and rendered to Markdown and to HTML by `render` from that one model. The texts of the model (check
lines, SimX verdicts, the sweeps' applicability) are worded here, once for both renderings."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from vxsynth.records import LoopResult
from vxsynth.report.agreement_table import Cell, agreement

TITLE = "vxsynth suite report"
CHECK_NOTE = "Check errors are those of the unit-scale input case; every case is in the check record."


@dataclass(frozen=True)
class Figure:
    """A plot under plots/: its file, the short label (Markdown) and the title (HTML alt text)."""
    file: str
    label: str
    title: str


@dataclass(frozen=True)
class CheckLine:
    """One numeric check of a slice's final pair (check 1 or 2): its record, verdict, worst errors, tolerance."""
    id: str
    verdict: str
    max_abs: float
    max_rel: float
    tol: str

    @property
    def passed(self) -> bool:
        return self.verdict.startswith("pass")


@dataclass(frozen=True)
class SimxCheck:
    """Check 2 of the final pair on SimX: the line shown, and the verdict (None: not run)."""
    text: str
    verdict: str | None


@dataclass(frozen=True)
class SliceEvidence:
    """A slice's three layers of evidence: numeric (checks), behaviour (components, signature plot), decision
    applicability (SimX sweeps)."""
    slice_id: str
    checks: tuple[CheckLine, ...]
    simx_check: SimxCheck
    error: str | None
    behaviour: str
    components: pd.DataFrame
    figure: Figure | None
    applicability: tuple[str, ...]


@dataclass(frozen=True)
class Section:
    """One block of results (this run, or the committed H200 reconstructions)."""
    title: str
    note: str
    table: pd.DataFrame                          # the suite table as shown (`shown`)
    agreement: dict[str, dict[str, Cell]]
    figure: Figure | None                        # D per round
    slices: tuple[SliceEvidence, ...]
    speed: str = ""                              # how many final kernels run near the reference's time
    time_figure: Figure | None = None            # each final kernel's time over the reference's


@dataclass(frozen=True)
class Report:
    context: dict[str, str]
    counts: pd.DataFrame | None                  # slices per family and precision in this run; None: none reconstructed
    coverage: pd.DataFrame
    sections: tuple[Section, ...]
    title: str = TITLE


def report_model(parts: list, cov: pd.DataFrame, context: dict) -> Report:
    """The report of `parts` (build.Part: a block's tables, evidence and plots), the coverage table and the context."""
    local = parts[0].table
    counts = local.groupby(["family", "precision"]).size().rename("slices").reset_index() if len(local) else None
    return Report({str(k): str(v) for k, v in context.items()}, counts, cov, tuple(_section(p) for p in parts))


def _section(p) -> Section:
    fig = Figure(p.plots["suite"][0], "D per round", f"D per round: {p.title}") if "suite" in p.plots else None
    return Section(p.title, p.note, shown(p.table), agreement(p.comps, p.evidence), fig,
                   tuple(_slice(p, e) for e in p.evidence), speed(p.table),
                   Figure(p.plots["time"][0], "time / reference", f"final kernel time / reference: {p.title}")
                   if "time" in p.plots else None)


def speed(table: pd.DataFrame) -> str:
    """The line under the suite table: final CUDA kernels within 1.2x and 1.5x of the reference kernel's time."""
    t = table["time_vs_reference"].dropna()
    if t.empty:
        return "final kernel time against the reference's: not measured (no GPU measurement in these results)"
    return (f"final CUDA kernel time / reference kernel time (ncu duration): within 1.2x on {(t <= 1.2).sum()}, "
            f"within 1.5x on {(t <= 1.5).sum()} of {len(t)} measured; median {t.median():.2f}x, "
            f"{t.min():.2f}x to {t.max():.2f}x")


def _slice(p, e: dict) -> SliceEvidence:
    sid = e["slice_id"]
    sx, status = e["simx_check"], e["status"]
    return SliceEvidence(
        sid, tuple(CheckLine(c["id"], c["verdict"], c["max_abs"], c["max_rel"], c["tol"]) for c in e["checks"] if "id" in c),
        SimxCheck(simx_check(sx), sx["verdict"] if sx else None), status.error if status else None, traded(e["result"]),
        p.comps[p.comps["slice_id"] == sid].drop(columns="slice_id"),
        Figure(p.plots[sid][0], sid, f"signature {sid}") if sid in p.plots else None, tuple(applicability(e["simx"])))


def fmt(v, spec=".4f") -> str:
    return "n/a" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, spec)


def _differs(recorded: float, now: float) -> bool:
    """Whether the D re-scored under today's component rules differs from the recorded one (both measured)."""
    return pd.notna(recorded) and pd.notna(now) and abs(recorded - now) > 5e-5


def shown(table: pd.DataFrame) -> pd.DataFrame:
    """The suite table as the page shows it: one column per question, so that it fits a 1400-px window."""
    return pd.DataFrame({
        "slice": table["slice_id"], "models": table["models"], "op": table["op"] + " " + table["shape"],
        "precision": table["precision"], "status": table["status"],
        "check 1": [f"{v} ({fmt(e, '.2e')}, {t})" for v, e, t in zip(table["check1"], table["check1_max_abs"], table["check1_tol"])],
        "check 2": [f"{v} ({fmt(e, '.2e')}, {t})" for v, e, t in zip(table["check2"], table["check2_max_abs"], table["check2_tol"])],
        "check 2 on SimX": table["simx_check2"],
        "D initial -> final": [f"{fmt(a)} -> {fmt(b)}" + (f" ({fmt(c)} under today's rules)" if _differs(b, c) else "")
                               for a, b, c in zip(table["D_initial"], table["D_final"], table["D_final_now"])],
        "time / reference": [f"{t:.2f}x" if pd.notna(t) else f"n/a ({n})" for t, n in
                             zip(table["time_vs_reference"], table["time_note"])],
        "rounds (kept/rev/rej/crash/failed reply)": [f"{r.rounds} ({r.kept}/{r.reverted}/{r.rejected}/{r.crashed}/{r.failed})"
                                                     for r in table.itertuples()]})


def traded(res: LoopResult | None) -> str:
    if not res:
        return "not reconstructed"
    before, after = res.initial.gaps, res.final.gaps
    better = [c for c in after if c in before and abs(after[c]) < abs(before[c]) - 0.01]
    worse = [c for c in after if c in before and abs(after[c]) > abs(before[c]) + 0.01]
    return f"improved: {', '.join(better) or 'none'}; traded away: {', '.join(worse) or 'none'}"


def simx_check(c: dict | None, short: bool = False) -> str:
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
            + f"; cycles per block {fmt(cyc['measured'], '.3g')} measured, {fmt(cyc['predicted'], '.3g')} predicted; "
            f"config {c['config']}; strategy: {where(c['strategy_from'])}")


def where(path: str) -> str:
    """A folder recorded as an absolute path of the machine that wrote it, shown from its data directory on
    (data/recorded/h200/reconstruct/<slice>); anything else as recorded."""
    parts = Path(path).parts
    if not Path(path).is_absolute() or "data" not in parts:
        return path
    return "/".join(parts[len(parts) - 1 - parts[::-1].index("data"):])


def applicability(simx: dict | None) -> list[str]:
    """One line per SimX sweep of the slice: the verdict, check 2 on SimX, the strategy it ran."""
    if not simx:
        return ["missing: no SimX configuration experiment has run for this slice (needs a Vortex installation; "
                "`vxsynth simx sweep --slice <id> --sweep dcache`)"]
    return [f"[{k}] {v['verdict']}; check 2 on SimX: {v['check2']['verdict']}; strategy: {where(v.get('strategy_from', ''))}"
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
    shown_ = (f"; every configuration ran windows {wins[0]}" if wins and len(set(wins)) == 1 else
              "; windows per configuration: " + ", ".join(f"{json.dumps(r['config'])} {json.dumps(r['windows'])}" for r in rows))
    return ran + shown_
