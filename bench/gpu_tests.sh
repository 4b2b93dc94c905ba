#!/bin/bash
# The whole GPU suite (`pytest -m gpu`: tests/test_gpu.py, tests/test_attacks.py) on a bare H200, in two device calls
# of at most 10 minutes each (one does not hold it: bench/results/gpu_suite_a29fe18/README.md):
#
#   bash bench/gpu_tests.sh 1 [SECONDS]   every test but the ncu ones, 14 at once (pytest-xdist)
#   bash bench/gpu_tests.sh 2 [SECONDS]   the ncu tests one at a time (a neighbour's kernels would perturb the
#                                         reference noise they assert), then the lerobot replacement test
#
# Carry .tools (the jail's bubblewrap) and .whl/bench (the wheels the tests import that the image lacks: lerobot,
# draccus, gymnasium and their missing dependencies, `python bench/gpu_host_wheels.py .whl --bench`; ncu_report comes
# from the host's ncu, pytest-xdist with the image: bench/device_env.sh). Writes $OUT/gpu_tests_<part>.txt
# (default OUT scratch/gpu-tests) and ends with the selected tests that did not pass (failed, or cut by SECONDS,
# default 540), to run again with -k. SEL narrows a part to the tests of a change (`SEL="check1_and_check2 or attack"
# bash bench/gpu_tests.sh 1`): the part's own selection and SEL.
set -u
part=${1:?usage: gpu_tests.sh 1|2 [SECONDS]}; limit=${2:-540}
source bench/device_env.sh
OUT=${OUT:-scratch/gpu-tests}; mkdir -p "$OUT"; R=$OUT/gpu_tests_$part.txt
F="tests/test_gpu.py tests/test_attacks.py"          # naming tests/ would collect modules needing Hydra and Optuna
NCU="harness or batch_isolates or split_k_into or measured_launch"
P=(python3 -m pytest -o addopts= -m gpu -p no:cacheprovider -rfE --durations=0 -v -o faulthandler_timeout=$((limit - 30)))
case $part in
  1) sel="not ($NCU or replacement_entry)${SEL:+ and ($SEL)}"; t0=$(date +%s)
     timeout "$limit" "${P[@]}" -n 14 -k "$sel" $F > "$R" 2>&1; echo "part 1 rc $? in $(( $(date +%s) - t0 )) s" >> "$R" ;;
  2) sel="($NCU or replacement_entry)${SEL:+ and ($SEL)}"; t0=$(date +%s)
     timeout "$limit" "${P[@]}" -k "$sel" $F > "$R" 2>&1; echo "part 2 rc $? in $(( $(date +%s) - t0 )) s" >> "$R" ;;
  *) echo "gpu_tests.sh: part must be 1 or 2, not $part" >&2; exit 2 ;;
esac
python3 - "$R" "$sel" $F <<'PY'
import re, subprocess, sys
report, sel, files = sys.argv[1], sys.argv[2], sys.argv[3:]
ids = subprocess.run([sys.executable, "-m", "pytest", "-o", "addopts=", "-m", "gpu", "-q", "--co", "-p", "no:cacheprovider",
                      "-k", sel, *files], capture_output=True, text=True).stdout.split()
ids = [i for i in ids if "::" in i]
text = open(report).read()
passed = set(re.findall(r"PASSED (\S+::\S+)", text)) | set(re.findall(r"(\S+::\S+) PASSED", text))
left = [i for i in ids if i not in passed]
with open(report, "a") as f:
    f.write(f"selected {len(ids)}, passed {len(ids) - len(left)}; not passed: {' '.join(left) or 'none'}\n")
PY
tail -3 "$R"
