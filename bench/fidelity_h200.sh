#!/bin/bash
# One device call of the fidelity figures (bench/fidelity.py) on a bare GPU host: runs it for at most SECONDS (default
# 540) into scratch/NAME (default fid; a later call resumes there while the machine is kept, or from a carried copy),
# leaves the log, the worker log and scratch/NAME without its build folders (NAME.tgz) in $OUT.
# usage: bash bench/fidelity_h200.sh [SECONDS [CONFIG.json|auto NAME ABLATION SLICE...|suite]]
#   CONFIG auto (default): the run's own NAME/config.json where it was made for this GPU, else scratch/h200cfg.json on
#   an H200, scratch/h100cfg.json on others (composed on the CPU machine:
#   `vxsynth config platform=h200 loop.wall_s=45 > scratch/h200cfg.json`, platform=h100 likewise);
#   SLICE... default suite: every slice of SLICES_DIR (default data/slices), the tensor-core ones first.
# FIDELITY_ARGS adds options (e.g. --no-default-start). RESUME names an earlier call's NAME.tgz (a committed
# outputs.tgz travels with the tracked tree) to go on from on a fresh machine: unpacked when scratch/NAME is absent;
# finished slices are skipped, a cut one resumes from its trail, all with the vxsynth the run began with (NAME/code).
# Carry .tools, .whl/bench (bench/device_env.sh), the slices and the configs.
set -u
SECONDS_MAX=${1:-540} CFG=${2:-auto} NAME=${3:-fid} ABL=${4:-6}
SLICES_DIR=${SLICES_DIR:-data/slices}
SLICES="${*:5}"
if [ -z "$SLICES" ] || [ "$SLICES" = suite ]; then
  SLICES="$(ls "$SLICES_DIR" | grep -E -- '-(tf32|bf16|fp16)-') $(ls "$SLICES_DIR" | grep -E -- '-fp32-')"
fi
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
auto=; [ "$CFG" = auto ] && case "$gpu" in *H200*) auto=h200 ;; *) auto=h100 ;; esac
[ -n "$auto" ] && CFG=scratch/${auto}cfg.json
source bench/device_env.sh
if [ -n "${RESUME:-}" ] && [ ! -d "scratch/$NAME" ]; then
  mkdir -p scratch && tar -C scratch -xzf "$RESUME" || { echo "fidelity_h200.sh: cannot unpack RESUME=$RESUME" >&2; exit 2; }
  [ -d "scratch/$NAME" ] || { echo "fidelity_h200.sh: $RESUME holds no $NAME/ folder: give NAME as in that run" >&2; exit 2; }
fi
# a run goes on with its own config where it was made for this GPU (conf/ may have moved on since)
if [ -n "$auto" ] && [ -f "scratch/$NAME/config.json" ] &&
   python3 -c "import json, sys; sys.exit(json.load(open(sys.argv[1]))['platform']['name'] != sys.argv[2])" "scratch/$NAME/config.json" "$auto"; then
  CFG=scratch/$NAME/config.json
fi
OUT=${OUT:-scratch/fidelity-out}; mkdir -p "$OUT"
echo "# $CFG on ${gpu:-no GPU}" > "$OUT/$NAME.log"     # not the tree: the device's git HEAD is not the tree it was sent
# shellcheck disable=SC2086
timeout "$SECONDS_MAX" python3 bench/fidelity.py "$CFG" "$SLICES_DIR" "scratch/$NAME" --ablation "$ABL" ${FIDELITY_ARGS:-} $SLICES >> "$OUT/$NAME.log" 2>&1
echo "rc $?" >> "$OUT/$NAME.log"
tar -C scratch --exclude=work -czf "$OUT/$NAME.tgz" "$NAME"
cp "scratch/$NAME"/worker*.log "$OUT/" 2>/dev/null
