"""The problem a slice's kernel solves, as the launching aten op sees it (shapes, strides, dtypes, parameters).

Two kinds: a strided batched GEMM `C[b] = A[b] @ B[b] (+ bias)` covering linear/addmm/mm/bmm/matmul, and a
convolution (conv1d is a conv2d with H = R = 1, as cuDNN runs it). Output is always contiguous.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from vxsynth.errors import VxError

DTYPES = {"float": "float32", "c10::BFloat16": "bfloat16", "c10::Half": "float16"}


@dataclass(frozen=True)
class Gemm:
    op: str                       # addmm | mm | bmm
    batch: int
    M: int
    N: int
    K: int
    a_strides: tuple[int, int, int]   # element strides of A along (batch, m, k)
    b_strides: tuple[int, int, int]   # element strides of B along (batch, k, n)
    bias: bool
    dtype: str
    alpha: float = 1.0
    beta: float = 1.0
    kind: str = "gemm"

    @property
    def flops(self) -> int:
        return 2 * self.batch * self.M * self.N * self.K

    @property
    def out_shape(self) -> tuple[int, ...]:
        return (self.batch, self.M, self.N)

    def a_extent(self) -> int:
        sb, sm, sk = self.a_strides
        return sb * (self.batch - 1) + sm * (self.M - 1) + sk * (self.K - 1) + 1

    def b_extent(self) -> int:
        sb, sk, sn = self.b_strides
        return sb * (self.batch - 1) + sk * (self.K - 1) + sn * (self.N - 1) + 1

    def label(self) -> str:
        core = f"{self.M}x{self.N}x{self.K}"
        return f"{self.batch}x{core}" if self.batch > 1 else core


@dataclass(frozen=True)
class Conv:
    dims: int                     # 1 or 2
    N: int
    C: int
    H: int
    W: int
    K: int                        # output channels
    R: int
    S: int
    stride: tuple[int, int]
    pad: tuple[int, int]
    dil: tuple[int, int]
    groups: int
    bias: bool
    dtype: str
    kind: str = "conv"
    c_layout: int = 0             # channels the image and weights are laid out with (0: C): a shortened reduction
                                  # sums the first C of them, the tensors' strides kept as the op has them

    def __post_init__(self):
        if self.c_layout and (self.groups != 1 or self.c_layout < self.C):
            raise VxError(f"conv c_layout {self.c_layout} needs groups 1 and at least C={self.C} channels")

    @property
    def c_stored(self) -> int:
        """Channels per pixel (and per filter tap) in the stored image and weights."""
        return self.c_layout or self.C

    @property
    def P(self) -> int:
        return (self.H + 2 * self.pad[0] - self.dil[0] * (self.R - 1) - 1) // self.stride[0] + 1

    @property
    def Q(self) -> int:
        return (self.W + 2 * self.pad[1] - self.dil[1] * (self.S - 1) - 1) // self.stride[1] + 1

    @property
    def flops(self) -> int:
        return 2 * self.N * self.K * self.P * self.Q * (self.C // self.groups) * self.R * self.S

    @property
    def out_shape(self) -> tuple[int, ...]:
        return (self.N, self.K, self.P, self.Q)

    def label(self) -> str:
        if self.dims == 1:
            return f"{self.C}to{self.K}k{self.S}l{self.W}" + (f"s{self.stride[1]}" if self.stride[1] > 1 else "")
        return f"{self.C}to{self.K}k{self.R}x{self.S}i{self.H}x{self.W}" + (f"s{self.stride[0]}" if self.stride[0] > 1 else "")


Problem = Gemm | Conv


def to_dict(p: Problem) -> dict:
    """The problem's fields (a convolution's `c_layout` only when set, so names and hashes of whole problems stay)."""
    d = asdict(p)
    if d.get("c_layout") == 0:
        del d["c_layout"]
    return d


def from_dict(d: dict) -> Problem:
    d = dict(d)
    kind = d.get("kind")
    tuples = {"gemm": ("a_strides", "b_strides"), "conv": ("stride", "pad", "dil")}
    if kind not in tuples:
        raise VxError(f"problem kind {kind!r} is not gemm or conv; the slice record is damaged")
    for k in tuples[kind]:
        d[k] = tuple(d[k])
    return (Gemm if kind == "gemm" else Conv)(**d)


def _ints(s: str) -> list[int]:
    return [int(x) for x in s.strip("[] ").split(",") if x.strip()]


def gemm_from_launch(op: dict) -> Gemm:
    """The GEMM of a launch op record {op, dims, dtypes, strides, args} (addmm, mm, bmm) from profiling pass 1."""
    name, dims, strides, args = op["op"], op["dims"], op["strides"], op["args"]
    dtype = DTYPES.get(op["dtypes"][0] if op["op"] != "aten::addmm" else op["dtypes"][1])
    if dtype is None:
        raise VxError(f"{name}: dtype {op['dtypes']} is not float32, bfloat16 or float16")
    if name == "aten::addmm":
        (m, k), (_, n) = dims[1], dims[2]
        (am, ak), (bk, bn) = strides[1], strides[2]
        beta = float(args[3]) if args[3] else 1.0
        alpha = float(args[4]) if args[4] else 1.0
        return Gemm("addmm", 1, m, n, k, (0, am, ak), (0, bk, bn), True, dtype, alpha, beta)
    if name == "aten::mm":
        (m, k), (_, n) = dims[0], dims[1]
        (am, ak), (bk, bn) = strides[0], strides[1]
        return Gemm("mm", 1, m, n, k, (0, am, ak), (0, bk, bn), False, dtype)
    if name == "aten::bmm":
        (b, m, k), (_, _, n) = dims[0], dims[1]
        return Gemm("bmm", b, m, n, k, tuple(strides[0]), tuple(strides[1]), False, dtype)
    raise VxError(f"no problem form for launch op {name}")


def conv_from_call(top: dict, launch: dict | None) -> Conv:
    """The convolution of an aten::conv1d/conv2d call {dims, dtypes, args}: (input, weight, bias, stride, padding,
    dilation, groups). A string padding ('valid'/'same', recorded as '') is taken from the launch op when it states
    it explicitly (cudnn_convolution's third argument), else resolved by its meaning."""
    dims, args = top["dims"], top["args"]
    dtype = DTYPES.get(top["dtypes"][0])
    if dtype is None:
        raise VxError(f"conv: dtype {top['dtypes'][0]} is not float32, bfloat16 or float16")
    x, w = list(dims[0]), list(dims[1])
    bias = bool(dims[2]) if len(dims) > 2 else False
    stride, dil, groups = _ints(args[3]), _ints(args[5]), int(args[6] or 1)
    pad = _ints(args[4]) if args[4] else None
    if pad is None:
        if launch and launch["op"] == "aten::cudnn_convolution" and launch["args"][2]:
            pad = _ints(launch["args"][2])[-len(stride):]
        else:
            pad = [0] * len(stride)
    if len(x) == 3:
        x, w = [x[0], x[1], 1, x[2]], [w[0], w[1], 1, w[2]]
        stride, pad, dil = [1, *stride], [0, *pad], [1, *dil]
    dims_ = 1 if x[2] == 1 and w[2] == 1 else 2
    return Conv(dims_, x[0], x[1], x[2], x[3], w[0], w[2], w[3], tuple(stride), tuple(pad), tuple(dil), groups, bias, dtype)
