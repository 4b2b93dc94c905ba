"""The project's Prefect API: the configured `PREFECT_API_URL`, else one local server per `PREFECT_HOME`, started on
demand and kept (`vxsynth server stop` ends it).

Prefect's own temporary server is started anew by every command and must come up within 20 s: on a busy machine,
or on a fresh clone whose first start creates the SQLite database, it does not, and every flow command fails. The kept
server pays its start-up once, is found again through `server.json` (pid, url) under `PREFECT_HOME`, and is started
under a file lock so that concurrent commands share one. Imports no Prefect: it runs before any flow is imported.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

from vxsynth.errors import VxError
from vxsynth.store.io import write_json

START_TIMEOUT_S = float(os.environ.get("VXSYNTH_SERVER_TIMEOUT", "600"))


def home() -> Path:
    return Path(os.environ["PREFECT_HOME"])


def _state() -> dict | None:
    p = home() / "vxsynth-server.json"
    try:
        return json.loads(p.read_text())
    except (OSError, ValueError):
        return None


def healthy(url: str, timeout: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=timeout) as r:
            return r.status == 200
    except OSError:
        return False


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except OSError:
        return False


@contextmanager
def _locked():
    home().mkdir(parents=True, exist_ok=True)
    with open(home() / "vxsynth-server.lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


def running() -> dict | None:
    """The kept server's state when it answers, else None."""
    s = _state()
    return s if s and _alive(s["pid"]) and healthy(s["url"]) else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(say) -> dict:
    port = _free_port()
    url = f"http://127.0.0.1:{port}/api"
    log = home() / "server.log"
    say(f"starting the project's Prefect server on {url} (once; the first start creates its database) ...")
    with open(log, "ab") as out:
        proc = subprocess.Popen([sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1",
                                 "--port", str(port), "--no-ui", "--analytics-off"],
                                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                                env={**os.environ, "PREFECT_API_URL": ""})
    t0 = time.monotonic()
    while not healthy(url):
        if proc.poll() is not None:
            tail = log.read_text(errors="replace").strip().splitlines()[-1:] or ["(no output)"]
            raise VxError(f"the Prefect server exited with code {proc.returncode} while starting: {tail[0]} (log: {log})")
        if time.monotonic() - t0 > START_TIMEOUT_S:
            os.killpg(proc.pid, signal.SIGTERM)
            raise VxError(f"the Prefect server did not answer within {START_TIMEOUT_S:.0f} s (log: {log}); "
                          "set VXSYNTH_SERVER_TIMEOUT to wait longer")
        time.sleep(0.3)
    state = {"pid": proc.pid, "url": url, "started": time.time(), "start_s": round(time.monotonic() - t0, 1)}
    write_json(home() / "vxsynth-server.json", state)
    return state


def ensure(say=lambda s: print(s, file=sys.stderr)) -> str:
    """The API URL flows report to, exported as PREFECT_API_URL: the configured one, else the kept local server."""
    if os.environ.get("PREFECT_API_URL"):
        return os.environ["PREFECT_API_URL"]
    with _locked():
        s = running() or _start(say)
    os.environ["PREFECT_API_URL"] = s["url"]
    return s["url"]


def stop() -> dict | None:
    """Stop the kept server (its whole process group); the state it had, or None when none was running."""
    with _locked():
        s = _state()
        if s and _alive(s["pid"]):
            try:
                os.killpg(s["pid"], signal.SIGTERM)
            except ProcessLookupError:
                pass
            for _ in range(100):
                if not _alive(s["pid"]):
                    break
                time.sleep(0.1)
        (home() / "vxsynth-server.json").unlink(missing_ok=True)
        return s
