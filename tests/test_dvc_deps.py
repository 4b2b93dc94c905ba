"""dvc.yaml is the one source of truth of what a stage depends on (DVC reruns on it, the Prefect flows key their stage
cache on it): every vxsynth module a stage's code imports, and every config group it reads, must be a listed dep."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT

ENTRIES = {"profile": ["vxsynth.profiling.stage"], "slice": ["vxsynth.slicing.stage"],
           "reconstruct": ["vxsynth.reconstruct.loop", "vxsynth.reconstruct.setup"], "report": ["vxsynth.report.build"],
           "simx": ["vxsynth.simx.sweep", "vxsynth.simx.install", "vxsynth.checks.cases", "vxsynth.kernels.tensors",
                    "vxsynth.store.io", "vxsynth.store.schemas"]}   # what tasks/simx.py and flows/simx.py call


def _file(module: str) -> Path | None:
    p = ROOT / Path(*module.split("."))
    return p / "__init__.py" if (p / "__init__.py").exists() else p.with_suffix(".py") if p.with_suffix(".py").exists() else None


def _docstring_only(f: Path) -> bool:
    body = ast.parse(f.read_text()).body
    return all(isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant) for n in body)


def imported_files(entries: list[str]) -> set[str]:
    """Every vxsynth source file the entry modules import, transitively (package __init__s that only hold a docstring
    left out)."""
    seen: set[Path] = set()
    todo = list(entries)
    while todo:
        parts = todo.pop().split(".")
        for i in range(1, len(parts) + 1):
            f = _file(".".join(parts[:i]))
            if f is None or f in seen:
                continue
            seen.add(f)
            for n in ast.walk(ast.parse(f.read_text())):
                if isinstance(n, ast.Import):
                    todo += [a.name for a in n.names if a.name.startswith("vxsynth")]
                elif isinstance(n, ast.ImportFrom) and (n.module or "").startswith("vxsynth"):
                    todo += [n.module, *(f"{n.module}.{a.name}" for a in n.names)]
    return {str(f.relative_to(ROOT)) for f in seen if not (f.name == "__init__.py" and _docstring_only(f))}


def _deps(stage: str) -> list[str]:
    spec = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"][stage]
    return (spec.get("do") or spec)["deps"]


def _covered(path: str, deps: list[str]) -> bool:
    return any(path == d or path.startswith(d.rstrip("/") + "/") for d in deps)


def _cfg_keys(stage: str) -> tuple[str, ...]:
    from flows.profile import CFG_KEYS as profile
    from flows.slice import CFG_KEYS as slice_
    from flows.simx import CFG_KEYS as simx
    from tasks.reconstruct import CFG_KEYS as reconstruct
    return {"profile": profile, "slice": slice_, "reconstruct": reconstruct, "report": (), "simx": simx}[stage]


@pytest.mark.parametrize("stage", sorted(ENTRIES))
def test_every_imported_module_is_a_dep(stage):
    deps = [d.replace("${key}", "h200") for d in _deps(stage)]
    files = imported_files(ENTRIES[stage])
    assert len(files) >= 3
    assert [f for f in sorted(files) if not _covered(f, deps)] == []
    assert [d for d in deps if not (ROOT / d).exists() and not d.startswith("data/")] == []


@pytest.mark.parametrize("stage", sorted(ENTRIES))
def test_every_config_group_read_is_a_dep(stage):
    deps = [d.replace("${key}", "h200") for d in _deps(stage)]
    for k in _cfg_keys(stage):
        conf = ROOT / "conf" / k
        want = f"conf/{k}" if conf.is_dir() else "conf/config.yaml"
        assert _covered(want, deps) or any(d.startswith(want + "/") for d in deps), (stage, k)


def test_the_checker_sees_a_missing_dep():
    """Drop one dep the slicing code needs: the same check reports it."""
    deps = [d for d in _deps("slice") if d != "vxsynth/kernels/problem.py"]
    assert [f for f in imported_files(ENTRIES["slice"]) if not _covered(f, deps)] == ["vxsynth/kernels/problem.py"]


def test_stage_cache_key_hashes_the_listed_deps_only():
    from tasks.caching import stage_code_deps

    assert "vxsynth/kernels/problem.py" in stage_code_deps("slice")
    assert not any(d.startswith("vxsynth/targets") for d in stage_code_deps("slice"))
    assert "conf/platform/orin.yaml" in stage_code_deps("profile", "orin")
