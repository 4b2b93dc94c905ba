"""Tensor maps of `tma` launches, encoded by the project's launcher (CUDA worker, measurement harness, in-workload
dispatch, `bench/emit_speed.py`), never by a candidate: the candidate's kernel receives them as `__grid_constant__` parameters after its
buffers. A map describes (dims, byte strides, box) of one operand, as `kernels.geometry.tensor_maps` derives it from
the problem and the strategy; before encoding, `error` checks it against the buffer the launcher itself allocated, so
a map can only ever address that buffer (the hardware then bounds every copy by the map's dimensions). Encoded with
the driver's `cuTensorMapEncodeTiled`: 128-byte swizzle, out-of-range elements read as zeros."""

from __future__ import annotations

import ctypes

import numpy as np

DATA_TYPES = {"float32": 7, "float16": 6, "bfloat16": 9}     # CU_TENSOR_MAP_DATA_TYPE_*
SWIZZLE_128B = 3
L2_PROMOTION_128B = 2
SIZE, ALIGN = 128, 64


def error(m: dict, dtype: str, address: int, nbytes: int) -> str | None:
    """Why map `m` cannot be encoded on the buffer at `address` of `nbytes` bytes, or None."""
    eb = 4 if dtype == "float32" else 2
    dims, strides, box = m.get("dims", []), m.get("strides", []), m.get("box", [])
    if m.get("operand") not in ("a", "b") or dtype not in DATA_TYPES:
        return f"tensor map of operand {m.get('operand')!r}, dtype {dtype}: only A and B of fp32/bf16/fp16"
    if len(dims) not in (2, 3) or len(strides) != len(dims) - 1 or len(box) != 2:
        return f"tensor map {m['operand']}: rank {len(dims)} with {len(strides)} strides and box {box}"
    if any(not 0 < d < 2 ** 32 for d in dims) or any(s <= 0 or s % 16 or s >= 2 ** 40 for s in strides):
        return f"tensor map {m['operand']}: dims {dims} or byte strides {strides} (positive, multiples of 16)"
    if box[0] * eb != 128 or not 1 <= box[1] <= 256:
        return f"tensor map {m['operand']}: box {box} is not one 128-byte swizzle row by 1-256 rows"
    extent = dims[0] * eb + sum((d - 1) * s for d, s in zip(dims[1:], strides))
    if extent > nbytes or address % 16:
        return f"tensor map {m['operand']}: reaches {extent} bytes of a {nbytes}-byte buffer at {address:#x}"
    return None


def encode(m: dict, dtype: str, address: int) -> np.ndarray:
    """The 128-byte CUtensorMap of map `m` on the buffer at `address` (checked by `error` first)."""
    raw = np.zeros(SIZE + ALIGN, dtype=np.uint8)
    off = -raw.ctypes.data % ALIGN
    out = raw[off:off + SIZE]
    u64 = ctypes.c_uint64
    dims, strides = (u64 * 3)(*m["dims"]), (u64 * 2)(*m["strides"])
    rank = len(m["dims"])
    box, ones = (ctypes.c_uint32 * rank)(*m["box"], *[1] * (rank - 2)), (ctypes.c_uint32 * 3)(1, 1, 1)   # a batch box is 1 deep
    rc = _driver().cuTensorMapEncodeTiled(
        ctypes.c_void_p(out.ctypes.data), DATA_TYPES[dtype], len(m["dims"]), ctypes.c_void_p(address), dims,
        strides, box, ones, 0, SWIZZLE_128B, L2_PROMOTION_128B, 0)
    if rc:
        raise RuntimeError(f"cuTensorMapEncodeTiled failed ({rc}) for tensor map {m}")
    return out


MAP_DTYPE = np.dtype([("w", np.uint64, 16)])     # one CUtensorMap: CuPy passes a size-one array by value


def kernel_args(maps: list[dict], dtype: str, buffers: dict) -> tuple:
    """The kernel arguments of `maps` (in order) on `buffers` ({operand: (address, nbytes)}): size-one arrays of the
    encoded bytes, which CuPy passes by value. Raises ValueError when a map does not fit its buffer."""
    out = []
    for m in maps:
        address, nbytes = buffers[m.get("operand")]
        if why := error(m, dtype, address, nbytes):
            raise ValueError(why)
        out.append(encode(m, dtype, address).view(MAP_DTYPE).copy())
    return tuple(out)


_lib = None


def _driver():
    global _lib
    if _lib is None:
        _lib = ctypes.CDLL("libcuda.so.1")
        _lib.cuTensorMapEncodeTiled.restype = ctypes.c_int
    return _lib
