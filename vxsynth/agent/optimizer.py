"""Agent `optuna`: a sampler over the strategy knobs instead of one edit per round.

Why Optuna: the knobs are discrete and interdependent (tiles, flags, enumerations), which its TPE sampler models
directly (multivariate, categorical); its ask-and-tell interface lets the loop ask for a whole batch (the constant
liar keeps a batch's pending points apart) and tell each result when the evaluator returns it. BoTorch, which the GPU
host also has, models continuous spaces and would need a relaxation of every knob.

The revision trail is the study: every row with a D is a completed trial (objective: D over the components measurable
on both sides), a row whose checks or sandbox failed is a failed trial. A resumed run rebuilds the study from the
trail, so nothing measured is measured again. The structure-informed start (round 0) is the first point; with
probability `mutate` a proposal is instead the profile-guided edit of the current revision (the gap rules as a
mutation operator). A sampled point is first repaired to the nearest form the emitters implement (`repair`: e.g. the
direct convolution form drops staging); one that still cannot run on both targets is told D = 1 (the worst) so the sampler learns
to avoid that region; it is never evaluated. When `max_draws` draws give no valid untried point (a space that is
mostly invalid for the slice), the proposal is the profile-guided edit instead.

`local` (a trust region): a draw that moves more than `local` knobs away from the current revision is taken as a
direction only: the proposal moves 1 to `local` of those knobs, picked at random, and keeps the rest. A point of the
whole space is far from a start read off the reference and seldom better: in the H200 fidelity run of 2026-12-01
(bench/results/fidelity_h200_whole_space_log.txt) 3 of 287 TPE samples were kept, against 10 of 105 profile-guided
edits. The draw itself is told failed (it was not measured); the point measured reaches the study as a trail row,
like a mutation.
"""

from __future__ import annotations

import logging
import math

import optuna

from vxsynth.agent.base import Context, Proposal
from vxsynth.agent.profile_guided import ProfileGuided
from vxsynth.errors import VxError
from vxsynth.kernels.strategy import Strategy, repair
from vxsynth.signature.distance import excess
from vxsynth.trail import TrailRow

SAMPLERS = ("tpe", "random")
WORST = 1.0            # D's upper bound: what an invalid point is told


