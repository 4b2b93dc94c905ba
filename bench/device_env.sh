#!/bin/bash
# Sourced by the bench scripts that run bare on a lent GPU host (gpu_tests.sh, fidelity_h200.sh): installs the carried
# wheels once into /tmp/site (WHEELS: folders of wheels, default .whl/bench, filled on the CPU machine by
# `python bench/gpu_host_wheels.py .whl --bench`, 9 MiB), takes ncu_report from the host's own Nsight Compute
# (extras/python) where no carried wheel brings it (its PyPI wheel is 17 MiB of the 64 MiB a call carries), and puts
# the jail's bubblewrap (.tools, carried) and the project on the paths.
site=/tmp/site
if [ ! -e "$site/.installed" ]; then
  mkdir -p "$site"; ok=1
  for d in ${WHEELS:-.whl/bench}; do
    ls "$d"/*.whl >/dev/null 2>&1 || continue
    python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" "$d"/*.whl 2>&1 | grep -v WARNING
    [ "${PIPESTATUS[0]}" = 0 ] || ok=0
  done
  [ "$ok" = 1 ] && touch "$site/.installed"     # a failed install is tried again by the next script
fi
export PATH=$PWD/.tools/bin:$PATH LD_LIBRARY_PATH=$PWD/.tools/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
ncu_py=""   # ncu_report finds its libraries relative to its own file: the folder goes on the path, not a link to it
if ! PYTHONPATH=$site python3 -c "import ncu_report" 2>/dev/null; then
  for x in "$(dirname "$(readlink -f "$(command -v ncu)")")/extras/python" /opt/nvidia/nsight-compute/*/extras/python \
           /usr/local/cuda/nsight-compute*/extras/python; do
    [ -e "$x/ncu_report.py" ] && { ncu_py=:$x; break; }
  done
  [ -n "$ncu_py" ] || echo "device_env: no ncu_report (no wheel carried, none in the host's ncu): the ncu steps will fail" >&2
fi
export PYTHONPATH=$site:$PWD$ncu_py HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
