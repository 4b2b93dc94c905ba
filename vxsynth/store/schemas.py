"""Explicit pyarrow schemas of every table the pipeline writes.

Nested values (shapes, strides, argument lists) are stored as JSON strings so the tables stay flat and read
directly in pandas or duckdb. Every row carries how it was measured (`measured_with`: platform, tools and their
versions, and the settings that change the numbers).
"""

from __future__ import annotations

import json

import pyarrow as pa

from vxsynth.metrics.components import COMPONENTS as _COMPONENTS

_s, _i, _f, _b = pa.string(), pa.int64(), pa.float64(), pa.bool_()


def _schema(*fields: tuple) -> pa.Schema:
    """Fields as (name, type) or (name, type, default): a column added after tables were first written carries the
    value that older tables are read with (`store.io.read_table`)."""
    return pa.schema([pa.field(f[0], f[1], metadata={"default": json.dumps(f[2])} if len(f) > 2 else None)
                      for f in fields])


MEASURED = [("platform", _s), ("measured_with", _s)]

# Profiling pass 1: one row per kernel launch (GPU) or leaf operator (cpu platform).
KERNELS = _schema(
    ("workload", _s), ("workload_id", _s), *MEASURED,
    ("inference", _i), ("call_index", _i), ("kernel_seq", _i),
    ("kernel_name", _s), ("kernel_base", _s), ("gpu_time_us", _f),
    ("grid", _s), ("block", _s), ("registers", _i), ("shared_mem", _i), ("stream", _i),
    ("launch_op", _s), ("launch_dims", _s), ("launch_dtypes", _s), ("launch_strides", _s), ("launch_args", _s),
    ("op_name", _s), ("module_path", _s), ("correlation", _i),
)

# Pass 1, one row per (inference, op call).
OP_CALL_RUNS = _schema(
    ("workload", _s), ("workload_id", _s), *MEASURED,
    ("inference", _i), ("call_index", _i), ("op_name", _s), ("gpu_time_us", _f), ("n_kernels", _i),
)

# Pass 1 aggregated over inferences: one row per op call of the forward pass.
OP_CALLS = _schema(
    ("workload", _s), ("workload_id", _s), *MEASURED,
    ("call_index", _i), ("op_name", _s), ("module_path", _s),
    ("input_dims", _s), ("input_dtypes", _s), ("input_strides", _s), ("input_args", _s),
    ("launch_ops", _s), ("kernels", _s), ("n_kernels", _i),
    ("gpu_time_us", _f), ("gpu_time_us_min", _f), ("gpu_time_us_max", _f), ("n_inferences", _i),
    ("share", _f),
)

# Pass 2: one row per profiled kernel (ncu action); raw metrics as JSON plus the ten components.
NCU = _schema(
    ("workload", _s), ("workload_id", _s), *MEASURED,
    ("action", _i), ("kernel_name", _s), ("kernel_base", _s), ("grid", _s), ("block", _s),
    ("nvtx_module", _s), ("nvtx_op", _s), ("call_index", _i), ("attribution", _s),
    ("gpu_time_us_ncu", _f), ("metrics", _s),
    *[(c, _f) for c in _COMPONENTS], ("nan_reasons", _s),
)

# Slicing: the suite index, one row per selected slice.
SUITE = _schema(
    ("slice_id", _s), ("family", _s), ("precision", _s), ("op", _s), ("problem", _s),
    ("models", _s), ("platform", _s), ("gpu_time_us", _f), ("share", _f), ("calls_per_inference", _i),
    ("main_kernel", _s), ("hint_check", _s), ("record_sha256", _s),
)

# Slicing: every op call of every profiled workload ranked by GPU time, family or "(not sliced)".
RANKING = _schema(
    ("platform", _s), ("workload", _s), ("call_index", _i), ("op_name", _s), ("family", _s), ("module_path", _s),
    ("input_dims", _s), ("gpu_time_us", _f), ("share", _f),
)

