"""A language-model agent: any OpenAI-compatible chat-completions endpoint (a hosted API, or a vLLM / llama.cpp
server on the GPU host) reads the slice, the current pair's sources, the per-component gaps and the trail, and
replies with a strategy edit (plain data, validated here) or a full CUDA + Vortex source pair (free-form).

Every reply becomes a candidate that goes through the same sandbox, checks, measurement and keep rule as any other.
A reply that yields no candidate (malformed, refused, truncated, timed out, rate limited, an invalid edit) is a
failed round of the trail with its reason, never an exception; the round's tokens, latency and attempts are kept.
The agent stops when its token or cost budget for the slice is spent (counted from the trail, so resuming counts
what was spent before).
"""

from __future__ import annotations

import json
import math
import os
import re
import time
from dataclasses import dataclass, fields
from urllib.parse import urlparse

from vxsynth.agent.base import Context, Proposal
from vxsynth.errors import VxError
from vxsynth.kernels import strategy as strategy_doc
from vxsynth.kernels.problem import to_dict
from vxsynth.kernels.strategy import CONV_FORMS, MAPPINGS, Strategy
from vxsynth.trail import TrailRow

MAX_SOURCE = 200_000      # characters per free-form source (the sandbox's own size rule judges it again)
_CHOICES = {"mapping": MAPPINGS, "conv_form": CONV_FORMS, "raster": ("row", "col"), "accumulate": ("fp32",)}

SYSTEM = """You rebuild a GPU kernel so that its Nsight Compute profile signature matches a reference kernel. You edit a
pair of kernels generated from one strategy: a CUDA kernel and a Vortex (RISC-V GPGPU) kernel computing the same
operator. Each round you propose ONE candidate; it is compiled, checked against the reference operator on both
targets, measured, and kept only if the signature distance D improves.

Reply with exactly one JSON object and nothing else, either
  {"action": "edit", "set": {"<knob>": <value>, ...}, "reason": "<why>"}      (the pair is regenerated)
or
  {"action": "sources", "cuda": "<full CUDA source>", "vortex": "<full Vortex source>", "reason": "<why>"}
Free-form sources must keep the kernel's name, parameters and argument layout exactly as in the current pair and
may not include headers beyond the current ones, call libraries or host APIs, use inline assembly beyond the
generated tensor-core templates, keep global or
static state, or embed tables of literals: a sandbox rejects them otherwise. They stand for the current strategy, so
their CUDA kernel must use the same instruction forms as the current one (shared-memory loads/stores, cp.async,
ldmatrix, mma.sync, wmma, wgmma, global atomics: present exactly where they are present now); to change those, edit the
strategy instead.

Strategy knobs:
"""


@dataclass
class Settings:
    """conf/agent/llm.yaml."""
    endpoint: str = "http://localhost:8000/v1"
    model: str | None = None
    api_key_env: str | None = "OPENAI_API_KEY"
    temperature: float = 0.2
    max_tokens: int = 4096
    timeout_s: float = 120.0
    retries: int = 2
    backoff_s: float = 2.0
    budget_tokens: int = 400_000        # per slice; 0: no limit
    budget_usd: float = 0.0             # per slice; 0: no limit
    usd_per_mtok_in: float = 0.0
    usd_per_mtok_out: float = 0.0
    trail_rows: int = 12                # rows of the trail shown in the prompt (the latest)

    @classmethod
    def from_dict(cls, d: dict) -> "Settings":
        known = {f.name: f for f in fields(cls)}
        for k, v in d.items():
            if k not in known:
                raise VxError(f"agent.{k}: unknown setting of agent=llm; known: {', '.join(known)}")
            want = {"float": (int, float), "int": int, "str": str, "str | None": (str, type(None))}[str(known[k].type)]
            if not isinstance(v, want) or isinstance(v, bool):
                raise VxError(f"agent.{k}={v!r} must be {known[k].type}")
        s = cls(**d)
        if not s.model:
            raise VxError("agent=llm needs a model: add agent.model=<name the endpoint serves>")
        if urlparse(s.endpoint).scheme not in ("http", "https") or not urlparse(s.endpoint).netloc:
            raise VxError(f"agent.endpoint={s.endpoint!r} is not an http(s) URL, e.g. http://localhost:8000/v1")
        if s.api_key_env and not os.environ.get(s.api_key_env):
            raise VxError(f"agent=llm: environment variable {s.api_key_env} (agent.api_key_env) is not set; "
                          "export it, or set agent.api_key_env=null for a server without keys")
        return s


class ReplyError(ValueError):
    """A reply that yields no candidate."""


