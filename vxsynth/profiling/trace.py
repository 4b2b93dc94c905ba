"""Turn a torch.profiler Chrome trace into kernel rows and op-call rows.

Links (profiling.md 4.2-4.3): a kernel's `External id` equals that of the innermost `cpu_op` that launched it
(the launch op); the op call is the outermost aten op above it (e.g. `aten::conv1d` above `cudnn_convolution`,
so a conv's layout-transform kernels count toward the conv call); the module path is the innermost `module::`
range around the op call; `call_index` numbers op calls in order within each `inference#i` range.
On the cpu platform there are no kernels: every operator's self time becomes one row.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field

import pandas as pd

from vxsynth.errors import VxError
from vxsynth.profiling.hooks import MODULE_PREFIX
from vxsynth.profiling.torch_pass import INFERENCE_PREFIX

CPU_OP_CATS = {"cpu_op", "Operator"}
KERNEL_CATS = {"kernel", "Kernel"}
EPS = 1e-3  # trace timestamps are microseconds with ns resolution


@dataclass
class _Ev:
    name: str
    ts: float
    end: float
    args: dict
    is_op: bool
    parent: "_Ev | None" = None
    children_time: float = 0.0
    inference: int = -1
    module: str = ""
    top: "_Ev | None" = None
    call_index: int = -1
    kernels: list = field(default_factory=list)


def _ext_id(args: dict):
    return args.get("External id", args.get("external id"))


def kernel_base(name: str) -> str:
    """Function base name: no `void`, no template arguments or parameters, last namespace component.

    Kineto and ncu spell templated names differently; the base name is what both agree on.
    """
    n = name.strip()
    if n.startswith("void "):
        n = n[5:]
    depth, cut = 0, len(n)
    for i, ch in enumerate(n):
        if ch in "<(" and depth == 0:
            cut = i
            break
    n = n[:cut].strip()
    return n.split("::")[-1] if n else name


def parse_trace(trace: dict) -> tuple[list[dict], bool]:
    """Kernel rows (one per launch, or per operator on CPU) and whether GPU kernels were found."""
    events = trace.get("traceEvents", [])
    inference_evs = [e for e in events if e.get("cat") == "user_annotation" and e.get("name", "").startswith(INFERENCE_PREFIX)]
    if not inference_evs:
        raise VxError("trace has no inference# ranges; it was not written by vxsynth's profiling pass")
    pid, tid = inference_evs[0]["pid"], inference_evs[0]["tid"]
    host: list[_Ev] = []
    for e in events:
        cat = e.get("cat")
        if e.get("ph") != "X" or e.get("pid") != pid or e.get("tid") != tid:
            continue
        if cat in CPU_OP_CATS or cat == "user_annotation":
            ts = float(e["ts"])
            host.append(_Ev(e["name"], ts, ts + float(e.get("dur", 0.0)), e.get("args", {}), cat in CPU_OP_CATS))
    host.sort(key=lambda ev: (ev.ts, -ev.end))
    stack: list[_Ev] = []
    for ev in host:
        while stack and not (stack[-1].ts <= ev.ts + EPS and ev.end <= stack[-1].end + EPS):
            stack.pop()
        ev.parent = stack[-1] if stack else None
        stack.append(ev)
    by_ext: dict = {}
    counters: dict[int, int] = defaultdict(int)
    for ev in host:
        p = ev.parent
        if p is not None:
            ev.inference, ev.module = p.inference, p.module
            if ev.is_op and p.is_op:
                p.children_time += ev.end - ev.ts
        if not ev.is_op:
            if ev.name.startswith(INFERENCE_PREFIX):
                ev.inference = int(ev.name[len(INFERENCE_PREFIX):])
            elif ev.name.startswith(MODULE_PREFIX):
                ev.module = ev.name[len(MODULE_PREFIX):]
            continue
        ev.top = p.top if (p is not None and p.is_op) else ev
        if ev.top is ev and ev.inference >= 0:
            ev.call_index = counters[ev.inference]
            counters[ev.inference] += 1
        ext = _ext_id(ev.args)
        if ext is not None:
            by_ext[ext] = ev
    gpu = [e for e in events if e.get("cat") in KERNEL_CATS]
    rows: list[dict] = []
    if gpu:
        for k in gpu:
            a = k.get("args", {})
            launch = by_ext.get(_ext_id(a))
            if launch is None or launch.inference < 0:
                continue
            rows.append(_row(launch, k["name"], float(k.get("dur", 0.0)), a, float(k["ts"])))
    else:
        for ev in host:
            if ev.is_op and ev.inference >= 0:
                self_t = (ev.end - ev.ts) - ev.children_time
                if self_t > 0:
                    rows.append(_row(ev, "cpu:" + ev.name, self_t, {}, ev.ts))
    rows.sort(key=lambda r: (r["inference"], r["call_index"], r["_ts"]))
    seq: dict = defaultdict(int)
    for r in rows:
        key = (r["inference"], r["call_index"])
        r["kernel_seq"] = seq[key]
        seq[key] += 1
    return rows, bool(gpu)


def _row(launch: _Ev, name: str, dur: float, kargs: dict, ts: float) -> dict:
    top = launch.top
    a = launch.args
    return {
        "inference": launch.inference, "call_index": top.call_index, "_ts": ts,
        "kernel_name": name, "kernel_base": kernel_base(name.removeprefix("cpu:")), "gpu_time_us": dur,
        "grid": json.dumps(kargs.get("grid")) if "grid" in kargs else None,
        "block": json.dumps(kargs.get("block")) if "block" in kargs else None,
        "registers": kargs.get("registers per thread"), "shared_mem": kargs.get("shared memory"),
        "stream": kargs.get("stream"), "correlation": kargs.get("correlation"),
        "launch_op": launch.name, "launch_dims": json.dumps(a.get("Input Dims")),
        "launch_dtypes": json.dumps(a.get("Input type")), "launch_strides": json.dumps(a.get("Input Strides")),
        "launch_args": json.dumps(a.get("Concrete Inputs")),
        "op_name": top.name, "module_path": top.module,
        "_top_args": top.args,
    }


def tables(rows: list[dict], *, meta: dict) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """kernels, op_call_runs and op_calls frames (meta columns: workload, workload_id, platform, measured_with)."""
    if not rows:
        raise VxError("the profile recorded no kernels or operators inside the inference ranges")
    kernels = pd.DataFrame([{k: v for k, v in r.items() if not k.startswith("_")} for r in rows])
    for k, v in meta.items():
        kernels[k] = v
    runs = (kernels.groupby(["inference", "call_index"], sort=True)
            .agg(op_name=("op_name", "first"), gpu_time_us=("gpu_time_us", "sum"), n_kernels=("kernel_name", "size"))
            .reset_index())
    names = runs.pivot(index="call_index", columns="inference", values="op_name")
    bad = names[names.nunique(axis=1, dropna=True) > 1]
    if len(bad):
        raise VxError(f"op call {int(bad.index[0])} differs between inferences; the workload is not deterministic")
    for k, v in meta.items():
        runs[k] = v
    first = kernels["inference"].min()
    tops = {}
    for r in rows:
        if r["inference"] == first and r["call_index"] not in tops:
            tops[r["call_index"]] = r
    calls = []
    per_call = runs.groupby("call_index")["gpu_time_us"]
    total = runs.groupby("inference")["gpu_time_us"].sum().mean()
    k0 = kernels[kernels["inference"] == first]
    for ci, grp in k0.groupby("call_index", sort=True):
        r = tops[ci]
        ta = r["_top_args"]
        launch_ops = []
        for _, kr in grp.drop_duplicates(["launch_op", "launch_dims"]).iterrows():
            launch_ops.append({"op": kr.launch_op, "dims": json.loads(kr.launch_dims), "dtypes": json.loads(kr.launch_dtypes),
                               "strides": json.loads(kr.launch_strides), "args": json.loads(kr.launch_args)})
        t = per_call.get_group(ci)
        calls.append({
            "call_index": int(ci), "op_name": r["op_name"], "module_path": r["module_path"],
            "input_dims": json.dumps(ta.get("Input Dims")), "input_dtypes": json.dumps(ta.get("Input type")),
            "input_strides": json.dumps(ta.get("Input Strides")), "input_args": json.dumps(ta.get("Concrete Inputs")),
            "launch_ops": json.dumps(launch_ops),
            "kernels": json.dumps([{"name": kr.kernel_name, "grid": kr.grid, "block": kr.block,
                                    "gpu_time_us": kr.gpu_time_us} for kr in grp.itertuples()]),
            "n_kernels": len(grp), "gpu_time_us": float(t.mean()), "gpu_time_us_min": float(t.min()),
            "gpu_time_us_max": float(t.max()), "n_inferences": int(len(t)), "share": float(t.mean() / total),
        })
    op_calls = pd.DataFrame(calls)
    for k, v in meta.items():
        op_calls[k] = v
    kernels["registers"] = kernels["registers"].astype("Int64")
    kernels["shared_mem"] = kernels["shared_mem"].astype("Int64")
    kernels["stream"] = kernels["stream"].astype("Int64")
    kernels["correlation"] = kernels["correlation"].astype("Int64")
    return kernels, runs, op_calls
