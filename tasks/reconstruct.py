"""Prefect task: reconstruct one slice (the core loop); a failure is recorded for that slice only."""

from __future__ import annotations

import traceback
from pathlib import Path

from prefect import get_run_logger, task

from tasks.caching import fresh, key, stamp
from vxsynth.errors import VxError
from vxsynth.reconstruct.loop import reconstruct
from vxsynth.reconstruct.setup import loop_config, loop_env, make_agent
from vxsynth.store.io import read_json, write_json
from vxsynth.store.lock import exclusive

CFG_KEYS = ("loop", "agent", "target", "precision", "sandbox", "platform", "cuda_arch", "start")


def slice_key(slice_json: Path, cfg: dict, gpu: bool) -> str:
    return key("reconstruct", [slice_json], {**{k: cfg.get(k) for k in CFG_KEYS}, "gpu": gpu})


@task(name="reconstruct-slice", task_run_name="reconstruct {sid}")
def reconstruct_task(sid: str, slice_json: str, cfg: dict, out_dir: str, work_dir: str) -> dict:
    log = get_run_logger()
    out = Path(out_dir)
    try:
        with exclusive(out, f"slice {sid}"):
            return _run(sid, Path(slice_json), cfg, out, Path(work_dir), log)
    except VxError as e:                      # another run holds this slice: nothing of it is touched
        log.error(f"[{sid}] {e}")
        return {"slice_id": sid, "status": "failed", "error": str(e)}


def _run(sid: str, slice_json: Path, cfg: dict, out: Path, work: Path, log) -> dict:
    env, why = loop_env(cfg, cfg["platform"], work)
    k = slice_key(slice_json, cfg, why is None)
    done = fresh(out, k)
    if done is not None:
        log.info(f"[{sid}] up to date (cache key {k[:12]}), nothing to do")
        return done
    if why:
        log.info(f"[{sid}] GPU steps skipped: {why}")
    try:
        res = reconstruct(read_json(slice_json), loop_config(cfg), env, make_agent(cfg), out, log=log.info, work_dir=work)
        summary = {"slice_id": sid, "status": "reconstructed", "D_initial": res["initial"]["D"], "D_final": res["final"]["D"],
                   "rounds": res["rounds"], "gpu_skipped": why or ""}
        write_json(out / "status.json", summary)
        stamp(out, k, summary)
        return summary
    except Exception as e:  # noqa: BLE001 - one failing slice is recorded and does not stop the suite
        summary = {"slice_id": sid, "status": "failed", "error": f"{type(e).__name__}: {e}",
                   "traceback": traceback.format_exc(limit=5)}
        try:
            write_json(out / "status.json", summary)
        except OSError as w:
            summary["error"] += f" (and its status could not be written: {w})"
        log.error(f"[{sid}] failed: {summary['error']}")
        return summary
