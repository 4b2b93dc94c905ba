"""The speed probe's timers on this machine's GPU: CUDA events for the sweep, ncu in the signature harness for the
finalists (`speed.probe` takes them as `time_fn` and `ncu_fn`)."""

from __future__ import annotations

import os
import statistics
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from vxsynth.kernels.problem import Problem
from vxsynth.kernels.strategy import Strategy
from vxsynth.reconstruct.speed import PROBE_REPEAT, Timed
from vxsynth.records import SliceRecord

if TYPE_CHECKING:
    from vxsynth.signature.measure import Measurement


def cuda_timer(problem: Problem, make: Callable[[Strategy], object], checks, work: Path,
               jobs: int | None = None) -> Callable[[list[Strategy]], list[Timed]]:
    """A `time_fn` on this machine's GPU: candidates built by `make`, compiled in parallel (the checks' compile
    cache), launched one after another through the checks' GPU workers on the slice's normal-case inputs."""
    from vxsynth.kernels import tensors as T
    from vxsynth.targets.cuda import compile_cuda, run_cuda

    bufs = T.make_inputs(problem, 0)

    def build(i_s):
        i, s = i_s
        c = make(s)
        return c, compile_cuda(c, work / f"v{i}", checks.arch, cache=checks.compile_cache)

    def time_all(strategies: list[Strategy]) -> list[Timed]:
        with ThreadPoolExecutor(jobs or os.cpu_count()) as ex:
            built = list(ex.map(build, enumerate(strategies)))
        out = []
        for i, (s, (c, cr)) in enumerate(zip(strategies, built)):
            if not cr.ok:
                out.append(Timed(s, None, cr.error[:200]))
                continue
            inputs = {k: T.to_numpy(v) for k, v in T.kernel_storages(problem, s.layout, bufs).items()}
            r = run_cuda(c, cr.cubin, inputs, work / f"v{i}", checks.timeout_s, repeat=PROBE_REPEAT, pool=checks.pool,
                         flush_l2=True)
            out.append(Timed(s, statistics.median(r.info["kernel_us"][1:]), "") if r.ok else Timed(s, None, r.error[:200]))
        return out
    return time_all


def ncu_timer(record: SliceRecord, make: Callable[[Strategy], object], checks, pcfg: dict,
              work: Path) -> Callable[[list[Strategy]], list[Measurement | None]]:
    """An `ncu_fn` on this machine's GPU: each strategy's candidate compiled and launched once (its launch, as the
    checks make it), then all measured in one ncu process of the signature harness (`measure.candidates`: the
    platform's metrics, cache and clock control, the measured output judged); its measurement, None where it did not
    build, run or measure."""
    from vxsynth.kernels import tensors as T
    from vxsynth.signature import measure
    from vxsynth.targets.cuda import compile_cuda, run_cuda

    problem = record.problem
    bufs = T.make_inputs(problem, 0)

    def time_all(strategies: list[Strategy]) -> list[Measurement | None]:
        launched = []
        for i, s in enumerate(strategies):
            c, at = make(s), work / f"n{i}"
            cr = compile_cuda(c, at, checks.arch, cache=checks.compile_cache)
            inputs = {k: T.to_numpy(v) for k, v in T.kernel_storages(problem, s.layout, bufs).items()}
            r = run_cuda(c, cr.cubin, inputs, at, checks.timeout_s, pool=checks.pool) if cr.ok else None
            launched.append((c, r.launch) if r is not None and r.ok else None)
        batch = [b for b in launched if b]
        ms = iter(measure.candidates(batch, record, pcfg, work / "ncu") if batch else [])
        out = []
        for b in launched:
            m = next(ms) if b else None
            out.append(m if m is not None and m.ok else None)
        return out
    return time_all
