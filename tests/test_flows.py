"""Orchestration end to end on CPU: the demo-scale rebuild, interrupted and resumed; scheduling against a real local
Prefect API; the report opened in headless Chromium; one-line errors for bad input."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import RECORDED, ROOT

PY = sys.executable
CLI = [PY, "-m", "flows.cli"]


def _env(tmp: Path, **extra) -> dict:
    return {**os.environ, "PREFECT_HOME": str(tmp / "prefect"), "PYTHONUNBUFFERED": "1", **extra}


def _wait(pred, timeout: float, proc=None) -> bool:
    t = time.time()
    while time.time() - t < timeout:
        if pred():
            return True
        if proc is not None and proc.poll() is not None:
            return False
        time.sleep(0.5)
    return False


def _demo_runs_gpu_steps() -> bool:
    """Whether `vxsynth demo` runs its GPU steps here: it takes the h200 (h100, orin) platform when torch sees that GPU
    (`_local_platform` in flows/cli.py), else the cpu platform, whose GPU steps are skipped and said to be."""
    import torch

    return torch.cuda.is_available() and any(p in torch.cuda.get_device_name(0).lower() for p in ("h200", "h100", "orin"))


def test_demo_rebuild_interrupted_then_resumed_recomputes_nothing_finished(tmp_path, prefect):
    data = tmp_path / "data"
    cmd = [*CLI, "demo", f"data_dir={data}", "rebuild.cpu_workers=1", f"simx.home={tmp_path / 'no-vortex'}"]
    first = subprocess.Popen(cmd, cwd=ROOT, env=_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             start_new_session=True)
    suite = data / "suite"
    assert _wait(lambda: len(list(suite.glob("*/.stamp.json"))) >= 2, 600, first), first.stdout.read().decode()[-3000:]
    os.killpg(first.pid, signal.SIGKILL)                               # interrupt mid-suite
    first.wait()
    done = {p.parent.name: p.stat().st_mtime_ns for p in suite.glob("*/result.json") if (p.parent / ".stamp.json").exists()}
    assert 2 <= len(done) < 5
    slices_mtime = (data / "slices" / "suite.parquet").stat().st_mtime_ns
    second = subprocess.run(cmd, cwd=ROOT, env=_env(tmp_path), capture_output=True, text=True, timeout=900)
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    out = second.stdout + second.stderr
    for sid, mtime in done.items():                                   # finished slices were not recomputed
        assert (suite / sid / "result.json").stat().st_mtime_ns == mtime
        assert f"[{sid}] up to date" in out
    assert (data / "slices" / "suite.parquet").stat().st_mtime_ns == slices_mtime and "slices up to date" in out
    assert len(list(suite.glob("*/.stamp.json"))) == 5
    report = (data / "report" / "report.md").read_text()
    assert f"skipped SimX checks of the final pairs**: VORTEX_HOME={tmp_path / 'no-vortex'} does not exist" in report
    statuses = [json.loads((p / "status.json").read_text())["status"] for p in suite.iterdir() if p.is_dir()]
    sids = {p.name for p in suite.iterdir() if p.is_dir()}
    said = {line.split(":")[0].strip(): line for line in second.stdout.splitlines()
            if line.startswith("  ") and line.split(":")[0].strip() in sids}
    assert set(said) == sids, second.stdout[-3000:]
    if _demo_runs_gpu_steps():                                        # an H200 (or Orin) host: the full loop, with D
        assert "skipped GPU steps" not in report
        assert statuses == ["reconstructed"] * 5
        assert all(": reconstructed (D " in line for line in said.values()), said
        assert "- **slices reconstructed**: 5" in report
    else:                                                             # no GPU: round 0's CPU-side check, said as such
        assert "skipped GPU steps" in report and "vortex vs reference" in report
        assert statuses == ["start checked on CPU"] * 5
        assert all("start checked on CPU: round 0 only, vortex vs reference: pass" in line for line in said.values())
        assert "- **slices start checked on CPU**: 5" in report
    import pandas as pd
    table = pd.read_parquet(data / "report" / "suite_report.parquet")
    assert len(table) == 5 and set(table["precision"]) == {"FP32", "BF16", "TF32_FP16"}
    assert any(m.endswith("_tiny") for m in table["models"]) and any(m == "pi0" for m in table["models"])


def test_a_failing_slice_is_recorded_and_the_suite_goes_on(tmp_path, prefect, h200_slices):
    from flows.reconstruct import reconstruct_flow

    data = tmp_path / "data"
    shutil.copytree(h200_slices, data / "slices")
    (data / "suite").mkdir(parents=True)
    (data / "suite" / "linear-fp32-1x4096x260-h200-4da0e5").write_text("")   # its output cannot be written
    out = reconstruct_flow([f"data_dir={data}", "gpu=false"], ["linear-fp32-1x4096x260", "matmul-fp32-8x302x64x302"])
    status = {r["slice_id"]: r["status"] for r in out}
    assert status == {"linear-fp32-1x4096x260-h200-4da0e5": "failed", "matmul-fp32-8x302x64x302-h200-47e418": "start checked on CPU"}
    assert "linear-fp32-1x4096x260" in [r for r in out if r["status"] == "failed"][0]["error"]


def test_a_slice_whose_start_fails_its_checks_is_failed_not_stamped(tmp_path, prefect, h200_slices):
    """No candidate passing both checks is no rebuilt pair (seen on the H200 when the jail vanished mid-run): the slice
    says failed with the check's reason and is run again next time, not reported as reconstructed."""
    from flows.reconstruct import reconstruct_flow

    data = tmp_path / "data"
    shutil.copytree(h200_slices, data / "slices")
    exact = ["precision.FP32.check2.atol=1e-30", "precision.FP32.check2.accum=0.0"]   # fp32 sums vs float64
    [r] = reconstruct_flow([f"data_dir={data}", "gpu=false", "loop.rounds=0", *exact], ["linear-fp32-1x4096x260"])
    assert r["status"] == "failed" and "no candidate passed both checks: check1" in r["error"], r
    assert "check2 vortex vs reference: fail" in r["error"] and "outside tolerance" in r["error"], r["error"]
    sdir = data / "suite" / r["slice_id"]
    assert json.loads((sdir / "status.json").read_text())["status"] == "failed" and not (sdir / ".stamp.json").exists()