class LLMAgent:
    name = "llm"

    def __init__(self, **settings):
        self.cfg = Settings.from_dict(settings)
        self.identity = f"llm:{self.cfg.model}"   # trails of another model are not resumed
        self.stopped: str | None = None
        self._client = None

    def client(self):
        if self._client is None:
            from openai import OpenAI

            key = os.environ.get(self.cfg.api_key_env) if self.cfg.api_key_env else None
            self._client = OpenAI(base_url=self.cfg.endpoint, api_key=key or "not-needed", timeout=self.cfg.timeout_s,
                                  max_retries=0)
        return self._client

    def propose(self, ctx: Context) -> Proposal | None:
        tokens, usd = spent(ctx.trail)
        c = self.cfg
        if (c.budget_tokens and tokens >= c.budget_tokens) or (c.budget_usd and usd >= c.budget_usd):
            self.stopped = f"agent budget spent: {tokens} tokens, ${usd:.4f} (agent.budget_tokens / agent.budget_usd)"
            return None
        messages = [{"role": "system", "content": SYSTEM + (strategy_doc.__doc__ or "")},
                    {"role": "user", "content": prompt(ctx, c.trail_rows)}]
        call, text = self._ask(messages)
        call["messages"], call["reply"] = messages, text
        try:
            if call.get("error"):
                raise ReplyError(call["error"])
            return _proposal(parse(text, call.get("finish_reason")), ctx, call)
        except ReplyError as e:
            return Proposal(ctx.current, {}, "agent reply", "", failure=f"agent: {e}", call=call)

    def _ask(self, messages: list[dict]) -> tuple[dict, str]:
        """One chat completion with retries on timeouts, rate limits and server errors; the call's record and text."""
        import openai

        c = self.cfg
        call = {"model": c.model, "endpoint": c.endpoint, "attempts": 0, "prompt_tokens": 0, "completion_tokens": 0,
                "total_tokens": 0, "cost_usd": 0.0, "latency_s": 0.0, "finish_reason": "", "error": ""}
        t0 = time.perf_counter()
        for attempt in range(c.retries + 1):
            call["attempts"] = attempt + 1
            retry = True
            try:
                r = self.client().chat.completions.create(model=c.model, messages=messages, temperature=c.temperature,
                                                          max_tokens=c.max_tokens)
            except openai.RateLimitError:
                call["error"] = "rate limited (HTTP 429)"
            except openai.APITimeoutError:
                call["error"] = f"no reply within agent.timeout_s={c.timeout_s:g} s"
            except openai.APIConnectionError as e:
                call["error"] = f"cannot reach {c.endpoint} ({type(e).__name__})"
            except openai.APIStatusError as e:
                call["error"] = f"HTTP {e.status_code}: {str(e)[:300]}"
                retry = e.status_code >= 500
            except openai.OpenAIError as e:    # e.g. a reply that is not a chat completion
                call["error"], retry = f"{type(e).__name__}: {str(e)[:300]}", False
            else:
                u = r.usage
                if u is not None:
                    call.update(prompt_tokens=u.prompt_tokens or 0, completion_tokens=u.completion_tokens or 0,
                                total_tokens=u.total_tokens or 0)
                    call["cost_usd"] = (call["prompt_tokens"] * c.usd_per_mtok_in
                                        + call["completion_tokens"] * c.usd_per_mtok_out) / 1e6
                call["latency_s"] = time.perf_counter() - t0
                if not r.choices:
                    call["error"] = "reply without choices"
                    return call, ""
                msg = r.choices[0].message
                call["finish_reason"], call["error"] = r.choices[0].finish_reason or "", ""
                if getattr(msg, "refusal", None):
                    call["error"] = f"refused: {msg.refusal[:300]}"
                return call, msg.content or ""
            if not retry or attempt == c.retries:
                break
            time.sleep(c.backoff_s * 2 ** attempt)
        call["latency_s"] = time.perf_counter() - t0
        return call, ""


def spent(trail: list[TrailRow]) -> tuple[int, float]:
    """Tokens and dollars the agent spent on the trail's rounds so far."""
    calls = [r.agent_call for r in trail]
    return sum(int(c.get("total_tokens", 0)) for c in calls), sum(float(c.get("cost_usd", 0.0)) for c in calls)