class OptunaSearch:
    name = "optuna"

    def __init__(self, space: dict, sampler: str = "tpe", startup: int = 8, mutate: float = 0.25, seed: int = 0,
                 max_draws: int = 300, local: int = 0):
        if sampler not in SAMPLERS:
            raise VxError(f"agent.sampler={sampler!r}: use one of {', '.join(SAMPLERS)}")
        known = set(Strategy.__dataclass_fields__)
        bad = [k for k, v in (space or {}).items() if k not in known or not isinstance(v, list) or not v]
        if not isinstance(local, int) or local < 0:
            raise VxError(f"agent.local={local!r}: give the most knobs a proposal may change (0: the whole space)")
        if not space or bad:
            raise VxError(f"agent.space: {bad or 'empty'}: give strategy knobs with lists of values, e.g. agent.space.block_m=[32,64]")
        self.space, self.sampler, self.startup, self.mutate, self.seed = dict(space), sampler, startup, mutate, seed
        self.max_draws, self.local = max_draws, local
        self.identity = {"name": self.name, "space": self.space, "sampler": sampler, "startup": startup,
                         "mutate": mutate, "seed": seed, "local": local}
        self.study, self.pending, self.seen, self.stopped = None, {}, set(), None
        self.guided = ProfileGuided(explore=0.0)

    def _tell(self, trial, d: float) -> None:
        """A measured D, or a failed trial when there is none (checks failed, not measured)."""
        if math.isfinite(d):
            self.study.tell(trial, d)
        else:
            self.study.tell(trial, state=optuna.trial.TrialState.FAIL)

    def _guided(self, ctx: Context, why: str) -> Proposal | None:
        p = self.guided.propose(ctx)
        return p and Proposal(p.strategy, p.edit, f"guided:{p.name}", f"{why}; profile-guided: {p.reason}")

    def _knobs(self, ctx: Context) -> dict:
        """The space for this slice: conv_form and layout only for convolutions, tensor cores only on paths that have
        them."""
        drop = {"conv_form", "layout"} if ctx.problem.kind != "conv" else set()
        if ctx.precision == "FP32":
            drop |= {"tensor_core", "mma"}
        return {k: v for k, v in self.space.items() if k not in drop}

    def _sync(self, ctx: Context, knobs: dict) -> None:
        """Tell the study every trail row it has not seen: its own pending trials, and rows it did not ask for
        (the start, profile-guided mutations, a resumed run's earlier rounds)."""
        if self.study is None:
            optuna.logging.set_verbosity(logging.WARNING)
            sampler = (optuna.samplers.TPESampler(seed=self.seed, n_startup_trials=self.startup, multivariate=True,
                                                  constant_liar=True) if self.sampler == "tpe"
                       else optuna.samplers.RandomSampler(seed=self.seed))
            self.study = optuna.create_study(direction="minimize", sampler=sampler)
        dist = {k: optuna.distributions.CategoricalDistribution(v) for k, v in knobs.items()}
        for row in ctx.trail:
            h = row.strategy_hash
            if h in self.seen or row.source_kind != "generated" or row.decision == "failed":
                continue
            self.seen.add(h)
            d = objective(row, ctx.limits)
            if h in self.pending:
                self._tell(self.pending.pop(h), d)
                continue
            params = {k: getattr(row.strategy, k) for k in knobs}
            if math.isfinite(d) and all(params[k] in knobs[k] for k in knobs):
                self.study.add_trial(optuna.trial.create_trial(params=params, distributions=dist, value=d))

    def propose(self, ctx: Context) -> Proposal | None:
        knobs = self._knobs(ctx)
        self._sync(ctx, knobs)
        if self.mutate and ctx.rng.random() < self.mutate and (p := self._guided(ctx, "mutation of the current revision")):
            return p
        done = {r.strategy_hash: objective(r, ctx.limits) for r in ctx.trail}
        for _ in range(self.max_draws):
            t = self.study.ask()
            point = {k: t.suggest_categorical(k, v) for k, v in knobs.items()}
            moved = [k for k in knobs if point[k] != getattr(ctx.current, k)]
            if self.local and len(moved) > self.local:
                self.study.tell(t, state=optuna.trial.TrialState.FAIL)
                t, point = None, {k: point[k] for k in ctx.rng.sample(moved, ctx.rng.randint(1, self.local))}
            s = repair(ctx.problem, ctx.current.with_(**point))
            h = s.hash()
            if h in ctx.tried:          # measured (tell its D again) or pending in this batch (drop the draw)
                if t is not None:
                    self._tell(t, done.get(h, math.nan))
                continue
            why = ctx.valid(s)
            if why:
                if t is not None:
                    t.set_user_attr("invalid", why[:200])
                    self.study.tell(t, WORST)
                continue
            n = sum(x.state == optuna.trial.TrialState.COMPLETE for x in self.study.trials)
            if t is None:
                return Proposal(s, ctx.current.diff(s), f"{self.sampler} local",
                                f"{len(point)} of the {len(moved)} knobs a {self.sampler} draw moved, after {n} told points")
            self.pending[h] = t.number
            return Proposal(s, ctx.current.diff(s), f"{self.sampler} sample",
                            f"{self.sampler} trial {t.number} after {n} told points")
        p = self._guided(ctx, f"{self.max_draws} draws of the space gave no valid untried point")
        if p is None:
            self.stopped = f"no valid untried point in {self.max_draws} draws of the space, and no untried edit"
        return p


def objective(row: TrailRow, limits: dict | None) -> float:
    """What the sampler minimises: D, plus (under the gap guard) every component's excess over its limit, so that
    points the keep rule would refuse look as bad as they are."""
    if not limits or math.isnan(row.D):
        return row.D
    return row.D + sum(excess(row.gaps, limits).values())
