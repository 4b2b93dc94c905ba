"""The agent interface: propose the next edit from the slice, the current strategy, its per-component gaps and the
trail so far. Agents are pluggable by name (conf/agent)."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Callable, Protocol

from vxsynth.kernels.problem import Problem
from vxsynth.kernels.strategy import Strategy
from vxsynth.records import SliceRecord
from vxsynth.trail import TrailRow


@dataclass
class Context:
    record: SliceRecord
    problem: Problem
    precision: str
    current: Strategy
    gaps: dict[str, float]             # signed gaps of the current revision (candidate - reference, on [0, 1])
    trail: list[TrailRow]              # rows of the revision trail so far
    tried: set[str]                    # strategy hashes already attempted (never repeated)
    valid: Callable[[Strategy], str | None]   # why a strategy cannot run on both targets, or None
    order: str = "cuda_first"
    rng: random.Random = field(default_factory=random.Random)
    sources: tuple[str, str] = ("", "")   # the current revision's CUDA and Vortex sources, as checked
    limits: dict[str, float] | None = None   # gap guard: the largest |gap| a kept revision may have per component


@dataclass
class Proposal:
    strategy: Strategy
    edit: dict                         # {field: [old, new]}
    name: str                          # the edit's name, e.g. "mapping->strided"
    reason: str                        # why the agent chose it (gaps it targets, or exploration)
    sources: tuple[str, str] | None = None   # free-form CUDA + Vortex pair (the strategy then only describes it)
    failure: str | None = None         # the agent produced no usable candidate (malformed reply, timeout, ...)
    call: dict = field(default_factory=dict)   # the agent's model call: tokens, latency, attempts, prompt and reply


class Agent(Protocol):
    name: str

    def propose(self, ctx: Context) -> Proposal | None:
        """The next edit, or None when the agent has nothing left to try (its `stopped`, when set, says why)."""
