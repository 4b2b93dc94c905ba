"""The ten signature components and how each is computed from Nsight Compute metrics.

Components, in four groups:
  cache and memory:         l1_hit_rate, l2_hit_rate, gld_coalescing          (percent)
  compute engine and issue: tensor_pipe, fma_pipe, issue_active               (percent of peak)
  intensity and bandwidth:  arith_intensity (FLOP/byte), dram_bw (byte/s)
  machine parallelism:      achieved_occupancy, sm_throughput                 (percent)

A component that cannot be measured is NaN with a reason, never 0; so is a rate that ncu reports far outside 0-100%
(never clamped: a clamped 100% would score as a match with any reference near 100%).
"""

from __future__ import annotations

import math

COMPONENTS = (
    "l1_hit_rate", "l2_hit_rate", "gld_coalescing",
    "tensor_pipe", "fma_pipe", "issue_active",
    "arith_intensity", "dram_bw",
    "achieved_occupancy", "sm_throughput",
)
RATE_COMPONENTS = tuple(c for c in COMPONENTS if c not in ("arith_intensity", "dram_bw"))

# Primary ncu metric of each directly-read component (profiling.md, section 1.2).
PRIMARY = {
    "l1_hit_rate": "l1tex__t_sector_hit_rate.pct",
    "l2_hit_rate": "lts__t_sector_hit_rate.pct",
    "gld_coalescing": "smsp__sass_average_data_bytes_per_sector_mem_global_op_ld.pct",
    "tensor_pipe": "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
    "fma_pipe": "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active",
    "issue_active": "smsp__issue_active.avg.pct_of_peak_sustained_active",
    "dram_bw": "dram__bytes.sum.per_second",
    "achieved_occupancy": "sm__warps_active.avg.pct_of_peak_sustained_active",
    "sm_throughput": "sm__throughput.avg.pct_of_peak_sustained_elapsed",
}
# The highest rate that is still a measurement: 100% plus counter slack (percentage points). Beyond it the metric does
# not describe the kernel: ncu reported 265% to 4,096,025% load coalescing for six final pairs of rebuild h.
RATE_MAX = 100.0 + 1.0
GLD_REQUESTS = "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum"
GLD_SECTORS = "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum"
LDG_INST = "smsp__sass_inst_executed_op_global_ld.sum"
DRAM_BYTES = "dram__bytes.sum"
# Below this share of a kernel's global reads, its LDGs (the only loads the coalescing metric counts) are a few bias or
# index loads beside LDGSTS/TMA operand traffic: 544 LDGs beside 61,073 load requests in a cuDNN conv1d reference.
LDG_SHARE_MIN = 0.05
# CUDA-core FLOP counters and their weights (ncu roofline convention: FMA counts 2).
CORE_FLOPS = {
    "smsp__sass_thread_inst_executed_op_fadd_pred_on.sum": 1,
    "smsp__sass_thread_inst_executed_op_fmul_pred_on.sum": 1,
    "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum": 2,
    "smsp__sass_thread_inst_executed_op_dadd_pred_on.sum": 1,
    "smsp__sass_thread_inst_executed_op_dmul_pred_on.sum": 1,
    "smsp__sass_thread_inst_executed_op_dfma_pred_on.sum": 2,
    "smsp__sass_thread_inst_executed_op_hadd_pred_on.sum": 2,
    "smsp__sass_thread_inst_executed_op_hmul_pred_on.sum": 2,
    "smsp__sass_thread_inst_executed_op_hfma_pred_on.sum": 4,
}
# Tensor-core FLOP counters per chip (they already count FLOPs, not MACs).
TENSOR_FLOPS = {
    "gh100": ["sm__ops_path_tensor_src_bf16_dst_fp32.sum", "sm__ops_path_tensor_src_fp16.sum",
              "sm__ops_path_tensor_src_tf32_dst_fp32.sum", "sm__ops_path_tensor_src_fp8.sum",
              "sm__ops_path_tensor_src_fp64.sum", "sm__ops_path_tensor_src_int8.sum",
              "sm__ops_path_tensor_src_int1.sum"],
    "ga10b": ["sm__ops_path_tensor_src_bf16_dst_fp32.sum", "sm__ops_path_tensor_src_fp16_dst_fp16.sum",
              "sm__ops_path_tensor_src_fp16_dst_fp32.sum", "sm__ops_path_tensor_src_tf32_dst_fp32.sum",
              "sm__ops_path_tensor_src_fp64.sum", "sm__ops_path_tensor_src_int8.sum",
              "sm__ops_path_tensor_src_int4.sum", "sm__ops_path_tensor_src_int1.sum"],
}
DURATION = "gpu__time_duration.sum"      # the kernel's duration: reference and candidate times are compared on it
LAUNCH = [
    DURATION, "launch__grid_size", "launch__block_size", "launch__registers_per_thread",
    "launch__shared_mem_per_block_static", "launch__shared_mem_per_block_dynamic",
    "launch__waves_per_multiprocessor", "launch__sm_count",
]


