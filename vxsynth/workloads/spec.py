"""A workload's description (from the Hydra `workload` group) and its identity.

Identity = policy type + hash of the full built policy config + the input spec (shapes, dtypes, seed).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from vxsynth.errors import VxError
from vxsynth.store.io import sha256_obj


def _merge(base: dict, over: dict) -> dict:
    out = copy.deepcopy(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else copy.deepcopy(v)
    return out


@dataclass(frozen=True)
class WorkloadSpec:
    name: str
    policy_type: str
    builder: str
    preset: str
    seed: int
    config: dict[str, Any]
    inputs: dict[str, dict[str, Any]]
    outputs: dict[str, dict[str, Any]]
    history: int = 0
    call: str = "predict_action_chunk"
    patches: dict[str, Any] = field(default_factory=dict)
    profile: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_config(cls, cfg: dict[str, Any]) -> "WorkloadSpec":
        """Resolve the chosen preset over the workload's defaults."""
        cfg = dict(cfg)
        preset = cfg.get("preset", "full")
        presets = cfg.get("presets") or {}
        if preset != "full":
            if preset not in presets:
                raise VxError(f"workload {cfg.get('name')!r} has no preset {preset!r}; choose one of {['full', *presets]}")
            cfg = _merge(cfg, presets[preset])
        for key in ("name", "policy_type", "inputs", "outputs"):
            if key not in cfg:
                raise VxError(f"workload config lacks `{key}`; see conf/workload/act.yaml for the expected fields")
        return cls(
            name=cfg["name"], policy_type=cfg["policy_type"], builder=cfg.get("builder", "lerobot"),
            preset=preset, seed=int(cfg.get("seed", 0)), config=dict(cfg.get("config") or {}),
            inputs={k: dict(v) for k, v in cfg["inputs"].items()},
            outputs={k: dict(v) for k, v in cfg["outputs"].items()},
            history=int(cfg.get("history", 0)), call=cfg.get("call", "predict_action_chunk"), patches=dict(cfg.get("patches") or {}),
            profile=dict(cfg.get("profile") or {}),
        )

    @property
    def label(self) -> str:
        """Directory-friendly name: `act`, `act_tiny`."""
        return self.name if self.preset == "full" else f"{self.name}_{self.preset}"

    def input_spec(self) -> dict[str, Any]:
        shapes = {}
        for k, v in self.inputs.items():
            shape = [1] + ([self.history] if self.history and v.get("feature", True) else []) + list(v["shape"])
            shapes[k] = {"shape": shape, "dtype": v.get("dtype", "float32")}
        return {"tensors": shapes, "seed": self.seed, "batch": 1}

    def identity(self, built_config: dict[str, Any]) -> dict[str, Any]:
        cfg_hash = sha256_obj(built_config)[:16]
        spec = self.input_spec()
        return {
            "policy_type": self.policy_type, "config_hash": cfg_hash, "input_spec": spec,
            "workload_id": f"{self.policy_type}-{cfg_hash[:8]}-{sha256_obj(spec)[:8]}",
        }
