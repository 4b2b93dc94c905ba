"""Build lerobot policies offline with seeded random weights, and their batch-1 inputs.

A new lerobot policy needs only a config file in `conf/workload/`; `lerobot` builds any registered policy type.
Pi0 gets one small extra: size patches for its tiny preset (no config field controls Gemma/SigLIP sizes).
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any, Callable

import torch

from vxsynth.errors import VxError
from vxsynth.workloads.spec import WorkloadSpec

_FT = {"VISUAL", "STATE", "ENV", "ACTION"}


def _features(spec: dict[str, dict[str, Any]]):
    from lerobot.configs.types import FeatureType, PolicyFeature

    out = {}
    for key, v in spec.items():
        if not v.get("feature", True):
            continue
        kind = v.get("kind", "STATE")
        if kind not in _FT:
            raise VxError(f"input {key!r}: kind {kind!r} is not one of {sorted(_FT)}")
        out[key] = PolicyFeature(FeatureType[kind], tuple(v["shape"]))
    return out


def config_dict(cfg: Any) -> dict[str, Any]:
    """The built policy config as plain data (for hashing and provenance)."""
    def conv(o):
        if dataclasses.is_dataclass(o):
            return {f.name: conv(getattr(o, f.name)) for f in dataclasses.fields(o)}
        if isinstance(o, dict):
            return {str(k): conv(v) for k, v in o.items()}
        if isinstance(o, (list, tuple)):
            return [conv(v) for v in o]
        if hasattr(o, "value") and hasattr(o, "name"):
            return o.value
        if isinstance(o, (str, int, float, bool)) or o is None:
            return o
        return str(o)
    d = conv(cfg)
    d.pop("device", None)  # where it runs is not part of what it is
    return d


@contextlib.contextmanager
def _pi0_sizes(patches: dict[str, Any]):
    """Temporarily shrink Pi0's Gemma and SigLIP sizes (workloads.md, section 3)."""
    if not patches:
        yield
        return
    import lerobot.policies.pi0.modeling_pi0 as mp0

    gemma = {v: mp0.GemmaConfig(**kw) for v, kw in patches["gemma"].items()}
    vision = patches.get("vision", {})
    orig_get, orig_cls = mp0.get_gemma_config, mp0.PaliGemmaForConditionalGenerationWithPiGemma

    class Resized(orig_cls):
        def __init__(self, config):
            vc = config.vision_config
            for k, v in vision.items():
                setattr(vc, k, v)
            vc.projection_dim = config.text_config.hidden_size
            super().__init__(config)

    mp0.get_gemma_config = lambda variant: gemma[variant]
    mp0.PaliGemmaForConditionalGenerationWithPiGemma = Resized
    try:
        yield
    finally:
        mp0.get_gemma_config, mp0.PaliGemmaForConditionalGenerationWithPiGemma = orig_get, orig_cls


BUILDERS: dict[str, Callable[[WorkloadSpec], contextlib.AbstractContextManager]] = {
    "lerobot": lambda spec: contextlib.nullcontext(),
    "lerobot_pi0": lambda spec: _pi0_sizes(spec.patches),
}


def build_policy(spec: WorkloadSpec, device: str) -> tuple[torch.nn.Module, dict[str, Any]]:
    """The policy in eval mode on `device`, and its full config as plain data."""
    from lerobot.policies.factory import get_policy_class, make_policy_config

    if spec.builder not in BUILDERS:
        raise VxError(f"workload {spec.name!r}: unknown builder {spec.builder!r}; use one of {sorted(BUILDERS)}")
    torch.manual_seed(spec.seed)
    kwargs = dict(spec.config)
    kwargs.update(device=device, input_features=_features(spec.inputs), output_features=_features(spec.outputs))
    try:
        cfg = make_policy_config(spec.policy_type, **kwargs)
    except (TypeError, ValueError, KeyError) as e:
        raise VxError(f"workload {spec.name!r}: lerobot rejected the config ({e}); fix conf/workload/{spec.name}.yaml") from e
    with BUILDERS[spec.builder](spec), torch.device(device):
        policy = get_policy_class(spec.policy_type)(cfg)
    return policy.to(device).eval(), config_dict(cfg)


def make_batch(spec: WorkloadSpec, device: str) -> dict[str, torch.Tensor]:
    """Seeded batch-1 inputs: images in [0, 1], states normal, token ids with a padding tail."""
    g = torch.Generator().manual_seed(spec.seed + 1)
    batch = {}
    for key, meta in spec.input_spec()["tensors"].items():
        v = spec.inputs[key]
        shape, dtype = meta["shape"], getattr(torch, meta["dtype"])
        gen = v.get("gen", "unit" if v.get("kind") == "VISUAL" else "normal")
        if gen == "unit":
            t = torch.rand(shape, generator=g)
        elif gen == "normal":
            t = torch.randn(shape, generator=g)
        elif gen == "tokens":
            t = torch.zeros(shape, dtype=torch.long)
            t[..., : v["real"]] = torch.randint(2, v["vocab"], (*shape[:-1], v["real"]), generator=g)
        elif gen == "mask":
            t = torch.zeros(shape, dtype=torch.bool)
            t[..., : v["real"]] = True
        else:
            raise VxError(f"input {key!r}: unknown generator {gen!r}; use unit, normal, tokens or mask")
        batch[key] = t.to(dtype=dtype, device=device)
    return batch


def run_inference(policy: torch.nn.Module, batch: dict[str, torch.Tensor], call: str = "predict_action_chunk") -> torch.Tensor:
    """One full model evaluation (all denoising steps) from empty queues: `predict_action_chunk`, or `select_action`
    for policies whose chunk call needs filled observation queues."""
    if call not in ("predict_action_chunk", "select_action"):
        raise VxError(f"workload call {call!r} must be predict_action_chunk or select_action")
    policy.reset()
    with torch.no_grad():
        return getattr(policy, call)(batch)