def prompt(ctx: Context, trail_rows: int) -> str:
    """The round's user message: the slice, the reference kernel, the current strategy and sources, the gaps and
    the latest rows of the trail."""
    rec = ctx.record
    main = rec.main or {}
    facts = {k: main.get(k) for k in ("grid", "block", "registers", "shared_mem", "gpu_time_us") if k in main}
    gaps = "\n".join(f"  {c:<20} {'n/a (not measurable)' if math.isnan(g) else f'{g:+.4f}'}" for c, g in ctx.gaps.items())
    rows = "\n".join(_trail_line(r) for r in ctx.trail[-trail_rows:])
    cuda, vortex = ctx.sources
    return (f"Slice {rec.slice_id}: {rec.family} {json.dumps(to_dict(ctx.problem))}, precision path {ctx.precision}.\n"
            f"Reference kernel: {rec.main_kernel}\nReference launch: {json.dumps(facts)}\n"
            f"Reference name hints: {json.dumps(rec.name_hints.get('parsed', {}))}\n\n"
            f"Current strategy: {json.dumps(ctx.current.to_dict(), sort_keys=True)}\n"
            f"Signed gaps of the current revision (candidate - reference, components on [0, 1]; D is their distance):\n"
            f"{gaps}\n\nTrail so far (latest {trail_rows}):\n{rows}\n\n"
            f"Current CUDA source:\n```cuda\n{cuda}\n```\n\nCurrent Vortex source:\n```c\n{vortex}\n```\n\n"
            f"Your next candidate, as one JSON object:")


def _trail_line(r: TrailRow) -> str:
    d = "" if math.isnan(r.D) else f" D={r.D:.4f}"
    return f"  round {r.round} from {r.parent}: {r.edit} -> {r.decision}{d}; {r.reason[:160]}"


def parse(text: str, finish_reason: str | None = None) -> dict:
    """The reply's JSON object (bare, or inside a ``` block), checked for shape; ReplyError otherwise."""
    if not text.strip():
        raise ReplyError("empty reply")
    m = re.search(r"```(?:json)?\s*(\{.*\})\s*```", text, re.S)
    body = m.group(1) if m else text[text.find("{"): text.rfind("}") + 1]
    try:
        obj = json.loads(body)
    except json.JSONDecodeError as e:
        cut = " (reply cut at agent.max_tokens)" if finish_reason == "length" else ""
        raise ReplyError(f"reply is not one JSON object{cut}: {e.msg} at {e.pos}; starts {text[:80]!r}") from e
    if not isinstance(obj, dict) or obj.get("action") not in ("edit", "sources"):
        raise ReplyError("reply JSON needs \"action\": \"edit\" or \"sources\"")
    if obj["action"] == "edit" and (not isinstance(obj.get("set"), dict) or not obj["set"]):
        raise ReplyError("an edit needs a non-empty \"set\" object of strategy knobs")
    if obj["action"] == "sources":
        for side in ("cuda", "vortex"):
            if not isinstance(obj.get(side), str) or not obj[side].strip():
                raise ReplyError(f"a source pair needs a non-empty \"{side}\" string")
            if len(obj[side]) > MAX_SOURCE:
                raise ReplyError(f"{side} source of {len(obj[side])} characters exceeds {MAX_SOURCE}")
    return obj


def _proposal(obj: dict, ctx: Context, call: dict) -> Proposal:
    reason = f"agent: {str(obj.get('reason', ''))[:500]}"
    if obj["action"] == "sources":
        return Proposal(ctx.current, {}, "free-form", reason, sources=(obj["cuda"], obj["vortex"]), call=call)
    s = edited(ctx.current, obj["set"])
    if s.hash() in ctx.tried:
        raise ReplyError(f"edit {json.dumps(obj['set'], sort_keys=True)} gives a strategy already tried")
    if why := ctx.valid(s):
        raise ReplyError(f"edit {json.dumps(obj['set'], sort_keys=True)} is not valid on both targets: {why}")
    diff = ctx.current.diff(s)
    return Proposal(s, diff, "+".join(f"{k}->{v[1]}" for k, v in sorted(diff.items())), reason, call=call)


def edited(current: Strategy, changes: dict) -> Strategy:
    """`current` with the knob values of an agent's edit, each checked against the knob's type and choices."""
    known = {f.name: f for f in fields(Strategy)}
    for k, v in changes.items():
        if k not in known:
            raise ReplyError(f"unknown strategy knob {k!r}")
        default = known[k].default
        if type(v) is not type(default):
            raise ReplyError(f"knob {k}={v!r} must be {type(default).__name__}")
        if k in _CHOICES and v not in _CHOICES[k]:
            raise ReplyError(f"knob {k}={v!r}: choose one of {list(_CHOICES[k])}")
    s = current.with_(**changes)
    if s == current:
        raise ReplyError("edit changes nothing")
    return s
