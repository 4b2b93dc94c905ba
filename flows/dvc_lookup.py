"""Find a slice by its DVC hash, in the workspace's dvc.lock or in any earlier commit's, and locate its objects.

DVC answers where objects lie (`dvc.repo.Repo`: its cache, its configured remotes with their URLs resolved, DVC's
object layout); the revisions come from git (`git log -- dvc.lock`: the commits that changed it) and each revision's
dvc.lock is read as the YAML it is. Objects regenerated from committed inputs (`flows.regenerate`) are kept in DVC's
layout under scratch/regenerated. Outside the core package: DVC is imported here, on first use.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import yaml

from vxsynth.errors import VxError
from vxsynth.store.version import path_md5

__all__ = ["Found", "all_slices", "changed_deps", "check_prefix", "fetchable", "find_slice", "lock_versions", "manifest",
           "missing_manifests", "object_path", "path_md5", "recorded_files", "regenerated_odb", "regenerated_store",
           "remotes", "stage_deps", "stage_out"]

_HEX = re.compile(r"^[0-9a-f]+$")


@dataclass(frozen=True)
class Found:
    md5: str
    slice_id: str
    revision: str              # "workspace" or a git commit
    lock: dict                 # that revision's dvc.lock


def lock_versions(root: Path) -> list[tuple[str, dict]]:
    """(revision, dvc.lock) for the workspace and every commit that changed dvc.lock, newest first."""
    out = []
    lock = root / "dvc.lock"
    if lock.exists():
        out.append(("workspace", yaml.safe_load(lock.read_text()) or {}))
    try:
        revs = subprocess.run(["git", "log", "--format=%H", "--", "dvc.lock"], cwd=root, capture_output=True,
                              text=True, check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        revs = []
    for rev in revs:
        text = subprocess.run(["git", "show", f"{rev}:dvc.lock"], cwd=root, capture_output=True, text=True).stdout
        if text.strip():
            out.append((rev, yaml.safe_load(text) or {}))
    return out


def stage_out(lock: dict, stage: str, path: str) -> str | None:
    for o in (lock.get("stages", {}).get(stage, {}) or {}).get("outs", []) or []:
        if o.get("path") == path:
            return o.get("md5")
    return None


def stage_deps(lock: dict, stage: str) -> list[dict]:
    return (lock.get("stages", {}).get(stage, {}) or {}).get("deps", []) or []


def changed_deps(root: Path, lock: dict, stage: str) -> list[str]:
    """The code and config deps (not data/) of `stage` in `lock` that differ in this checkout."""
    return [d["path"] for d in stage_deps(lock, stage) if not d["path"].startswith("data/")
            and (not (root / d["path"]).exists() or path_md5(root / d["path"])[0] != d["md5"])]


def regenerated_store(root: Path) -> Path:
    """Where objects regenerated from committed inputs are kept, in DVC's cache layout (scratch/, not versioned)."""
    return root / "scratch" / "regenerated"


@dataclass(frozen=True)
class _Stores:
    cache: object | None            # the workspace's DVC cache (an object database), None outside a DVC workspace
    remotes: tuple                  # (url, object database or None when it is not a local directory) per remote


def _config_stamp(root: Path) -> tuple:
    return tuple(f.stat().st_mtime_ns if f.exists() else None for f in (root / ".dvc" / "config", root / ".dvc" / "config.local"))


@lru_cache(maxsize=16)
def _stores_at(root: Path, stamp: tuple) -> _Stores:
    if not (root / ".dvc").is_dir():
        return _Stores(None, ())
    from dvc.exceptions import DvcException
    from dvc.repo import Repo

    with Repo(str(root)) as repo:
        found = []
        for name, settings in repo.config["remote"].items():
            try:
                odb = repo.cloud.get_remote_odb(name)
            except DvcException:                  # a remote whose filesystem this installation cannot open (no plugin)
                odb = None
            found.append((settings["url"], odb if odb is not None and odb.fs.protocol == "local" else None))
        return _Stores(repo.cache.local, tuple(found))


def _stores(root: Path) -> _Stores:
    """The DVC cache and remotes of the workspace at `root`, as DVC configures them (.dvc/config and config.local)."""
    root = Path(root).resolve()
    return _stores_at(root, _config_stamp(root))


def remotes(root: Path) -> list[str]:
    """The URL of every DVC remote configured (a local directory's resolved by DVC from the config file's folder)."""
    return [url for url, _ in _stores(root).remotes]


