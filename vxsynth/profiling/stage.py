"""The profiling stage for one (platform, workload): pass 1, pass 2, tables and the environment record.

Outputs go to a temporary sibling directory that replaces `out_dir` only when everything succeeded.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

import torch

from vxsynth.metrics.components import metric_list
from vxsynth.profiling import ncu as ncu_pass
from vxsynth.profiling.env import environment
from vxsynth.profiling.platforms import check_platform
from vxsynth.profiling.torch_pass import profile_inferences
from vxsynth.profiling.trace import parse_trace, tables
from vxsynth.store import schemas
from vxsynth.store.io import replace_dir, write_json, write_table
from vxsynth.workloads.builders import build_policy, make_batch
from vxsynth.workloads.spec import WorkloadSpec

FAMILY_OPS = r"^aten::(linear|addmm|matmul|mm|bmm|baddbmm|conv1d|conv2d|convolution|_convolution)$"


def profile_workload(pcfg: dict, wcfg: dict, out_dir: Path, log: Callable[[str], None] = print) -> dict:
    """Profile one workload on one platform; returns a summary dict."""
    check_platform(pcfg)
    device = pcfg["device"]
    spec = WorkloadSpec.from_config(wcfg)
    t0 = time.perf_counter()
    policy, built = build_policy(spec, device)
    batch = make_batch(spec, device)
    ident = spec.identity(built)
    t_build = time.perf_counter() - t0
    log(f"[{pcfg['name']}/{spec.label}] built {ident['workload_id']} in {t_build:.1f} s")
    prof = {**(pcfg.get("profile") or {}), **spec.profile}
    t_inference = _plain_inference_s(policy, batch, device, spec.call)
    env = environment(pcfg["name"], (pcfg.get("ncu") or {}).get("binary"))
    measured = json.dumps({"tool": "torch.profiler", "platform": pcfg["name"], "torch": env["torch"],
                           "cuda": env["cuda_runtime"], "gpu": env["gpu"], "time": "kineto kernel dur (us)"
                           if device != "cpu" else "cpu op self time (us)"}, sort_keys=True)
    meta = {"workload": spec.label, "workload_id": ident["workload_id"], "platform": pcfg["name"], "measured_with": measured}

    t1 = time.perf_counter()
    trace = profile_inferences(policy, batch, device=device, warmup=int(prof.get("warmup", 2)), iters=int(prof.get("iters", 3)),
                               call=spec.call)
    t_pass1 = time.perf_counter() - t1
    rows, has_gpu = parse_trace(trace)
    kernels, runs, calls = tables(rows, meta=meta)
    log(f"[{pcfg['name']}/{spec.label}] pass 1: {len(kernels)} rows, {len(calls)} op calls in {t_pass1:.1f} s")
    del policy, trace
    if device.startswith("cuda"):
        torch.cuda.empty_cache()

    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        summary = {"workload": spec.label, "identity": ident, "platform": pcfg["name"], "t_build_s": t_build,
                   "t_pass1_s": t_pass1, "t_inference_s": t_inference, "kernels": len(kernels), "op_calls": len(calls)}
        ncu_cfg = pcfg.get("ncu")
        if ncu_cfg and has_gpu:
            t2 = time.perf_counter()
            ncu_df = _ncu(pcfg, spec, wcfg, kernels, tmp, env, log)
            summary["t_pass2_s"] = time.perf_counter() - t2
            for k, v in meta.items():
                if k != "measured_with":
                    ncu_df[k] = v
            write_table(tmp / "ncu.parquet", ncu_df, schemas.NCU)
            summary["ncu_kernels"] = len(ncu_df)
        write_table(tmp / "kernels.parquet", kernels, schemas.KERNELS)
        write_table(tmp / "op_call_runs.parquet", runs, schemas.OP_CALL_RUNS)
        write_table(tmp / "op_calls.parquet", calls, schemas.OP_CALLS)
        write_json(tmp / "env.json", {**env, "workload": ident, "workload_config": wcfg, "built_config": built,
                                      "profile": prof, "timings": summary})
        replace_dir(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    summary["t_total_s"] = time.perf_counter() - t0
    return summary


def _plain_inference_s(policy, batch, device: str, call: str) -> float:
    """Wall time of one plain inference after one warm-up (the reference for profiling overhead)."""
    from vxsynth.workloads.builders import run_inference

    run_inference(policy, batch, call)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    t = time.perf_counter()
    run_inference(policy, batch, call)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return time.perf_counter() - t


def _ncu(pcfg: dict, spec: WorkloadSpec, wcfg: dict, kernels, tmp: Path, env: dict, log) -> "object":
    ncu_cfg = pcfg["ncu"]
    comps = list(pcfg["components"])
    metrics, dropped = ncu_pass.available(metric_list(pcfg["chip"], comps), ncu_cfg["binary"], pcfg["chip"])
    if dropped:
        log(f"[{pcfg['name']}/{spec.label}] ncu does not know {dropped}; those components will be NaN")
    (tmp / "workload.json").write_text(json.dumps(wcfg))
    regex = ncu_pass.family_regex(kernels, FAMILY_OPS, ncu_cfg.get("aux_regex", "^$"), float(ncu_cfg.get("min_share", 0.0)))
    target = [sys.executable, "-m", "vxsynth.profiling.ncu_target", "--workload", str(tmp / "workload.json")]
    report = tmp / "pass2"
    cmd = ncu_pass.command(ncu_cfg, metrics, report, target, kernel_regex=regex)
    log(f"[{pcfg['name']}/{spec.label}] pass 2: ncu on {regex[:80]}...")
    ncu_pass.run(cmd, float(ncu_cfg.get("timeout_s", 1800)), log=tmp / "ncu.log")
    actions = ncu_pass.read_report(report.with_suffix(".ncu-rep"), metrics)
    df = ncu_pass.attribute(actions, kernels, chip=pcfg["chip"], components=comps)
    df["measured_with"] = json.dumps({**ncu_pass.settings(ncu_cfg, pcfg["chip"], comps, env["ncu"]),
                                      "platform": pcfg["name"], "gpu": env["gpu"], "metric_set": pcfg["metric_set"],
                                      "dropped_metrics": dropped},
                                     sort_keys=True)
    log(f"[{pcfg['name']}/{spec.label}] pass 2: {len(df)} kernels profiled, "
        f"{int((df['attribution'] != 'unmatched').sum())} attributed")
    return df
