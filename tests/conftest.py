"""Shared fixtures. Core-only imports at module level: GPU hosts run `pytest -m gpu` without Prefect/DVC/Hydra."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import yaml

os.environ.setdefault("HF_HUB_OFFLINE", "1")   # no model weights or data from a hub
# subprocesses (dvc, vxsynth, prefect) come from the interpreter's environment even when it is not activated
os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
ROOT = Path(__file__).resolve().parent.parent
RECORDED = ROOT / "data" / "recorded" / "h200"


def conf(group: str, name: str = "default") -> dict:
    return yaml.safe_load((ROOT / "conf" / group / f"{name}.yaml").read_text())


@pytest.fixture(scope="session")
def prefect(tmp_path_factory):
    """One Prefect API server (SQLite) for the whole test run, the way commands get theirs (flows.server): in-process
    flows and every `vxsynth` subprocess (which inherits PREFECT_API_URL) report to it; stopped at the end."""
    from flows import server

    os.environ["PREFECT_HOME"] = str(tmp_path_factory.mktemp("prefect-home"))
    os.environ.pop("PREFECT_API_URL", None)
    url = server.ensure(say=lambda s: None)
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings(updates={PREFECT_API_URL: url}):
        yield url
        from prefect.logging.handlers import APILogWorker

        APILogWorker.drain_all(timeout=10)                            # flow logs reach the server before it goes
    server.stop()
    os.environ.pop("PREFECT_API_URL", None)


def recorded_profiles() -> list[Path]:
    return sorted(p for p in RECORDED.iterdir() if (p / "op_calls.parquet").exists())


@pytest.fixture(scope="session")
def recorded():
    """The real H200 trail and reference of the Pi0 attention bmm (the loop tests replay its measurements)."""
    import pandas as pd

    rec = RECORDED / "reconstruct" / "matmul-bf16-8x51x256x355-h200-acb8f2"
    return pd.read_parquet(rec / "trail.parquet"), json.loads((rec / "reference.json").read_text())


@pytest.fixture(scope="session")
def tolerances() -> dict:
    return conf("precision")


@pytest.fixture(scope="session")
def sandbox_rules() -> list[dict]:
    return conf("sandbox")["rules"]


def _unpacked(tmp_path_factory, run: str) -> Path:
    """A committed fidelity run's outputs.tgz (bench/results/RUN), unpacked in a fresh folder."""
    import tarfile

    out = tmp_path_factory.mktemp(run)
    with tarfile.open(ROOT / "bench" / "results" / run / "outputs.tgz") as t:
        t.extractall(out, filter="data")
    return out


@pytest.fixture(scope="session")
def i37(tmp_path_factory) -> Path:
    """The H200 fidelity run of issue 37 (12 slices: result, trail, measurements; bench/results/fidelity_h200_i37),
    unpacked: one folder per slice."""
    return _unpacked(tmp_path_factory, "fidelity_h200_i37") / "fid" / "cuda_first"


@pytest.fixture(scope="session")
def r18(tmp_path_factory) -> Path:
    """The H100 rebuild r18 of the tensor-core slices (bench/results/fidelity_h100_r18: 12 finished, one cut; result,
    trail, speed_probe.json per slice), unpacked: the run's folder (cuda_first/ holds one folder per slice)."""
    return _unpacked(tmp_path_factory, "fidelity_h100_r18") / "r18"


@pytest.fixture(scope="session")
def r19(tmp_path_factory) -> Path:
    """The H100 rebuild r19 of the 15 tensor-core slices (bench/results/fidelity_h100_r19, the time tie-break's first
    rebuild), unpacked: the run's folder."""
    return _unpacked(tmp_path_factory, "fidelity_h100_r19") / "r19"


@pytest.fixture(scope="session")
def r23(tmp_path_factory) -> Path:
    """The H100 run r23 (bench/results/fidelity_h100_r23: 15 tensor-core slices finished, 6 of the suite and 9 sliced
    with every op call kept; its probes keep their finalists' signatures), unpacked: the run's folder."""
    return _unpacked(tmp_path_factory, "fidelity_h100_r23") / "r23"


@pytest.fixture(scope="session")
def r27(tmp_path_factory) -> Path:
    """The H100 whole-suite run r27 (bench/results/fidelity_h100_r27: the 8 TF32 convolutions finished, one cut),
    unpacked: the run's folder."""
    return _unpacked(tmp_path_factory, "fidelity_h100_r27") / "r27"