def metric_list(chip: str, components: list[str]) -> list[str]:
    """The explicit `--metrics` list that measures `components` on `chip`."""
    names: list[str] = []
    for c in components:
        if c == "arith_intensity":
            names += list(CORE_FLOPS) + TENSOR_FLOPS[chip] + [DRAM_BYTES]
        else:
            names.append(PRIMARY[c])
        if c in ("l1_hit_rate", "gld_coalescing"):
            names += [GLD_REQUESTS, GLD_SECTORS, LDG_INST]
        if c == "dram_bw":
            names.append(DRAM_BYTES)
    names += LAUNCH
    return list(dict.fromkeys(names))


def flops(metrics: dict[str, float], chip: str) -> float:
    """FLOPs including tensor-core operations; NaN when no FLOP counter was collected."""
    terms = [w * metrics[m] for m, w in CORE_FLOPS.items() if _ok(metrics.get(m))]
    terms += [metrics[m] for m in TENSOR_FLOPS[chip] if _ok(metrics.get(m))]
    return float(sum(terms)) if terms else math.nan


def ldg_share(metrics: dict[str, float]) -> float:
    """The share of a kernel's global reads (sectors) that LDG instructions move, estimated from LSU load requests
    (LDG and LDGSTS alike) and DRAM bytes (TMA reads reach only those); NaN when a counter is missing or nothing is
    read."""
    ldg, req, sec, dram = (metrics.get(k) for k in (LDG_INST, GLD_REQUESTS, GLD_SECTORS, DRAM_BYTES))
    if not all(_ok(x) for x in (ldg, req, sec, dram)) or req <= 0:
        return math.nan
    reads = max(sec, dram / 32)
    return sec * min(ldg / req, 1.0) / reads if reads > 0 else math.nan


def _ok(v) -> bool:
    return v is not None and not (isinstance(v, float) and math.isnan(v))


def compute(metrics: dict[str, float], chip: str, components: list[str]) -> tuple[dict[str, float], dict[str, str]]:
    """Ten component values from raw metrics, and the reason for every NaN."""
    values: dict[str, float] = {}
    reasons: dict[str, str] = {}

    def nan(c: str, why: str) -> None:
        values[c], reasons[c] = math.nan, why

    for c in COMPONENTS:
        if c not in components:
            nan(c, "not in this platform's metric set")
            continue
        if c == "arith_intensity":
            f, b = flops(metrics, chip), metrics.get(DRAM_BYTES)
            if math.isnan(f) or not _ok(b):
                nan(c, "FLOP or DRAM byte counters not collected")
            elif b <= 0:
                nan(c, "no DRAM traffic (working set served from L2)")
            else:
                values[c] = f / b
            continue
        m = PRIMARY[c]
        v = metrics.get(m)
        if not _ok(v):
            nan(c, f"{m} not collected")
            continue
        if c in ("l1_hit_rate", "gld_coalescing") and not metrics.get(GLD_REQUESTS):
            nan(c, "no LSU global loads (TMA/wgmma kernel or no global reads)")
            continue
        # Bytes per sector is at least 1 of 32 for any LDG; exactly 0 means no LDG ran (LDGSTS/cp.async only).
        if c == "gld_coalescing" and (metrics.get(LDG_INST) == 0 or v == 0):
            nan(c, "no LDG instructions (loads through LDGSTS/cp.async or TMA)")
            continue
        if c in RATE_COMPONENTS and not 0.0 <= v <= RATE_MAX:
            what = "this kernel's loads" if c == "gld_coalescing" else "this kernel"
            nan(c, f"ncu reported {v:,.1f}% ({m}), more than {RATE_MAX - 100:g} point outside 0-100%: "
                   f"the metric does not describe {what}")
            continue
        if c == "gld_coalescing" and (share := ldg_share(metrics)) < LDG_SHARE_MIN:
            nan(c, f"LDG instructions carry about {100 * share:.1f}% of the kernel's global reads (the rest LDGSTS/"
                   f"cp.async or TMA): the metric does not describe its loads")
            continue
        values[c] = float(v)
    return values, reasons
