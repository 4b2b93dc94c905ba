"""The slicing stage: profiles in, the suite's slice records out.

Per workload: every kernel is grouped under the op call that launched it; family op calls are deduplicated by
(family, problem, op-call signature, platform); selection walks each model's slices in GPU-time order until the
coverage threshold, keeps a minimum per family present, and caps per model and per suite. Identical slices of
different models merge, keeping every occurrence. Output is deterministic: rerunning on the same profiles
rewrites identical bytes.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import shutil
import tempfile
from pathlib import Path
from typing import Callable

import pandas as pd

from vxsynth.errors import VxError
from vxsynth.kernels.problem import conv_from_call, gemm_from_launch, to_dict
from vxsynth.metrics.components import COMPONENTS
from vxsynth.slicing import classify, hints
from vxsynth.store import schemas
from vxsynth.store.io import canonical_json, read_json, read_table, replace_dir, sha256_text, write_table, write_text

COMPUTE_OPS = r"^aten::(addmm|mm|bmm|baddbmm|cudnn_convolution|mkldnn_convolution|_slow_conv2d_forward|thnn_conv2d|_convolution|convolution)$"
PREC_SHORT = {"FP32": "fp32", "TF32_FP16": "tf32", "BF16": "bf16"}
ENV_KEYS = ("platform", "gpu", "sm_count", "capability", "driver", "cuda_runtime", "cudnn", "torch", "ncu", "lerobot",
            "transformers", "diffusers", "python", "precision_flags")


def _nan_to_none(v):
    return None if isinstance(v, float) and math.isnan(v) else v


@dataclasses.dataclass
class Candidate:
    """One deduplicated family op call of one workload."""
    key: str
    family: str
    precision: str
    problem: object
    op_call: dict
    workload: str
    gpu_time_us: float = 0.0
    calls: list = dataclasses.field(default_factory=list)
    modules: set = dataclasses.field(default_factory=set)
    kernels: list = dataclasses.field(default_factory=list)
    main: dict = dataclasses.field(default_factory=dict)
    signature: dict = dataclasses.field(default_factory=dict)
    hint: dict = dataclasses.field(default_factory=dict)


def _workload_candidates(wdir: Path, aux: re.Pattern, platform: str) -> tuple[dict, list[Candidate], pd.DataFrame]:
    env = read_json(wdir / "env.json")
    calls = read_table(wdir / "op_calls.parquet", schemas.OP_CALLS)
    kernels = read_table(wdir / "kernels.parquet", schemas.KERNELS)
    kernels = kernels[kernels["inference"] == kernels["inference"].min()].sort_values("kernel_seq")
    compute_kernel = ~kernels["kernel_base"].str.contains(aux) & kernels["launch_op"].str.match(COMPUTE_OPS)
    ncu = read_table(wdir / "ncu.parquet", schemas.NCU) if (wdir / "ncu.parquet").exists() else None
    total = float(calls["gpu_time_us"].sum())
    ranking = []
    by_key: dict[str, Candidate] = {}
    kgroups = {ci: g for ci, g in kernels.groupby("call_index")}
    for r in calls.itertuples():
        dims = json.loads(r.input_dims)
        fam = classify.family(r.op_name, dims)
        ranking.append({"workload": wdir.name, "call_index": r.call_index, "op_name": r.op_name, "family": fam or "(not sliced)",
                        "module_path": r.module_path, "input_dims": r.input_dims, "gpu_time_us": r.gpu_time_us,
                        "share": r.gpu_time_us / total})
        if fam is None:
            continue
        ks = kgroups[r.call_index]                                 # in kernel_seq order
        compute = ks[compute_kernel[ks.index]]
        if not len(compute):
            ranking[-1]["family"] = f"{fam} (no compute kernel; not sliced)"
            continue
        main = compute.sort_values(["gpu_time_us", "kernel_seq"], ascending=[False, True]).iloc[0]
        launch = {"op": main.launch_op, "dims": json.loads(main.launch_dims), "dtypes": json.loads(main.launch_dtypes),
                  "strides": json.loads(main.launch_strides), "args": json.loads(main.launch_args)}
        top = {"op": r.op_name, "dims": dims, "dtypes": json.loads(r.input_dtypes), "strides": json.loads(r.input_strides),
               "args": json.loads(r.input_args)}
        if fam in ("conv1d", "conv2d"):
            problem = conv_from_call(top, launch)
        else:
            problem = gemm_from_launch(launch)
        op_call = {**top, "launch_op": launch}
        key = canonical_json({"family": fam, "problem": to_dict(problem), "op_call": op_call, "platform": platform})
        c = by_key.get(key)
        if c is None:
            sig = _signature(ncu, r.call_index, main, platform)
            prec = classify.precision(problem.dtype, main.kernel_name, sig.get("_row"))
            c = by_key[key] = Candidate(key, fam, prec, problem, op_call, wdir.name, signature=sig)
            c.kernels = [{"name": k.kernel_name, "base": k.kernel_base, "role": "main" if k.kernel_seq == main.kernel_seq else "aux",
                          "grid": _json(k.grid), "block": _json(k.block),
                          "registers": _int(k.registers), "shared_mem": _int(k.shared_mem), "gpu_time_us": float(k.gpu_time_us),
                          "share_of_call": float(k.gpu_time_us / max(ks["gpu_time_us"].sum(), 1e-12))} for k in ks.itertuples()]
            c.main = c.kernels[[k["role"] for k in c.kernels].index("main")]
            if isinstance(main.grid, str):
                pipe = sig["values"].get("tensor_pipe")
                c.hint = {"parsed": hints.parse(main.kernel_name),
                          **hints.cross_check(hints.parse(main.kernel_name), problem,
                                              {"grid": main.grid, "block": main.block, "shared_mem": _int(main.shared_mem)},
                                              math.nan if pipe is None else pipe, env.get("sm_count") or 132)}
            else:
                c.hint = {"parsed": {"grammar": "unparsed"}, "verdict": "unparsed", "checks": [], "note": "cpu operator"}
        c.gpu_time_us += float(r.gpu_time_us)
        c.calls.append(int(r.call_index))
        c.modules.add(r.module_path)
    return env, list(by_key.values()), pd.DataFrame(ranking)


def _json(v):
    return json.loads(v) if isinstance(v, str) else None


def _int(v):
    return None if v is None or (isinstance(v, float) and math.isnan(v)) or pd.isna(v) else int(v)


def _signature(ncu: pd.DataFrame | None, call_index: int, main, platform: str) -> dict:
    """The reference signature of the main kernel: the ncu row of this call, else one with the same launch config."""
    none = {"values": {c: None for c in COMPONENTS},
            "nan_reasons": {c: f"platform {platform} has no ncu pass" if ncu is None else "main kernel not profiled by ncu"
                            for c in COMPONENTS}, "measured_with": None, "source": None}
    if ncu is None or not isinstance(main.grid, str):
        return none
    rows = ncu[(ncu["kernel_base"] == main.kernel_base) & (ncu["grid"] == main.grid) & (ncu["block"] == main.block)]
    same = rows[rows["call_index"] == call_index]
    pick = same if len(same) else rows
    if not len(pick):
        return none
    row = pick.iloc[0]
    return {"values": {c: _nan_to_none(float(row[c])) for c in COMPONENTS},
            "nan_reasons": json.loads(row["nan_reasons"]), "measured_with": json.loads(row["measured_with"]),
            "raw_metrics": json.loads(row["metrics"]),
            "source": {"ncu_action": int(row["action"]), "attribution": row["attribution"],
                       "profiled_call_index": int(row["call_index"]), "shared_measurement": not len(same)},
            "_row": row.to_dict()}


def select(cands: list[Candidate], cfg: dict, workload_time: float) -> list[Candidate]:
    """Per model: GPU-time order until coverage, a minimum per family present, a cap per model."""
    order = sorted(cands, key=lambda c: (-c.gpu_time_us, c.key))
    fam_total = sum(c.gpu_time_us for c in order) or 1.0
    chosen, covered = [], 0.0
    for c in order:
        if covered / fam_total >= cfg["coverage"] or len(chosen) >= cfg["max_per_model"]:
            break
        if c.gpu_time_us / workload_time < cfg.get("min_share", 0.0):
            break
        chosen.append(c)
        covered += c.gpu_time_us
    for fam in sorted({c.family for c in order}):
        have = sum(c.family == fam for c in chosen)
        extra = [c for c in order if c.family == fam and c not in chosen][: max(0, cfg["min_per_family"] - have)]
        chosen += extra
    return chosen


def slice_id(family: str, precision: str, problem, platform: str, key: str) -> str:
    return f"{family}-{PREC_SHORT[precision]}-{problem.label()}-{platform}-{sha256_text(key)[:6]}"


def run(profile_dirs: list[Path], out_dir: Path, cfg: dict, tolerances: dict, log: Callable[[str], None] = print) -> pd.DataFrame:
    """Slice the given profile directories (data/profiles/<platform>/<workload>) into `out_dir`."""
    if not profile_dirs:
        raise VxError("no profiles to slice; run `vxsynth profile` first or point slicing.profiles at recorded ones")
    aux = re.compile(cfg["aux_kernels"])
    merged: dict[str, dict] = {}
    rankings = []
    for wdir in sorted(profile_dirs):
        platform = wdir.parent.name
        env, cands, ranking = _workload_candidates(wdir, aux, platform)
        rankings.append(ranking.assign(platform=platform))
        wtime = float(ranking["gpu_time_us"].sum())
        chosen = select(cands, cfg, wtime)
        log(f"[slice] {platform}/{wdir.name}: {len(cands)} distinct family op calls, {len(chosen)} selected, "
            f"covering {sum(c.gpu_time_us for c in chosen) / wtime:.1%} of its GPU time")
        for c in chosen:
            occ = {"workload": wdir.name, "workload_id": env["workload"]["workload_id"],
                   "model": {"policy_type": env["workload"]["policy_type"], "config_hash": env["workload"]["config_hash"]},
                   "input_spec": env["workload"]["input_spec"], "workload_config": env.get("workload_config"),
                   "call_indices": sorted(c.calls),
                   "module_paths": sorted(c.modules), "calls_per_inference": len(c.calls),
                   "gpu_time_us": c.gpu_time_us, "share": c.gpu_time_us / wtime}
            m = merged.setdefault(c.key, {"cand": c, "occurrences": [], "env": {k: env.get(k) for k in ENV_KEYS}})
            m["occurrences"].append(occ)
    ranked = sorted(merged.values(), key=lambda m: (-max(o["share"] for o in m["occurrences"]), m["cand"].key))
    ranked = ranked[: cfg["max_suite"]]
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    rows = []
    try:
        for m in ranked:
            c: Candidate = m["cand"]
            platform = m["env"]["platform"]
            sid = slice_id(c.family, c.precision, c.problem, platform, c.key)
            sig = {k: v for k, v in c.signature.items() if k != "_row"}
            record = {
                "schema_version": 1, "slice_id": sid, "family": c.family, "precision": c.precision,
                "problem": to_dict(c.problem), "op_call": c.op_call, "platform": platform, "environment": m["env"],
                "occurrences": sorted(m["occurrences"], key=lambda o: o["workload"]),
                "gpu_time_us": sum(o["gpu_time_us"] for o in m["occurrences"]),
                "kernels": c.kernels, "main_kernel": c.main["name"], "reference_signature": sig,
                "name_hints": c.hint, "tolerance": tolerances[c.precision],
            }
            text = canonical_json(record) + "\n"
            write_text(tmp / sid / "slice.json", text)
            rows.append({"slice_id": sid, "family": c.family, "precision": c.precision, "op": c.op_call["op"],
                         "problem": json.dumps(to_dict(c.problem), sort_keys=True),
                         "models": ",".join(o["workload"] for o in record["occurrences"]), "platform": platform,
                         "gpu_time_us": record["gpu_time_us"], "share": max(o["share"] for o in record["occurrences"]),
                         "calls_per_inference": sum(o["calls_per_inference"] for o in record["occurrences"]),
                         "main_kernel": c.main["name"], "hint_check": c.hint.get("verdict", "unparsed"),
                         "record_sha256": sha256_text(text)})
        suite = pd.DataFrame(rows, columns=[f.name for f in schemas.SUITE])
        write_table(tmp / "suite.parquet", suite, schemas.SUITE)
        rank = pd.concat(rankings, ignore_index=True).sort_values(["platform", "workload", "gpu_time_us", "call_index"],
                                                                  ascending=[True, True, False, True])
        write_table(tmp / "ranking.parquet", rank, schemas.RANKING)
        replace_dir(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    log(f"[slice] suite: {len(suite)} slices " + ", ".join(f"{k} {v}" for k, v in suite["precision"].value_counts().sort_index().items()))
    return suite

