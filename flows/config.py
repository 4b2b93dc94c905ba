"""Hydra compose API (not @hydra.main): flows and the CLI build their config from `conf/` plus overrides."""

from __future__ import annotations

import os
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException, MissingConfigException
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from vxsynth.errors import VxError

def project_root() -> Path:
    """The project the command works on: $VXSYNTH_ROOT, else the nearest directory (from the working directory up)
    holding conf/config.yaml and dvc.yaml, else this checkout."""
    if os.environ.get("VXSYNTH_ROOT"):
        return Path(os.environ["VXSYNTH_ROOT"]).resolve()
    cwd = Path.cwd().resolve()
    for d in (cwd, *cwd.parents):
        if (d / "conf" / "config.yaml").exists() and (d / "dvc.yaml").exists():
            return d
    return Path(__file__).resolve().parent.parent


ROOT = project_root()
CONF_DIR = Path(os.environ.get("VXSYNTH_CONF", ROOT / "conf"))


def load(overrides: list[str] | tuple[str, ...] = (), config_name: str = "config") -> dict:
    """The composed config as a plain dict; bad overrides become one-line VxErrors."""
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            cfg = compose(config_name=config_name, overrides=list(overrides))
    except (ConfigCompositionException, MissingConfigException) as e:
        msg = str(e).splitlines()[0]
        if "Could not find" in msg:
            raise VxError(f"{msg.rstrip('.')}; {_options(msg)}") from e
        if msg.startswith("Could not override") and msg.count("'") >= 2:
            raise VxError(f"bad override: {_unknown_key(msg.split(chr(39))[1])}") from e
        raise VxError(f"bad override: {msg}") from e
    except Exception as e:  # noqa: BLE001 - hydra's override grammar errors have various types
        if type(e).__name__ in ("OverrideParseException", "GrammarParseError"):
            raise VxError(f"bad override syntax: {str(e).splitlines()[0]}; use key=value") from e
        raise
    try:
        return OmegaConf.to_container(cfg, resolve=True)
    except OmegaConfBaseException as e:
        raise VxError(f"config cannot be resolved: {str(e).splitlines()[0]}; check the ${{...}} references") from e


def _unknown_key(key: str) -> str:
    """What to do about an override of a key the config lacks: add it where its parent is an open map (loop.initial),
    else the parent's keys."""
    *parents, _ = key.split(".")
    node = load([])
    for p in parents:
        node = node.get(p) if isinstance(node, dict) else None
    if node == {}:
        return f"{'.'.join(parents)} starts empty: add {key!r} with +{key}=VALUE"
    if isinstance(node, dict):
        return f"the config has no {key!r}; {'.'.join(parents) or 'the top level'} has {', '.join(sorted(node))}"
    return f"the config has no {key!r} (`vxsynth config` prints it)"


def _options(msg: str) -> str:
    """'choose one of ...' for the config group named in a Hydra 'Could not find' message."""
    import re

    m = re.search(r"'([\w/]+)/[^/']*'", msg)
    group = CONF_DIR / m.group(1) if m else None
    if group is None or not group.is_dir():
        return f"config groups are {sorted(p.name for p in CONF_DIR.iterdir() if p.is_dir())}"
    return f"choose one of {sorted(p.stem for p in group.glob('*.yaml'))}"


def data_dir(cfg: dict) -> Path:
    p = Path(cfg["data_dir"])
    return p if p.is_absolute() else ROOT / p
