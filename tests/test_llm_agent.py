"""The language-model agent (agent=llm) against a real local HTTP server that speaks the chat-completions protocol
and replies from a script: a valid edit, a valid free-form pair, malformed JSON, a cheating source, a timeout, an
HTTP 429 and a refusal each land in the trail as specified, and the loop finishes. Candidates are built and checked
for real (host Vortex run against the reference op on CPU); D comes from the real H200 measurements recorded for
the slice's strategies."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pandas as pd
import pytest

from tests.conftest import conf
from tests.test_loop import _env, _record
from vxsynth.agent.llm import LLMAgent
from vxsynth.errors import VxError
from vxsynth.export.trajectories import PENALTY, export, reward_of
from vxsynth.kernels.candidate import make
from vxsynth.kernels.strategy import Strategy
from vxsynth.reconstruct.loop import LoopConfig, reconstruct
from vxsynth.records import SliceRecord
from vxsynth.reconstruct.setup import make_agent
from vxsynth.targets.vortex_host import VortexConfig, lmem_per_block


class _Handler(BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802 - http.server's name
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        srv: ScriptedChat = self.server
        srv.requests.append(body)
        step = srv.script.pop(0)
        time.sleep(step.get("sleep", 0))
        if "status" in step:
            return self._send(step["status"], {"error": {"message": "slow down", "type": "rate_limit"}})
        prompt = sum(len(m["content"]) for m in body["messages"]) // 4
        content = step.get("content")
        done = len(content or "") // 4
        self._send(200, {"id": "cmpl-1", "object": "chat.completion", "created": 0, "model": body["model"],
                         "choices": [{"index": 0, "finish_reason": "stop", "logprobs": None,
                                      "message": {"role": "assistant", "content": content, "refusal": step.get("refusal")}}],
                         "usage": {"prompt_tokens": prompt, "completion_tokens": done, "total_tokens": prompt + done}})

    def _send(self, status: int, obj: dict):
        data = json.dumps(obj).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (the timeout case)

    def log_message(self, *args):
        pass


class ScriptedChat(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, script: list[dict]):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.script, self.requests = list(script), []

    def __enter__(self):
        threading.Thread(target=self.serve_forever, daemon=True).start()
        return self

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"


def _agent(url: str, **kw) -> LLMAgent:
    settings = {k: v for k, v in conf("agent", "llm").items() if k != "name"}
    return LLMAgent(**{**settings, "endpoint": url, "model": "scripted", "api_key_env": None,
                       "timeout_s": 1.0, "retries": 0, "backoff_s": 0.1, **kw})


def _sources(rec: SliceRecord, s: Strategy) -> tuple[str, str]:
    c = make(rec.problem, s, rec.precision, lmem_per_block(s.threads, VortexConfig()))
    return c.cuda_source, c.vortex_source


def test_scripted_replies_land_in_the_trail(h200_slices, tmp_path, recorded):
    trail, ref = recorded
    rec = _record(h200_slices)
    kept = Strategy.from_dict(json.loads(trail.loc[1, "strategy"]))   # the H200 run's first kept edit: block_k 16 -> 8
    cuda, vortex = _sources(rec, kept)
    script = [
        {"content": "Smaller K steps lower intensity.\n```json\n" + json.dumps({"action": "edit", "set": {"block_k": 8},
                                                                                "reason": "lower intensity"}) + "\n```"},
        {"content": json.dumps({"action": "sources", "cuda": "// reviewed by hand\n" + cuda, "vortex": vortex,
                                "reason": "same pair, annotated"})},
        {"content": '{"action": "edit", "set": {"block_m": 32'},                      # malformed JSON
        {"content": json.dumps({"action": "sources", "cuda": "__device__ float vx_cache_[64];\n" + cuda,
                                "vortex": vortex, "reason": "cache the answer"})},     # cheating: state across launches
        {"sleep": 3.0, "content": "{}"},                                              # past agent.timeout_s
        {"status": 429},
        {"refusal": "I cannot help with that."},
    ]
    with ScriptedChat(script) as srv:
        res = reconstruct(rec, LoopConfig(rounds=len(script), threshold=0.005), _env(trail, ref), _agent(srv.url),
                          tmp_path / "out", log=lambda s: None, work_dir=tmp_path / "work")
    srv.shutdown()
    new = pd.read_parquet(tmp_path / "out" / "trail.parquet").set_index("round")
    assert res.rounds == len(script) and not srv.script                # every reply used, the loop finished
    assert list(new["decision"]) == ["initial", "kept", "reverted", "failed", "rejected", "failed", "failed", "failed"]
    assert new.loc[1, "D"] == pytest.approx(trail.loc[1, "D"]) and new.loc[1, "diff"] == '{"block_k": [16, 8]}'
    assert new.loc[1, "edit_reason"].startswith("agent: lower intensity")
    assert (new.loc[2, "source_kind"], new.loc[2, "check2"]) == ("free-form", "vortex vs reference: pass")
    assert new.loc[2, "D"] == pytest.approx(new.loc[1, "D"])              # same kernel, same recorded measurement
    assert "not one JSON object" in new.loc[3, "reason"]
    assert new.loc[4, "reason"].startswith("sandbox: no_persistent_state (cuda)")
    assert "no reply within agent.timeout_s=1" in new.loc[5, "reason"]
    assert "rate limited (HTTP 429)" in new.loc[6, "reason"] and "refused: I cannot" in new.loc[7, "reason"]
    calls = {r: json.loads(new.loc[r, "agent_call"]) for r in range(1, 8)}
    assert all(calls[r]["total_tokens"] > 0 for r in (1, 2, 3, 4, 7)) and calls[5]["total_tokens"] == 0
    assert calls[5]["latency_s"] >= 1.0 and all(c["attempts"] == 1 for c in calls.values())
    # the prompt carried the current pair and its gaps; the round's prompt and reply are kept beside its candidate
    second = srv.requests[1]["messages"][1]["content"]
    assert cuda in second and "l1_hit_rate" in second and "block_k->8 -> kept" in second
    saved = json.loads((tmp_path / "out" / "candidates" / "r003" / "agent.json").read_text())
    assert saved["reply"] == script[2]["content"] and saved["messages"][1]["role"] == "user"
    # the export: one record per round, kinds and rewards recomputable from the rows
    df = export(tmp_path, h200_slices, tmp_path / "export")
    assert list(df["action_kind"]) == ["start", "strategy_edit", "free_form", "no_candidate", "free_form",
                                       "no_candidate", "no_candidate", "no_candidate"]
    assert df.loc[3, "reward"] == -PENALTY and df.loc[1, "reward"] == pytest.approx(trail.loc[0, "D"] - trail.loc[1, "D"])
    assert [reward_of(r) for r in df.to_dict("records")] == pytest.approx(list(df["reward"]), nan_ok=True)


def test_retry_after_rate_limit_then_budget_stops(h200_slices, tmp_path, recorded):
    trail, ref = recorded
    edit = json.dumps({"action": "edit", "set": {"block_k": 8}, "reason": "r"})
    logs: list[str] = []
    with ScriptedChat([{"status": 429}, {"content": edit}, {"content": edit}]) as srv:
        reconstruct(_record(h200_slices), LoopConfig(rounds=3), _env(trail, ref), _agent(srv.url, retries=1, budget_tokens=1),
                    tmp_path / "out", log=logs.append, work_dir=tmp_path / "work")
    srv.shutdown()
    new = pd.read_parquet(tmp_path / "out" / "trail.parquet")
    assert list(new["decision"]) == ["initial", "kept"] and len(srv.script) == 1   # no call once the budget was spent
    assert json.loads(new.loc[1, "agent_call"])["attempts"] == 2
    assert "agent budget spent" in logs[-1]


def test_bad_settings_are_one_line_errors(monkeypatch):
    base = {**conf("agent", "llm"), "api_key_env": None}
    with pytest.raises(VxError, match="needs a model: add agent.model="):
        make_agent({"agent": base})
    with pytest.raises(VxError, match="agent.temprature: unknown setting"):
        make_agent({"agent": {**base, "model": "m", "temprature": 0.1}})
    with pytest.raises(VxError, match="agent.timeout_s='soon' must be float"):
        make_agent({"agent": {**base, "model": "m", "timeout_s": "soon"}})
    monkeypatch.delenv("VX_TEST_KEY", raising=False)
    with pytest.raises(VxError, match="VX_TEST_KEY .* is not set"):
        make_agent({"agent": {**base, "model": "m", "api_key_env": "VX_TEST_KEY"}})
    assert make_agent({"agent": {**base, "model": "m"}}).identity == "llm:m"
