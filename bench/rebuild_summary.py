"""Figures of one `vxsynth rebuild` (issue 17) from its outputs: per slice status, GPU, D, checks and wall time; GPU
seconds per finished slice, slices per GPU-hour, median / max final D, the share of each policy's GPU time the suite
and the finished slices cover, the final pairs' signature gaps per component, and the suite's slices not finished.

    python bench/rebuild_summary.py DATA_DIR [SUITE_SLICES_DIR]

DATA_DIR holds suite/ (status.json and result.json per slice) and report/ (suite_report.parquet, coverage.parquet) as
a rebuild leaves them (bench/rebuild_h200.sh's rebuild.tgz unpacked); before the report is written, the checks come
from each slice's result.json. SUITE_SLICES_DIR (default DATA_DIR/slices) lists the suite's slices, so the ones this
rebuild did not reach are named too."""

from __future__ import annotations

import json
import math
import statistics
import sys
from collections import defaultdict
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from vxsynth.errors import VxError  # noqa: E402
from vxsynth.records import LoopResult  # noqa: E402
from vxsynth.report.build import time_vs_reference  # noqa: E402


def main(data: Path, slices: Path) -> None:
    status = {p.parent.name: json.loads(p.read_text()) for p in sorted((data / "suite").glob("*/status.json"))}
    report = data / "report"                   # absent while the rebuild has not reached its report
    done = [s for s in status.values() if s["status"] == "reconstructed"]
    table = (pd.read_parquet(report / "suite_report.parquet").set_index("slice_id") if (report / "suite_report.parquet").exists()
             else _checks(data / "suite", done))
    print(f"{'slice':<50} {'status':<13} gpu  {'D start':>8} {'D final':>8}  checks     wall s  reason   (wall s: all attempts on its trail)")
    for sid, s in status.items():
        row = table.loc[sid] if sid in table.index else None
        checks = f"{row['check1']}/{row['check2']}" if row is not None else "-"
        d0, d1 = (f"{s[k]:.4f}" if s.get(k) is not None else "-" for k in ("D_initial", "D_final"))
        print(f"{sid:<50} {s['status']:<13} {s.get('gpu', '-'):<4} {d0:>8} {d1:>8}  {checks:<10} {_wall(s):6.0f}"
              f"  {s.get('error', '')[:160]}")
    gpu_s = [_wall(s) for s in done]
    finals = [s["D_final"] for s in done if s.get("D_final") is not None]
    passing = sum(1 for s in done if s["slice_id"] in table.index
                  and table.loc[s["slice_id"], "check1"] == "pass" and table.loc[s["slice_id"], "check2"] == "pass")
    checked = f"{passing} of {len(done)}" if len(table) else "unknown (no report, no result.json)"
    print(f"\nfinished: {len(done)} of {len(status)} attempted; both checks pass: {checked}")
    if gpu_s:
        per = sum(gpu_s) / len(gpu_s)
        print(f"GPU seconds per finished slice: mean {per:.0f}, min {min(gpu_s):.0f}, max {max(gpu_s):.0f}; "
              f"{3600 / per:.0f} slices per GPU-hour")
    if finals:
        print(f"final D: median {statistics.median(finals):.4f}, max {max(finals):.4f}; "
              f"at most 0.05: {sum(d <= 0.05 for d in finals)} of {len(finals)}; "
              f"improved on the start: {sum(s['D_final'] < s['D_initial'] for s in done if s.get('D_final') is not None)}")
        _families(done)
    covered = defaultdict(float)
    for s in done:
        if s["slice_id"] in table.index and "models" in table:
            for m in str(table.loc[s["slice_id"], "models"]).split(","):
                covered[m.strip()] += float(table.loc[s["slice_id"], "gpu_share"])
    _coverage(report / "coverage.parquet", covered)
    _setup(data / "suite", done)
    _gaps(data / "suite", done)
    _not_reached(slices, status)


def _setup(suite: Path, done: list[dict]) -> None:
    """Median set-up before the search per finished slice (its last run): the reference measurement from reference.json
    (its ncu runs' wall seconds; any rebuild), start and round 0 from result.json's summary.setup_s (recorded since
    9f0ac75), against the slice's wall seconds."""
    ref = [json.loads(p.read_text()).get("wall_s") for s in done if (p := suite / s["slice_id"] / "reference.json").exists()]
    ref = [x for x in ref if x]
    runs = [r["summary"]["setup_s"] for s in done if (p := suite / s["slice_id"] / "result.json").exists()
            and "setup_s" in (r := json.loads(p.read_text()))["summary"]]
    if ref:
        walls = [_wall(s) for s in done]
        print(f"reference measurement (reference.json wall_s) over {len(ref)} slices: median {statistics.median(ref):.1f} s, "
              f"{min(ref):.1f}-{max(ref):.1f} s; slice wall {min(walls):.0f}-{max(walls):.0f} s")
    if runs:
        print(f"set-up before the search, median over {len(runs)} slices (their last run): "
              + ", ".join(f"{k} {statistics.median(r[k] for r in runs):.1f} s" for k in ("start_s", "reference_s", "round0_s")))