# Reconstruction: the revision trail, one row per attempted round.
TRAIL = _schema(
    ("slice_id", _s), ("run_id", _s), ("order", _s), ("round", _i), ("parent", _i),
    ("strategy_hash", _s), ("strategy", _s), ("diff", _s), ("edit", _s), ("edit_reason", _s),
    ("cuda_sha256", _s), ("vortex_sha256", _s),
    ("check1", _s), ("check2", _s), ("check1_record", _s), ("check2_record", _s),
    *[(c, _f) for c in _COMPONENTS], ("component_set", _s), ("gaps", _s),
    ("D", _f), ("decision", _s), ("reason", _s), ("improved", _s), ("worsened", _s),
    ("t_generate_s", _f), ("t_compile_s", _f), ("t_checks_s", _f), ("t_measure_s", _f), ("wall_s", _f),
    ("measured_with", _s),
    ("source_kind", _s, "generated"),   # generated from the strategy, free-form (written by an agent), "" (no source)
    ("agent_call", _s, "{}"),           # the agent's model call of the round: model, attempts, tokens, latency, error
    ("batch", _i, -1),                  # the first round of the batch it was evaluated with (-1: before batches)
)

# Revision trails as agent-training trajectories (`vxsynth export trajectories`): one row per round.
# state = the slice and the revision the round started from (its sources and gaps), action = the edit and the
# candidate's strategy and sources, outcome = checks, components, D, decision; reward = reward_of(row).
TRAJECTORIES = _schema(
    ("slice_id", _s), ("slice_md5", _s), ("trail_commit", _s), ("exporter_version", _s), ("run_id", _s),
    ("round", _i), ("parent", _i),
    ("family", _s), ("precision", _s), ("problem", _s), ("reference_kernel", _s),
    ("state_strategy", _s), ("state_cuda", _s), ("state_vortex", _s), ("state_gaps", _s), ("state_D", _f),
    ("action_kind", _s), ("action_edit", _s), ("action_diff", _s), ("action_strategy", _s), ("action_cuda", _s),
    ("action_vortex", _s),
    ("check1", _s), ("check2", _s), ("components", _s), ("gaps", _s), ("D", _f), ("decision", _s),
    ("reward", _f), ("measured_with", _s), ("agent_call", _s),
)

# Report: the suite table, per-component values and gaps, model coverage.
REPORT = _schema(
    ("slice_id", _s), ("models", _s), ("family", _s), ("op", _s), ("shape", _s), ("precision", _s), ("gpu_share", _f),
    ("check1", _s), ("check1_max_abs", _f), ("check1_max_rel", _f), ("check1_tol", _s),
    ("check2", _s), ("check2_max_abs", _f), ("check2_max_rel", _f), ("check2_tol", _s),
    ("D_initial", _f), ("D_final", _f), ("rounds", _i), ("kept", _i), ("reverted", _i), ("rejected", _i), ("crashed", _i),
    ("status", _s), ("failed", _i, 0), ("simx_check2", _s, ""),
    ("time_vs_reference", _f, None), ("time_note", _s, "not recorded (report written before the column)"),
    ("D_final_now", _f, None),
)
COMPONENTS = _schema(
    ("slice_id", _s), ("component", _s), ("reference", _f), ("initial", _f), ("final", _f), ("gap_before", _f), ("gap_after", _f),
)
COVERAGE = _schema(
    ("platform", _s), ("model", _s), ("gpu_time_ms", _f), ("family_share", _f), ("covered_by_slices", _f), ("slices", _i),
)

# SimX counters: one row per run (configuration x class).
SIMX = _schema(
    ("slice_id", _s), ("candidate", _s), ("config_id", _s), ("config", _s), ("perf_class", _s),
    ("api", _s), ("ok", _b), ("error", _s), ("instrs", _i), ("cycles", _i), ("ipc", _f),
    ("counters", _s), ("covered_fraction", _f), ("blocks", _s),
)
