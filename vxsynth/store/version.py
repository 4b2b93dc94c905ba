"""Content hashes: the code version that cache keys include (a hash of the package's sources, Python and the C
runtime), and the md5 DVC 3 records for a file or directory (computed here, without DVC: stage cache keys and stamps
hash outputs anywhere, also outside a DVC workspace; tests/test_dvc_stages.py checks it against DVC's own)."""

from __future__ import annotations

import hashlib
import json
from functools import lru_cache
from pathlib import Path

PKG = Path(__file__).resolve().parent.parent


@lru_cache(maxsize=1)
def code_version() -> str:
    h = hashlib.sha256()
    for p in sorted(PKG.rglob("*")):
        if p.suffix in (".py", ".c", ".h") and "__pycache__" not in p.parts:
            h.update(str(p.relative_to(PKG)).encode())
            h.update(p.read_bytes())
    return h.hexdigest()[:16]


def md5_file(path: Path) -> str:
    """The md5 DVC 3 records for a file (of its bytes)."""
    return hashlib.md5(Path(path).read_bytes()).hexdigest()


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
