"""What each command will do, checked before any orchestration starts: config composition, platform, workload,
slice and data-file lookups. Imports no Prefect, and torch and the targets only where a check needs them (after the
config composed and the light checks passed), so a bad input is answered in one line, fast."""

from __future__ import annotations

import shlex
from pathlib import Path

from flows.config import ROOT, data_dir, load
from vxsynth.errors import VxError
from vxsynth.reconstruct.settings import loop_config, records_in
from vxsynth.records import SliceRecord

PROFILE_FILES = ("env.json", "op_calls.parquet", "kernels.parquet")
RECORDED = ROOT / "data" / "recorded"          # the committed profiles, data/recorded/<platform>/<workload>


def profile(overrides: list[str]) -> tuple[dict, list[dict]]:
    """The composed config and one workload config per profiled workload (all of `workloads` unless one is named);
    VxError when the platform cannot be profiled here."""
    from vxsynth.profiling.platforms import check_platform

    cfg, workloads = profile_settings(overrides)
    check_platform(cfg["platform"])
    return cfg, workloads


def profile_settings(overrides: list[str]) -> tuple[dict, list[dict]]:
    """`profile` without the check of this machine: what `vxsynth schedule` checks of a run on another."""
    cfg = load(overrides)
    if any(o.split("=")[0].lstrip("+") == "workload" for o in overrides):
        return cfg, [cfg["workload"]]
    extra = [o for o in overrides if o.startswith("workload.")]
    return cfg, [load([*extra, f"workload={w}", *[o for o in overrides if not o.startswith("workload")]])["workload"]
                 for w in cfg["workloads"]]


def _workloads(roots: list[Path]) -> list[Path]:
    """The profile directories in `roots` (each a platform dir or a workload dir)."""
    dirs: list[Path] = []
    for r in roots:
        dirs += [r] if (r / "op_calls.parquet").exists() else sorted(d for d in r.glob("*/") if (d / "op_calls.parquet").exists())
    return dirs


def profile_dirs(cfg: dict) -> tuple[list[Path], str]:
    """Profile directories to slice: `slicing.profiles` if given (each a platform dir or a workload dir), else every
    workload under data/profiles/<platform> for `slicing.platforms`, a platform with none there taken from its
    committed profiles (data/recorded/<platform>); and a line saying so when that happened."""
    s = cfg["slicing"]
    if s["profiles"]:
        return _workloads([Path(p) if Path(p).is_absolute() else ROOT / p for p in s["profiles"]]), ""
    dirs, said = [], []
    for p in s["platforms"]:
        here = _workloads([data_dir(cfg) / "profiles" / p])
        if not here and (here := _workloads([RECORDED / p])):
            said.append(f"{data_dir(cfg) / 'profiles' / p} holds no profiles: slicing the committed ones in "
                        f"{(RECORDED / p).relative_to(ROOT)}")
        dirs += here
    return dirs, "; ".join(said)


def slice_(overrides: list[str]) -> tuple[dict, list[Path], str]:
    """The config, the profile directories to slice and what was taken in place of absent ones; VxError when there
    are none or one is incomplete."""
    cfg = load(overrides)
    _precision(cfg)
    dirs, note = profile_dirs(cfg)
    if not dirs:
        where = cfg["slicing"]["profiles"] or [str(data_dir(cfg) / "profiles" / p) for p in cfg["slicing"]["platforms"]]
        raise VxError(f"no profiles to slice in {', '.join(map(str, where))}; run `vxsynth profile platform=h200` on an "
                      "H200 host, or slice the committed ones: slicing.profiles=[data/recorded/h200]")
    for d in dirs:
        if missing := [f for f in PROFILE_FILES if not (d / f).exists()]:
            raise VxError(f"profile {d} lacks {', '.join(missing)}; profile that workload again")
    return cfg, dirs, note


def _precision(cfg: dict) -> None:
    from vxsynth.checks.tolerance import validate

    validate(cfg["precision"])


def _records(cfg: dict, overrides: list[str], ids: list[str] | None) -> list[SliceRecord]:
    """The slice records to run, checked (and the precision policy the checks judge them by); a damaged one names the
    `vxsynth slice` that regenerates them here."""
    _precision(cfg)
    keep = [o for o in overrides if o.lstrip("+~").split("=")[0].split(".")[0] in ("data_dir", "suite", "slicing", "precision")]
    return records_in(data_dir(cfg) / "slices", ids, f"`{shlex.join(['vxsynth', 'slice', *keep])}`")


def _loop(cfg: dict) -> None:
    """The Vortex target, the agent and the GPU list (the loop's own settings are checked before, by `loop_config`)."""
    from vxsynth.reconstruct.gpus import slots
    from vxsynth.reconstruct.setup import make_agent
    from vxsynth.targets.vortex_host import TARGET_OTHERS, VortexConfig

    VortexConfig.from_dict(cfg["target"], others=TARGET_OTHERS)
    make_agent(cfg)
    slots((cfg.get("rebuild") or {}).get("gpus", "auto"), 0)    # its form; the GPUs it names are checked in the flow


def reconstruct(overrides: list[str], ids: list[str] | None = None) -> tuple[dict, list[SliceRecord]]:
    """The config and the slice records to reconstruct, every setting and record checked."""
    cfg = load(overrides)
    loop_config(cfg)
    recs = _records(cfg, overrides, ids or cfg["rebuild"]["slices"] or None)
    _loop(cfg)
    return cfg, recs


