"""Kernel time of saved CUDA candidates against the same strategies emitted by the current code (H200, CuPy).

For every saved candidate folder (kernel.cu + candidate.json, e.g. the final rounds of a rebuild's rebuild.tgz) it
compiles the saved source and the source the current emitter writes for the same strategy (and for that strategy
with knobs changed: --vary), launches them on the same random inputs (L2 flushed before every launch, as ncu's cache
control does), and prints the median kernel time of each, the reference's ncu duration, and the largest difference
between the saved output and the current one (and the varied ones).

    python bench/emit_speed.py DIR [DIR ...] [--vary KNOB=VALUE[,KNOB=VALUE]] ... [--sass OUTDIR]
      DIR = data/suite/<slice>/candidates/rNNN, or a suite folder (data/suite: every finished slice's final round)
      --vary: one more timed column per option;  --sass: the current kernels' SASS (cuobjdump) written there
      REPEAT=N (environment): launches per kernel (default 15)
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, ".")
from vxsynth.kernels import tensors as T  # noqa: E402
from vxsynth.kernels.candidate import make  # noqa: E402
from vxsynth.kernels.problem import from_dict  # noqa: E402
from vxsynth.targets import tensor_map  # noqa: E402
from vxsynth.kernels.strategy import Strategy  # noqa: E402
from vxsynth.targets.cuda import nvcc  # noqa: E402
from vxsynth.targets.cuda_worker import kernel, workspace  # noqa: E402

REPEAT = int(os.environ.get("REPEAT", 15))


def _time(cp, src: str, meta: dict, bufs: dict, work: Path, tag: str, sass: Path | None = None):
    cu, cubin = work / f"{tag}.cu", work / f"{tag}.cubin"
    cu.write_text(src)
    subprocess.run([nvcc(), "-arch=sm_90a", "-cubin", "-o", str(cubin), str(cu)], check=True, capture_output=True)
    if sass:
        (sass / f"{work.name.rsplit('-', 1)[0]}-{tag}.sass").write_text(subprocess.run(["cuobjdump", "-sass", str(cubin)],
                                                                      capture_output=True, text=True).stdout)
    launch = meta["launch"]
    fn = kernel(str(cubin), meta["kernel_name"], launch["smem_bytes"])
    out_spec = meta["arg_layout"]["cuda"]["out"]
    half = out_spec["dtype"] in ("bfloat16", "float16")
    out = cp.zeros(out_spec["elements"], dtype=cp.uint16 if half else cp.float32)
    flush = cp.empty(256 << 20, dtype=cp.uint8)
    ws = workspace(launch.get("workspace_words", 0))
    args = (bufs["a"], bufs["b"], bufs.get("bias", cp.zeros(1, dtype=out.dtype)), out) + ((ws,) if ws is not None else ())
    args += tensor_map.kernel_args(launch.get("tensor_maps", []), out_spec["dtype"], {r: (bufs[r].data.ptr, bufs[r].nbytes) for r in "ab"})
    start, stop, times = cp.cuda.Event(), cp.cuda.Event(), []
    for _ in range(REPEAT):
        flush.fill(1)
        out.fill(0)
        if ws is not None:
            ws.fill(0)
        start.record()
        fn(tuple(launch["grid"]), tuple(launch["block"]), args, shared_mem=launch["smem_bytes"])
        stop.record()
        stop.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, stop) * 1e3)
    host = cp.asnumpy(out)
    if half:
        host = (host.astype(np.uint32) << 16).view(np.float32)
    return statistics.median(times), host


def _candidates(arg: Path) -> list[Path]:
    if (arg / "candidate.json").exists():
        return [arg]
    results = [arg / "result.json"] if (arg / "result.json").exists() else sorted(arg.glob("*/result.json"))
    return [r.parent / "candidates" / f"r{json.loads(r.read_text())['final']['round']:03d}" for r in results]


def _knobs(spec: str) -> dict:
    out = {}
    for kv in spec.split(","):
        k, v = kv.split("=")
        out[k] = {"true": True, "false": False}.get(v, v if not v.lstrip("-").isdigit() else int(v))
    return out


def main(argv: list[str]) -> int:
    import cupy as cp

    ap = argparse.ArgumentParser()
    ap.add_argument("dirs", nargs="+")
    ap.add_argument("--vary", action="append", default=[])
    ap.add_argument("--sass", type=Path)
    a = ap.parse_args(argv)
    if a.sass:
        a.sass.mkdir(parents=True, exist_ok=True)
    dirs = [d for x in a.dirs for d in _candidates(Path(x))]
    print(f"{'slice':48s} {'round':5s} {'saved us':>9s} {'now us':>9s} " + "".join(f"{v:>16s} " for v in a.vary)
          + f"{'ref us':>8s} {'max |diff|':>10s}" + (f" {'vary |diff|':>11s}" if a.vary else ""))
    for d in dirs:
        saved = json.loads((d / "candidate.json").read_text())
        problem, strategy = from_dict(saved["problem"]), Strategy.from_dict(saved["strategy"])
        bufs = {r: cp.asarray(T.to_numpy(x)) for r, x in T.make_inputs(problem, 0).items()}
        ref = json.loads((d.parent.parent / "reference.json").read_text())["metrics"].get("gpu__time_duration.sum")
        with tempfile.TemporaryDirectory(prefix=d.parent.parent.name[:24] + "-") as tmp:
            work = Path(tmp)
            t_old, y_old = _time(cp, (d / "kernel.cu").read_text(), saved["meta"], bufs, work, "saved")
            now = make(problem, strategy, saved["precision"])
            t_new, y_new = _time(cp, now.cuda_source, now.meta, bufs, work, "now", a.sass)
            varied, vary_diff = [], float("nan") if not a.vary else 0.0
            for i, v in enumerate(a.vary):
                try:
                    c = make(problem, strategy.with_(**_knobs(v)), saved["precision"])
                    t, y = _time(cp, c.cuda_source, c.meta, bufs, work, f"vary{i}", a.sass)
                    varied.append(t)
                    vary_diff = max(vary_diff, float(np.max(np.abs(y_old - y))))
                except (ValueError, subprocess.CalledProcessError) as e:     # not a valid strategy for this slice
                    print(f"{d.parent.parent.name} {v}: {str(e).splitlines()[0][:200]}", file=sys.stderr)
                    varied.append(float("nan"))
        diff = float(np.max(np.abs(y_old - y_new)))
        ref_us = ref / 1e3 if ref else float("nan")
        print(f"{d.parent.parent.name:48s} {d.name:5s} {t_old:9.1f} {t_new:9.1f} " + "".join(f"{x:16.1f} " for x in varied)
              + f"{ref_us:8.1f} {diff:10.3g}" + (f" {vary_diff:11.3g}" if a.vary else ""), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
