#!/bin/bash
# Device calls of issue 17: the default suite (26 slices sliced from the committed H200 profiles) rebuilt with
# `vxsynth rebuild platform=h200` as a Prefect flow run of deployment rebuild/h200, picked up by a worker of the
# `h200` pool on the project's local Prefect server (SQLite under .prefect), DVC committing the outputs; slices dealt
# to every GPU of the host (rebuild.gpus=auto). Each step is one device call; the machine keeps the working copy's
# ignored folders (.gpu-site, .prefect, data/, scratch/) between calls while it is held, so `run` resumes: finished
# slices are stamped, a cut loop resumes from its trail, and its wall budget counts what it already spent. Tracked
# files are sent again with every call (the machine's dvc.lock is reset: `run` copies it out at once).
#
#   bash bench/rebuild_h200.sh install N             carry .whl/N: bundle N of bench/gpu_host_wheels.py, into .gpu-site/bN
#   bash bench/rebuild_h200.sh run [SECONDS] [OVERRIDE ...]      at most SECONDS (default 540), then stops cleanly
#   bash bench/rebuild_h200.sh test [PYTEST ARGS ...]   the GPU tests (pytest -m gpu) with the installed bundles on the path
#                                                       (ncu_report comes with bundle 1: without it the ncu tests fail)
#
# Carry .tools and data/slices (this machine's `vxsynth slice`) in every call: a carried path left out of a later
# call is removed there (seen: the jail's bwrap vanished under a running rebuild). On a fresh machine a rebuild
# resumes from an earlier call's output: RESUME names its rebuild.tgz
# (default scratch/rebuild-in/rebuild.tgz, carried in; or a committed one, e.g. bench/results/rebuild_h200_h/rebuild.tgz,
# which travels with the tracked files); finished slices keep their stamps, a slice is redone when it has none.
# REDO (slice-folder globs, e.g. REDO='conv1d-* conv2d-*') drops those slices from the resumed outputs, so they start
# afresh rather than resuming their spent trail (after a generator change); it applies only when the outputs are unpacked.
#
# .tools (the jail's bubblewrap, Debian's, with its libraries): mkdir -p .tools/bin .tools/lib && cp /usr/bin/bwrap
#   .tools/bin && ldd /usr/bin/bwrap | awk '/=> \//{print $3}' | grep -v -E 'libc\.so' | xargs -I{} cp {} .tools/lib
# `run` leaves in $OUT: rebuild.log (the worker's and flow run's log), status.txt (bench/rebuild_summary.py: per slice
# status, GPU, D, checks; totals), dvc.lock and rebuild.tgz (data/suite, data/report, dvc.lock). Rehearsed on CPU
# with platform=h200 (GPU steps skipped): bench/results/rebuild_rehearsal_cpu.txt; run on an H200 (11 of 26 slices):
# bench/results/rebuild_h200/summary.txt; 2026-12-02 (7 of 26, loop.wall_s=45): bench/results/rebuild_h200_b/summary.txt;
# 2026-12-02 again, after the host executor change (15 of 26): bench/results/rebuild_h200_c/summary.txt; the ten convolutions
# redone after the emitter and NHWC changes (REDO, 15 of 26): bench/results/rebuild_h200_d/summary.txt; resumed from that
# (16 of 26): bench/results/rebuild_h200_e/summary.txt; 2026-12-03, every trail restarted (15 of 17): rebuild_h200_f/summary.txt;
# the tree of 1143d26, loop.wall_s=30 (16 of 26): rebuild_h200_g/summary.txt; resumed at b614e14, the whole suite
# (26 of 26, report, dvc commit): rebuild_h200_h/summary.txt.
set -u
site=$(ls -d "$PWD"/.gpu-site/b* 2>/dev/null | tr '\n' ':')       # one target per bundle: pip --target merges no bin/
export PYTHONPATH=$site$PWD PATH=$(echo "$site" | sed 's#:#/bin:#g')$PWD/.tools/bin:$PATH LD_LIBRARY_PATH=$PWD/.tools/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export HF_HUB_OFFLINE=1 PREFECT_HOME=$PWD/.prefect PYTHONUNBUFFERED=1
OUT=${OUT:-scratch/rebuild-out}; mkdir -p "$OUT"
PY=${PY:-python3}
cli() { "$PY" -m flows.cli "$@"; }