def _wall(s: dict) -> float:
    """A slice's seconds over every attempt on its trail (older status files record only the last attempt)."""
    return float(s.get("wall_s_total", s.get("wall_s", 0.0)))


def _checks(suite: Path, done: list) -> pd.DataFrame:
    """The final pair's checks of each finished slice, from its result.json (no policy shares: those need the report)."""
    rows = {}
    for s in done:
        res = suite / s["slice_id"] / "result.json"
        if res.exists():
            final = json.loads(res.read_text())["final"]
            rows[s["slice_id"]] = {"check1": final["check1"], "check2": final["check2"]}
    return pd.DataFrame.from_dict(rows, orient="index", columns=["check1", "check2"])


def _gaps(suite: Path, done: list) -> None:
    """Per component, over the finished slices' final pairs: median signed gap (candidate - reference), median |gap|,
    and in how many slices it is the largest |gap|: where the remaining distance D comes from."""
    results = {s["slice_id"]: json.loads(res.read_text()) for s in done
               if (res := suite / s["slice_id"] / "result.json").exists()}
    if not results:
        return
    table = pd.DataFrame.from_dict({sid: r["final"]["gaps"] for sid, r in results.items()}, orient="index")
    largest = table.abs().idxmax(axis=1).value_counts()
    print(f"\nfinal pairs' gaps (candidate - reference) over {len(table)} slices: component, median, median |gap|, largest in")
    for c in table.abs().median().sort_values(ascending=False).index:
        print(f"  {c:<20} {table[c].median():+.3f}  {table[c].abs().median():.3f}  {largest.get(c, 0)}")
    print("final pair / reference, per slice: kernel time (ncu duration), DRAM bandwidth, tensor pipe % (candidate / reference)")
    times = []
    for sid, r in results.items():
        cand, ref = r["final"]["values"], r["reference"]
        try:
            t, why = time_vs_reference(suite / sid, LoopResult.load(suite / sid / "result.json"))
        except VxError as e:                    # a result.json the typed record refuses (an older rebuild's)
            t, why = math.nan, str(e)[:80]
        times += [t] if t == t else []
        print(f"  {sid:<50} {f'{t:5.2f}' if t == t else 'n/a (' + why + ')'}  {_ratio(cand.get('dram_bw'), ref.get('dram_bw'))}  "
              f"{cand.get('tensor_pipe') or 0:5.2f} / {ref.get('tensor_pipe') or 0:5.2f}")
    if times:
        print(f"final kernel time within 1.2x of the reference's: {sum(t <= 1.2 for t in times)}, within 1.5x: "
              f"{sum(t <= 1.5 for t in times)} of {len(times)} measured")


def _families(done: list) -> None:
    """Median start and final D per family (the slice id's first word) over the finished slices."""
    fam = defaultdict(list)
    for s in done:
        if s.get("D_final") is not None and s.get("D_initial") is not None:
            fam[s["slice_id"].split("-")[0]].append(s)
    for f, ss in sorted(fam.items()):
        print(f"  {f:<8} {len(ss):2d} slices: median D start {statistics.median(s['D_initial'] for s in ss):.4f}, "
              f"final {statistics.median(s['D_final'] for s in ss):.4f}")


def _ratio(a, b) -> str:
    return f"{a / b:5.2f}" if a and b else "  n/a"


def _coverage(path: Path, covered: dict) -> None:
    if not path.exists():
        return
    print("\nshare of each policy's GPU time: the suite's slices / the finished slices")
    for r in pd.read_parquet(path).itertuples():
        print(f"  {r.model:<10} {r.covered_by_slices:.3f} / {covered[r.model]:.3f}  ({r.slices} suite slices, "
              f"{r.gpu_time_ms:.1f} ms GPU time per inference)")


def _not_reached(slices: Path, status: dict) -> None:
    suite = sorted(p.name for p in slices.iterdir() if (p / "slice.json").exists()) if slices.is_dir() else []
    missing = [sid for sid in suite if sid not in status]
    if suite:
        print(f"\nsuite slices not reached by this rebuild: {len(missing)} of {len(suite)}: {', '.join(missing) or 'none'}")


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3) or not (Path(sys.argv[1]) / "suite").is_dir():
        sys.exit("usage: python bench/rebuild_summary.py DATA_DIR [SUITE_SLICES_DIR]  (DATA_DIR holds suite/ and report/)")
    root = Path(sys.argv[1])
    main(root, Path(sys.argv[2]) if len(sys.argv) == 3 else root / "slices")
