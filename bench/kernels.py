"""Candidate generation and compile times (CUDA nvcc, Vortex host, RISC-V cross) and host-executor run time, for
every slice of the default suite at its real shape (one input case, the executor's default block window).

usage: python bench/kernels.py [SLICES_DIR]   (default: slice the committed H200 profiles into a temp dir)
"""

import statistics
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from vxsynth.kernels import tensors as T  # noqa: E402
from vxsynth.kernels.candidate import make  # noqa: E402
from vxsynth.kernels.strategy import Strategy  # noqa: E402
from vxsynth.reconstruct.setup import records_in  # noqa: E402
from vxsynth.slicing.stage import run as slice_run  # noqa: E402
from vxsynth.targets import riscv  # noqa: E402
from vxsynth.targets.cuda import compile_cuda, nvcc  # noqa: E402
from vxsynth.targets.vortex_host import HostExecutor, VortexConfig  # noqa: E402


def conf(g):
    return yaml.safe_load((ROOT / "conf" / g / "default.yaml").read_text())


def main() -> None:
    tmp = Path(tempfile.mkdtemp(prefix="vxbench-"))
    slices = Path(sys.argv[1]) if len(sys.argv) > 1 else tmp / "slices"
    if len(sys.argv) == 1:
        slice_run(sorted(p for p in (ROOT / "data/recorded/h200").iterdir() if (p / "op_calls.parquet").exists()),
                  slices, conf("slicing"), conf("precision"), log=lambda s: None)
    ex = HostExecutor(VortexConfig(), cache_dir=tmp / "cache")
    rows, failed = [], []
    print(f"{'slice':<48}{'gen ms':>8}{'nvcc s':>8}{'host s':>8}{'rv32 s':>8}{'run s':>8}{'blocks':>9}  notes")
    for rec in records_in(slices):
        p = rec.problem
        try:
            t = time.perf_counter()
            c = make(p, Strategy(), rec.precision)
            gen = time.perf_counter() - t
            cu = compile_cuda(c, tmp / rec.slice_id / "cu") if nvcc() else None
            t = time.perf_counter()
            exe, err = ex.build(c, tmp / rec.slice_id / "vx")
            host = time.perf_counter() - t
            rv = riscv.cross_compile(c.vortex_source, tmp / rec.slice_id / "rv") if riscv.compiler() else None
            r = ex.run(c, T.vortex_inputs(p, rec.precision, T.make_inputs(p, 0)), tmp / rec.slice_id / "run", exe=exe)
            ok = exe is not None and r.ok and (cu is None or cu.ok) and (rv is None or rv.ok)
            note = "" if ok else (err or r.error or (cu.error if cu and not cu.ok else "") or (rv.error if rv else ""))[:60]
            rows.append((gen, cu.wall_s if cu else float("nan"), host, rv.wall_s if rv else float("nan"), r.wall_s))
            print(f"{rec.slice_id[:47]:<48}{gen * 1e3:>8.1f}{rows[-1][1]:>8.2f}{host:>8.2f}{rows[-1][3]:>8.2f}{r.wall_s:>8.2f}"
                  f"{sum(k for _, k in r.blocks) if r.ok else 0:>4}/{c.meta['blocks']:<4}  {note}")
            if not ok:
                failed.append(rec.slice_id)
        except Exception as e:  # noqa: BLE001 - report slices that cannot be expressed
            failed.append(rec.slice_id)
            print(f"{rec.slice_id[:47]:<48}  cannot be expressed: {type(e).__name__}: {e}")
    med = [statistics.median(col) for col in zip(*rows)]
    print(f"\nmedian over {len(rows)} slices: generate {med[0] * 1e3:.1f} ms, nvcc {med[1]:.2f} s, Vortex host build {med[2]:.2f} s, "
          f"RISC-V cross-compile {med[3]:.2f} s, host-executor run {med[4]:.2f} s")
    print(f"slices not expressed or failing: {failed or 'none'}")


if __name__ == "__main__":
    main()
