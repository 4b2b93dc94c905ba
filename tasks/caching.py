"""Stage cache keys from content hashes (the md5s DVC records) plus the code version, never from paths.

A finished stage output carries `.stamp.json` with its key; a rerun skips it when the key matches and the output is
still there, so an interrupted rebuild redoes only what is missing or stale.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from vxsynth.store.io import sha256_obj, write_json
from vxsynth.store.version import code_version, md5_file

STAMP = ".stamp.json"


def content_md5(path: Path) -> str:
    """md5 of a file, or of the sorted (relative path, md5) list of a directory's files."""
    path = Path(path)
    if path.is_file():
        return md5_file(path)
    h = hashlib.md5()
    for f in sorted(p for p in path.rglob("*") if p.is_file() and p.name != STAMP and "/." not in str(p.relative_to(path))):
        h.update(f"{f.relative_to(path)}:{md5_file(f)}\n".encode())
    return h.hexdigest()


def key(inputs: list[Path], cfg: dict) -> str:
    return sha256_obj({"inputs": [content_md5(p) for p in inputs], "code": code_version(), "cfg": cfg})


def fresh(out: Path, k: str) -> dict | None:
    """The stamped summary when `out` was produced under key `k`, else None."""
    s = Path(out) / STAMP
    if not s.exists():
        return None
    d = json.loads(s.read_text())
    return d.get("summary") if d.get("key") == k else None


def stamp(out: Path, k: str, summary) -> None:
    write_json(Path(out) / STAMP, {"key": k, "summary": summary})