@pytest.fixture(scope="session")
def r30(tmp_path_factory) -> Path:
    """The H100 whole-suite run r30 (bench/results/fidelity_h100_r30: 3 conv1d slices finished, a fourth cut in its
    start; the four probes complete), unpacked: the run's folder."""
    return _unpacked(tmp_path_factory, "fidelity_h100_r30") / "r30"


@pytest.fixture(scope="session")
def r20(tmp_path_factory) -> Path:
    """The H100 rebuild r20 of the tensor-core slices (bench/results/fidelity_h100_r20: 12 of 15 finished, the wgmma
    kernels' uniform warpgroup index in its first rebuild), unpacked: the run's folder."""
    return _unpacked(tmp_path_factory, "fidelity_h100_r20") / "r20"


@pytest.fixture(scope="session")
def h200_slices(tmp_path_factory) -> Path:
    """The default suite sliced from the committed real H200 profiles."""
    from vxsynth.slicing.stage import run

    out = tmp_path_factory.mktemp("slices") / "slices"
    run(recorded_profiles(), out, conf("slicing"), conf("precision"), log=lambda s: None)
    return out


@pytest.fixture(scope="session")
def rebuild_h(tmp_path_factory) -> Path:
    """The committed whole-suite H200 rebuild (bench/results/rebuild_h200_h/rebuild.tgz) unpacked: its data/suite."""
    import tarfile

    out = tmp_path_factory.mktemp("rebuild_h")
    with tarfile.open(ROOT / "bench" / "results" / "rebuild_h200_h" / "rebuild.tgz") as t:
        t.extractall(out, filter="data")
    return out / "data" / "suite"


def load_slice(slices: Path, prefix: str) -> dict:
    """The slice.json content of the one slice whose id starts with `prefix`."""
    (match,) = [p for p in slices.iterdir() if p.name.startswith(prefix)]
    return json.loads((match / "slice.json").read_text())


def slice_record(slices: Path, prefix: str):
    """The typed record (`SliceRecord`) of the one slice whose id starts with `prefix`."""
    from vxsynth.records import SliceRecord

    (match,) = [p for p in slices.iterdir() if p.name.startswith(prefix)]
    return SliceRecord.load(match / "slice.json")


def runnable(problem, strategy, precision) -> bool:
    """The strategy implements the problem on CUDA and fits the default Vortex core (the loop's validity rule)."""
    from vxsynth.kernels.candidate import make
    from vxsynth.kernels.strategy import check
    from vxsynth.targets.vortex_host import VortexConfig, lmem_per_block, occupancy_error

    if check(problem, strategy, tensor_ok=precision != "FP32"):
        return False
    try:
        c = make(problem, strategy, precision, lmem_per_block(strategy.threads, VortexConfig()))
    except ValueError:
        return False
    return occupancy_error(c, VortexConfig()) is None


def loop_result(wall_s_this_run: float = 0.0, wall_s_total: float = 0.0):
    """A real loop result (the recorded H200 reconstruction of a linear), with the wall seconds a stubbed loop says."""
    import dataclasses

    from vxsynth.records import LoopResult

    res = LoopResult.load(RECORDED / "reconstruct" / "linear-fp32-302x512x3200-h200-a0ce7c" / "result.json")
    return dataclasses.replace(res, summary={"wall_s_this_run": wall_s_this_run, "wall_s_total": wall_s_total})


def write_final_strategy(slice_dir: Path, slice_id: str, strategy) -> None:
    """A real loop result (as `loop_result`) for `slice_id` in `slice_dir`, with `strategy` as its final revision's."""
    import dataclasses

    from vxsynth.store.io import write_json

    res = loop_result()
    slice_dir.mkdir(parents=True, exist_ok=True)
    write_json(slice_dir / "result.json", dataclasses.replace(res, slice_id=slice_id,
                                                              final=dataclasses.replace(res.final, strategy=strategy)).to_dict())


def check_record(**fields):
    """A `CheckRecord` with placeholder values for the fields a test does not set (for stand-ins of `checks.run`)."""
    from vxsynth.records import CheckRecord

    base = dict(check_id="x", kind="vortex_ref", slice_id="s", tag="t", candidate={}, precision="FP32", tolerance={},
                conditions={}, problem={}, verdict="pass", reason="", cases=[])
    return CheckRecord(**{**base, **fields})
