"""The code version that cache keys include: a hash of the package's sources (Python and the C runtime)."""

from __future__ import annotations

import hashlib
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
