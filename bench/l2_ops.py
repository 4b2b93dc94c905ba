"""Where an L2 hit rate comes from: a slice's reference kernel and chosen candidates measured in the signature harness
(the platform's ncu settings and components, `signature.measure`) with L2 sector counters split by source unit and
operation beside the component (`lts__t_sector_hit_rate.pct`). Candidates: each form's nearest finalist of a rebuild's
speed probe (`speed_probe.json`, `probe_signatures.nearest_by_form`) and the slice's final pair. On a GPU host.

Per kernel: ncu time; the L2 hit-rate and tensor-pipe components (NaN where ncu's rate is outside 0-100%); every L2
sector lookup (millions) and its hit share, split into the SMs' reads, writes, reductions and atomics (srcunit tex: LSU
loads, cp.async and TMA alike) and the lookups the L2 fabric forwards between the two L2 partitions (ltcfabric); DRAM
bytes read; the tensor pipe's active cycles and the SMs' active cycles (millions, summed over SMs: the component is
their ratio), and the HMMA and HGMMA instructions executed (thousands). A counter this ncu does not know is named and
its columns are NaN.

With --stalls, the same kernels' issue stalls instead: per reason, warps stalled per issued instruction
(`smsp__average_warps_issue_stalled_<reason>_per_issue_active.ratio`, ncu's warp-state section), beside the time and
the issue-active component: where a kernel at the reference's tile and grid loses its time against the reference.

usage: python bench/l2_ops.py CONFIG SLICES_DIR RUN/cuda_first SLICE... [--vary KNOB=VALUE[,KNOB=VALUE]]... [--work DIR]
       [--stalls]
  --vary: one more kernel per option, the final pair's strategy with those knobs (bench/emit_speed.py's syntax)
"""

import argparse
import json
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.emit_speed import _knobs  # noqa: E402
from bench.probe_signatures import form, nearest_by_form  # noqa: E402
from vxsynth.errors import VxError  # noqa: E402
from vxsynth.kernels.strategy import Strategy  # noqa: E402

OPS = ("read", "write", "red", "atom")
PARTS = {"all": "lts__t_sectors", "fabric": "lts__t_sectors_srcunit_ltcfabric",
         **{op: f"lts__t_sectors_srcunit_tex_op_{op}" for op in OPS}}
TENSOR = {"tc Mcyc": ("sm__pipe_tensor_op_hmma_cycles_active.sum", 1e6), "SM Mcyc": ("sm__cycles_active.sum", 1e6),
          "HMMA k": ("sm__inst_executed_pipe_tensor_op_hmma.sum", 1e3),
          "HGMMA k": ("sm__inst_executed_pipe_tensor_op_gmma.sum", 1e3)}
COUNTERS = ([f"{m}{hit}.sum" for m in PARTS.values() for hit in ("", "_lookup_hit")] + ["dram__bytes_read.sum"]
            + [m for m, _ in TENSOR.values()])
DURATION = "gpu__time_duration.sum"
STALLS = ("long_scoreboard", "short_scoreboard", "wait", "barrier", "mio_throttle", "math_pipe_throttle", "lg_throttle",
          "not_selected", "selected", "dispatch_stall", "no_instruction", "branch_resolving", "membar", "sleeping",
          "tex_throttle", "drain", "imc_miss", "misc")
STALL = "smsp__average_warps_issue_stalled_{}_per_issue_active.ratio"


def candidates(slice_dir: Path, vary: list[str] = ()) -> list[tuple[str, Strategy]]:
    """(label, strategy): the nearest finalist of each form the slice's speed probe measured with ncu, the final
    pair's strategy, then that strategy with each `vary` option's knobs."""
    probe = json.loads((slice_dir / "speed_probe.json").read_text())
    ref = json.loads((slice_dir / "reference.json").read_text())["values"]
    out = [(f"{f} (probe, D {r['D']:.3f})", r["strategy"]) for f, r in sorted(nearest_by_form(probe, ref).items())]
    final = json.loads((slice_dir / "result.json").read_text())["final"]
    s = Strategy.from_dict(final["strategy"])
    return (out + [(f"{form(s)} (final r{final['round']}, D {final['D']:.3f})", s)]
            + [(f"{form(v)} (final, {spec})", v) for spec in vary for v in [s.with_(**_knobs(spec))]])


