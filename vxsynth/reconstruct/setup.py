"""Build a LoopEnv from the composed configuration (plain dicts, so bare GPU hosts can use it too)."""

from __future__ import annotations

import atexit
import importlib.util
from pathlib import Path

import torch

from vxsynth.agent.llm import LLMAgent
from vxsynth.agent.optimizer import OptunaSearch
from vxsynth.agent.profile_guided import ProfileGuided
from vxsynth.checks.run import CheckEnv
from vxsynth.errors import VxError
from vxsynth.profiling.platforms import check_platform
from vxsynth.reconstruct import probe_timers
from vxsynth.reconstruct.loop import LoopEnv, pair, reconstruct
from vxsynth.reconstruct.settings import loop_config, records_in  # noqa: F401 - re-exported for the loop's callers
from vxsynth.records import LoopResult, SliceRecord
from vxsynth.signature import in_workload, measure
from vxsynth.targets import jail, preprocess
from vxsynth.targets.cuda import nvcc
from vxsynth.targets.gpu_worker import GpuPool
from vxsynth.targets.vortex_host import TARGET_OTHERS, HostExecutor, VortexConfig


def gpu_available(platform: dict) -> str | None:
    """None when this machine can run and measure CUDA candidates for `platform`, else why not."""
    if platform.get("device") == "cpu" or not platform.get("ncu"):
        return f"platform {platform['name']} has no GPU measurement"
    try:
        check_platform(platform)
    except VxError as e:
        return str(e)
    if nvcc() is None:
        return "nvcc not found"
    if importlib.util.find_spec("cupy") is None:
        return "CuPy not installed (pip install .[gpu])"
    return None


def gpu_skipped(cfg: dict) -> str | None:
    """Why the configured run skips its GPU steps (`gpu` auto/true/false on `cfg['platform']`), None when they run."""
    return gpu_available(cfg["platform"]) if cfg.get("gpu", "auto") in ("auto", True, "true") else "disabled by gpu=false"


def loop_env(cfg: dict, platform: dict, work: Path) -> tuple[LoopEnv, str | None]:
    """The environment the loop runs in, and why GPU steps are skipped (None when they run)."""
    why = gpu_skipped({**cfg, "platform": platform})
    if cfg.get("gpu", "auto") in (True, "true") and why:
        raise VxError(f"gpu=true but {why}")
    gpu = why is None
    tgt = cfg["target"]
    if tgt.get("executor", "host") != "host":
        raise VxError(f"target.executor={tgt['executor']!r}: use `vxsynth simx` for SimX runs; reconstruction uses the host executor")
    if (no_jail := jail.available()) is not None:
        raise VxError(no_jail)
    vortex = HostExecutor(VortexConfig.from_dict(tgt, others=TARGET_OTHERS), cache_dir=work / "vxhost-cache", objects=cfg["sandbox"].get("objects"))
    flags = {"cuda.matmul.allow_tf32": torch.backends.cuda.matmul.allow_tf32, "cudnn.allow_tf32": torch.backends.cudnn.allow_tf32}
    chk = CheckEnv(vortex, cfg["precision"], cuda=gpu, device="cuda" if gpu else "cpu", precision_flags=flags,
                   arch=cfg.get("cuda_arch", preprocess.CUDA_ARCH), compile_cache=work / "build-cache")
    if gpu:
        chk.pool = GpuPool(torch.cuda.device_count())
        atexit.register(chk.pool.close)
    env = LoopEnv(chk, cfg["sandbox"]["rules"], component_set=tuple(platform.get("components") or ()),
                  objects=cfg["sandbox"].get("objects"))
    where = cfg["loop"].get("measure_in", "isolated")
    if where not in ("isolated", "workload"):
        raise VxError(f"loop.measure_in={where!r}: use isolated (measurement harness) or workload (inside the running workload)")
    if gpu and where == "isolated":
        env.measure = lambda c, launch, rec, folder, at: measure.candidate(c, launch, rec, platform, at / "ncu")
        env.measure_batch = lambda batch, rec, at: measure.candidates(batch, rec, platform, at / "ncu-batch")
        repeats = int(cfg["loop"]["reference_repeats"])
        env.reference = lambda rec: measure.reference(rec, platform, work / rec.slice_id / "reference-ncu", repeats)
    elif gpu:
        env.measure = lambda c, launch, rec, folder, at: in_workload.candidate(rec, folder, launch.cubin, c.name,
                                                                               platform, at / "ncu-workload")
        env.reference = in_workload.reference
    if gpu:
        env.time_kernels = lambda problem, precision, at: probe_timers.cuda_timer(
            problem, lambda s: pair(problem, s, precision, env.checks.vortex.cfg), chk, at)
        if where == "isolated":
            env.ncu_kernels = lambda rec, at: probe_timers.ncu_timer(
                rec, lambda s: pair(rec.problem, s, rec.precision, env.checks.vortex.cfg), chk, platform, at)
        env.measured_with = {"platform": platform["name"], "metric_set": platform["metric_set"], "measured_in": where,
                             **platform["ncu"]}
    return env, why


def run_slice(cfg: dict, record: SliceRecord, out: Path, work: Path | None = None, env: LoopEnv | None = None,
              loop=None, log=print) -> LoopResult:
    """One slice's reconstruction as the composed config `cfg` says: its loop environment (built here unless the
    caller runs several slices in one, `env`), its loop settings (`loop` overrides them), its agent; the result."""
    work = Path(work or out / "work")
    env = env or loop_env(cfg, cfg["platform"], work)[0]
    return reconstruct(record, loop or loop_config(cfg), env, make_agent(cfg), out, log=log, work_dir=work)


AGENTS = {"profile_guided": ProfileGuided, "llm": LLMAgent, "optuna": OptunaSearch}


def make_agent(cfg: dict):
    a = cfg["agent"]
    if a["name"] not in AGENTS:
        raise VxError(f"agent {a['name']!r} unknown; choose one of {sorted(AGENTS)}")
    return AGENTS[a["name"]](**{k: v for k, v in a.items() if k != "name"})
