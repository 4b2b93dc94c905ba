"""Speed probe (issue 37): can the kernel space reach each slice's reference kernel time at all, before any search?

For every slice given (default: the tensor-core ones, TF32/BF16), the structure-informed start (conf/start/informed)
and the probe's search around it (`vxsynth.reconstruct.speed`: split-K x ring depth, then one-knob steps to the
neighbours of the fastest while it improves); every variant compiled and launched on this GPU (CUDA events, median of
9 after one, L2 overwritten before each launch). The 3 fastest and the 3 nearest (and the 3 nearest that issue the
reference's tensor-core instructions, HMMA or HGMMA: the start prefers those within 1.5x; and the nearest of each
split-K factor; nearest in time, in the SMs the grid keeps busy, column 'blocks ref/near', and in FLOPs) are measured
again by ncu in the signature harness (gpu__time_duration.sum, cache flushed) and set against the reference main
kernel's ncu duration in its recorded signature: the same metric on both sides (an event-timed launch also counts
launch overhead, which ncu's duration and the reference's trace time do not). This bench measures no reference here,
so its 'nearest' is the model's choice on ncu time; the loop's start ranks the same finalists by signature distance
from the reference it has just measured. Both checks run on the fastest variant. Prints one row per slice and
the count within 1.2x and 1.5x; with OUT, the whole probe (every variant's time) as JSON.

usage: python bench/speed_probe.py SLICES_DIR [--out OUT.json] [--local-mem BYTES] [PREFIX ...]   (bare GPU host)
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import torch
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from vxsynth.checks.run import CheckEnv, run as run_checks  # noqa: E402
from vxsynth.kernels.strategy import Strategy  # noqa: E402
from vxsynth.reconstruct import probe_timers, speed  # noqa: E402
from vxsynth.reconstruct.loop import LoopEnv, pair, validator  # noqa: E402
from vxsynth.reconstruct.start import informed  # noqa: E402
from vxsynth.records import SliceRecord  # noqa: E402
from vxsynth.targets.gpu_worker import GpuPool  # noqa: E402
from vxsynth.targets.vortex_host import HostExecutor, VortexConfig  # noqa: E402

CONF = Path(__file__).resolve().parents[1] / "conf"


def _conf(group: str, name: str = "default") -> dict:
    return yaml.safe_load((CONF / group / f"{name}.yaml").read_text())


def _checks(rec: SliceRecord, s: Strategy, env: CheckEnv, vcfg: VortexConfig, work: Path) -> str:
    c = pair(rec.problem, s, rec.precision, vcfg)
    r = run_checks(c, rec.slice_id, "probe", env, work, None)
    return "/".join(r[k].verdict for k in ("check1", "check2"))


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("slices", type=Path)
    ap.add_argument("prefixes", nargs="*")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--local-mem", type=int, help="the Vortex core's local memory (bytes) instead of conf/target's: "
                    "whether that core's limit, which every pair's Vortex half must fit, is what keeps a slice slow")
    a = ap.parse_intermixed_args(argv)
    recs = [SliceRecord.load(p) for p in sorted(a.slices.glob("*/slice.json"))]
    if a.prefixes:      # in the order given
        recs = [r for x in a.prefixes for r in recs if r.slice_id.startswith(x)]
    else:
        recs = [r for r in recs if r.precision != "FP32"]
    vcfg = VortexConfig.from_dict({**_conf("target", "vortex_host"), **({"local_mem": a.local_mem} if a.local_mem else {})})
    print(f"Vortex core: {vcfg.local_mem} B local memory, {vcfg.warps} warps x {vcfg.threads} threads", flush=True)
    here, there = torch.cuda.get_device_name(), sorted({r.environment.get("gpu", "?") for r in recs})
    print(f"candidates on {here}; references recorded on {', '.join(there)}"
          + ("" if there == [here] else ": 'x ref' compares two GPUs (the loop's start compares with the reference "
                                        "measured on its own GPU)"), flush=True)
    work = Path(tempfile.mkdtemp(prefix="speed-probe-"))
    env = CheckEnv(HostExecutor(vcfg, cache_dir=work / "vx-cache"), _conf("precision"), cuda=True, device="cuda",
                   precision_flags={"cuda.matmul.allow_tf32": False, "cudnn.allow_tf32": True},
                   compile_cache=work / "build-cache", pool=GpuPool(1))
    rules, pcfg = _conf("start", "informed"), _conf("platform", "h200")
    print(f"{'slice':44s} {'ref us':>7s} {'ref ncu':>7s} {'start':>8s} {'fastest':>8s} {'ncu us':>7s} {'x ref':>6s} "
          f"{'nearest':>7s} {'x ref':>6s} {'mma ref/near':>12s} {'blocks ref/near':>15s} {'tried':>5s} {'checks':>9s} {'s':>5s}  fastest knobs (changed from the start)",
          flush=True)
    results, within = [], {1.2: 0, 1.5: 0}
    for rec in recs:
        t0 = time.perf_counter()
        p = rec.problem
        valid = validator(p, rec.precision, LoopEnv(env, []))
        start, _ = informed(rec, rules, valid)
        make = lambda s: pair(p, s, rec.precision, vcfg)    # noqa: E731
        res = speed.probe(rec, start, valid, probe_timers.cuda_timer(p, make, env, work / rec.slice_id),
                          probe_timers.ncu_timer(rec, make, env, pcfg, work / rec.slice_id / "ncu"))
        fast, near = res["fastest"], res["nearest"]
        start_us = res["variants"][0]["us"] if res["variants"] and res["variants"][0]["strategy"] == start.to_dict() else None
        checks = _checks(rec, Strategy.from_dict(fast["strategy"]), env, vcfg, work / rec.slice_id / "checks") if fast else "-"
        res.update(slice_id=rec.slice_id, start=start.to_dict(), start_us=start_us, fastest_checks=checks,
                   wall_s=time.perf_counter() - t0)
        results.append(res)
        ratio = fast and fast.get("ncu_ratio", fast["ratio"])
        for lim in within:
            within[lim] += bool(ratio and ratio <= lim)
        knobs = {k: v[1] for k, v in start.diff(Strategy.from_dict(fast["strategy"])).items()} if fast else {}

        mma = f"{res['reference_family'] or '-'}/{speed.mma_family(Strategy.from_dict(near['strategy'])) if near else '-'}"
        grid = f"{(res['reference_footprint'] or {}).get('blocks', '-')}/{near['blocks'] if near else '-'}"

        def f(x, spec):
            return format(x, spec) if x is not None else "-".rjust(int(spec.split(".")[0]))
        print(f"{rec.slice_id[:44]:44s} {f(res['reference_us'], '7.1f')} {f(res['reference_ncu_us'], '7.1f')} "
              f"{f(start_us, '8.1f')} {f(fast and fast['us'], '8.1f')} {f(fast and fast.get('ncu_us'), '7.1f')} "
              f"{f(ratio, '6.2f')} {f(near and near.get('ncu_us', near['us']), '7.1f')} "
              f"{f(near and near.get('ncu_ratio', near['ratio']), '6.2f')} {mma:>12s} {grid:>15s} {len(res['variants']):5d} {checks:>9s} "
              f"{res['wall_s']:5.0f}  {knobs}", flush=True)
    n = len(results)
    print(f"\nfastest variant within 1.2x of the reference: {within[1.2]} of {n}; within 1.5x: {within[1.5]} of {n}")
    print(f"timing: {results[0]['timed'] if results else '-'}; reference: 'ref us' the slice record's main-kernel "
          "time (profiling pass 1, trace), 'ref ncu' its recorded signature's gpu__time_duration.sum; 'x ref' ncu over "
          "ncu ('start' and 'fastest' event-timed)")
    if a.out:
        a.out.write_text(json.dumps(results, indent=1))
    env.pool.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