def report(overrides: list[str]) -> dict:
    cfg = load(overrides)
    if not (data_dir(cfg) / "slices" / "suite.parquet").exists():
        raise VxError(f"no suite under {data_dir(cfg) / 'slices'}; run `vxsynth slice` first")
    return cfg


def rebuild(overrides: list[str]) -> dict:
    """The config, with every platform and workload of the rebuild and the loop settings checked, and whether its
    platform and SimX can run here."""
    cfg = rebuild_settings(overrides)
    _runs_here(cfg)
    if cfg["simx"].get("in_rebuild", "auto") in (True, "true"):
        installation(cfg["simx"])
    return cfg


def rebuild_settings(overrides: list[str]) -> dict:
    """`rebuild` without the checks of this machine: what `vxsynth schedule` checks of a run on another."""
    cfg = load(overrides)
    loop_config(cfg)
    _precision(cfg)
    for name in cfg["rebuild"]["platforms"]:
        load([*overrides, f"platform={name}"])
    for w in cfg["workloads"]:
        load([*overrides, f"workload={w}"])
    _loop(cfg)
    mode = cfg["simx"].get("in_rebuild", "auto")
    if mode not in ("auto", True, False, "true", "false"):
        raise VxError(f"simx.in_rebuild={mode!r}: give auto, true or false")
    if mode is not False and mode != "false":
        _check_cases(cfg["simx"])
    return cfg


def _runs_here(cfg: dict) -> None:
    """VxError when the rebuild's platform is a GPU this machine is not and no profiles of it are here to rebuild
    from: nothing of that platform can run here, so say where its profiling stage runs."""
    from tasks.caching import stage_items
    from vxsynth.profiling.platforms import other_machine

    p = cfg["platform"]
    if not (why := other_machine(p)):
        return
    name, places = p["name"], [data_dir(cfg) / "profiles" / p["name"], RECORDED / p["name"]]
    if not _workloads(places):
        dvc = f", or `dvc repro profile@{name}` in a checkout there" if name in stage_items("profile") else ""
        raise VxError(f"rebuild platform={name} cannot run here: {why}, and there are no {name} profiles to rebuild "
                      f"from ({', '.join(map(str, places))}). Run its profiling stage on the {name} machine: a Prefect "
                      f"worker of pool `{name}` there (`prefect worker start --pool {name}`, for the deployment "
                      f"`vxsynth schedule --flow profile --name profile-{name} --pool {name} platform={name}`){dvc}")


def simx(overrides: list[str], slice_id: str, sweep: str):
    """The config, the Vortex installation and the slice record; VxError when any is missing."""
    cfg = load(overrides)
    s = cfg["simx"]
    if sweep not in s["sweeps"]:
        raise VxError(f"sweep {sweep!r} not configured; choose one of {sorted(s['sweeps'])} (conf/simx/default.yaml)")
    entries = s["sweeps"][sweep]
    if not isinstance(entries, list) or not all(isinstance(e, str) and "=" in e for e in entries):
        raise VxError(f"simx.sweeps.{sweep}={entries!r}: give a list of quoted overrides, e.g. [\"dcache_size=4096,16384\"] "
                      "(unquoted, YAML splits an entry on its commas)")
    _check_cases(s)
    rec = _records(cfg, overrides, [slice_id])[0]
    return cfg, installation(s), rec


def simx_checks(overrides: list[str], ids: list[str] | None = None):
    """The config, the SimX installation and the slice records whose final pairs are checked on SimX."""
    cfg = load(overrides)
    _check_cases(cfg["simx"])
    return cfg, installation(cfg["simx"]), _records(cfg, overrides, ids or cfg["rebuild"]["slices"] or None)


def _check_cases(s: dict) -> None:
    from vxsynth.checks.cases import CASES

    for k in ("check_max_s", "s_per_mcycle"):
        v = s.get(k)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0:
            raise VxError(f"simx.{k}={v!r} must be a positive number of seconds, e.g. simx.{k}="
                          + ("600" if k == "check_max_s" else "4.0"))
    v = s.get("probe_s")
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
        raise VxError(f"simx.probe_s={v!r} must be a number of seconds, 0 for no probe, e.g. simx.probe_s=30")
    v = s.get("check_coverage", 0.0)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= 1:
        raise VxError(f"simx.check_coverage={v!r} must be a fraction of the output's blocks in [0, 1], e.g. "
                      "simx.check_coverage=0.1 (0: the cycle budget's windows)")
    if not isinstance(s.get("shorten"), bool):
        raise VxError(f"simx.shorten={s.get('shorten')!r} must be true or false, e.g. simx.shorten=false")
    cases = s.get("check_cases")
    if not isinstance(cases, list) or len(set(cases)) < 2 or not set(cases) <= set(CASES):
        raise VxError(f"simx.check_cases={cases!r}: give at least two distinct input cases of {list(CASES)}, "
                      "e.g. simx.check_cases=[near_zero,normal]")


def installation(s: dict):
    """The Vortex installation of conf/simx, with a kernel compiler that really builds a kernel; VxError otherwise."""
    from vxsynth.simx.executor import toolchain_error
    from vxsynth.simx.install import detect

    inst = detect(s["home"], s["tooldir"], s["api"])
    if why := toolchain_error(inst, s["config"]):
        raise VxError(why)
    return inst
