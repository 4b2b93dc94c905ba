#!/bin/bash
# What a fresh CPU machine prepares before the bench scripts' device calls (gpu_tests.sh, fidelity_h200.sh), each step
# skipped where its output is there: .tools (the jail's bubblewrap, Debian's, with its libraries; `apt-get install
# bubblewrap` first), .whl/bench (`bench/gpu_host_wheels.py --bench`), data/slices (`vxsynth slice`, every time, from the
# committed profiles), scratch/h200cfg.json and scratch/h100cfg.json (`vxsynth config platform=... loop.wall_s=45`,
# the issues' default budget; every time, from conf/).
# Then carry: .tools .whl/bench data/slices scratch/h200cfg.json scratch/h100cfg.json
# usage: bash bench/device_prep.sh        (after `make install`; PY defaults to .venv/bin/python)
set -eu
PY=${PY:-.venv/bin/python}
command -v bwrap >/dev/null || { echo "device_prep: no bwrap here: apt-get install bubblewrap" >&2; exit 2; }
if [ ! -x .tools/bin/bwrap ]; then
  mkdir -p .tools/bin .tools/lib && cp "$(command -v bwrap)" .tools/bin/
  ldd "$(command -v bwrap)" | awk '/=> \//{print $3}' | grep -v -E 'libc\.so' | xargs -I{} cp {} .tools/lib
fi
ls .whl/bench/*.whl >/dev/null 2>&1 || "$PY" bench/gpu_host_wheels.py .whl --bench | tail -2
# always: `make demo` (and any other slicing config) rewrites data/slices with its own slices, and a rebuild run
# on those is not the suite's (session 26 rebuilt 8 non-suite slices so); the stage is quick when up to date
HF_HUB_OFFLINE=1 "$PY" -m flows.cli slice > /dev/null
mkdir -p scratch
for p in h200 h100; do      # always: a config kept from before a conf/ change would rebuild with stale rules
  HF_HUB_OFFLINE=1 "$PY" -m flows.cli config platform=$p loop.wall_s=45 > scratch/${p}cfg.json.new
  mv scratch/${p}cfg.json.new scratch/${p}cfg.json
done
du -sh .tools .whl/bench data/slices scratch/h200cfg.json scratch/h100cfg.json
