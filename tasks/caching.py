"""Stage cache keys with one source of truth: the deps `dvc.yaml` lists for the stage.

A key hashes the DVC md5 (`vxsynth.store.version.path_md5`) of every code/config path the stage's entry in dvc.yaml depends on (the same paths `dvc repro`
watches), the content md5 of its data inputs and the resolved config it runs with; an edit elsewhere in the package
invalidates nothing. A finished stage output carries `.stamp.json` with its key; a rerun skips it when the key
matches and the output is still there, so an interrupted rebuild redoes only what is missing or stale. The stamp also
keeps the parts its key hashed, so a rerun that does redo a stamped output says why (`stale`): which dep's code, which
input or which config setting differs. It also keeps the md5 of the output as written: an output edited or damaged
since is redone by the next run, so rerunning the stage is the repair.

Why not Prefect's cache policies: they cache a task's return value, and cannot see that the files a stage wrote were
deleted or edited since; the stamp lives in the output itself.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import yaml

from flows.config import ROOT
from vxsynth.store.io import sha256_obj, write_json
from vxsynth.store.version import path_md5

STAMP = ".stamp.json"


def _stage(stage: str, root: Path) -> dict:
    return yaml.safe_load((root / "dvc.yaml").read_text())["stages"][stage]


@lru_cache(maxsize=None)
def stage_code_deps(stage: str, item: str = "", root: Path = ROOT) -> tuple[str, ...]:
    """The code and config paths (not data/) dvc.yaml lists as deps of `stage` (`item`: the foreach key)."""
    spec = _stage(stage, root)
    deps = (spec.get("do") or spec).get("deps", [])
    return tuple(d.replace("${key}", item) for d in deps if not d.startswith("data/"))


def stage_items(stage: str, root: Path = ROOT) -> tuple[str, ...]:
    """The foreach keys of `stage` in dvc.yaml (`dvc repro <stage>@<key>`); none for a plain stage."""
    return tuple(_stage(stage, root).get("foreach") or ())


class Key(str):
    """A stage cache key (the hash) that keeps the parts it hashed: code md5 per dep, input md5s, config."""
    parts: dict


def key(stage: str, inputs: list[Path], cfg: dict, item: str = "") -> Key:
    code = {d: path_md5(ROOT / d)[0] for d in stage_code_deps(stage, item) if (ROOT / d).exists()}
    parts = {"stage": stage, "code": code, "inputs": {str(p): path_md5(p)[0] for p in inputs}, "cfg": cfg}
    k = Key(sha256_obj({**parts, "inputs": list(parts["inputs"].values())}))
    k.parts = parts
    return k


def _stamp(out: Path) -> dict:
    try:
        return json.loads((Path(out) / STAMP).read_text())
    except (OSError, ValueError):
        return {}


def fresh(out: Path, k: str) -> dict | None:
    """The stamped summary when `out` was produced under key `k` and is unchanged since, else None."""
    d = _stamp(out)
    return d.get("summary") if d and d.get("key") == k and d.get("out") in (None, path_md5(out)[0]) else None


def stale(out: Path, k: Key) -> str:
    """Why `out` is not up to date under key `k`, in one line: no stamp, or what differs from the stamped key's parts."""
    if not (Path(out) / STAMP).exists():
        return "not finished before (no stamp)"
    d = _stamp(out)
    if not d:
        return "its stamp is unreadable"
    if d.get("key") == k and d.get("out") not in (None, path_md5(out)[0]):
        return "its files changed since it was stamped (edited or damaged)"
    if "parts" not in d:
        return "stamped before stamps kept their key's parts: what changed is not known"
    diffs = _diff(d["parts"], k.parts)
    return "changed since it was stamped: " + ("; ".join(diffs[:4]) + (f" (+{len(diffs) - 4} more)" if len(diffs) > 4 else "")
                                               if diffs else "the key's hashing itself")


def _diff(old, new, at: str = "") -> list[str]:
    if isinstance(old, dict) and isinstance(new, dict):
        return [d for k in sorted(set(old) | set(new), key=str)
                for d in _diff(old.get(k, "(absent)"), new.get(k, "(absent)"), f"{at}.{k}" if at else str(k))]
    return [] if old == new else [f"{at} {_short(old)} -> {_short(new)}"]


def _short(v) -> str:
    s = json.dumps(v, sort_keys=True) if not isinstance(v, str) else v
    return s if len(s) <= 40 else s[:37] + "..."


def stamp(out: Path, k: Key, summary) -> None:
    write_json(Path(out) / STAMP, {"key": k, "parts": getattr(k, "parts", None), "summary": summary,
                                   "out": path_md5(Path(out))[0]})
