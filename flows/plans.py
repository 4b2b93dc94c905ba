"""What each command will do, checked before any orchestration starts: config composition, platform, workload,
slice and data-file lookups. Imports no Prefect, so a bad input is answered in one line, fast."""

from __future__ import annotations

from pathlib import Path

from flows.config import ROOT, data_dir, load
from vxsynth.checks.run import CASES
from vxsynth.errors import VxError
from vxsynth.profiling.platforms import check_platform
from vxsynth.reconstruct.gpus import slots
from vxsynth.reconstruct.setup import loop_config, make_agent, records_in
from vxsynth.targets.vortex_host import VortexConfig

PROFILE_FILES = ("env.json", "op_calls.parquet", "kernels.parquet")


def profile(overrides: list[str]) -> tuple[dict, list[dict]]:
    """The composed config and one workload config per profiled workload (all of `workloads` unless one is named);
    VxError when the platform cannot be profiled here."""
    cfg = load(overrides)
    check_platform(cfg["platform"])
    if any(o.split("=")[0].lstrip("+") == "workload" for o in overrides):
        return cfg, [cfg["workload"]]
    extra = [o for o in overrides if o.startswith("workload.")]
    return cfg, [load([*extra, f"workload={w}", *[o for o in overrides if not o.startswith("workload")]])["workload"]
                 for w in cfg["workloads"]]


def profile_dirs(cfg: dict) -> list[Path]:
    """Profile directories to slice: `slicing.profiles` if given (each a platform dir or a workload dir), else
    every workload under data/profiles/<platform> for `slicing.platforms`."""
    s = cfg["slicing"]
    roots = [Path(p) if Path(p).is_absolute() else ROOT / p for p in s["profiles"]] or \
            [data_dir(cfg) / "profiles" / p for p in s["platforms"]]
    dirs: list[Path] = []
    for r in roots:
        dirs += [r] if (r / "op_calls.parquet").exists() else sorted(d for d in r.glob("*/") if (d / "op_calls.parquet").exists())
    return dirs


def slice_(overrides: list[str]) -> tuple[dict, list[Path]]:
    """The config and the profile directories to slice; VxError when there are none or one is incomplete."""
    cfg = load(overrides)
    dirs = profile_dirs(cfg)
    if not dirs:
        where = cfg["slicing"]["profiles"] or [str(data_dir(cfg) / "profiles" / p) for p in cfg["slicing"]["platforms"]]
        raise VxError(f"no profiles to slice in {', '.join(map(str, where))}; run `vxsynth profile platform=h200` on an "
                      "H200 host, or slice the committed ones: slicing.profiles=[data/recorded/h200]")
    for d in dirs:
        if missing := [f for f in PROFILE_FILES if not (d / f).exists()]:
            raise VxError(f"profile {d} lacks {', '.join(missing)}; profile that workload again")
    return cfg, dirs


def _loop(cfg: dict) -> None:
    loop_config(cfg)
    VortexConfig.from_dict(cfg["target"])
    make_agent(cfg)
    slots((cfg.get("rebuild") or {}).get("gpus", "auto"), 0)    # its form; the GPUs it names are checked in the flow


def reconstruct(overrides: list[str], ids: list[str] | None = None) -> tuple[dict, list[dict]]:
    """The config and the slice records to reconstruct, every setting and record checked."""
    cfg = load(overrides)
    _loop(cfg)
    return cfg, records_in(data_dir(cfg) / "slices", ids or cfg["rebuild"]["slices"] or None)


def report(overrides: list[str]) -> dict:
    cfg = load(overrides)
    if not (data_dir(cfg) / "slices" / "suite.parquet").exists():
        raise VxError(f"no suite under {data_dir(cfg) / 'slices'}; run `vxsynth slice` first")
    return cfg


def rebuild(overrides: list[str]) -> dict:
    """The config, with every platform and workload of the rebuild and the loop settings checked."""
    cfg = load(overrides)
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
    if mode in (True, "true"):
        installation(cfg["simx"])
    return cfg


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
    rec = records_in(data_dir(cfg) / "slices", [slice_id])[0]
    return cfg, installation(s), rec


def simx_checks(overrides: list[str], ids: list[str] | None = None):
    """The config, the SimX installation and the slice records whose final pairs are checked on SimX."""
    cfg = load(overrides)
    _check_cases(cfg["simx"])
    return cfg, installation(cfg["simx"]), records_in(data_dir(cfg) / "slices", ids or cfg["rebuild"]["slices"] or None)


def _check_cases(s: dict) -> None:
    for k in ("check_max_s", "s_per_mcycle"):
        v = s.get(k)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0:
            raise VxError(f"simx.{k}={v!r} must be a positive number of seconds, e.g. simx.{k}="
                          + ("600" if k == "check_max_s" else "4.0"))
    v = s.get("probe_s")
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
        raise VxError(f"simx.probe_s={v!r} must be a number of seconds, 0 for no probe, e.g. simx.probe_s=30")
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
