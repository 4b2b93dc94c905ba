"""Find a slice by its DVC hash, in the workspace's dvc.lock or in any earlier commit's, and locate its objects.

Reads DVC's own files (dvc.lock, `.dir` manifests in the cache, a local directory remote, or the objects regenerated
from committed inputs by `vxsynth.store.regenerate`); imports no DVC.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import yaml

from vxsynth.errors import VxError
from vxsynth.store.version import md5_file

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


def ignored(rel: Path) -> bool:
    """What this project's .dvcignore leaves out of an output or dep: __pycache__, locks, stage stamps."""
    return "__pycache__" in rel.parts or rel.name == ".stamp.json" or (rel.name.startswith(".") and rel.name.endswith(".lock"))


def path_md5(path: Path) -> tuple[str, list[dict]]:
    """The md5 DVC 3 records for a file, or for a directory (`<md5>.dir`) with its manifest ([{md5, relpath}])."""
    path = Path(path)
    if path.is_file():
        return md5_file(path), []
    entries = sorted(({"md5": md5_file(f), "relpath": f.relative_to(path).as_posix()} for f in path.rglob("*")
                      if f.is_file() and not ignored(f.relative_to(path))), key=lambda e: e["relpath"])
    return hashlib.md5(json.dumps(entries, sort_keys=True).encode()).hexdigest() + ".dir", entries


def stage_deps(lock: dict, stage: str) -> list[dict]:
    return (lock.get("stages", {}).get(stage, {}) or {}).get("deps", []) or []


def changed_deps(root: Path, lock: dict, stage: str) -> list[str]:
    """The code and config deps (not data/) of `stage` in `lock` that differ in this checkout."""
    return [d["path"] for d in stage_deps(lock, stage) if not d["path"].startswith("data/")
            and (not (root / d["path"]).exists() or path_md5(root / d["path"])[0] != d["md5"])]


def regenerated_store(root: Path) -> Path:
    """Where objects regenerated from committed inputs are kept, in DVC's cache layout (scratch/, not versioned)."""
    return root / "scratch" / "regenerated"


def remotes(root: Path) -> list[str]:
    """The URL of every DVC remote configured in .dvc/config and .dvc/config.local."""
    return [m.group(1) for f in ("config", "config.local") if (root / ".dvc" / f).exists()
            for m in re.finditer(r"^\s*url\s*=\s*(\S+)", (root / ".dvc" / f).read_text(), re.M)]


def remote_dirs(root: Path) -> list[Path]:
    """Local directory remotes configured (relative URLs resolve from .dvc/)."""
    return [p if p.is_absolute() else (root / ".dvc" / p).resolve() for p in (Path(u) for u in remotes(root) if "://" not in u)]


def fetchable(root: Path) -> bool:
    """Whether a configured DVC remote can hold data for this checkout: a directory remote that exists, or any other
    URL (a fresh clone's `local` remote, outside git, does not exist)."""
    return any(d.exists() for d in remote_dirs(root)) or any("://" in u for u in remotes(root))


def object_path(root: Path, md5: str) -> Path | None:
    """Where object `md5` lies: the cache, else a local directory remote."""
    rel = Path("files") / "md5" / md5[:2] / md5[2:]
    for base in [root / ".dvc" / "cache", *remote_dirs(root), regenerated_store(root)]:
        if (base / rel).exists():
            return base / rel
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