def fetchable(root: Path) -> bool:
    """Whether a configured DVC remote can hold data for this checkout: a directory remote that exists, or any other
    URL (a fresh clone's `local` remote, outside git, does not exist)."""
    return any(Path(url).exists() if odb is not None else True for url, odb in _stores(root).remotes)


def regenerated_odb(root: Path):
    """The object database of objects regenerated from committed inputs, laid out as DVC lays out its cache."""
    from dvc.cachemgr import CacheManager
    from dvc_data.hashfile.db import get_odb
    from dvc_data.hashfile.hash import DEFAULT_ALGORITHM
    from dvc_objects.fs.local import LocalFileSystem

    return get_odb(LocalFileSystem(), os.path.join(regenerated_store(root), CacheManager.FILES_DIR, DEFAULT_ALGORITHM))


def object_path(root: Path, md5: str) -> Path | None:
    """Where object `md5` lies: the DVC cache, else a local directory remote, else the regenerated store."""
    s = _stores(root)
    for odb in [s.cache, *(o for _, o in s.remotes), regenerated_odb(root)]:
        if odb is not None and (p := Path(odb.oid_to_path(md5))).exists():
            return p
    return None


def manifest(root: Path, dir_md5: str) -> list[dict] | None:
    p = object_path(root, dir_md5)
    return json.loads(p.read_text()) if p else None


def check_prefix(prefix: str) -> str:
    prefix = prefix.strip().lower()
    if not _HEX.match(prefix) or not 1 <= len(prefix) <= 32:
        raise VxError(f"{prefix!r} is not a DVC md5 hash or prefix (1 to 32 hex digits); see `vxsynth reproduce --list`")
    return prefix


def missing_manifests(root: Path, slices_path: str = "data/slices") -> list[tuple[str, dict]]:
    """(revision, dvc.lock) of the revisions whose slice manifest is in no cache, remote or regenerated store."""
    return [(rev, lock) for rev, lock in lock_versions(root)
            if (d := stage_out(lock, "slice", slices_path)) and manifest(root, d) is None]


def find_slice(root: Path, prefix: str, slices_path: str = "data/slices") -> tuple[Found, list[str]]:
    """The slice whose slice.json has DVC md5 starting with `prefix` (unique across all revisions)."""
    prefix = check_prefix(prefix)
    hits: dict[str, Found] = {}
    missing: list[str] = []
    for rev, lock in lock_versions(root):
        d = stage_out(lock, "slice", slices_path)
        if not d:
            continue
        entries = manifest(root, d)
        if entries is None:
            missing.append(f"{rev[:10]}:{d}")
            continue
        for e in entries:
            if e["relpath"].endswith("/slice.json") and e["md5"].startswith(prefix) and e["md5"] not in hits:
                hits[e["md5"]] = Found(e["md5"], e["relpath"].split("/")[0], rev, lock)
    if not hits:
        more = f"; the slice records of {len(missing)} revisions are in no DVC cache or remote here" if missing else ""
        raise VxError(f"no slice has DVC hash {prefix!r} in the workspace or any commit{more}")
    if len(hits) > 1:
        raise VxError(f"hash prefix {prefix!r} is ambiguous: " + ", ".join(f"{h.md5[:10]} ({h.slice_id})" for h in hits.values())
                      + "; give more digits")
    return next(iter(hits.values())), missing


def all_slices(root: Path, slices_path: str = "data/slices") -> list[dict]:
    """Every slice record hash known to any revision (for listing)."""
    seen = {}
    for rev, lock in lock_versions(root):
        d = stage_out(lock, "slice", slices_path)
        for e in (manifest(root, d) or []) if d else []:
            if e["relpath"].endswith("/slice.json"):
                seen.setdefault(e["md5"], {"md5": e["md5"], "slice_id": e["relpath"].split("/")[0], "revision": rev})
    return list(seen.values())


def recorded_files(root: Path, lock: dict, stage: str, path: str, sid: str) -> dict[str, Path]:
    """{relpath: object path} of the files under `sid/` in a stage output directory at that revision."""
    d = stage_out(lock, stage, path)
    out = {}
    for e in (manifest(root, d) or []) if d else []:
        if e["relpath"].startswith(sid + "/"):
            p = object_path(root, e["md5"])
            if p:
                out[e["relpath"][len(sid) + 1:]] = p
    return out
