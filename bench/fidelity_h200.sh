#!/bin/bash
# One device call of the issue-13 fidelity figures (bench/results/fidelity_h200.txt) on a bare GPU host: installs the
# carried wheels (.whl/f), runs bench/fidelity.py for at most SECONDS (default 540) into scratch/NAME (default fid; a
# later call resumes there while the machine is kept, or from a carried copy), leaves the log, the worker log and
# scratch/NAME without its build folders (NAME.tgz) in $OUT.
# usage: bash bench/fidelity_h200.sh [SECONDS [CONFIG.json NAME ABLATION SLICE...]]
#   default: scratch/h200cfg.json, fid, 6, the 12 slices of bench/results/fidelity_h200.txt
# Slices from SLICES_DIR (default data/slices); FIDELITY_ARGS adds options (e.g. --no-default-start). Carry: .whl/f .tools the slices and the config (`vxsynth config platform=h200 loop.wall_s=45 > scratch/h200cfg.json`; on an H100 platform=h100, scratch/h100cfg.json);
# .whl/f = the wheels of `python bench/gpu_host_wheels.py .whl` this bench needs (23 MiB): optuna colorlog sqlalchemy
# greenlet alembic mako ncu_report opentelemetry_api pydot pytz
SLICES="matmul-bf16-8x51x256x355 linear-fp32-302x512x512-h200-6d8528 conv1d-tf32-2048to2048k5l16 conv2d-tf32-3to64k7x7
  linear-bf16-51x4096x1024 matmul-fp32-8x302x64x302 matmul-bf16-8x51x355x256 linear-fp32-302x512x3200
  linear-fp32-100x512x512 linear-fp32-256x1152x1152 conv2d-fp32-3to1152k14x14 conv2d-tf32-64to64k3x3"
SECONDS_MAX=${1:-540} CFG=${2:-scratch/h200cfg.json} NAME=${3:-fid} ABL=${4:-6}
[ $# -gt 4 ] && SLICES="${*:5}"
export PATH=$PWD/.tools/bin:$PATH LD_LIBRARY_PATH=$PWD/.tools/lib
[ -d /tmp/site/optuna ] || python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/f/*.whl
export PYTHONPATH=/tmp/site:$PWD HF_HUB_OFFLINE=1
# shellcheck disable=SC2086
timeout "$SECONDS_MAX" python3 bench/fidelity.py "$CFG" "${SLICES_DIR:-data/slices}" "scratch/$NAME" --ablation "$ABL" ${FIDELITY_ARGS:-} $SLICES > "$OUT/$NAME.log" 2>&1
echo "rc $?" >> "$OUT/$NAME.log"
tar -C scratch --exclude=work -czf "$OUT/$NAME.tgz" "$NAME"
cp "scratch/$NAME"/worker*.log "$OUT/" 2>/dev/null
