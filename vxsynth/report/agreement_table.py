"""The per-component agreement table of the report: per reconstructed slice and signature component, the final
candidate's deviation from the reference, within tolerance or not (n/a with the reason where either side is NaN), as
Markdown and as HTML."""

from __future__ import annotations

import html
import math
from dataclasses import dataclass

import pandas as pd

from vxsynth.metrics.components import COMPONENTS, RATE_COMPONENTS
from vxsynth.signature.agreement import deviation, summary, within_tolerance

ABBR = {"l1_hit_rate": "L1", "l2_hit_rate": "L2", "gld_coalescing": "coal", "tensor_pipe": "TC", "fma_pipe": "FMA",
        "issue_active": "issue", "arith_intensity": "AI", "dram_bw": "DRAM", "achieved_occupancy": "occ",
        "sm_throughput": "SM"}
AGREEMENT_NOTE = ("Final candidate against the reference, per component: the candidate's deviation, within tolerance "
                  "(green, ✓) when within 10% of the reference's value for AI and DRAM and within 5 percentage points for "
                  "the rates, else red (✗); n/a (grey) where either side is NaN, not counted. "
                  + ", ".join(f"{a}: {c}" for c, a in ABBR.items()) + ".")


@dataclass(frozen=True)
class Cell:
    """One (slice, component) cell of the agreement table."""
    ok: bool | None                 # None: NaN on either side
    text: str
    reasons: tuple[str, ...] = ()   # why n/a, per side


def agreement(comps: pd.DataFrame, evidence: list[dict]) -> dict[str, dict[str, Cell]]:
    """Slice -> component -> cell, for the reconstructed slices. NaN reasons come from each side's raw metrics under
    the current rules, so a value recorded clamped to 100% (before rates far above 100% became NaN) is n/a as well."""
    out = {}
    for e in evidence:
        if e["result"] is None:
            continue
        why, cells = e["nan_reasons"], {}
        for r in comps[comps["slice_id"] == e["slice_id"]].itertuples():
            c = r.component
            cand, ref = (math.nan if c in why[side] else v for side, v in (("final", r.final), ("reference", r.reference)))
            ok = within_tolerance(c, cand, ref)
            if ok is None:
                cells[c] = Cell(None, "n/a", tuple(f"{side}: {why[side][c]}" for side in ("final", "reference")
                                                   if c in why[side]) or ("NaN, no reason recorded",))
            else:
                d = deviation(c, cand, ref)
                cells[c] = Cell(ok, f"{d:+.1f}" if c in RATE_COMPONENTS else f"{d:+.0%}")
        out[e["slice_id"]] = cells
    return out


def _counts(cells: dict[str, dict[str, Cell]]) -> tuple[list[str], str]:
    """The per-component count row and the overall line."""
    n = summary({c: x.ok for c, x in row.items()} for row in cells.values())
    k, m = n["all"]
    return [f"{a}/{b}" for a, b in (n[c] for c in COMPONENTS)], \
        f"cells within tolerance: {k} of {m} ({k / m:.0%})" if m else "cells within tolerance: none measured on both sides"


def agreement_md(cells: dict[str, dict[str, Cell]]) -> list[str]:
    counts, line = _counts(cells)
    L = ["", "### Per-component agreement", "", AGREEMENT_NOTE, "", "| slice | " + " | ".join(ABBR.values()) + " |",
         "|---" * (len(ABBR) + 1) + "|"]
    L += [f"| {sid} | " + " | ".join(row[c].text + {True: " ✓", False: " ✗", None: ""}[row[c].ok] for c in COMPONENTS) + " |"
          for sid, row in cells.items()]
    L += ["| within | " + " | ".join(counts) + " |", "", f"**{line}**", ""]
    na: dict[str, list[str]] = {}
    for sid, row in cells.items():
        for c, x in row.items():
            for reason in x.reasons:
                na.setdefault(reason, []).append(f"{sid} {ABBR[c]}")
    return L + [f"- n/a, {reason}: {', '.join(where)}" for reason, where in na.items()]


def agreement_html(cells: dict[str, dict[str, Cell]]) -> list[str]:
    esc = html.escape
    counts, line = _counts(cells)
    cls = {True: "in", False: "out", None: "na"}
    H = ["<h3>Per-component agreement</h3>", f"<p>{esc(AGREEMENT_NOTE)}</p><table class='agree'><tr><th>slice</th>"
         + "".join(f"<th title='{c}'>{a}</th>" for c, a in ABBR.items()) + "</tr>"]
    for sid, row in cells.items():
        tds = [f"<td class='{cls[x.ok]}'" + (f" title='{esc('; '.join(x.reasons))}'" if x.reasons else "") + f">{esc(x.text)}</td>"
               for x in (row[c] for c in COMPONENTS)]
        H.append(f"<tr><td>{esc(sid)}</td>{''.join(tds)}</tr>")
    return H + ["<tr><th>within</th>" + "".join(f"<th>{n}</th>" for n in counts) + "</tr></table>", f"<p><b>{line}</b></p>"]
