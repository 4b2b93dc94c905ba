"""Prefect task: reconstruct one slice (the core loop); a failure is recorded for that slice only.

With GPU slots (those of the host the task runs on) the loop runs in a child process pinned to one leased GPU
(`vxsynth.reconstruct.gpus`), its log lines forwarded here; without, it runs in this process (CPU-side fan-out)."""

from __future__ import annotations

import dataclasses
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

from prefect import get_run_logger, task

from tasks.caching import Key, fresh, key, stale, stamp
from vxsynth.errors import VxError
from vxsynth.reconstruct import gpus as G
from vxsynth.reconstruct.loop import no_pair
from vxsynth.reconstruct.setup import gpu_skipped, run_slice
from vxsynth.records import LoopResult, SliceRecord, SliceStatus
from vxsynth.store.io import write_json
from vxsynth.store.lock import exclusive
from vxsynth.targets import proc

CFG_KEYS = ("loop", "agent", "target", "precision", "sandbox", "platform", "cuda_arch", "start")
START_CHECKED = "start checked on CPU"      # no GPU: round 0 only, its Vortex half against the reference op; no D


def slice_key(slice_json: Path, cfg: dict, gpu: bool) -> Key:
    return key("reconstruct", [slice_json], {**{k: cfg.get(k) for k in CFG_KEYS}, "gpu": gpu})


def gpu_slots(cfg: dict) -> list[str]:
    """This host's GPUs that slices are dealt to: `rebuild.gpus` (auto: every visible GPU when GPU steps run, none
    otherwise)."""
    setting = (cfg.get("rebuild") or {}).get("gpus", "auto")
    if setting in (None, "auto") and gpu_skipped(cfg):
        return []
    import torch
    return G.slots(setting, torch.cuda.device_count())


@task(name="reconstruct-slice", task_run_name="reconstruct {sid}")
def reconstruct_task(sid: str, slice_json: str, cfg: dict, out_dir: str, work_dir: str, lock_dir: str) -> dict:
    """One slice on the GPU slots of the host this runs on (a Dask worker's host), locked under `lock_dir/<host>`:
    hosts sharing one checkout never wait for each other's GPU of the same index."""
    log = get_run_logger()
    out = Path(out_dir)
    try:
        gpus = gpu_slots(cfg)
        with exclusive(out, f"slice {sid}"):
            return _run(sid, Path(slice_json), cfg, out, Path(work_dir), log, gpus, Path(lock_dir) / socket.gethostname())
    except VxError as e:                      # GPUs this host lacks, or another run holds this slice: nothing touched
        log.error(f"[{sid}] {e}")
        return {"slice_id": sid, "status": "failed", "error": str(e)}


def _earlier_s(out: Path) -> float:
    """Seconds the slice's earlier attempts spent (status.json), counted when this attempt resumes their trail."""
    try:
        prev = SliceStatus.load(out / "status.json")
    except (VxError, OSError):                  # no earlier attempt, or its status unreadable
        return 0.0
    return float(prev.wall_s_total if prev.wall_s_total is not None else prev.wall_s or 0.0)


def _run(sid: str, slice_json: Path, cfg: dict, out: Path, work: Path, log, gpus, lock_dir) -> dict:
    why = gpu_skipped(cfg)
    k = slice_key(slice_json, cfg, why is None)
    done = fresh(out, k)
    if done is not None:
        log.info(f"[{sid}] up to date (cache key {k[:12]}), nothing to do")
        return done
    log.info(f"[{sid}] {stale(out, k)}")
    if why:
        log.info(f"[{sid}] GPU steps skipped: {why}")
    t0 = time.time()
    where = {}
    earlier = _earlier_s(out)
    try:
        if gpus:
            with G.lease(Path(lock_dir), gpus, sid) as gpu:
                where = {"host": socket.gethostname(), "gpu": gpu, "started": time.time()}
                log.info(f"[{sid}] on GPU {gpu}")
                _in_child(cfg, slice_json, out, work, gpu, log)
                where["ended"] = time.time()
                res = LoopResult.load(out / "result.json")
        else:
            res = run_slice(cfg, SliceRecord.load(slice_json), out, work, log=log.info)
        wall = time.time() - t0
        resumed = res.summary["wall_s_total"] > res.summary["wall_s_this_run"]      # the trail went on
        status = SliceStatus(sid, "reconstructed" if res.gpu else START_CHECKED, D_initial=res.initial.D,
                             D_final=res.final.D, check2=res.final.check2, rounds=res.rounds,
                             gpu_skipped=why or "", **where, wall_s=wall, wall_s_total=wall + (earlier if resumed else 0.0))
        unfinished = no_pair(res, out)
        if unfinished:                             # nothing was rebuilt: recorded as failed and run again next time
            status = dataclasses.replace(status, status="failed", error=unfinished)
            log.error(f"[{sid}] failed: {status.error}")
        summary = status.to_dict()
        write_json(out / "status.json", summary)
        if not unfinished:                         # the stamp last: a run cut before it leaves the slice stale
            stamp(out, k, summary)
        return summary
    except Exception as e:  # noqa: BLE001 - one failing slice is recorded and does not stop the suite
        spent = time.time() - t0
        status = SliceStatus(sid, "failed", error=f"{type(e).__name__}: {e}", **where, wall_s=spent,
                             wall_s_total=earlier + spent, traceback=traceback.format_exc(limit=5))
        try:
            write_json(out / "status.json", status.to_dict())
        except OSError as w:
            status = dataclasses.replace(status, error=f"{status.error} (and its status could not be written: {w})")
        log.error(f"[{sid}] failed: {status.error}")
        return status.to_dict()


def _in_child(cfg: dict, slice_json: Path, out: Path, work: Path, gpu: str, log) -> None:
    """The slice's loop in a child process that sees GPU `gpu` alone; its lines logged as they come. The child's
    whole process group is killed when this ends early (a cancelled flow run)."""
    work.mkdir(parents=True, exist_ok=True)
    cfg_path = work / "config.json"
    write_json(cfg_path, cfg)
    cmd = [sys.executable, "-m", "vxsynth.reconstruct", str(cfg_path), str(slice_json), str(out), str(work)]
    with tempfile.TemporaryFile(mode="w+") as err:
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True, start_new_session=True,
                             env=G.child_env(gpu))
        try:
            for line in p.stdout:
                log.info(line.rstrip())
            rc = p.wait()
        finally:
            proc.kill_group(p.pid)
        if rc:
            err.seek(0)
            how = f"exit status {rc}" if rc > 0 else f"signal {-rc}"
            if rc == -signal.SIGTERM:
                how += " (stopped from outside: a cancelled or cut run; a rerun resumes from its trail)"
            raise VxError(f"loop on GPU {gpu} ended with {how}: {proc.tail(err.read(), 1500)}")
