"""The report model (`model.Report`) rendered as Markdown (report.md) and as one self-contained HTML page
(index.html, the plots embedded): the same tables, figures and lines, each in its own markup."""

from __future__ import annotations

import base64
import html
from pathlib import Path

from vxsynth.report.agreement_table import agreement_html, agreement_md
from vxsynth.report.model import CHECK_NOTE, Report, Section, fmt

CSS = ("body{font-family:sans-serif;margin:2em auto;max-width:1400px;padding:0 1em}"
       "table{border-collapse:collapse;font-size:12px;display:block;overflow-x:auto;max-width:100%}"
       "td,th{border:1px solid #ccc;padding:3px 6px;overflow-wrap:break-word;max-width:24em}th{background:#eee;white-space:nowrap}"
       ".pass{color:#060}.fail{color:#a00}.note{background:#f4f4ff;padding:.5em;border-left:4px solid #88f}"
       "img{max-width:100%;height:auto}.agree td{text-align:right}.agree td:first-child{text-align:left}"
       ".agree .in{background:#cfc}.agree .out{background:#fcc}.agree .na{background:#ddd;color:#666}")


def markdown(r: Report) -> str:
    L = [f"# {r.title}", ""]
    L += [f"- **{k}**: {v}" for k, v in r.context.items()]
    L += ["", "## Counts (this run)", "", r.counts.to_markdown(index=False) if r.counts is not None else "no slice reconstructed",
          "", "## Coverage of each model's GPU time", "", r.coverage.to_markdown(index=False, floatfmt=".3f"), ""]
    for s in r.sections:
        L += _md_section(s)
    return "\n".join(L) + "\n"


def _md_section(s: Section) -> list[str]:
    L = [f"## {s.title}", "", s.note, "", CHECK_NOTE, "",
         s.table.map(lambda v: v.replace("|", "\\|") if isinstance(v, str) else v).to_markdown(index=False), "", s.speed]
    if s.time_figure:
        L += ["", f"![{s.time_figure.label}](plots/{s.time_figure.file})"]
    L += agreement_md(s.agreement)
    if s.figure:
        L += ["", f"![{s.figure.label}](plots/{s.figure.file})"]
    L += ["", f"### Evidence per slice ({s.title.lower()})", ""]
    for e in s.slices:
        L += [f"#### {e.slice_id}", "", "**Numeric** (replay with `vxsynth check replay <id>`):", ""]
        L += [f"- `{c.id}`: {c.verdict} — max abs {fmt(c.max_abs, '.3e')}, max rel {fmt(c.max_rel, '.3e')}, {c.tol}"
              for c in e.checks]
        L.append(f"- check 2 on SimX: {e.simx_check.text}")
        if e.error:
            L.append(f"- reconstruction failed: {e.error}")
        L += ["", f"**Behaviour**: {e.behaviour}", "", e.components.to_markdown(index=False, floatfmt=".4g")]
        if e.figure:
            L += ["", f"![{e.figure.label}](plots/{e.figure.file})"]
        L += ["", "**Decision applicability** (SimX configuration sweeps):", "", *[f"- {x}" for x in e.applicability], ""]
    return L


def _img(path: Path, alt: str) -> str:
    """A plot embedded in the page (the HTML is one self-contained file)."""
    return f"<img alt='{html.escape(alt)}' src='data:image/png;base64,{base64.b64encode(path.read_bytes()).decode()}'>"


def html_page(r: Report, plots_dir: Path) -> str:
    esc = html.escape
    H = [f"<!doctype html><html><head><meta charset='utf-8'><title>{esc(r.title)}</title>",
         f"<meta name='viewport' content='width=device-width'><style>{CSS}</style></head><body><h1>{esc(r.title)}</h1><ul>"]
    H += [f"<li><b>{esc(k)}</b>: {esc(v)}</li>" for k, v in r.context.items()]
    H += ["</ul><h2>Counts (this run)</h2>", r.counts.to_html(index=False) if r.counts is not None else "<p>none</p>",
          "<h2>Coverage of each model's GPU time</h2>", r.coverage.to_html(index=False, float_format=lambda x: f"{x:.3f}")]
    for s in r.sections:
        H += _html_section(s, plots_dir)
    H.append("</body></html>")
    return "\n".join(H)


def _html_section(s: Section, plots_dir: Path) -> list[str]:
    esc = html.escape
    H = [f"<h2>{esc(s.title)}</h2><p class='note'>{esc(s.note)}</p>", f"<p>{CHECK_NOTE}</p>",
         s.table.to_html(classes="suite", index=False), f"<p>{esc(s.speed)}</p>"]
    if s.time_figure:
        H.append(_img(plots_dir / s.time_figure.file, s.time_figure.title))
    H += agreement_html(s.agreement)
    if s.figure:
        H.append(_img(plots_dir / s.figure.file, s.figure.title))
    for e in s.slices:
        sid = e.slice_id
        H += [f"<section class='slice' id='{esc(sid)}'><h3>{esc(sid)}</h3><p><b>Numeric</b> (replay: <code>vxsynth check replay &lt;id&gt;</code>)</p><ul>"]
        H += [f"<li class='{'pass' if c.passed else 'fail'}'><code>{esc(c.id)}</code>: {esc(c.verdict)}, max abs "
              f"{fmt(c.max_abs, '.3e')}, max rel {fmt(c.max_rel, '.3e')}, {esc(c.tol)}</li>" for c in e.checks]
        v = e.simx_check.verdict
        H.append(f"<li class='{'pass' if v == 'pass' else 'fail' if v is not None else ''}'>check 2 on SimX: "
                 f"{esc(e.simx_check.text)}</li>")
        if e.error:
            H.append(f"<li class='fail'>reconstruction failed: {esc(e.error)}</li>")
        H += ["</ul>", f"<p><b>Behaviour</b>: {esc(e.behaviour)}</p>",
              e.components.to_html(float_format=lambda x: f"{x:.4g}", na_rep="n/a", index=False)]
        if e.figure:
            H.append(_img(plots_dir / e.figure.file, e.figure.title))
        H.append("<p><b>Decision applicability</b> (SimX configuration sweeps):</p><ul>"
                 + "".join(f"<li>{esc(x)}</li>" for x in e.applicability) + "</ul></section>")
    return H
