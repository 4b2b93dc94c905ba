"""One CUDA launch of a compiled candidate, as a value: what `cuda.run_cuda` ran and hands on (`CudaRun.launch`) to
measurement and compute-sanitizer. Its JSON (`to_dict`) is the CUDA worker's job (`cuda_worker`, `gpu_worker`), the
only place it travels as text; `write` makes the file a subprocess's command line needs."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Launch:
    cubin: Path
    kernel: str
    grid: tuple
    block: tuple
    smem_bytes: int               # dynamic shared memory
    dtype: str
    out_elements: int
    inputs: dict                  # role -> .npy of its raw storage
    output: Path
    repeat: int = 1
    flush_l2: bool = False        # L2 overwritten before every launch (timings)
    zero_output: bool = False     # split-K: the output starts at zero, not NaN
    workspace_words: int = 0      # an fp32 workspace, zeroed before every launch (0: none)
    tensor_maps: tuple = ()       # `tma`: maps of operands A/B the launcher encodes and passes last (`tensor_map`)

    def to_dict(self) -> dict:
        """The worker's job: optional keys only when set."""
        return {"cubin": str(self.cubin), "kernel": self.kernel, "grid": list(self.grid), "block": list(self.block),
                "smem_bytes": self.smem_bytes, "dtype": self.dtype, "out_elements": self.out_elements,
                "inputs": {r: str(p) for r, p in self.inputs.items()}, "output": str(self.output),
                "repeat": self.repeat, **({"flush_l2": True} if self.flush_l2 else {}),
                **({"zero_output": True} if self.zero_output else {}),
                **({"workspace_words": self.workspace_words} if self.workspace_words else {}),
                **({"tensor_maps": list(self.tensor_maps)} if self.tensor_maps else {})}

    @classmethod
    def from_dict(cls, d: dict) -> Launch:
        return cls(Path(d["cubin"]), d["kernel"], tuple(d["grid"]), tuple(d["block"]), int(d.get("smem_bytes", 0)),
                   d["dtype"], d["out_elements"], {r: Path(p) for r, p in d["inputs"].items()}, Path(d["output"]),
                   d.get("repeat", 1), bool(d.get("flush_l2")), bool(d.get("zero_output")),
                   int(d.get("workspace_words", 0)), tuple(d.get("tensor_maps", ())))

    def write(self, path: Path) -> Path:
        """The job file at `path`, for a subprocess that takes one."""
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_dict()))
        return path
