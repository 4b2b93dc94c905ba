"""Slice records for a fresh clone: the DVC cache and the local remote are not in git, so the per-record md5s of
`data/slices` are known nowhere but in the outputs themselves. They are rebuilt here from what git does hold: the
recorded profiles (`data/recorded/<platform>`) are checked against the md5 dvc.lock gives the slice stage's profile
input, the slicing stage reruns (it is deterministic), and the result must have the md5 dvc.lock records for
`data/slices`. Verified objects are kept in DVC's cache layout under scratch/regenerated
(`dvc_lookup.regenerated_odb`), where `dvc_lookup` finds them.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Callable

from flows.dvc_lookup import changed_deps, fetchable, path_md5, regenerated_odb, regenerated_store, stage_deps, stage_out
from vxsynth.errors import VxError


def _store(root: Path, src: Path, dir_md5: str, entries: list[dict]) -> None:
    """Put a verified directory's files and its `.dir` manifest into the regenerated object store."""
    odb = regenerated_odb(root)
    for e in entries:
        dst = Path(odb.oid_to_path(e["md5"]))
        if not dst.exists():
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src / e["relpath"], dst)
    man = Path(odb.oid_to_path(dir_md5))
    man.parent.mkdir(parents=True, exist_ok=True)
    tmp = man.with_suffix(".tmp")
    tmp.write_text(json.dumps(entries, sort_keys=True))
    tmp.replace(man)


def _profiles(root: Path, dep: dict, into: Path) -> Path:
    """The committed recorded profiles that are dvc.lock's profile input `dep` (data/profiles/<platform>), verified."""
    platform = Path(dep["path"]).name
    src = root / "data" / "recorded" / platform
    dst = into / platform
    for w in sorted(p for p in src.glob("*/") if (p / "op_calls.parquet").exists()):
        shutil.copytree(w, dst / w.name, ignore=shutil.ignore_patterns("__pycache__"))
    got = path_md5(dst)[0] if dst.exists() else "none"
    if got != dep["md5"]:
        rel = src.relative_to(root)
        edited = subprocess.run(["git", "status", "--porcelain", "--", str(rel)], cwd=root, capture_output=True,
                                text=True).stdout.strip()
        raise VxError(f"the committed profiles in {rel} (md5 {got[:10]}) are not the {dep['path']} dvc.lock was built "
                      f"from ({dep['md5'][:10]}): " + (f"they differ from the commit (`git status {rel}` lists the edits)"
                                                       if edited else "that dvc.lock was recorded from other profiles")
                      + ("; that revision's data may be in the DVC remote: `dvc fetch --all-commits`" if fetchable(root) else ""))
    return dst


def slices(root: Path, rev: str, lock: dict, slicing_cfg: dict, precision: dict,
           run: Callable, log: Callable[[str], None] = print) -> str:
    """Regenerate revision `rev`'s data/slices (dvc.lock `lock`) with `run` (the slicing stage's core); return its
    verified `.dir` md5. VxError when this checkout cannot rebuild it byte for byte."""
    want = stage_out(lock, "slice", "data/slices")
    if not want:
        raise VxError(f"dvc.lock of {rev[:10]} records no data/slices")
    deps = stage_deps(lock, "slice")
    stale = changed_deps(root, lock, "slice")
    if stale and rev == "workspace":
        raise VxError(f"{', '.join(stale)} changed since dvc.lock's slice stage was recorded; run `vxsynth slice` and "
                      "`dvc commit slice`, then commit dvc.lock")
    if stale:
        raise VxError(f"this checkout's {', '.join(stale)} differ from what revision {rev[:10]} sliced with, so its slice "
                      f"records cannot be regenerated here; `git checkout {rev[:10]}` and retry")
    log(f"regenerating data/slices of {rev[:10]} from the committed recorded profiles (no DVC cache or remote here) ...")
    regenerated_store(root).mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".work-", dir=regenerated_store(root)))
    try:
        dirs = []
        for d in deps:
            if d["path"].startswith("data/profiles/"):
                dirs += sorted(p for p in _profiles(root, d, work / "profiles").glob("*/"))
        run(dirs, work / "slices", slicing_cfg, precision)
        got, entries = path_md5(work / "slices")
        if got != want:
            raise VxError(f"regenerated data/slices has md5 {got[:10]}, dvc.lock of {rev[:10]} records {want[:10]}: "
                          "slicing is not reproducing that revision's records")
        _store(root, work / "slices", got, entries)
        log(f"data/slices {got[:10]} regenerated and verified against dvc.lock ({len(entries)} files)")
        return got
    finally:
        shutil.rmtree(work, ignore_errors=True)