def breakdown(metrics: dict) -> dict[str, tuple[float, float]]:
    """part -> (sector lookups, hit share); NaN where ncu gave no value (unknown counter, or nothing looked up)."""
    out = {}
    for part, m in PARTS.items():
        n, hit = metrics.get(f"{m}.sum"), metrics.get(f"{m}_lookup_hit.sum")
        n = math.nan if n is None else float(n)
        share = float(hit) / n if hit is not None and 0 < n and 0 <= hit <= n else math.nan     # a share, or none
        out[part] = (n, share)
    return out


def row(label: str, m) -> str:
    """One kernel's line from its measurement `m` (`signature.measure.Measurement`): the L2 hit rate and tensor pipe as
    the signature computes them (NaN, with the reason in the measurement, where ncu's value is outside 0-100%), then
    the counters."""
    metrics = m.metrics
    b = breakdown(metrics)
    us = metrics.get(DURATION, math.nan) / 1e3
    dram = metrics.get("dram__bytes_read.sum", math.nan) / 1e6
    cells = " ".join(f"{b[p][0] / 1e6:8.2f} {b[p][1]:5.2f}" for p in PARTS)
    tensor = " ".join(f"{metrics.get(c, math.nan) / scale:8.2f}" for c, scale in TENSOR.values())
    rates = " ".join(f"{m.values.get(c, math.nan):6.1f}" for c in ("l2_hit_rate", "tensor_pipe"))
    return f"{label[:58]:<58} {us:7.1f} {rates} {cells} {dram:8.1f} {tensor}"


def header() -> str:
    parts = " ".join(f"{p + ' M':>8} {'hit':>5}" for p in PARTS)
    tensor = " ".join(f"{t:>8}" for t in TENSOR)
    return f"{'kernel':<58} {'us':>7} {'L2 %':>6} {'TP %':>6} {parts} {'DRAM MB':>8} {tensor}"


def stall_row(label: str, m) -> str:
    """One kernel's line of issue stalls: time, the issue-active component, warps stalled per issued instruction by
    reason (NaN where ncu gave none)."""
    us = m.metrics.get(DURATION, math.nan) / 1e3
    stalls = " ".join(f"{m.metrics.get(STALL.format(r), math.nan):6.2f}" for r in STALLS)
    return f"{label[:58]:<58} {us:7.1f} {m.values.get('issue_active', math.nan):6.1f} {stalls}"


def stall_header() -> str:
    return f"{'kernel':<58} {'us':>7} {'issue':>6} " + " ".join(f"{r[:6]:>6}" for r in STALLS)


def main(argv: list[str]) -> int:
    from vxsynth.profiling import ncu as ncu_pass
    from vxsynth.reconstruct.setup import loop_env, records_in

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("config"), ap.add_argument("slices_dir"), ap.add_argument("run"), ap.add_argument("slice", nargs="+")
    ap.add_argument("--work", default="/tmp/l2_ops")
    ap.add_argument("--vary", action="append", default=[])
    ap.add_argument("--stalls", action="store_true", help="issue stalls by reason instead of L2 lookups")
    a = ap.parse_args(argv)
    counters, head, line = ([STALL.format(r) for r in STALLS], stall_header, stall_row) if a.stalls else (COUNTERS, header, row)
    cfg = json.loads(Path(a.config).read_text())
    pcfg = dict(cfg["platform"])
    try:
        env, why = loop_env(cfg, pcfg, Path(a.work))
        if why:
            raise VxError(f"no GPU measurement here: {why}")
        known, unknown = ncu_pass.available(counters, pcfg["ncu"]["binary"], pcfg["chip"])
    except VxError as e:
        print(f"l2_ops: {e}", file=sys.stderr)
        return 2
    if unknown:
        print(f"# counters this ncu does not know (NaN below): {' '.join(unknown)}")
    pcfg.update(extra_metrics=known)        # the dict the environment's measurements read
    print(f"# python bench/l2_ops.py {' '.join(argv)} ({pcfg['name']}; signature harness, ncu "
          f"--cache-control {pcfg['ncu']['cache_control']} --clock-control {pcfg['ncu']['clock_control']})")
    for rec in records_in(Path(a.slices_dir), a.slice):
        chosen = candidates(Path(a.run) / rec.slice_id, a.vary)
        print(f"{rec.slice_id}\n{head()}")
        ref = env.reference(rec)
        print(line(f"reference {ref.kernel}", ref) if ref.ok else f"reference: {ref.error[:200]}", flush=True)
        ms = env.ncu_kernels(rec, Path(a.work) / rec.slice_id)([s for _, s in chosen])
        for (label, _), m in zip(chosen, ms):
            print(line(label, m) if m is not None else f"{label}: not measured", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
