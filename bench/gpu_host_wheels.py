"""Wheels an air-gapped H200 host needs to run `vxsynth rebuild` (Prefect, DVC, Hydra, lerobot and the rest of the
project's dependency closure), less what its image already holds, split into carry-sized bundles.

The closure is pip's resolution of this project (`pip install --dry-run --report`, Python 3.12, this platform); the
image's packages are the device library's list (KINDS.md, "Python packages already there", read 2026-11-17): those
are used as the host has them, whatever version the project pins. The rest is downloaded (`pip download --no-deps`;
a package published only as a source archive is built into a wheel here) into DEST/1, DEST/2, ... of at most
--max-mib each, one device call's carry each (a call carries at most 64 MiB with the tracked tree, 16 MiB on
2026-12-03, and .tools: hence 40). Prints what the host has, what is brought, sizes.

On the host, per bundle (one target each: pip's --target merges no bin/):
  python3 -m pip install -q --no-index --no-deps --target .gpu-site/bN DEST/N/*.whl
then every .gpu-site/bN on PYTHONPATH and its bin/ on PATH (bench/rebuild_h200.sh does both).

With --bench, only the wheels the bare bench scripts import that the image lacks (BENCH: bench/fidelity.py, the
GPU tests; no Prefect, DVC or Hydra) into DEST/bench, one carry: bench/device_env.sh installs them and takes
ncu_report from the host's own ncu.

usage: python bench/gpu_host_wheels.py DEST [--max-mib 40] [--bench]
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

HOST_IMAGE = """absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs botorch build certifi
charset-normalizer chex click cloudpickle cmake colorama contourpy coverage cuda-bindings cuda-core cuda-pathfinder
cuda-toolkit cupy-cuda13x cycler cython diffrax e3nn einops equinox etils execnet filelock flatbuffers flax fonttools
formulaic frozenlist fsspec gpytorch grpcio h11 h5py hf-xet httpcore httpx huggingface-hub humanize hypothesis idna
imageio iniconfig interface-meta jax jax-cuda13-pjrt jax-cuda13-plugin jaxlib jaxtyping jinja2 joblib kiwisolver
lazy-loader lightning lightning-utilities linear-operator lineax llvmlite lxml markdown markdown-it-py markupsafe
matplotlib mdurl meson ml-dtypes mpi4py mpmath msgpack multidict multipledispatch mypy-extensions nanobind narwhals
networkx ninja numba numba-cuda numpy numpyro nvidia-cublas nvidia-cuda-cupti nvidia-cuda-nvrtc nvidia-cuda-runtime
nvidia-cudnn-cu13 nvidia-cufft nvidia-cufile nvidia-curand nvidia-cusolver nvidia-cusparse nvidia-cusparselt-cu13
nvidia-ml-py nvidia-nccl-cu13 nvidia-nvjitlink nvidia-nvshmem-cu13 nvidia-nvtx onnx onnx-ir onnxruntime onnxscript
opencv-python-headless optax opt-einsum opt-einsum-fx optimistix orbax-checkpoint packaging pandas pathspec patsy peft
pillow pip pluggy portalocker prometheus-client propcache protobuf psutil pyarrow pybind11 py-cpuinfo pygments
pyparsing pyproject-hooks pyre-extensions pytest pytest-benchmark pytest-cov pytest-mock pytest-timeout pytest-xdist
python-dateutil pytorch-lightning pyyaml regex requests rich sacrebleu safetensors scikit-build-core scikit-image
scikit-learn scipy seaborn sentencepiece sentence-transformers setuptools shellingham simplejson six sortedcontainers
statsmodels sympy tabulate tensorboard tensorboard-data-server tensorstore threadpoolctl tifffile tiktoken timm
tokenizers toolz torch torchaudio torchdiffeq torch-geometric torchmetrics torchvision tqdm transformers treescope
triton typer typing-extensions typing-inspect urllib3 uvloop wadler-lindig werkzeug wheel wrapt xarray xxhash yarl zipp"""
# what bench/fidelity.py and the GPU tests import beyond the image (the loop's Optuna with its SQLAlchemy; lerobot's ACT)
BENCH = """optuna colorlog sqlalchemy greenlet alembic mako pytz opentelemetry-api pydot lerobot draccus gymnasium
farama-notifications h2 hpack hyperframe mergedeep toml termcolor lazy-importer importlib-metadata"""
# lerobot 0.6.1 pins these below the image's versions (../shared/gpu-host/wheels.sh: checked on an H200 with them)
PINNED_OVER_IMAGE = {"transformers", "tokenizers"}


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def closure() -> dict[str, str]:
    """name -> version of every distribution pip installs for this project (the project itself left out)."""
    with tempfile.TemporaryDirectory() as tmp:
        rep = Path(tmp) / "report.json"
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--dry-run", "--ignore-installed", "--report",
                        str(rep), "--target", str(Path(tmp) / "t"), str(ROOT)], check=True)
        items = json.loads(rep.read_text())["install"]
    return {norm(i["metadata"]["name"]): i["metadata"]["version"] for i in items if norm(i["metadata"]["name"]) != "vxsynth"}


def fetch(name: str, version: str, into: Path) -> Path:
    """The wheel of name==version in `into`: downloaded, or built here from its source archive."""
    before = set(into.iterdir())
    spec = f"{name}=={version}"
    r = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "-d", str(into),
                        spec], capture_output=True, text=True)
    if r.returncode:
        subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(into), spec], check=True)
    (new,) = set(into.iterdir()) - before
    return new


def bundles(files: list[Path], max_bytes: int) -> list[list[Path]]:
    """Largest first into the first bundle with room (each at most max_bytes)."""
    out: list[list[Path]] = []
    for f in sorted(files, key=lambda p: -p.stat().st_size):
        size = f.stat().st_size
        if size > max_bytes:
            raise SystemExit(f"{f.name} alone is {size / 2**20:.1f} MiB, over --max-mib; raise it")
        room = [b for b in out if sum(p.stat().st_size for p in b) + size <= max_bytes]
        (room[0] if room else out.append([]) or out[-1]).append(f)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("dest")
    ap.add_argument("--max-mib", type=float, default=40.0)
    ap.add_argument("--bench", action="store_true", help="only the bench scripts' wheels, into DEST/bench")
    a = ap.parse_args()
    dest = Path(a.dest)
    host = {norm(n) for n in HOST_IMAGE.split()}
    need = closure()
    bring = {n: v for n, v in need.items() if n not in host or n in PINNED_OVER_IMAGE}
    have = sorted(n for n in need if n not in bring)
    if a.bench:
        if missing := {norm(n) for n in BENCH.split()} - set(bring):
            raise SystemExit(f"BENCH names what the closure does not bring: {' '.join(sorted(missing))}; update BENCH")
        bring = {n: bring[n] for n in sorted(norm(n) for n in BENCH.split())}
    print(f"# command: python bench/gpu_host_wheels.py {' '.join(sys.argv[1:])}")
    print(f"# closure {len(need)} distributions; the image has {len(have)}, used as they are there: {' '.join(have)}")
    with tempfile.TemporaryDirectory(dir=dest.parent if dest.parent.exists() else None) as tmp:
        got = [fetch(n, v, Path(tmp)) for n, v in sorted(bring.items())]
        parts = [got] if a.bench else bundles(got, int(a.max_mib * 2**20))
        names = ["bench"] if a.bench else [str(i) for i in range(1, len(parts) + 1)]
        for old in [dest / "bench"] if a.bench else [dest]:
            shutil.rmtree(old, ignore_errors=True)
        for name, b in zip(names, parts):
            (dest / name).mkdir(parents=True)
            for f in b:
                shutil.move(str(f), dest / name / f.name)
    total = 0
    for i, name in enumerate(names, 1):
        files = sorted((dest / name).iterdir())
        size = sum(f.stat().st_size for f in files)
        total += size
        print(f"bundle {i}: {len(files)} wheels, {size / 2**20:.1f} MiB: " + " ".join(f.name.split("-")[0] for f in files))
    print(f"# brought: {len(bring)} wheels, {total / 2**20:.1f} MiB in {len(parts)} bundles of at most {a.max_mib:g} MiB")


if __name__ == "__main__":
    main()
