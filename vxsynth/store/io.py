"""Atomic writes and schema-checked reads: nothing already written is lost to a crash mid-write."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vxsynth.errors import VxError

if TYPE_CHECKING:                 # pandas and pyarrow load with the first table read or written: commands that
    import pandas as pd           # answer bad input before any table is touched do not wait for them
    import pyarrow as pa

_UMASK = os.umask(0)      # read once, while imports run single-threaded; temporary files and directories are
os.umask(_UMASK)          # created private (0600, 0700) and get the usual modes before they are moved into place


def _atomic(path: Path, write) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        write(Path(tmp))
        os.chmod(tmp, 0o666 & ~_UMASK)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def replace_dir(tmp: Path, out_dir: Path) -> None:
    """Move a finished temporary directory into place; the old one is removed only after the swap."""
    import shutil

    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    os.chmod(tmp, 0o777 & ~_UMASK)
    if out_dir.exists():
        old = out_dir.with_name(f".{out_dir.name}.old")
        shutil.rmtree(old, ignore_errors=True)
        out_dir.rename(old)
        Path(tmp).rename(out_dir)
        shutil.rmtree(old, ignore_errors=True)
    else:
        Path(tmp).rename(out_dir)


def write_bytes(path: Path, data: bytes) -> Path:
    return _atomic(path, lambda p: p.write_bytes(data))


def write_text(path: Path, text: str) -> Path:
    return write_bytes(path, text.encode())


def canonical_json(obj: Any) -> str:
    """Deterministic JSON: sorted keys, no whitespace variation, NaN allowed."""
    return json.dumps(obj, sort_keys=True, indent=1, default=_json_default)


def _json_default(o: Any):
    if hasattr(o, "item"):
        return o.item()
    if isinstance(o, (set, frozenset, tuple)):
        return list(o)
    if isinstance(o, Path):
        return str(o)
    if hasattr(o, "value") and hasattr(o, "name"):  # enums
        return o.value
    raise TypeError(f"not JSON-serialisable: {type(o).__name__}")


def write_json(path: Path, obj: Any) -> Path:
    return write_text(path, canonical_json(obj) + "\n")


def read_json(path: Path) -> Any:
    path = Path(path)
    if not path.exists():
        raise VxError(f"{path}: file not found; run the stage that writes it first")
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise VxError(f"{path}: not valid JSON ({e.msg} at line {e.lineno}); rerun the stage that writes it") from e


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def sha256_obj(obj: Any) -> str:
    return sha256_text(canonical_json(obj))


def write_table(path: Path, df: pd.DataFrame, schema: pa.Schema) -> Path:
    """Write a DataFrame as parquet with an explicit schema (columns in schema order)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    missing = [f.name for f in schema if f.name not in df.columns]
    if missing:
        raise ValueError(f"table for {path.name} lacks columns {missing}")
    table = pa.Table.from_pandas(df[[f.name for f in schema]], schema=schema, preserve_index=False)
    return _atomic(path, lambda p: pq.write_table(table, p, compression="zstd"))


def default_of(f: pa.Field) -> tuple[bool, Any]:
    """(True, value) for a schema field added later with a default (`schemas._schema`), else (False, None)."""
    meta = f.metadata or {}
    return (True, json.loads(meta[b"default"])) if b"default" in meta else (False, None)


def read_table(path: Path, schema: pa.Schema | None = None) -> pd.DataFrame:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = Path(path)
    if not path.exists():
        raise VxError(f"{path}: table not found; run the stage that writes it first")
    try:
        table = pq.read_table(path)
    except (pa.ArrowInvalid, OSError) as e:
        raise VxError(f"{path}: not a readable parquet file ({e}); rerun the stage that writes it") from e
    if schema is None:
        return table.to_pandas()
    absent = [f for f in schema if f.name not in table.schema.names]
    missing = [f.name for f in absent if not default_of(f)[0]]
    if missing:
        raise VxError(f"{path}: columns {missing} missing; the file was written by another version, rerun its stage")
    df = table.to_pandas()
    for f in absent:   # columns added later: older tables read with the field's default
        df[f.name] = default_of(f)[1]
    return df