def test_a_start_that_cannot_implement_its_slice_is_named_in_the_failure(tmp_path, prefect, h200_slices):
    """`+loop.initial.block_m=48` (an int, so the settings pass) cannot implement any slice: the slice fails with the
    start's own reason, not only 'check1 not run'."""
    from flows.reconstruct import reconstruct_flow

    data = tmp_path / "data"
    shutil.copytree(h200_slices, data / "slices")
    [r] = reconstruct_flow([f"data_dir={data}", "gpu=false", "loop.rounds=0", "+loop.initial.block_m=48"],
                           ["linear-fp32-1x4096x260"])
    assert r["status"] == "failed" and "check1 not run" in r["error"], r
    assert "round 0 crashed: ValueError: strategy cannot implement the problem: block_m=48 must be a power of two" in r["error"]


@pytest.mark.parametrize("damage,msg", [("kind", "problem kind 'fft'"), ("truncate", "not valid JSON")])
def test_a_damaged_record_is_refused_before_anything_runs(tmp_path, h200_slices, damage, msg):
    data = tmp_path / "data"
    shutil.copytree(h200_slices, data / "slices")
    bad = data / "slices" / "linear-fp32-1x4096x260-h200-4da0e5" / "slice.json"
    rec = json.loads(bad.read_text())
    rec["problem"]["kind"] = "fft"
    bad.write_text(json.dumps(rec) if damage == "kind" else bad.read_text()[:200])   # a damaged or truncated record
    r = subprocess.run([*CLI, "reconstruct", f"data_dir={data}"], cwd=ROOT, env=_env(tmp_path), capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 1 and r.stderr.count("error: ") == 1 and msg in r.stderr, r.stderr[-2000:]
    assert "Traceback" not in r.stderr + r.stdout and not (data / "suite").exists()


def test_schedule_create_list_remove_on_a_local_prefect_api(tmp_path, prefect):
    env = _env(tmp_path)
    assert env["PREFECT_API_URL"] == prefect                          # the test run's one server

    def cli(*args):
        r = subprocess.run([*CLI, "schedule", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
        return r.returncode, r.stdout + r.stderr
    rc, out = cli("--cron", "0 2 * * *", "--name", "nightly", "--pool", "h200", "platform=h200")
    assert rc == 0 and "deployment rebuild/nightly" in out and f"PREFECT_API_URL={prefect}" in out, out
    rc, out = cli("--flow", "profile", "--name", "profile-orin", "--pool", "orin", "platform=orin")
    assert rc == 0, out
    rc, out = cli("--list")
    assert "rebuild/nightly  pool=h200  cron=0 2 * * *" in out and "profile/profile-orin  pool=orin" in out
    rc, out = cli("--remove", "rebuild/nightly")
    assert rc == 0 and "rebuild/nightly" not in cli("--list")[1]
    rc, out = cli("--cron", "every night")
    assert rc == 1 and "is not a cron expression" in out


@pytest.mark.parametrize("args,msg", [(["--cron", "every night"], "is not a cron expression"),
                                      (["--cron", "every night", "platform=tpu"], "is not a cron expression"),  # first
                                      (["platform=tpu"], "Could not find 'platform/tpu'"),
                                      (["--flow", "slice"], "--flow 'slice': choose one of"),
                                      (["loop.threshold=-1"], "loop.threshold=-1 must be at least 0")])
def test_a_bad_schedule_is_answered_before_any_prefect_server_starts(tmp_path, args, msg):
    """`vxsynth schedule` checks the flow, the cron expression and its settings (as a run of it checks them, which takes
    seconds) first: one line, no server started (none configured here, so the project's own would start), nothing registered."""
    env = {k: v for k, v in _env(tmp_path).items() if k != "PREFECT_API_URL"}
    t = time.time()
    r = subprocess.run([*CLI, "schedule", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and r.stderr.count("error: ") == 1 and msg in r.stderr, r.stderr[-2000:]
    assert "starting the project's Prefect server" not in r.stdout + r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "prefect" / "vxsynth-server.json").exists() and time.time() - t < 30


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


@pytest.mark.skipif(_chromium() is None, reason="no Chromium (apt-get install chromium)")
def test_report_renders_in_headless_chromium(tmp_path, h200_slices):
    from vxsynth.report.build import build

    local = tmp_path / "suite"                                        # a local run of one slice, beside the recorded three
    shutil.copytree(RECORDED / "reconstruct" / "linear-fp32-302x512x3200-h200-a0ce7c", local / "linear-fp32-302x512x3200-h200-a0ce7c")
    out = tmp_path / "report"
    build(h200_slices, local, [RECORDED.parent / "simx"], out, {"run": "test"}, RECORDED / "reconstruct")
    assert {p.name for p in (out / "plots").iterdir()} >= {"d_per_round.png", "recorded-d_per_round.png",
                                                          "recorded-matmul-bf16-8x51x256x355-h200-acb8f2.png"}
    md = (out / "report.md").read_text()
    assert "## Recorded H200 reconstructions" in md and "Recorded, not rerun here" in md and "measured on h200 with ncu" in md
    bmm = md[md.index("#### matmul-bf16-8x51x256x355-h200-acb8f2"):]                 # its committed SimX sweeps
    assert "- [dcache] dcache_size 4096 -> 65536: dcache_hit_rate" in bmm and "check 2 on SimX: pass" in bmm
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", f"--user-data-dir={tmp_path / 'chrome'}"]
    url = (out / "index.html").as_uri()
    dom = subprocess.run([_chromium(), *flags, "--dump-dom", url], capture_output=True, text=True, timeout=120).stdout
    assert dom.count("<section class=\"slice\"") == 4 and dom.count("<h2>Recorded H200 reconstructions</h2>") == 1
    assert dom.count('src="data:image/png;base64,') == 6 and "src=\"plots/" not in dom   # plots embedded: one file
    assert "matmul-bf16-8x51x256x355-h200-acb8f2" in dom and "Decision applicability" in dom
    assert "strategy: data/suite/matmul-bf16-8x51x256x355-h200-acb8f2" in md   # recorded as /work/main/data/suite/...
    assert "strategy: /" not in md and "strategy: /" not in dom
    measured = tmp_path / "measured.html"                             # every table fits a 1400-px window, no scrolling
    measured.write_text((out / "index.html").read_text() + "<script>document.body.dataset.over = JSON.stringify("
                        "[...document.querySelectorAll('table')].filter(t => t.scrollWidth > t.clientWidth).length)</script>")
    dom = subprocess.run([_chromium(), *flags, "--window-size=1400,1000", "--dump-dom", measured.as_uri()], capture_output=True,
                         text=True, timeout=120).stdout
    assert 'data-over="0"' in dom
    shot = tmp_path / "shot.png"
    subprocess.run([_chromium(), *flags, f"--screenshot={shot}", "--window-size=1400,3000", url], capture_output=True, timeout=120)
    import matplotlib.image as mpimg
    img = mpimg.imread(shot)
    assert img.shape[0] == 3000 and img.std() > 0.05                   # a rendered page, not a blank one


@pytest.mark.parametrize("args,msg", [
    (["config", "platform=tpu"], "choose one of ['cpu', 'h100', 'h200', 'orin']"),
    (["config", "workload=gpt"], "choose one of ['act', 'diffusion', 'pi0', 'tdmpc']"),
    (["config", "loop.initial.block_m=32"], "loop.initial starts empty: add 'loop.initial.block_m' with +loop.initial.block_m="),
    (["config", "loop.rounsd=3"], "the config has no 'loop.rounsd'; loop has batch, "),
    (["slices", "data_dir=/nonexistent"], "table not found"),
    (["check", "replay", "no-such-check", "data_dir=/nonexistent"], "matches 0 records"),
    (["simx", "detect", "simx.home=/nonexistent"], "does not exist"),
    (["rebuild", "target.unstaged_fallback=maybe", "data_dir=/nonexistent"], "target.unstaged_fallback='maybe': use true or false"),
    (["rebuild", "+target.max_block=4", "data_dir=/nonexistent"], "target.max_block: no such Vortex target setting; use one of "),
    (["slice", "precision.BF16.check2.accum_growth=linear", "data_dir=/nonexistent"],
     "precision.BF16.check2.accum_growth='linear': use one of sqrt(K), K"),
])
def test_bad_input_gets_a_one_line_error(args, msg, tmp_path):
    r = subprocess.run([*CLI, *args], cwd=ROOT, env=_env(tmp_path, VORTEX_HOME=""), capture_output=True, text=True, timeout=300)
    err = [l for l in r.stderr.splitlines() if l.startswith("error: ")]
    assert r.returncode == 1 and len(err) == 1 and msg in err[0], r.stderr[-2000:]


@pytest.mark.parametrize("args", [["profile", "platform=nosuch"], ["reconstruct", "loop.rounds=abc"],
                                  ["reconstruct", "--slice", "nosuch"], ["rebuild", "loop.rounds=abc"],
                                  ["demo", "loop.rounds=abc"], ["reproduce", "nothex"], ["report"],
                                  ["simx", "sweep", "--slice", "nosuch"], ["schedule", "loop.rounds=abc"]])
def test_bad_input_is_answered_before_torch_pandas_or_prefect_load(args, tmp_path):
    """What makes common bad input fast (`bench/cli_latency.py`): its one error line comes before the heavy imports."""
    from vxsynth.profiling.platforms import cuda

    if args[0] == "demo" and cuda() is not None:
        pytest.skip("on a GPU host `demo` asks torch which GPU it is before anything else")
    (tmp_path / "data" / "slices" / "some-slice").mkdir(parents=True)
    (tmp_path / "data" / "slices" / "some-slice" / "slice.json").write_text("{}")
    data = [] if args[0] == "reproduce" else [f"data_dir={tmp_path / 'data'}"]
    r = subprocess.run([PY, "-X", "importtime", *CLI[1:], *args, *data], cwd=ROOT, env=_env(tmp_path), capture_output=True,
                       text=True, timeout=300)
    err = [line for line in r.stderr.splitlines() if line.startswith("error: ")]
    assert r.returncode == 1 and len(err) == 1, r.stderr[-2000:]
    loaded = {line.split("|")[-1].strip() for line in r.stderr.splitlines() if line.startswith("import time:")}
    assert loaded & {"torch", "pandas", "pyarrow", "prefect"} == set(), err


@pytest.mark.parametrize("command", ["rebuild", "demo"])
def test_a_platform_this_machine_is_not_gets_one_line_naming_where_its_stage_runs(command, tmp_path):
    """No Jetson here: one error line, before any orchestration (no server started, no flow run), naming the two ways
    to run the Orin stage there, the DVC one by its stage name in dvc.yaml."""
    import torch
    import yaml

    if torch.cuda.is_available() and "orin" in torch.cuda.get_device_name(0).lower():
        pytest.skip("this machine is an Orin")
    env = {k: v for k, v in _env(tmp_path).items() if k != "PREFECT_API_URL"}
    r = subprocess.run([*CLI, command, "platform=orin", f"data_dir={tmp_path / 'data'}"], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=300)
    lines = (r.stdout + r.stderr).strip().splitlines()
    assert r.returncode == 1 and len(lines) == 1, r.stdout[-2000:] + r.stderr[-2000:]
    assert lines[0].startswith("error: rebuild platform=orin cannot run here: platform 'orin' needs an NVIDIA GPU")
    assert "a Prefect worker of pool `orin` there" in lines[0] and "`dvc repro profile@orin` in a checkout there" in lines[0]
    assert "orin" in yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]["profile"]["foreach"]
    assert not (tmp_path / "prefect").exists() and not (tmp_path / "data").exists()


def test_advice_names_only_stages_that_exist(tmp_path):
    """The h100 platform (reconstruction on an H100) has no DVC profiling stage: off an H100 its one error line names
    the Prefect way only, never a `dvc repro` target dvc.yaml lacks."""
    import torch
    import yaml

    if torch.cuda.is_available() and "h100" in torch.cuda.get_device_name(0).lower():
        pytest.skip("this machine is an H100")
    env = {k: v for k, v in _env(tmp_path).items() if k != "PREFECT_API_URL"}
    r = subprocess.run([*CLI, "rebuild", "platform=h100", f"data_dir={tmp_path / 'data'}"], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=300)
    lines = (r.stdout + r.stderr).strip().splitlines()
    assert r.returncode == 1 and len(lines) == 1, r.stdout[-2000:] + r.stderr[-2000:]
    assert lines[0].startswith("error: rebuild platform=h100 cannot run here") and "pool `h100`" in lines[0]
    assert "h100" not in yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]["profile"]["foreach"]
    assert "dvc repro" not in lines[0] and not (tmp_path / "data").exists()


def test_a_slice_being_reconstructed_elsewhere_is_refused(tmp_path, prefect, h200_slices):
    from vxsynth.store.lock import exclusive

    data = tmp_path / "data"
    shutil.copytree(h200_slices, data / "slices")
    sid = "linear-fp32-1x4096x260-h200-4da0e5"
    with exclusive(data / "suite" / sid, f"slice {sid}"):             # another run holds this slice
        r = subprocess.run([*CLI, "reconstruct", "--slice", sid, f"data_dir={data}", "gpu=false", "loop.rounds=0"],
                           cwd=ROOT, env=_env(tmp_path), capture_output=True, text=True, timeout=600)
    assert r.returncode == 1, r.stdout[-2000:] + r.stderr[-2000:]
    err = [line for line in r.stderr.splitlines() if line.startswith("error: ")]
    assert len(err) == 1 and f"slice {sid} is being written by pid {os.getpid()}" in err[0]
    assert not (data / "suite" / sid).exists()                        # nothing of it was touched


def test_flow_commands_use_the_one_server_and_the_report_is_world_readable(tmp_path, prefect, h200_slices, rebuild_h):
    """`vxsynth report` on one slice of the committed H200 rebuild: no temporary server, the files readable by others
    (0755/0644 under umask 022), and its FP32 check 2 shown with the accumulation bound that decides it."""
    data = tmp_path / "data"
    shutil.copytree(h200_slices, data / "slices")
    sid = "linear-fp32-302x512x512-h200-cbeaff"
    shutil.copytree(rebuild_h / sid, data / "suite" / sid)
    r = subprocess.run([*CLI, "report", f"data_dir={data}"], cwd=ROOT, env=_env(tmp_path), capture_output=True, text=True,
                       timeout=300, preexec_fn=lambda: os.umask(0o022))
    out = r.stdout + r.stderr
    assert r.returncode == 0 and (data / "report" / "index.html").exists(), out[-2000:]
    modes = {p.relative_to(data).as_posix(): oct(p.stat().st_mode & 0o777) for p in [data / "report", *(data / "report").rglob("*")]}
    assert set(modes.values()) == {"0o755", "0o644"} and modes["report"] == "0o755" and modes["report/index.html"] == "0o644"
    row = next(line for line in (data / "report" / "report.md").read_text().splitlines() if line.startswith(f"| {sid}"))
    assert ("pass (1.33e-06, atol 1e-07 rtol 0 + accumulation bound 2·K·2⁻²⁴·(\\|A\\|\\|B\\|+\\|bias\\|); worst element "
            "1.33e-06 of 5.43e-04 allowed)") in row
    assert "temporary server" not in out and "Recorded H200 reconstructions" in (data / "report" / "report.md").read_text()
    r = subprocess.run([*CLI, "server", "status"], cwd=ROOT, env=_env(tmp_path), capture_output=True, text=True, timeout=60)
    assert f"PREFECT_API_URL={prefect} (configured)" in r.stdout


def test_the_kept_server_is_started_once_reused_and_stopped(tmp_path):
    env = {k: v for k, v in _env(tmp_path).items() if k != "PREFECT_API_URL"}
    ensure = [PY, "-c", "from flows import server; s = server.ensure(); print(s, server.running()['pid'])"]

    def run(cmd):
        return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert "no local server running" in run([*CLI, "server", "status"]).stdout
    first = run(ensure)
    assert first.returncode == 0 and "starting the project's Prefect server" in first.stderr, first.stderr[-2000:]
    second = run(ensure)
    assert second.stdout == first.stdout and "starting" not in second.stderr          # same url, same pid: reused
    pid = int(first.stdout.split()[1])
    assert "stopped" in run([*CLI, "server", "stop"]).stdout
    assert _wait(lambda: not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text().lower(), 30)
    assert "no local server running" in run([*CLI, "server", "status"]).stdout


def test_dvc_is_found_beside_the_interpreter_when_not_on_path(monkeypatch):
    from flows import dvc

    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    assert dvc.executable() == str(Path(PY).parent / "dvc")
    monkeypatch.setattr(dvc.sys, "executable", "/nonexistent/python")
    with pytest.raises(dvc.VxError, match="dvc not found"):
        dvc.executable()
