"""`vxsynth reproduce <hash>`: locate a slice by its DVC hash (any commit), restore it, rerun its downstream stage
(reconstruction) alone in a scratch directory, and compare with what that revision recorded."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
from prefect import flow, get_run_logger

from flows import dvc
from flows.config import ROOT, load
from vxsynth.errors import VxError
from vxsynth.reconstruct.loop import reconstruct
from vxsynth.reconstruct.setup import loop_config, loop_env, make_agent
from vxsynth.store import dvc_lookup as L
from vxsynth.store.io import read_json, write_json


def compare(recorded: dict[str, Path], rerun_dir: Path, gpu: bool) -> dict:
    """What reproduced: the first round's strategy, sources and check verdicts; D when a GPU measured both."""
    if "trail.parquet" not in recorded:
        return {"match": None, "note": "that revision recorded no reconstruction of this slice; nothing to compare"}
    old = pd.read_parquet(recorded["trail.parquet"]).iloc[0]
    new = pd.read_parquet(rerun_dir / "trail.parquet").iloc[0]
    checks = {"strategy": old["strategy_hash"] == new["strategy_hash"],
              "cuda source": old["cuda_sha256"] == new["cuda_sha256"],
              "vortex source": old["vortex_sha256"] == new["vortex_sha256"]}
    if gpu and old["check1"] not in ("", "not run (no GPU)"):
        checks["check 1 verdict"] = old["check1"] == new["check1"]
        checks["check 2 verdict"] = old["check2"] == new["check2"]
        if pd.notna(old["D"]) and pd.notna(new["D"]):
            checks["D within 0.02"] = abs(old["D"] - new["D"]) <= 0.02
    elif not new["check2"].endswith("pass"):
        checks["vortex vs reference"] = False
    return {"match": all(checks.values()), "checks": checks,
            "recorded": {"check1": old["check1"], "check2": old["check2"], "D": None if pd.isna(old["D"]) else float(old["D"])},
            "rerun": {"check1": new["check1"], "check2": new["check2"], "D": None if pd.isna(new["D"]) else float(new["D"])}}


@flow(name="reproduce", log_prints=True)
def reproduce_flow(prefix: str, overrides: list[str], root: str = str(ROOT)) -> dict:
    log = get_run_logger()
    r = Path(root)
    try:
        found, missing = L.find_slice(r, prefix)
    except VxError:
        if dvc.is_workspace(r):
            log.info("hash not found locally; fetching every revision's data from the DVC remote")
            dvc.dvc("fetch", "--all-commits", root=r, check=False)
        found, missing = L.find_slice(r, prefix)
    src = L.object_path(r, found.md5)
    if src is None:
        raise VxError(f"slice {found.slice_id} ({found.md5[:10]}) is known but its data is in neither cache nor remote")
    cfg = load(overrides)
    scratch = r / "scratch" / "reproduce" / found.md5[:12]
    shutil.rmtree(scratch, ignore_errors=True)
    (scratch / "slices" / found.slice_id).mkdir(parents=True)
    shutil.copyfile(src, scratch / "slices" / found.slice_id / "slice.json")
    record = read_json(scratch / "slices" / found.slice_id / "slice.json")
    log.info(f"{found.slice_id}: DVC md5 {found.md5} from {found.revision[:12]}; rerunning reconstruction in {scratch}")
    env, why = loop_env(cfg, cfg["platform"], scratch / "work")
    reconstruct(record, loop_config(cfg), env, make_agent(cfg), scratch / "suite" / found.slice_id,
                log=log.info, work_dir=scratch / "work")
    recorded = L.recorded_files(r, found.lock, "reconstruct", "data/suite", found.slice_id)
    verdict = {"slice_id": found.slice_id, "md5": found.md5, "revision": found.revision, "scratch": str(scratch),
               "gpu_steps": "run" if why is None else f"skipped: {why}",
               **compare(recorded, scratch / "suite" / found.slice_id, why is None)}
    write_json(scratch / "reproduce.json", verdict)
    log.info(json.dumps(verdict, indent=1, default=str))
    return verdict
