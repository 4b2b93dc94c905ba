"""Profiling pass 2 with Nsight Compute: command line, report parsing, attribution to op calls.

Settings (recorded with every row):
  --clock-control none  clocks are left as the GPU runs them (base-clock locking made a GEMM 25% slower under ncu
                        than in the torch.profiler pass; GPU time is taken from pass 1 anyway);
  --cache-control all   caches flushed before each replay pass, so every pass and every kernel, reference or
                        candidate, starts from the same cold state (at batch 1 the working sets fit in L2, and
                        `none` under kernel replay gives inconsistent passes);
  --replay-mode kernel, an explicit --metrics list (no sections), --import-sass no.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
from pathlib import Path

import pandas as pd

from vxsynth.errors import VxError
from vxsynth.metrics import components as sig
from vxsynth.profiling.trace import kernel_base

PROFILED_RANGE = "profiled"


def settings(ncu_cfg: dict, chip: str, components: list[str], version: str | None) -> dict:
    return {
        "tool": "ncu", "ncu": version, "cache_control": ncu_cfg["cache_control"],
        "clock_control": ncu_cfg["clock_control"], "replay_mode": ncu_cfg.get("replay_mode", "kernel"),
        "chip": chip, "components": list(components),
    }


def command(ncu_cfg: dict, metrics: list[str], report: Path, target: list[str], *,
            kernel_regex: str, nvtx_range: str | None = PROFILED_RANGE, per_config: bool = True) -> list[str]:
    cmd = [ncu_cfg["binary"], "--metrics", ",".join(metrics),
           "--cache-control", ncu_cfg["cache_control"], "--clock-control", ncu_cfg["clock_control"],
           "--replay-mode", ncu_cfg.get("replay_mode", "kernel"), "--import-sass", "no",
           "-k", f"regex:{kernel_regex}", "-f", "-o", str(report)]
    if nvtx_range:
        cmd += ["--nvtx", "--nvtx-include", f"{nvtx_range}/"]
    if per_config:
        cmd += ["--filter-mode", "per-launch-config", "--launch-count", str(ncu_cfg.get("launch_count", 1))]
    return cmd + target


def available(metrics: list[str], binary: str, chip: str) -> tuple[list[str], list[str]]:
    """Split `metrics` into those `ncu --query-metrics --chip` knows and those it does not."""
    try:
        out = subprocess.run([binary, "--query-metrics", "--chip", chip], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise VxError(f"`{binary} --query-metrics` failed ({e}); check the Nsight Compute install") from e
    known = {line.split()[0] for line in out.stdout.splitlines() if line.strip() and "__" in line.split()[0]}
    if not known:
        return metrics, []
    ok = [m for m in metrics if m.split(".")[0] in known or m.startswith("launch__")]
    return ok, [m for m in metrics if m not in ok]


def run(cmd: list[str], timeout_s: float, log: Path | None = None) -> str:
    """Run ncu; raise VxError with the tail of its output when it fails."""
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired as e:
        raise VxError(f"ncu did not finish within {timeout_s:.0f} s; raise platform.ncu.timeout_s") from e
    text = out.stdout + out.stderr
    if log is not None:
        log.write_text(text)
    if out.returncode != 0 or "==ERROR==" in text:
        tail = " | ".join(l for l in text.splitlines() if "ERROR" in l or "Error" in l)[-400:]
        raise VxError(f"ncu failed (exit {out.returncode}): {tail or text[-400:]}")
    return text


def _nvtx_stack(action) -> list[str]:
    names: list[str] = []
    try:
        state = action.nvtx_state()
    except Exception:  # noqa: BLE001 - reports without NVTX data
        return names
    if state is None:
        return names
    for d in state.domains():
        dom = state.domain_by_id(d)
        for r in dom.push_pop_ranges():
            names.append(r if isinstance(r, str) else r.name())
    return names


def read_report(path: Path, wanted: list[str]) -> list[dict]:
    """One dict per profiled kernel: names, NVTX stack and the wanted metrics (base units)."""
    import ncu_report

    if not Path(path).exists():
        raise VxError(f"{path}: ncu report not found; rerun the ncu pass")
    ctx = ncu_report.load_report(str(path))
    out = []
    for r in range(ctx.num_ranges()):
        rng = ctx.range_by_idx(r)
        for a in range(rng.num_actions()):
            act = rng.action_by_idx(a)
            metrics = {}
            for m in wanted + ["launch__grid_dim_x", "launch__grid_dim_y", "launch__grid_dim_z",
                               "launch__block_dim_x", "launch__block_dim_y", "launch__block_dim_z"]:
                mv = act.metric_by_name(m)
                if mv is not None:
                    metrics[m] = float(mv.as_double())
            out.append({
                "action": len(out), "kernel_name": act.name(),
                "kernel_function": act.name(ncu_report.IAction.NameBase_FUNCTION),
                "nvtx": _nvtx_stack(act), "metrics": metrics,
            })
    return out


def _dim3(m: dict, kind: str) -> str | None:
    keys = [f"launch__{kind}_dim_{a}" for a in "xyz"]
    if not all(k in m for k in keys):
        return None
    return json.dumps([int(m[k]) for k in keys])


def _nvtx_parts(stack: list[str]) -> tuple[str, str]:
    from vxsynth.profiling.hooks import MODULE_PREFIX

    modules = [s[len(MODULE_PREFIX):] for s in stack if s.startswith(MODULE_PREFIX)]
    ops = [s for s in stack if s.startswith("aten::")]
    return (modules[-1] if modules else ""), (ops[-1] if ops else "")


def attribute(actions: list[dict], kernels: pd.DataFrame, *, chip: str, components: list[str]) -> pd.DataFrame:
    """Ten components per ncu action, attributed to the pass-1 op call that launched that kernel.

    Key: kernel base name + grid + block (Kineto and ncu spell full names differently). Among pass-1 launches with
    that key, the one in the NVTX module range is preferred ("nvtx+launch"); otherwise the first ("launch").
    """
    first = kernels[kernels["inference"] == kernels["inference"].min()]
    rows = []
    for a in actions:
        m = a["metrics"]
        base = kernel_base(a["kernel_function"] or a["kernel_name"])
        grid, block = _dim3(m, "grid"), _dim3(m, "block")
        module, op = _nvtx_parts(a["nvtx"])
        cand = first[(first["kernel_base"] == base) & (first["grid"] == grid) & (first["block"] == block)]
        attribution, ci = "unmatched", -1
        if len(cand):
            in_mod = cand[cand["module_path"] == module]
            pick = in_mod if len(in_mod) else cand
            attribution = "nvtx+launch" if len(in_mod) else "launch"
            ci = int(pick.iloc[0]["call_index"])
        values, reasons = sig.compute(m, chip, components)
        dur = m.get("gpu__time_duration.sum", math.nan)
        rows.append({
            "action": a["action"], "kernel_name": a["kernel_name"], "kernel_base": base, "grid": grid, "block": block,
            "nvtx_module": module, "nvtx_op": op, "call_index": ci, "attribution": attribution,
            "gpu_time_us_ncu": dur / 1000.0 if not math.isnan(dur) else math.nan,
            "metrics": json.dumps(m, sort_keys=True), **values, "nan_reasons": json.dumps(reasons, sort_keys=True),
        })
    return pd.DataFrame(rows)


def family_regex(kernels: pd.DataFrame, op_regex: str, aux_regex: str, min_share: float = 0.0) -> str:
    """A -k regex naming the compute kernels launched under family op calls in pass 1.

    Auxiliary kernels (layout transforms, bias adds) are left out; so are kernels whose op call's share of GPU time
    is below `min_share`.
    """
    fam = kernels[kernels["op_name"].str.contains(op_regex, regex=True)
                  & ~kernels["kernel_base"].str.contains(aux_regex, regex=True)]
    if min_share > 0:
        per_call = kernels.groupby("call_index")["gpu_time_us"].sum()
        share = per_call / kernels.groupby("inference")["gpu_time_us"].sum().mean() * kernels["inference"].nunique()
        fam = fam[fam["call_index"].map(share) >= min_share]
    names = sorted(set(fam["kernel_base"]))
    if not names:
        raise VxError("pass 1 found no matmul/conv-family kernels to profile with ncu")
    return "(" + "|".join(re.escape(n) for n in names) + ")"