case "${1:?usage: rebuild_h200.sh install N | run [SECONDS] [OVERRIDE ...] | test [PYTEST ARGS ...]}" in
install)
  "$PY" -m pip install -q --no-index --no-deps --target ".gpu-site/b${2:?bundle number}" ".whl/$2"/*.whl && ls -d .gpu-site/b* ;;
run)
  [ -z "${RESUME:-}" ] || [ -f "$RESUME" ] || { echo "rebuild_h200.sh: RESUME=$RESUME does not exist; name an earlier call's rebuild.tgz" >&2; exit 2; }
  limit=${2:-540}; shift; shift || true
  t0=$(date +%s)
  export VXSYNTH_RUN=$$-$t0                 # every process this run starts inherits it (the clean-up below finds them)
  # the default suite from the committed profiles: the slice stage's dep holds them (dvc.lock records their md5)
  [ -d data/profiles/h200 ] || { mkdir -p data/profiles && cp -r data/recorded/h200 data/profiles/h200 && rm -rf data/profiles/h200/reconstruct data/profiles/h200/logs; }
  # the slices come from here, not from the device: sliced there, their tables carry the host's pandas/pyarrow bytes,
  # dvc.lock records those, and a fresh clone's `vxsynth reproduce` can no longer regenerate and verify them
  [ -f data/slices/suite.parquet ] || { echo "rebuild_h200.sh: carry data/slices (made by \`vxsynth slice\` where dvc.lock was committed); sliced on the device, dvc.lock would record bytes a fresh clone cannot regenerate" >&2; exit 2; }
  resume=${RESUME:-scratch/rebuild-in/rebuild.tgz}
  if [ ! -d data/suite ] && [ -f "$resume" ]; then
    tar -xzf "$resume" data/suite
    (cd data/suite && for s in ${REDO:-}; do rm -rf -- "$s" ".$s.lock"; done)    # these slices start afresh
  fi
  [ -d .git ] || { git init -q && git add -A >/dev/null 2>&1 && git -c user.email=h200@vxsynth -c user.name=h200 commit -qm "device copy"; }
  args=(platform=h200 rebuild.platforms=[] "$@")
  echo "rebuild_h200.sh run $limit: overrides ${args[*]} (a stamped slice is skipped only under the same settings)" >> "$OUT/rebuild.log"
  cli schedule --name h200 --pool h200 "${args[@]}" || exit 1      # registers (or updates) deployment rebuild/h200
  url=$("$PY" -c "from flows import server; print(server.ensure(say=lambda s: None))")
  export PREFECT_API_URL=$url
  "$PY" -m prefect worker start --pool h200 --type process >> "$OUT/rebuild.log" 2>&1 &
  worker=$!
  left=$(( limit - ($(date +%s) - t0) - 30 ))
  timeout "$left" "$PY" -m prefect deployment run rebuild/h200 --watch >> "$OUT/rebuild.log" 2>&1
  echo "deployment run rc $? after $(( $(date +%s) - t0 )) s" >> "$OUT/rebuild.log"
  run_id=$(grep -o 'UUID: [0-9a-f-]*' "$OUT/rebuild.log" | tail -1 | cut -d' ' -f2)
  [ -z "$run_id" ] || timeout 15 "$PY" -m prefect flow-run cancel "$run_id" >> "$OUT/rebuild.log" 2>&1
  sleep 5; kill "$worker" 2>/dev/null; sleep 2; kill -9 "$worker" 2>/dev/null
  cp dvc.lock "$OUT/dvc.lock"               # this machine's copy is reset to the sender's tree by the next call
  # nothing of this run outlives the call (a flow run's loops run in their own sessions): every process carrying this
  # run's tag in its environment, but the Prefect server (kept for the next call) and this script
  "$PY" - <<'PY' >> "$OUT/rebuild.log" 2>&1
import json, os, pathlib, signal, time
tag, me = f"VXSYNTH_RUN={os.environ['VXSYNTH_RUN']}".encode(), {os.getpid(), os.getppid()}
state = pathlib.Path(os.environ["PREFECT_HOME"]) / "vxsynth-server.json"      # written by flows/server.py
keep = os.getsid(json.loads(state.read_text())["pid"]) if state.exists() else -1
def ours():
    for p in pathlib.Path("/proc").glob("[0-9]*"):
        try:
            pid = int(p.name)
            if pid not in me and os.getsid(pid) != keep and tag in (p / "environ").read_bytes().split(b"\0"):
                yield pid
        except (OSError, ProcessLookupError):
            pass
for sig in (signal.SIGTERM, signal.SIGKILL):
    for pid in ours():
        try: os.kill(pid, sig)
        except ProcessLookupError: pass
    time.sleep(3)
print("left running:", list(ours()) or "none")
PY
  "$PY" bench/rebuild_summary.py data > "$OUT/status.txt" 2>&1
  tar -czf "$OUT/rebuild.tgz" data/suite data/report dvc.lock 2>/dev/null   # whole: a resumed loop reads its candidates
  tail -5 "$OUT/status.txt" ;;
test)
  shift; "$PY" -m pytest -m gpu -q -p no:cacheprovider "$@" ;;
*) echo "rebuild_h200.sh: unknown step $1 (install N | run [SECONDS] [OVERRIDE ...] | test [PYTEST ARGS ...])" >&2; exit 2 ;;
esac
