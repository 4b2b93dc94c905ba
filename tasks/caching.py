"""Stage cache keys with one source of truth: the deps `dvc.yaml` lists for the stage.

A key hashes the DVC md5 (`dvc_lookup.path_md5`) of every code/config path the stage's entry in dvc.yaml depends on (the same paths `dvc repro`
watches), the content md5 of its data inputs and the resolved config it runs with; an edit elsewhere in the package
invalidates nothing. A finished stage output carries `.stamp.json` with its key; a rerun skips it when the key
matches and the output is still there, so an interrupted rebuild redoes only what is missing or stale.

Why not Prefect's cache policies: they cache a task's return value, and cannot see that the files a stage wrote were
deleted or edited since; the stamp lives in the output itself.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import yaml

from flows.config import ROOT
from vxsynth.store.dvc_lookup import path_md5
from vxsynth.store.io import sha256_obj, write_json

STAMP = ".stamp.json"


@lru_cache(maxsize=None)
def stage_code_deps(stage: str, item: str = "", root: Path = ROOT) -> tuple[str, ...]:
    """The code and config paths (not data/) dvc.yaml lists as deps of `stage` (`item`: the foreach key)."""
    spec = yaml.safe_load((root / "dvc.yaml").read_text())["stages"][stage]
    deps = (spec.get("do") or spec).get("deps", [])
    return tuple(d.replace("${key}", item) for d in deps if not d.startswith("data/"))


def key(stage: str, inputs: list[Path], cfg: dict, item: str = "") -> str:
    code = {d: path_md5(ROOT / d)[0] for d in stage_code_deps(stage, item) if (ROOT / d).exists()}
    return sha256_obj({"stage": stage, "code": code, "inputs": [path_md5(p)[0] for p in inputs], "cfg": cfg})


def fresh(out: Path, k: str) -> dict | None:
    """The stamped summary when `out` was produced under key `k`, else None."""
    s = Path(out) / STAMP
    if not s.exists():
        return None
    try:
        d = json.loads(s.read_text())
    except ValueError:
        return None
    return d.get("summary") if d.get("key") == k else None


def stamp(out: Path, k: str, summary) -> None:
    write_json(Path(out) / STAMP, {"key": k, "summary": summary})
