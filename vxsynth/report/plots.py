"""The report's plots: D per round of every traced slice, each final kernel's time over the reference's, and per slice
its per-component gaps before and after and the final candidate's values relative to the reference (PNG files,
matplotlib without a display)."""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402


def plots(table: pd.DataFrame, comps: pd.DataFrame, evidence: list[dict], out: Path, prefix: str = "") -> dict[str, list[str]]:
    out.mkdir(parents=True, exist_ok=True)
    made: dict[str, list[str]] = {}
    traced = [e for e in evidence if e["trail"] is not None and e["trail"]["D"].notna().any()]
    if traced:
        fig, ax = plt.subplots(figsize=(8, 4.5))
        for e in traced:
            t = e["trail"]
            line, = ax.plot(t["round"], t["D"], marker=".", alpha=0.5, label=e["slice_id"][:38])
            kept = t[t["decision"].isin(["initial", "kept"])]
            ax.step(kept["round"], kept["D"], where="post", color=line.get_color(), linewidth=2)
        ax.set(xlabel="round", ylabel="signature distance D", title="D per round (dots: attempts, line: kept revisions)")
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(out / f"{prefix}d_per_round.png", dpi=110)
        plt.close(fig)
        made["suite"] = [f"{prefix}d_per_round.png"]
    timed = table.dropna(subset=["time_vs_reference"]).sort_values("time_vs_reference")
    if len(timed):
        made["time"] = [_time_plot(timed, out / f"{prefix}time_vs_reference.png")]
    for e in evidence:
        sid = e["slice_id"]
        c = comps[comps["slice_id"] == sid]
        if c[["gap_before", "gap_after"]].notna().any().any():
            fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
            x = range(len(c))
            axes[0].bar([i - 0.2 for i in x], c["gap_before"].abs(), 0.4, label="initial")
            axes[0].bar([i + 0.2 for i in x], c["gap_after"].abs(), 0.4, label="final")
            axes[0].set(title="per-component |gap| (0..1)", xticks=list(x))
            axes[0].set_xticklabels(c["component"], rotation=60, ha="right", fontsize=7)
            axes[0].legend(fontsize=7)
            norm = c.apply(lambda r: _rel(r["final"], r["reference"]), axis=1)
            axes[1].bar(list(x), norm, color=["tab:green" if 0.8 <= v <= 1.25 else "tab:orange" for v in norm])
            axes[1].axhline(1.0, color="k", linewidth=1)
            axes[1].set(title="final candidate / reference per component", xticks=list(x))
            axes[1].set_xticklabels(c["component"], rotation=60, ha="right", fontsize=7)
            fig.suptitle(sid, fontsize=9)
            fig.tight_layout()
            name = f"{prefix}{sid}.png"
            fig.savefig(out / name, dpi=100)
            plt.close(fig)
            made[sid] = [name]
    return made


def _time_plot(timed: pd.DataFrame, path: Path) -> str:
    """Bars of each final CUDA kernel's time over the reference kernel's (log scale), green within 1.2x, orange within
    1.5x, red beyond."""
    t = timed["time_vs_reference"].astype(float)
    fig, ax = plt.subplots(figsize=(8, 0.8 + 0.22 * len(t)))
    ax.barh(range(len(t)), t, color=["tab:green" if v <= 1.2 else "tab:orange" if v <= 1.5 else "tab:red" for v in t])
    for x in (1.0, 1.2, 1.5):
        ax.axvline(x, color="k", linewidth=0.8, linestyle="-" if x == 1.0 else ":")
    ax.set_xscale("log")
    ax.set_yticks(range(len(t)))
    ax.set_yticklabels([s[:44] for s in timed["slice_id"]], fontsize=7)
    ax.set(xlabel="final kernel time / reference kernel time (ncu duration; dotted: 1.2x, 1.5x)",
           title="Does each pair run like the kernel it stands for?")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path.name


def _rel(a: float, b: float) -> float:
    """final / reference for the bar (NaN: no bar), shown up to 3."""
    if math.isnan(a) or math.isnan(b) or b == 0:
        return math.nan
    return min(a / b, 3.0)
