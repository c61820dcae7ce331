"""Random-geometry fuzz of ``conv2d`` and ``conv_transpose2d`` (and, for about one case in eight,
``conv3d`` and ``conv_transpose3d``): every algorithm that accepts a case, forward and all three
gradients, against float64 on the CPU (integers exactly). About one draw in eight is a
``causal_conv1d`` call instead (:class:`CausalCase`: width, SiLU, initial states, layouts).

A *case* is one convolution call: shapes, stride, padding (asymmetric, ``'same'``, ``'valid'``),
dilation, groups (dense, grouped, depthwise with a channel multiplier), bias, dtype, and the
memory layout of the input and of the output gradient (contiguous, channels-last, strided, or
expanded with zero strides); a quarter of the cases with int padding run the *transposed*
convolution of the same geometry instead (its input shaped like the convolution's output, its
``output_padding`` chosen so its output has the convolution's input size). :func:`draw_case`
draws one from a seed; :meth:`Case.spec` writes it
as one line that :meth:`Case.parse` reads back, so every failure prints a repro::

    tritonconv verify --repro 'n=5 c=16 k=4 h=14 w=25 kh=1 kw=1 ...'

Tolerances (:func:`bound`) are not tuned: for an output ``y = sum of L products a*b`` computed
from the same dtype-rounded inputs as the reference, the error is at most

    2 * u_out * |y|  +  (u_out + L * u_acc) * sum |a*b|  +  2 * subnormal step

(``sum |a*b|`` counting ``|bias|`` too) with ``u_out`` the unit roundoff of the result dtype (rounding the result, and rounding partial
results a path keeps in the dtype: a GEMM output before col2im, a bias added after rounding),
``u_acc`` that of the accumulation (fp32, or the 3xTF32 split's ~2^-21 for fp32 ``tl.dot``; fp64
for fp64) and ``L`` the reduction length (the worst-case bound of a recursive sum, not its
random-walk typical size); the subnormal step (``smallest_normal * eps``: 2^-24 in fp16) bounds
each rounding where the result is subnormal, and there relative precision is gone (seen on the
GPU: an fp16 dx of -8.3e-6). ``sum |a*b|`` is computed exactly by running the float64 reference on
``|x|``, ``|w|``, ``|dy|``. An indexing error (a missed, doubled or misplaced tap) moves an
element by the size of a whole term, which this bound does not admit for realistic ``L``.
Integers accumulate in int64 in every path and must be bitwise equal to the reference wrapped
to the dtype.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import random
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from . import functional, library
from .geometry import FLOAT_DTYPES, TritonConvError, check_conv, dtype_name
from .ops import implicit_gemm
from .ops.common import channels_last_format, is_channels_last
from .ops.implicit_gemm import DTYPES as IMPLICIT_GEMM_DTYPES
from .testing import DEVICE, exact_fp32

# How often each dtype is drawn (fp32 and the 16-bit floats are what networks run).
DTYPE_WEIGHTS = {
    "float32": 4,
    "float16": 2,
    "bfloat16": 2,
    "float64": 1,
    "int8": 1,
    "uint8": 1,
    "int16": 1,
    "int32": 1,
    "int64": 1,
}
DTYPES = {name: getattr(torch, name) for name in DTYPE_WEIGHTS}
# Memory layouts of the input and of the output gradient, with how often each is drawn.
LAYOUTS = {
    "contiguous": 8,
    "channels_last": 6,
    "strided_wide": 2,  # every other element of a buffer twice as wide
    "strided_hw": 2,  # H and W transposed in memory
    "expanded_n": 1,  # one sample broadcast over the batch (stride 0)
    "expanded_w": 1,  # one column broadcast over the width (stride 0)
}
# The layouts 3-D cases draw from (5-D tensors: channels-last is channels_last_3d).
LAYOUTS_3D = ("contiguous", "contiguous", "channels_last", "channels_last", "expanded_n")
# Channels per group: every tile-size threshold of the launchers (1, 2, 4, 8, 16, 32, 64) and
# its neighbours, so each tile configuration a launcher can pick is reached.
CHANNELS = (1, 2, 3, 4, 5, 7, 8, 9, 12, 15, 16, 17, 24, 31, 32, 33, 48, 64)
# The share of draws made the kind of layer the TMA kernels take (``window_tma_kernel``,
# ``pointwise_tma_kernel``): dense, stride 1, 16-bit, channel counts of multiples of 32 in and 8
# out, every tensor channels-last. Drawn at random, about one case in 300 would be.
TMA_SHARE = 0.1

# Unit roundoff of results and of accumulations, per dtype.
U_OUT = {
    torch.float16: 2.0**-11,
    torch.bfloat16: 2.0**-8,
    torch.float32: 2.0**-24,
    torch.float64: 2.0**-53,
}
U_ACC = {
    torch.float16: 2.0**-21,
    torch.bfloat16: 2.0**-21,
    torch.float32: 2.0**-21,  # 3xTF32 drops the lo*lo term: about 2^-21 per product
    torch.float64: 2.0**-50,
}


@dataclass(frozen=True)
class Case:
    """One ``conv2d`` call of the fuzz (batched input; ``n`` may be 0), or with ``transposed``
    the ``conv_transpose2d`` call whose output has the conv2d call's input shape (its input:
    the conv2d output's shape, ``k`` channels; its bias: ``c`` elements)."""

    n: int
    c: int
    k: int
    h: int
    w: int
    kh: int
    kw: int
    stride: tuple[int, int]
    padding: tuple[int, int] | str
    dilation: tuple[int, int]
    groups: int
    bias: bool
    dtype: str
    x_layout: str
    dy_layout: str
    w_layout: str
    seed: int
    transposed: bool = False
    # A 3-D case (conv3d / conv_transpose3d) when ``d`` > 0: the depth axis of input, kernel,
    # stride, padding and dilation, in front of the 2-D ones above.
    d: int = 0
    kd: int = 1
    stride_d: int = 1
    pad_d: int = 0
    dil_d: int = 1

    def spec(self) -> str:
        """One line :meth:`parse` reads back."""
        return _spec(self)

    @classmethod
    def parse(cls, spec: str) -> Case:
        """The case :meth:`spec` wrote; ``ValueError`` naming what is missing or malformed."""
        return _parse(cls, spec)

    @property
    def torch_dtype(self) -> torch.dtype:
        return DTYPES[self.dtype]

    @property
    def depthwise(self) -> bool:
        return self.groups == self.c

    def algos(self) -> list[str]:
        """Every algorithm ``conv2d`` (``conv3d``) accepts for this case."""
        if self.d:
            return ["implicit_gemm"]
        algos = ["direct"]
        if self.torch_dtype in FLOAT_DTYPES:
            algos.insert(0, "im2col_gemm")
        if self.torch_dtype in IMPLICIT_GEMM_DTYPES:
            algos.insert(0, "implicit_gemm")
        if self.depthwise:
            algos.append("depthwise")
        return algos

    @property
    def ndim(self) -> int:
        return 3 if self.d else 2

    @property
    def image(self) -> tuple[int, ...]:
        """The convolution's input spatial size."""
        return (self.d, self.h, self.w) if self.d else (self.h, self.w)

    @property
    def kernel(self) -> tuple[int, ...]:
        return (self.kd, self.kh, self.kw) if self.d else (self.kh, self.kw)

    def window(self) -> tuple:
        """(stride, padding, dilation) with one entry per spatial axis (padding may be a str)."""
        if not self.d:
            return self.stride, self.padding, self.dilation
        padding = self.padding if isinstance(self.padding, str) else (self.pad_d, *self.padding)
        return (self.stride_d, *self.stride), padding, (self.dil_d, *self.dilation)

    @property
    def output_padding(self) -> tuple[int, ...]:
        """The transposed convolution's ``output_padding``: what makes its output exactly the
        convolution's input size (always below the stride)."""
        stride, padding, dilation = self.window()
        return tuple(
            (i + 2 * p - d * (k - 1) - 1) % s
            for i, p, d, k, s in zip(self.image, padding, dilation, self.kernel, stride)
        )

    def output_size(self) -> tuple[int, ...]:
        """Output spatial size, from the geometry ``conv2d``/``conv3d`` validate with (an
        invalid window raises ``TritonConvError``)."""
        x = torch.empty((self.n, self.c, *self.image), device="meta")
        w = torch.empty((self.k, self.c // self.groups, *self.kernel), device="meta")
        args = check_conv(x, w, None, *self.window(), self.groups, ndim=self.ndim)
        return args.geometry.output


def _spec(case) -> str:
    """A case as one line of ``field=value`` (tuples comma-joined, booleans 0/1)."""
    parts = []
    for f in dataclasses.fields(case):
        v = getattr(case, f.name)
        if isinstance(v, tuple):
            v = ",".join(map(str, v))
        elif isinstance(v, bool):
            v = int(v)
        parts.append(f"{f.name}={v}")
    return " ".join(parts)


def _parse(cls, spec: str):
    """The ``cls`` case :func:`_spec` wrote, each value read as its field's annotation says;
    ``ValueError`` naming what is missing or malformed."""
    values = dict(item.split("=", 1) for item in spec.split() if "=" in item)
    required = [f for f in dataclasses.fields(cls) if f.default is dataclasses.MISSING]
    missing = [f.name for f in required if f.name not in values]
    if missing:
        raise ValueError(f"missing field(s) {missing} in {spec!r}")
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name not in values:
            continue
        v, kind = values[f.name], str(f.type)
        if kind == "bool":
            kwargs[f.name] = v not in ("0", "False")
        elif kind == "int":
            kwargs[f.name] = int(v)
        elif kind.startswith("tuple") and ("," in v or "str" not in kind):
            kwargs[f.name] = tuple(int(p) for p in v.split(","))
        else:
            kwargs[f.name] = v
    return cls(**kwargs)


def _draw_padding(rng: random.Random, stride) -> tuple[int, int] | str:
    u = rng.random()
    if u < 0.1 and stride == (1, 1):
        return "same"
    if u < 0.17:
        return "valid"
    return (rng.randint(0, 3), rng.randint(0, 3))


def _attempts(*limits: int):
    """Draws to try before giving up on size limits no case can meet (a clear error, not a
    loop that never ends)."""
    yield from range(100_000)
    raise ValueError(f"no fuzz case fits the size limits {limits}; raise them")


def draw_case(seed: int, *, max_elements: int = 60_000, max_macs: int = 3_000_000) -> Case:
    """A random valid case from ``seed`` (the same seed always gives the same case and data)."""
    rng = random.Random(seed)
    for _ in _attempts(max_elements, max_macs):
        mode = rng.choices(("dense", "grouped", "depthwise"), (5, 3, 3))[0]
        if mode == "depthwise":
            c = rng.choice(CHANNELS)
            groups, k = c, c * rng.choice((1, 1, 1, 2, 3))
        else:
            groups = 1 if mode == "dense" else rng.randint(2, 4)
            c = groups * rng.choice(CHANNELS)
            k = groups * rng.choice(CHANNELS)
        big_kernel = mode == "depthwise" and rng.random() < 0.2
        kh = rng.randint(1, 13 if big_kernel else 7)
        kw = rng.randint(7 if big_kernel else 1, 13 if big_kernel else 7)
        stride = (rng.choice((1, 1, 2, 3)), rng.choice((1, 1, 2, 3)))
        dilation = (rng.choice((1, 1, 2, 3)), rng.choice((1, 1, 2, 3)))
        padding = _draw_padding(rng, stride)
        n = 0 if rng.random() < 0.04 else rng.randint(1, 4)
        h, w = rng.randint(1, 40), rng.randint(1, 40)
        case = Case(
            n=n,
            c=c,
            k=k,
            h=h,
            w=w,
            kh=kh,
            kw=kw,
            stride=stride,
            padding=padding,
            dilation=dilation,
            groups=groups,
            bias=rng.random() < 0.5,
            dtype=rng.choices(list(DTYPE_WEIGHTS), list(DTYPE_WEIGHTS.values()))[0],
            x_layout=rng.choices(list(LAYOUTS), list(LAYOUTS.values()))[0],
            dy_layout=rng.choices(list(LAYOUTS), list(LAYOUTS.values()))[0],
            w_layout=rng.choice(("contiguous", "channels_last")),
            seed=seed,
            transposed=rng.random() < 0.25 and not isinstance(padding, str),
        )
        if rng.random() < TMA_SHARE:  # what the TMA kernels take: 16-bit, channels-last
            case = dataclasses.replace(
                case,
                c=rng.choice((32, 64, 96)),
                k=rng.choice((8, 24, 32, 64, 128)),
                groups=1,
                stride=(1, 1),
                dtype=rng.choice(("float16", "bfloat16")),
                x_layout="channels_last",
                dy_layout="channels_last",
                w_layout="channels_last",
            )
        if rng.random() < 0.12:  # a 3-D case: small planes, the implicit GEMM's layouts
            case = dataclasses.replace(
                case,
                d=rng.randint(1, 8),
                kd=rng.randint(1, 3),
                stride_d=rng.choice((1, 1, 2)),
                pad_d=rng.randint(0, 2),
                dil_d=rng.choice((1, 1, 2)),
                h=rng.randint(1, 16),
                w=rng.randint(1, 16),
                kh=min(kh, 3),
                kw=min(kw, 3),
                x_layout=rng.choice(LAYOUTS_3D),
                dy_layout=rng.choice(LAYOUTS_3D),
                padding=case.padding if case.transposed else _draw_padding(rng, case.stride),
            )
            if case.padding == "same" and case.stride_d != 1:
                case = dataclasses.replace(case, stride_d=1)
        try:
            out = case.output_size()
        except TritonConvError:  # the window does not fit the padded input
            continue
        macs = max(1, n) * k * math.prod(out) * (c // groups) * math.prod(case.kernel)
        if max(1, n) * c * math.prod(case.image) > max_elements or macs > max_macs:
            continue
        return case


def to_layout(base: torch.Tensor, layout: str) -> torch.Tensor:
    """``base`` (4-D) with the same shape in ``layout``; the expanded layouts keep only
    ``base``'s first sample or column, broadcast with stride 0."""
    if layout == "contiguous":
        return base.contiguous()
    if layout == "channels_last":
        # A fresh channels-last tensor's strides, as ``module.to(memory_format=...)`` makes
        # them: ``contiguous(memory_format=...)`` keeps a tensor whose channel axis has size 1
        # as it is (a depthwise weight (C, 1, KH, KW) stays (KH*KW, KH*KW, KW, 1), never the
        # (KH*KW, 1, KW, 1) of a converted model, which once hid a wrong channel stride).
        fmt = channels_last_format(base.dim())
        return torch.empty(
            base.shape, dtype=base.dtype, device=base.device, memory_format=fmt
        ).copy_(base)
    if layout == "strided_wide":
        wide = base.new_zeros(*base.shape[:3], 2 * base.shape[3])
        wide[..., ::2] = base
        return wide[..., ::2]
    if layout == "strided_hw":
        return base.transpose(2, 3).contiguous().transpose(2, 3)
    if layout == "expanded_n":
        return base[:1].expand(base.shape)
    if layout == "expanded_w":
        return base[..., :1].expand(base.shape)
    raise ValueError(f"unknown layout {layout!r}")


def _values(shape, dtype: torch.dtype, gen: torch.Generator) -> torch.Tensor:
    """float64 values exactly representable in ``dtype`` (integers: small enough that float64
    sums of their products stay exact)."""
    if dtype.is_floating_point:
        return torch.randn(shape, generator=gen, dtype=torch.float64).to(dtype).double()
    info = torch.iinfo(dtype)
    low, high = (max(info.min, -128), min(info.max, 127) + 1)
    if dtype != torch.int8 and dtype != torch.uint8:
        low, high = -1000, 1000
    return torch.randint(low, high, shape, generator=gen, dtype=torch.int64).double()


@dataclass
class Data:
    """A case's values in float64, contiguous on the CPU (an expanded layout's repeats are
    already in the values, so the reference sees exactly what the kernels read)."""

    x: torch.Tensor
    w: torch.Tensor
    b: torch.Tensor | None
    dy: torch.Tensor


def make_data(case: Case) -> Data:
    gen = torch.Generator().manual_seed(case.seed)
    dtype = case.torch_dtype
    image = (case.n, case.c, *case.image)
    result = (case.n, case.k, *case.output_size())
    if case.transposed:
        image, result = result, image
    x = to_layout(_values(image, dtype, gen), case.x_layout)
    w = _values((case.k, case.c // case.groups, *case.kernel), dtype, gen)
    b = _values((result[1],), dtype, gen) if case.bias else None
    dy = to_layout(_values(result, dtype, gen), case.dy_layout)
    return Data(x.contiguous(), w, b, dy.contiguous())


def _call(case: Case, conv, x, w, b, **kwargs):
    """``case``'s call of ``conv`` (``F``'s or ours: conv2d/conv3d, or the transposed one)."""
    stride, padding, dilation = case.window()
    dims = case.ndim
    if case.transposed:
        transposed = getattr(conv, f"conv_transpose{dims}d")
        return transposed(
            x, w, b, stride, padding, case.output_padding, case.groups, dilation, **kwargs
        )
    return getattr(conv, f"conv{dims}d")(x, w, b, stride, padding, dilation, case.groups, **kwargs)


def reference(case: Case, data: Data) -> dict[str, torch.Tensor]:
    """y, dx, dw, db in float64 on the CPU, and each one's ``sum |a*b|`` magnitude."""
    out = {}
    for tag, f in (("", lambda t: t), ("mag_", torch.abs)):
        x = f(data.x).requires_grad_()
        w = f(data.w).requires_grad_()
        b = f(data.b).requires_grad_() if data.b is not None else None
        y = _call(case, F, x, w, b)
        dy = f(data.dy)
        grads = torch.autograd.grad(y, [t for t in (x, w, b) if t is not None], dy)
        out[tag + "y"] = y.detach()
        out[tag + "dx"], out[tag + "dw"] = grads[0], grads[1]
        if b is not None:
            out[tag + "db"] = grads[2]
    if data.b is not None:  # the bias term's own magnitude, rounded in some paths (and added
        # after the rounded sum in the transposed ops)
        out["mag_y"] = out["mag_y"] + data.b.abs().view(1, -1, *[1] * case.ndim)
    return out


def reduction_lengths(case: Case) -> dict[str, int]:
    positions = max(1, case.n * math.prod(case.output_size()))
    taps = math.prod(case.kernel)
    forward = (case.c // case.groups) * taps
    backward = (case.k // case.groups) * taps
    if case.transposed:  # y is the convolution's dx and dx its y
        forward, backward = backward, forward
    biased = max(1, case.n * math.prod(case.image)) if case.transposed else positions
    return {"y": forward, "dx": backward, "dw": positions, "db": biased}


def bound(dtype: torch.dtype, ref: torch.Tensor, mag: torch.Tensor, length: int) -> torch.Tensor:
    """Per-element error bound (see the module docstring)."""
    u_out, u_acc = U_OUT[dtype], U_ACC[dtype]
    info = torch.finfo(dtype)
    subnormal_step = info.smallest_normal * info.eps  # below the normals rounding is absolute
    return 2 * u_out * ref.abs() + (u_out + length * u_acc) * mag + 2 * subnormal_step


def compare(name: str, case: Case, actual, ref, mag, length: int) -> str | None:
    """None if ``actual`` matches ``ref`` (float64) for this case's dtype, else what differs."""
    dtype = case.torch_dtype
    if actual is None:
        return f"{name}: missing"
    if tuple(actual.shape) != tuple(ref.shape):
        return f"{name}: shape {tuple(actual.shape)} != {tuple(ref.shape)}"
    if actual.dtype != dtype:
        return f"{name}: dtype {dtype_name(actual.dtype)} != {dtype_name(dtype)}"
    a = actual.detach().cpu()
    if not dtype.is_floating_point:
        expected = ref.round().to(torch.int64).to(dtype)  # wraps like the dtype
        bad = a != expected
        if bad.any():
            i = tuple(bad.nonzero()[0].tolist())
            return (
                f"{name}: {int(bad.sum())}/{a.numel()} differ, first at {list(i)}: "
                f"{a[i].item()} != {expected[i].item()}"
            )
        return None
    a = a.double()
    err = (a - ref).abs()
    tol = bound(dtype, ref, mag, length)
    bad = ~(err <= tol)  # NaN fails
    if bad.any():
        worst = (err - tol).nan_to_num(float("inf")).argmax()
        i = tuple(int(v) for v in torch.unravel_index(worst, err.shape))
        ratio = a[i].item() / ref[i].item() if ref[i].item() else float("nan")
        return (
            f"{name}: {int(bad.sum())}/{a.numel()} outside the bound, worst at {list(i)}: "
            f"{a[i].item():.6g} vs {ref[i].item():.6g} (x{ratio:.3g}, bound {tol[i].item():.3g})"
        )
    return None


def _poison_allocator(nbytes: int, device) -> None:
    """Fill freed allocator blocks with NaN bytes so outputs a kernel forgets to write show up
    (on CUDA, PyTorch's caching allocator hands the same blocks to the next allocations)."""
    if torch.device(device).type == "cuda":
        torch.empty(max(nbytes, 1 << 20), dtype=torch.uint8, device=device).fill_(0xFF)


# Integer cases call an algorithm's gradient ops directly (no autograd for integers): the
# (forward op, backward op, option) of each algorithm other than direct/depthwise.
INTEGER_OPS = {
    "implicit_gemm": (library.conv_implicit_gemm, library.conv_implicit_gemm_backward, []),
}


def run_case(case: Case, algo: str, ref: dict, data: Data, device=DEVICE) -> list[str]:
    """Problems of ``algo`` on ``case`` (empty when forward and gradients all match)."""
    dtype = case.torch_dtype
    x = to_layout(data.x.to(device, dtype), case.x_layout)
    w = to_layout(data.w.to(device, dtype), case.w_layout)
    b = data.b.to(device, dtype) if data.b is not None else None
    dy = to_layout(data.dy.to(device, dtype), case.dy_layout)
    lengths = reduction_lengths(case)
    _poison_allocator(8 * (x.numel() + w.numel() + dy.numel()), device)
    problems = []
    if dtype.is_floating_point:
        leaves = [t.detach().requires_grad_() for t in (x, w, b) if t is not None]
        bias = leaves[2] if b is not None else None
        y = _call(case, functional, leaves[0], leaves[1], bias, algo=algo)
        grads = torch.autograd.grad(y, leaves, dy)
        results = {"y": y, "dx": grads[0], "dw": grads[1]}
        if b is not None:
            results["db"] = grads[2]
    else:  # integers have no autograd: the gradient ops directly
        y = _call(case, functional, x, w, b, algo=algo)
        image = dy if case.transposed else x  # the convolution's input
        args = check_conv(image, w, None, *case.window(), case.groups, ndim=case.ndim)
        g = args.geometry
        forward_op, backward_op, option = INTEGER_OPS.get(
            algo, (library.conv2d_direct, library.conv2d_direct_backward, algo == "depthwise")
        )
        geometry = (
            list(g.stride),
            list(g.pad_before),
            list(g.pad_after),
            list(g.dilation),
            case.groups,
            option,
        )
        if case.transposed:  # dx = conv(dy); dw = the convolution's dw with x as its dy
            dx = forward_op(dy, w, None, *geometry)
            _, dw, _ = backward_op(x, dy, w, *geometry, [False, True, False])
            db = library.channel_sum(dy)
        else:
            dx, dw, db = backward_op(dy, x, w, *geometry, [True, True, b is not None])
        results = {"y": y, "dx": dx, "dw": dw}
        if b is not None:
            results["db"] = db
    # PyTorch's (cuDNN's) rule: channels-last when the input or the weight is
    last = is_channels_last(x) or is_channels_last(w)
    fmt = channels_last_format(x.dim()) if last else torch.contiguous_format
    if not results["y"].is_contiguous(memory_format=fmt):
        problems.append(f"y: strides {results['y'].stride()} are not in the expected {fmt}")
    for name, actual in results.items():
        p = compare(name, case, actual, ref[name], ref["mag_" + name], lengths[name])
        if p:
            problems.append(p)
    return problems


@dataclass
class Failure:
    case: Case | CausalCase
    algo: str
    problems: list[str]

    def line(self) -> str:
        return (
            f"FAIL algo={self.algo}: {'; '.join(self.problems)}\n"
            f"  repro: tritonconv verify --repro '{self.case.spec()}' --algo {self.algo}"
        )


@dataclass
class Report:
    draws: int = 0
    checks: int = 0
    seconds: float = 0.0
    failures: list[Failure] = field(default_factory=list)
    errors: list[Failure] = field(default_factory=list)
    by_algo: Counter = field(default_factory=Counter)
    by_dtype: Counter = field(default_factory=Counter)

    def merge(self, other: Report) -> None:
        self.draws += other.draws
        self.checks += other.checks
        self.seconds = max(self.seconds, other.seconds)
        self.failures += other.failures
        self.errors += other.errors
        self.by_algo.update(other.by_algo)
        self.by_dtype.update(other.by_dtype)

    @property
    def ok(self) -> bool:
        return not self.failures and not self.errors


def check_case(
    case: Case | CausalCase, algos=None, device=DEVICE
) -> Iterator[Failure | tuple[str, None]]:
    """Run ``case`` through ``algos`` (default: all that accept it); yield a Failure per
    algorithm that mismatches or raises, ``(algo, None)`` per algorithm that passes."""
    if isinstance(case, CausalCase):
        wrong = [a for a in algos or () if a != "causal"]
        if wrong:
            yield Failure(case, wrong[0], [f"ERROR a causal case runs algo 'causal', not {wrong}"])
            return
        try:
            with exact_fp32():
                problems = check_causal_case(case, device)
        except Exception as e:
            tb = traceback.format_exc(limit=-2).strip().splitlines()[-1]
            problems = [f"ERROR {type(e).__name__}: {str(e)[:300]} ({tb})"]
        yield Failure(case, "causal", problems) if problems else ("causal", None)
        return
    data = make_data(case)
    ref = reference(case, data)
    for algo in algos or case.algos():
        try:
            with exact_fp32():
                problems = run_case(case, algo, ref, data, device)
        except Exception as e:  # an error is a finding too: the case is valid
            tb = traceback.format_exc(limit=-2).strip().splitlines()[-1]
            yield Failure(case, algo, [f"ERROR {type(e).__name__}: {str(e)[:300]} ({tb})"])
            continue
        yield Failure(case, algo, problems) if problems else (algo, None)


def seeds(base: int, worker: int = 0, workers: int = 1) -> Iterator[int]:
    i = worker
    while True:
        yield base * 1_000_003 + i
        i += workers


def run(
    *,
    seconds: float | None = None,
    draws: int | None = None,
    seed: int = 0,
    worker: int = 0,
    workers: int = 1,
    device=DEVICE,
    on_draw: Callable[[Report], None] | None = None,
    **draw_kwargs,
) -> Report:
    """Draw and check cases until ``seconds`` pass or ``draws`` cases were checked."""
    if seconds is None and draws is None:
        raise ValueError("fuzz.run needs seconds or draws")
    report = Report()
    start = time.perf_counter()
    # (the TMA rectangles' overhang limit lifted: the fuzz's small odd planes reach them too)
    with _any_overhang():
        for s in seeds(seed, worker, workers):
            if draws is not None and report.draws >= draws:
                break
            if seconds is not None and time.perf_counter() - start >= seconds:
                break
            case = draw(s, **draw_kwargs)
            report.draws += 1
            report.by_dtype[case.dtype] += 1
            kind = " transposed" if getattr(case, "transposed", False) else ""
            for result in check_case(case, device=device):
                report.checks += 1
                if isinstance(result, Failure):
                    report.by_algo[result.algo + kind + " FAIL"] += 1
                    is_error = result.problems[0].startswith("ERROR")
                    (report.errors if is_error else report.failures).append(result)
                else:
                    report.by_algo[result[0] + kind] += 1
            if on_draw:
                on_draw(report)
    report.seconds = time.perf_counter() - start
    return report


@contextlib.contextmanager
def _any_overhang():
    """``window_tma_kernel`` for any plane, however much its rectangles overhang (a GPU takes
    it only where they waste little; small planes would never reach it)."""
    saved = implicit_gemm.WINDOW_TMA_MAX_WASTE
    implicit_gemm.WINDOW_TMA_MAX_WASTE = float("inf")
    try:
        yield
    finally:
        implicit_gemm.WINDOW_TMA_MAX_WASTE = saved


# --------------------------------------------------------------------------------------------
# causal depthwise conv1d (``causal_conv1d``): about one draw in eight
# --------------------------------------------------------------------------------------------

CAUSAL_SHARE = 0.125
# Memory of x (batch, dim, seqlen) and dy: L contiguous, dim contiguous, every other element.
CAUSAL_LAYOUTS = ("channel_first", "channel_last", "strided")
# Channel counts straddling the kernels' tile widths (16 channel-first, 128 channel-last).
CAUSAL_DIMS = (1, 2, 3, 5, 15, 16, 17, 31, 64, 127, 128, 129, 200)


@dataclass(frozen=True)
class CausalCase:
    """One ``causal_conv1d(x, weight, bias, activation, initial_states, True)`` call (with
    ``state``, also ``causal_conv1d_update`` over the first steps from the same state);
    ``w_transposed``: the weight stored width-major (a non-contiguous view)."""

    batch: int
    dim: int
    seqlen: int
    width: int
    bias: bool
    silu: bool
    state: bool
    dtype: str
    layout: str
    dy_layout: str
    seed: int
    w_transposed: bool = False
    op: str = "causal"

    def spec(self) -> str:
        return _spec(self)

    @classmethod
    def parse(cls, spec: str) -> CausalCase:
        return _parse(cls, spec)

    @property
    def torch_dtype(self) -> torch.dtype:
        return DTYPES[self.dtype]

    def algos(self) -> list[str]:
        return ["causal"]


def parse_spec(spec: str) -> Case | CausalCase:
    """The case a failure line printed (``op=causal`` marks a causal one)."""
    return CausalCase.parse(spec) if "op=causal" in spec.split() else Case.parse(spec)


def draw_causal_case(seed: int, *, max_elements: int = 60_000) -> CausalCase:
    rng = random.Random(seed)
    for _ in _attempts(max_elements):
        dtype = rng.choices(list(DTYPE_WEIGHTS), list(DTYPE_WEIGHTS.values()))[0]
        case = CausalCase(
            batch=0 if rng.random() < 0.04 else rng.randint(1, 4),
            dim=rng.choice(CAUSAL_DIMS),
            seqlen=rng.choice((1, 2, 3, rng.randint(4, 40), rng.randint(40, 700))),
            width=rng.choice((1, 2, 3, 4, 4, 4, 5)),
            bias=rng.random() < 0.6,
            silu=rng.random() < 0.5 and DTYPES[dtype].is_floating_point,
            state=rng.random() < 0.3,
            dtype=dtype,
            layout=rng.choice(CAUSAL_LAYOUTS),
            dy_layout=rng.choice(CAUSAL_LAYOUTS),
            seed=seed,
            w_transposed=rng.random() < 0.25,
        )
        if max(1, case.batch) * case.dim * (case.seqlen + case.width) <= max_elements:
            return case


#: The largest draws (input elements, multiply-adds) where the kernels run compiled, and
#: where they run in Triton's interpreter: there one draw of the first size through every
#: algorithm takes minutes of CPU (session 31: ``verify --fuzz --seconds 1200`` on the CPU
#: finished no report in 1500 s), so CPU runs draw what CI's tests draw.
GPU_LIMITS = {"max_elements": 60_000, "max_macs": 3_000_000}
INTERPRETER_LIMITS = {"max_elements": 3000, "max_macs": 150_000}


def default_limits() -> dict:
    """The draw size limits for where the kernels run (:data:`GPU_LIMITS` or
    :data:`INTERPRETER_LIMITS`)."""
    from ._runtime import INTERPRETER

    return dict(INTERPRETER_LIMITS if INTERPRETER else GPU_LIMITS)


def draw(seed: int, *, max_elements: int = 60_000, max_macs: int = 3_000_000):
    """The fuzz's case for ``seed``: a causal conv1d about one time in eight, else a
    convolution (:func:`draw_case`)."""
    if random.Random(~seed).random() < CAUSAL_SHARE:
        return draw_causal_case(seed, max_elements=max_elements)
    return draw_case(seed, max_elements=max_elements, max_macs=max_macs)


def _causal_layout(base: torch.Tensor, layout: str) -> torch.Tensor:
    if layout == "channel_last":
        return base.transpose(1, 2).contiguous().transpose(1, 2)
    if layout == "strided":
        wide = base.new_zeros(*base.shape[:2], 2 * base.shape[2])
        wide[..., ::2] = base
        return wide[..., ::2]
    return base.contiguous()


def _causal_reference(case: CausalCase, x, w, b, init, dy, silu: bool):
    """(y, final, grads of x, w, b, init) in float64, the causal-conv1d package's formula."""
    leaves = [t.requires_grad_() for t in (x, w, b, init) if t is not None]
    full = torch.cat([init, x], -1) if init is not None else F.pad(x, (case.width - 1, 0))
    y = F.conv1d(full, w.unsqueeze(1), b, groups=case.dim)
    y = F.silu(y) if silu else y
    grads = (
        torch.autograd.grad(y, leaves, dy) if y.numel() else [torch.zeros_like(t) for t in leaves]
    )
    named = dict(zip(("x", "w", "b", "init"), [x, w, b, init]))
    present = [k for k, v in named.items() if v is not None]
    out = {"y": y.detach(), **{"d" + k: g for k, g in zip(present, grads)}}
    tail = full.detach()[..., full.shape[-1] - (case.width - 1) :]
    out["final"] = tail
    return out


def check_causal_case(case: CausalCase, device=DEVICE) -> list[str]:
    """Problems of ``causal_conv1d`` on ``case`` (forward, final states and every gradient)."""
    gen = torch.Generator().manual_seed(case.seed)
    dtype = case.torch_dtype
    x = _values((case.batch, case.dim, case.seqlen), dtype, gen)
    w = _values((case.dim, case.width), dtype, gen)
    b = _values((case.dim,), dtype, gen) if case.bias else None
    init = _values((case.batch, case.dim, case.width - 1), dtype, gen) if case.state else None
    dy = _values((case.batch, case.dim, case.seqlen), dtype, gen)
    ref = _causal_reference(case, x, w, b, init, dy, case.silu)
    mag = _causal_reference(
        case, *(t.abs() if t is not None else None for t in (x, w, b, init, dy)), False
    )
    # SiLU: |SiLU'| <= 1.1 scales every magnitude; g = dy * SiLU'(z) carries z's error times
    # |SiLU''| <= 0.5, which adds ``width * max |z| magnitude`` accumulation roundings per term
    spread = case.width * math.ceil(float(mag["y"].max()) if mag["y"].numel() else 0)
    scale = 1.1 if case.silu else 1.0
    extra = spread if case.silu else 0
    positions = max(1, case.batch * case.seqlen)
    lengths = {"y": case.width, "dx": case.width + extra, "dinit": case.width + extra}
    lengths.update(dw=positions * (1 + extra), db=positions * (1 + extra))

    def on_device(t, layout="channel_first"):
        return None if t is None else _causal_layout(t.to(device, dtype), layout)

    xd, dyd = on_device(x, case.layout), on_device(dy, case.dy_layout)
    wd, bd = w.to(device, dtype), (b.to(device, dtype) if b is not None else None)
    if case.w_transposed:
        wd = wd.t().contiguous().t()
    initd = on_device(init)
    _poison_allocator(8 * (xd.numel() + dyd.numel() + wd.numel()), device)
    activation = "silu" if case.silu else None
    results = {}
    if dtype.is_floating_point:
        leaves = [t.detach().requires_grad_() for t in (xd, wd, bd, initd) if t is not None]
        named = dict(
            zip(
                [k for k, v in (("x", xd), ("w", wd), ("b", bd), ("init", initd)) if v is not None],
                leaves,
            )
        )
        y, final = functional.causal_conv1d(
            named["x"], named["w"], named.get("b"), activation, named.get("init"), True
        )
        grads = torch.autograd.grad(y, leaves, dyd, allow_unused=True)
        results.update(y=y, final=final)
        results.update({"d" + k: g for k, g in zip(named, grads)})
    else:  # integers: the forward through the API, the gradients by the backward op itself
        y, final = functional.causal_conv1d(xd, wd, bd, None, initd, True)
        full = torch.cat([initd, xd], -1) if initd is not None else xd
        pad = 0 if initd is not None else case.width - 1
        dfull, dw, db = library.causal_conv1d_backward(dyd, full, wd, bd, pad, False, [True] * 3)
        results.update(y=y, final=final, dw=dw)
        if bd is not None:
            results["db"] = db
        if initd is not None:
            results.update(dinit=dfull[..., : case.width - 1], dx=dfull[..., case.width - 1 :])
        else:
            results["dx"] = dfull
    if initd is not None:  # decoding the first steps from the same state, one at a time
        state = initd.clone()
        steps = [
            functional.causal_conv1d_update(xd[..., t], state, wd, bd, activation)
            for t in range(min(3, case.seqlen))
        ]
        if steps:
            results["update"] = torch.stack(steps, -1)
            ref["update"], mag["update"] = (r["y"][..., : len(steps)] for r in (ref, mag))
            lengths["update"] = lengths["y"]
    problems = []
    for name, actual in results.items():
        if name == "final":
            if not torch.equal(actual.cpu().double(), ref["final"]):
                problems.append("final: not the last width - 1 inputs")
            continue
        p = compare(name, case, actual, ref[name], scale * mag[name], lengths[name])
        if p:
            problems.append(p)
    channel_last = xd.stride(1) == 1 and xd.stride(2) != 1  # (an empty x is always dense)
    if channel_last and case.dim > 1 and case.seqlen > 1 and y.stride(1) != 1:
        problems.append(f"y: strides {y.stride()} are not channel-last like x's")
    return problems
