"""Shapes, output sizes, argument normalisation and every validation error, in one place.

Everything here is plain Python on sizes; nothing touches tensor data or launches a kernel, so
every error is raised before any kernel runs. Spatial arguments are N-D ready: a convolution
with ``n`` spatial dimensions takes ``stride``/``padding``/``dilation`` as an int or a sequence
of ``n`` ints, and ``padding`` may also be ``'same'`` or ``'valid'``.

Messages follow PyTorch's meaning (often its words) and name the argument, the value and what
was expected.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Sequence
from dataclasses import dataclass

import torch


class TritonConvError(ValueError, RuntimeError):
    """Bad arguments to a tritonconv function.

    Derives from both ``ValueError`` and ``RuntimeError``: PyTorch raises ``RuntimeError`` for
    the same mistakes, so code written for ``torch.nn.functional`` keeps catching them.
    """


FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
INT_DTYPES = (torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64)


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def shape_str(shape: Sequence[int]) -> str:
    return "[" + ", ".join(str(s) for s in shape) + "]"


def as_int(value) -> int | None:
    """``value`` as a Python int when it is an integer as PyTorch's arguments take them (an
    int, a NumPy integer, an integer 0-dim tensor: what ``operator.index`` takes), not a bool;
    else None."""
    if isinstance(value, bool) or (isinstance(value, torch.Tensor) and value.dtype == torch.bool):
        return None
    if isinstance(value, (int, torch.SymInt)):
        return value
    # Sequences (kernel_size=(3, 3)) and the other common non-integers answered here, not by
    # operator.index's TypeError: torch 2.11's Dynamo turns that TypeError into an internal
    # error while it traces this function, breaking every compiled convolution.
    if value is None or isinstance(value, (tuple, list, float, str, torch.SymFloat)):
        return None
    try:
        return operator.index(value)
    except TypeError:
        return None


def expand_param(value, n: int, name: str) -> tuple[int, ...]:
    """``value`` as an n-tuple of ints: an integer is repeated, a sequence must have length 1
    or n."""
    single = as_int(value)
    if single is not None:
        return (single,) * n
    if not isinstance(value, Sequence) or isinstance(value, str):
        raise TritonConvError(f"{name} must be an int or a sequence of {n} ints, got {value!r}")
    values = tuple(as_int(v) for v in value)
    if len(values) == 1:
        values = values * n
    if len(values) != n or None in values:
        raise TritonConvError(
            f"expected {name} to be a single integer value or a list of {n} values to match "
            f"the convolution dimensions, but got {name}={list(value)}"
        )
    return values


def output_size(
    input_size: int, kernel: int, stride: int, pad_before: int, pad_after: int, dilation: int
) -> int:
    """Positions of a sliding window along one axis: ``(I + pads - dil*(K-1) - 1) // s + 1``."""
    return (input_size + pad_before + pad_after - dilation * (kernel - 1) - 1) // stride + 1


@dataclass(frozen=True)
class Geometry:
    """One sliding-window geometry over ``n`` spatial axes (all tuples have length ``n``).

    ``pad_before``/``pad_after`` may differ (``padding='same'`` with an even kernel puts the
    extra pixel after, as PyTorch does). Kernels read ``pad_before`` and ``output``.
    """

    input: tuple[int, ...]
    kernel: tuple[int, ...]
    stride: tuple[int, ...]
    dilation: tuple[int, ...]
    pad_before: tuple[int, ...]
    pad_after: tuple[int, ...]
    output: tuple[int, ...]

    @property
    def ndim(self) -> int:
        return len(self.input)

    @property
    def kernel_numel(self) -> int:
        return _prod(self.kernel)

    @property
    def output_numel(self) -> int:
        return _prod(self.output)


def _prod(values: Sequence[int]) -> int:
    result = 1
    for v in values:
        result *= v
    return result


def _fmt(values: Sequence[int]) -> str:
    return "(" + " x ".join(str(v) for v in values) + ")"


def _resolve_padding(padding, kernel, stride, dilation, n: int):
    if isinstance(padding, str):
        if padding == "valid":
            return (0,) * n, (0,) * n
        if padding != "same":
            raise TritonConvError(
                f"Invalid padding string {padding!r}, should be one of ['valid', 'same']"
            )
        if any(s != 1 for s in stride):
            raise TritonConvError(
                f"padding='same' is not supported for strided convolutions (stride={list(stride)})"
            )
        totals = [d * (k - 1) for k, d in zip(kernel, dilation)]
        before = tuple(t // 2 for t in totals)
        return before, tuple(t - b for t, b in zip(totals, before))
    pads = expand_param(padding, n, "padding")
    if any(p < 0 for p in pads):
        raise TritonConvError(f"negative padding is not supported, got padding={list(pads)}")
    return pads, pads


def _cache_key(value):
    """``value`` with every element tagged by its type, so that ``True``, ``1.0`` and ``1``
    (equal and hash-equal in Python) never share a cache entry: only a value that passed
    validation once may skip it."""
    if isinstance(value, (list, tuple)):
        return (type(value), tuple((type(v), v) for v in value))
    return (type(value), value)


def sliding_geometry(
    input_size: Sequence[int], kernel_size, stride, padding, dilation, *, what: str = "conv"
) -> Geometry:
    """Validate and normalise one sliding-window geometry; raises on any bad value.

    Cached by value in eager mode (it is pure and every call of conv2d needs it); errors are never
    cached. Under torch.compile it runs uncached: it is evaluated once, while tracing."""
    args = (tuple(input_size), kernel_size, stride, padding, dilation)
    if torch.compiler.is_compiling():
        return _sliding_geometry(*args, what=what)
    try:
        key = tuple(_cache_key(v) for v in args)
        hash(key)
    except TypeError:  # an unhashable element: validate without the cache
        return _sliding_geometry(*args, what=what)
    return _cached_sliding_geometry(key, args, what)


def _cached_sliding_geometry(key, args, what: str) -> Geometry:
    geometry = _GEOMETRY_CACHE.get((key, what))
    if geometry is None:
        geometry = _sliding_geometry(*args, what=what)
        if len(_GEOMETRY_CACHE) < 4096:
            _GEOMETRY_CACHE[(key, what)] = geometry
    return geometry


_GEOMETRY_CACHE: dict = {}


def check_stride_dilation(stride, dilation, n: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """``stride`` and ``dilation`` as ``n`` positive ints, or PyTorch's error."""
    strides = expand_param(stride, n, "stride")
    if any(s <= 0 for s in strides):
        raise TritonConvError(f"non-positive stride is not supported, got stride={list(strides)}")
    dilations = expand_param(dilation, n, "dilation")
    if any(d <= 0 for d in dilations):
        raise TritonConvError(
            f"dilation should be greater than zero, got dilation={list(dilations)}"
        )
    return strides, dilations


def _sliding_geometry(
    input_size: Sequence[int], kernel_size, stride, padding, dilation, *, what: str
) -> Geometry:
    n = len(input_size)
    kernel = expand_param(kernel_size, n, "kernel_size")
    if any(k <= 0 for k in kernel):
        raise TritonConvError(f"kernel size should be greater than zero, but got {list(kernel)}")
    strides, dilations = check_stride_dilation(stride, dilation, n)
    before, after = _resolve_padding(padding, kernel, strides, dilations, n)
    padded = tuple(i + b + a for i, b, a in zip(input_size, before, after))
    extent = tuple(d * (k - 1) + 1 for k, d in zip(kernel, dilations))
    if any(p < e for p, e in zip(padded, extent)):
        raise TritonConvError(
            f"{what}: calculated padded input size per channel: {_fmt(padded)}. "
            f"Kernel size (dilated): {_fmt(extent)}. "
            "Kernel size can't be greater than actual input size"
        )
    out = tuple(
        output_size(i, k, s, b, a, d)
        for i, k, s, b, a, d in zip(input_size, kernel, strides, before, after, dilations)
    )
    return Geometry(tuple(input_size), kernel, strides, dilations, before, after, out)


# --------------------------------------------------------------------------------------------
# Tensor checks shared by every op
# --------------------------------------------------------------------------------------------


def _first_mismatch(tensors: dict, attribute: str):
    """(first name, first tensor, name, tensor) for the first tensor whose ``attribute`` differs
    from the first given tensor's, or None (``None`` entries are skipped)."""
    named = [(k, t) for k, t in tensors.items() if t is not None]
    first_name, first = named[0]
    for name, t in named[1:]:
        if getattr(t, attribute) != getattr(first, attribute):
            return first_name, first, name, t
    return None


def check_same_device(**tensors: torch.Tensor | None) -> None:
    mismatch = _first_mismatch(tensors, "device")
    if mismatch:
        first_name, first, name, t = mismatch
        raise TritonConvError(
            "Expected all tensors to be on the same device, but found at least two "
            f"devices: {first_name} is on {first.device} and {name} is on {t.device}"
        )


def check_same_dtype(**tensors: torch.Tensor | None) -> None:
    mismatch = _first_mismatch(tensors, "dtype")
    if mismatch:
        first_name, first, name, t = mismatch
        raise TritonConvError(
            f"{first_name} type ({dtype_name(first.dtype)}) and {name} type "
            f"({dtype_name(t.dtype)}) should be the same"
        )


def check_dtype(tensor: torch.Tensor, name: str, allowed: Sequence[torch.dtype], op: str) -> None:
    if tensor.dtype not in allowed:
        names = ", ".join(dtype_name(d) for d in allowed)
        raise TritonConvError(
            f"{op}: {name} has dtype {dtype_name(tensor.dtype)}, which is not supported "
            f"(supported: {names})"
        )


def check_workspace_limit(limit) -> int:
    """A column-buffer cap in bytes: a positive int."""
    if isinstance(limit, bool) or not isinstance(limit, int) or limit <= 0:
        raise TritonConvError(f"workspace_limit must be a positive int (bytes), got {limit!r}")
    return limit


# --------------------------------------------------------------------------------------------
# Convolution
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ConvArgs:
    """A validated convolution call: the input is always batched here (``batched`` records
    whether the caller's was)."""

    batch: int
    in_channels: int
    out_channels: int
    groups: int
    geometry: Geometry
    batched: bool

    @property
    def in_per_group(self) -> int:
        return self.in_channels // self.groups

    @property
    def out_per_group(self) -> int:
        return self.out_channels // self.groups

    @property
    def output_shape(self) -> tuple[int, ...]:
        return (self.batch, self.out_channels, *self.geometry.output)

    @property
    def depthwise(self) -> bool:
        """Each input channel convolved on its own (groups == in_channels, any multiplier)."""
        return self.groups == self.in_channels


def _check_conv_tensors(input, weight, bias, ndim: int, op: str) -> None:
    """What every convolution checks first, in PyTorch's order: tensors, the input's rank, one
    device, one dtype, a real dtype."""
    for name, t in (("input", input), ("weight", weight), ("bias", bias)):
        if not isinstance(t, torch.Tensor) and (t is not None or name != "bias"):
            raise TritonConvError(f"{op}: {name} must be a Tensor, got {type(t).__name__}")
    if input.dim() not in (ndim + 1, ndim + 2):
        raise TritonConvError(
            f"Expected {ndim + 1}D (unbatched) or {ndim + 2}D (batched) input to {op}, "
            f"but got input of size: {shape_str(input.shape)}"
        )
    check_same_device(input=input, weight=weight, bias=bias)
    check_same_dtype(Input=input, weight=weight, bias=bias)
    for name, t in (("input", input), ("weight", weight), ("bias", bias)):
        if t is not None and (t.dtype == torch.bool or t.is_complex()):
            raise TritonConvError(
                f"{op}: {name} has dtype {dtype_name(t.dtype)}; convolution needs a real "
                "floating-point or integer dtype"
            )


def _check_weight_and_groups(input, weight, groups, ndim: int, op: str, layout: str) -> int:
    """The weight's rank and a positive ``groups``, with PyTorch's messages (``layout``: what
    the weight's first two dimensions are); ``groups`` as an int."""
    if weight.dim() < 3:
        raise TritonConvError(
            f"weight should have at least three dimensions, got weight of size "
            f"{shape_str(weight.shape)}"
        )
    if weight.dim() != ndim + 2:
        batched_dim = weight.dim() if input.dim() == ndim + 2 else weight.dim() - 1
        raise TritonConvError(
            f"Expected {batched_dim}-dimensional input for {weight.dim()}-dimensional weight"
            f"{shape_str(weight.shape)}, but got {input.dim()}-dimensional input of size "
            f"{shape_str(input.shape)} instead ({op} takes a {ndim + 2}-dimensional weight: "
            f"{layout}, *kernel_size)"
        )
    number = as_int(groups)
    if number is None:
        raise TritonConvError(f"groups must be an integer, got groups={groups!r}")
    if number <= 0:
        raise TritonConvError(f"non-positive groups is not supported, got groups={number}")
    return number


def check_conv(
    input: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    stride,
    padding,
    dilation,
    groups: int,
    *,
    ndim: int = 2,
    op: str = "conv2d",
) -> ConvArgs:
    """Validate a ``F.conv{ndim}d`` call; return the normalised arguments."""
    # The order of PyTorch's own checks, so that a call with several faults gets its error.
    _check_conv_tensors(input, weight, bias, ndim, op)
    check_stride_dilation(stride, dilation, ndim)
    if not isinstance(padding, str):
        _resolve_padding(padding, (), (), (), ndim)
    groups = _check_weight_and_groups(
        input, weight, groups, ndim, op, "out_channels, in_channels/groups"
    )
    if weight.shape[0] < groups:
        raise TritonConvError(
            f"Given groups={groups}, expected weight to be at least {groups} at dimension 0, "
            f"but got weight of size {shape_str(weight.shape)} instead"
        )

    batched = input.dim() == ndim + 2
    shape = tuple(input.shape) if batched else (1, *input.shape)
    batch, in_channels = shape[0], shape[1]
    out_channels = weight.shape[0]
    if out_channels % groups != 0:
        raise TritonConvError(
            f"Given groups={groups}, expected weight to be divisible by {groups} at dimension 0, "
            f"but got weight of size {shape_str(weight.shape)} instead"
        )
    if in_channels != weight.shape[1] * groups:
        raise TritonConvError(
            f"Given groups={groups}, weight of size {shape_str(weight.shape)}, expected "
            f"input{shape_str(input.shape)} to have {weight.shape[1] * groups} channels, but got "
            f"{in_channels} channels instead"
        )
    if bias is not None and (bias.dim() != 1 or bias.shape[0] != out_channels):
        raise TritonConvError(
            f"Given weight of size {shape_str(weight.shape)}, expected bias to be 1-dimensional "
            f"with {out_channels} elements, but got bias of size {shape_str(bias.shape)} instead"
        )
    if any(s == 0 for s in shape[2:]):
        raise TritonConvError(
            f"{op}: expected non-zero spatial sizes, but got input of size {shape_str(input.shape)}"
        )
    geometry = sliding_geometry(
        shape[2:], tuple(weight.shape[2:]), stride, padding, dilation, what=op
    )
    return ConvArgs(batch, in_channels, out_channels, groups, geometry, batched)


def check_conv_transpose(
    input: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    stride,
    padding,
    output_padding,
    groups: int,
    dilation,
    *,
    ndim: int = 2,
    op: str = "conv_transpose2d",
) -> ConvArgs:
    """Validate a ``F.conv_transpose{ndim}d`` call. The result describes, in its own terms, the
    *convolution* whose input gradient the transposed convolution is: its input is the
    transposed convolution's output (``geometry.input``, ``in_channels``), its output the
    transposed convolution's input (``geometry.output``, ``out_channels``), its weight the same
    tensor (``depthwise``: one transposed output channel per group). ``pad_after`` is
    ``padding - output_padding``: the last ``output_padding`` rows are reached by no window
    (PyTorch writes them from the bias alone)."""
    _check_conv_tensors(input, weight, bias, ndim, op)
    strides, dilations = check_stride_dilation(stride, dilation, ndim)
    if isinstance(padding, str):
        raise TritonConvError(f"{op}: padding must be an int or a tuple of ints, got {padding!r}")
    pads, _ = _resolve_padding(padding, (), (), (), ndim)
    extra = expand_param(output_padding, ndim, "output_padding")
    if any(e < 0 for e in extra):
        raise TritonConvError(f"negative output_padding is not supported, got {list(extra)}")
    if any(e >= s and e >= d for e, s, d in zip(extra, strides, dilations)):
        raise TritonConvError(
            "output padding must be smaller than either stride or dilation, but got "
            f"output_padding={list(extra)}, stride={list(strides)}, dilation={list(dilations)}"
        )
    groups = _check_weight_and_groups(
        input, weight, groups, ndim, op, "in_channels, out_channels/groups"
    )
    batched = input.dim() == ndim + 2
    shape = tuple(input.shape) if batched else (1, *input.shape)
    batch, in_channels = shape[0], shape[1]
    if weight.shape[0] != in_channels:
        raise TritonConvError(
            f"Given transposed=1, weight of size {shape_str(weight.shape)}, expected "
            f"input{shape_str(input.shape)} to have {weight.shape[0]} channels, but got "
            f"{in_channels} channels instead"
        )
    if in_channels % groups != 0:
        raise TritonConvError(
            f"Given groups={groups}, expected weight to be divisible by {groups} at dimension 0, "
            f"but got weight of size {shape_str(weight.shape)} instead"
        )
    out_channels = weight.shape[1] * groups
    if bias is not None and (bias.dim() != 1 or bias.shape[0] != out_channels):
        raise TritonConvError(
            f"Given transposed=1, weight of size {shape_str(weight.shape)}, expected bias to be "
            f"1-dimensional with {out_channels} elements, but got bias of size "
            f"{shape_str(bias.shape)} instead"
        )
    if any(s == 0 for s in shape[2:]):
        raise TritonConvError(
            f"{op}: expected non-zero spatial sizes, but got input of size {shape_str(input.shape)}"
        )
    kernel = tuple(weight.shape[2:])
    out = tuple(
        (i - 1) * s - 2 * p + d * (k - 1) + e + 1
        for i, s, p, d, k, e in zip(shape[2:], strides, pads, dilations, kernel, extra)
    )
    if any(o <= 0 for o in out):
        raise TritonConvError(
            f"{op}: given input size {tuple(shape[2:])}, the calculated output size {out} is "
            "too small (every dimension must be at least 1)"
        )
    after = tuple(p - e for p, e in zip(pads, extra))
    geometry = make_geometry(out, kernel, strides, pads, after, dilations)
    return ConvArgs(batch, out_channels, in_channels, groups, geometry, batched)


# --------------------------------------------------------------------------------------------
# unfold / fold (as torch.nn.functional, and their 1-D and 3-D generalisations)
# --------------------------------------------------------------------------------------------

#: What the dimensions of an unbatched unfold input are called, by the window's rank.
_UNFOLD_AXES = {1: "C, L", 2: "C, H, W", 3: "C, D, H, W"}


@dataclass(frozen=True)
class FoldArgs:
    """A validated unfold or fold call (batched view; ``batched`` records the caller's)."""

    batch: int
    channels: int
    geometry: Geometry
    batched: bool

    @property
    def rows(self) -> int:
        return self.channels * self.geometry.kernel_numel


def window_rank(kernel_size) -> int:
    """The spatial rank of an unfold/fold window: the length of a ``kernel_size`` sequence (1, 2
    or 3), 2 for an int (``F.unfold``/``F.fold``'s only rank)."""
    if isinstance(kernel_size, (list, tuple)):
        if not 1 <= len(kernel_size) <= 3:
            raise TritonConvError(
                "kernel_size must be an int or a sequence of 1, 2 or 3 ints (one per spatial "
                f"dimension of the window), but got kernel_size={list(kernel_size)}"
            )
        return len(kernel_size)
    return 2


def _check_window(kernel_size, dilation, padding, stride, n: int):
    kernel = expand_param(kernel_size, n, "kernel_size")
    dil = expand_param(dilation, n, "dilation")
    pad = expand_param(padding, n, "padding")
    strides = expand_param(stride, n, "stride")
    if any(k <= 0 for k in kernel):
        raise TritonConvError(
            f"kernel size should be greater than zero, but got kernel_size={list(kernel)}"
        )
    if any(s <= 0 for s in strides):
        raise TritonConvError(f"stride should be greater than zero, but got stride={list(strides)}")
    if any(d <= 0 for d in dil):
        raise TritonConvError(f"dilation should be greater than zero, but got dilation={list(dil)}")
    if any(p < 0 for p in pad):
        raise TritonConvError(f"padding should be non-negative, but got padding={list(pad)}")
    return kernel, dil, pad, strides


def make_geometry(input_size, kernel, stride, pad_before, pad_after, dilation) -> Geometry:
    """A Geometry from already-validated integer sequences (no checks). Cached, as every call
    of an op rebuilds one from its int-list arguments; symbolic sizes (torch.compile with
    dynamic shapes) are not hashable and are built uncached."""
    args = tuple(tuple(v) for v in (input_size, kernel, stride, pad_before, pad_after, dilation))
    if torch.compiler.is_compiling():
        return _build_geometry(*args)
    try:
        return _cached_geometry(*args)
    except TypeError:
        return _build_geometry(*args)


def _build_geometry(input_size, kernel, stride, pad_before, pad_after, dilation) -> Geometry:
    out = tuple(
        output_size(*axis)
        for axis in zip(input_size, kernel, stride, pad_before, pad_after, dilation)
    )
    return Geometry(input_size, kernel, stride, dilation, pad_before, pad_after, out)


_cached_geometry = functools.lru_cache(maxsize=4096)(_build_geometry)


def window_geometry(input_size, kernel, dil, pad, strides) -> Geometry:
    """The geometry of unfold/fold's symmetric-padding window (arguments validated)."""
    return make_geometry(input_size, kernel, strides, pad, pad, dil)


def check_unfold(input: torch.Tensor, kernel_size, dilation, padding, stride) -> FoldArgs:
    """Validate an unfold call. The window's rank ``n`` is ``kernel_size``'s (``window_rank``);
    the input is ``(N, C, *spatial)`` or unbatched ``(C, *spatial)`` with ``n`` spatial
    dimensions."""
    if not isinstance(input, torch.Tensor):
        raise TritonConvError(f"unfold: input must be a Tensor, got {type(input).__name__}")
    n = window_rank(kernel_size)
    if input.dim() not in (n + 1, n + 2) or any(s == 0 for s in input.shape[-(n + 1) :]):
        if n == 2:  # F.unfold's words
            hint = " (a 3-D window takes a 3-element kernel_size)" if input.dim() == 5 else ""
            raise TritonConvError(
                "Expected 3D or 4D (batch mode) tensor with possibly 0 batch size and other "
                f"non-zero dimensions for input, but got: {shape_str(input.shape)}{hint}"
            )
        raise TritonConvError(
            f"unfold with a {n}-D kernel_size expects a {n + 1}D ({_UNFOLD_AXES[n]}) or "
            f"{n + 2}D (N, {_UNFOLD_AXES[n]}) input with possibly 0 batch size and other "
            f"non-zero dimensions, but got: {shape_str(input.shape)}"
        )
    if input.is_complex():
        raise TritonConvError("unfold: complex input is not supported")
    kernel, dil, pad, strides = _check_window(kernel_size, dilation, padding, stride, n)
    batched = input.dim() == n + 2
    shape = tuple(input.shape) if batched else (1, *input.shape)
    geometry = window_geometry(shape[2:], kernel, dil, pad, strides)
    if any(o < 1 for o in geometry.output):
        raise TritonConvError(
            f"Given input with spatial size {tuple(shape[2:])}, kernel_size={kernel}, "
            f"dilation={dil}, padding={pad}, calculated shape of the array of sliding blocks as "
            f"{geometry.output}, but its components must be at least one."
        )
    return FoldArgs(shape[0], shape[1], geometry, batched)


def check_fold(
    input: torch.Tensor, output_size, kernel_size, dilation, padding, stride
) -> FoldArgs:
    """Validate a fold call: ``input`` is ``(N, C*prod(kernel_size), L)`` or unbatched, the
    window's rank is ``kernel_size``'s (``window_rank``) and ``output_size`` has that many
    values."""
    if not isinstance(input, torch.Tensor):
        raise TritonConvError(f"fold: input must be a Tensor, got {type(input).__name__}")
    if input.dim() not in (2, 3) or any(s == 0 for s in input.shape[-2:]):
        raise TritonConvError(
            "Expected 2D or 3D (batch mode) tensor for input with possibly 0 batch size and "
            f"non-zero dimensions for input, but got: {shape_str(input.shape)}"
        )
    if input.dtype == torch.bool or input.is_complex():
        raise TritonConvError(
            f"fold: input has dtype {dtype_name(input.dtype)}; fold sums overlapping blocks "
            "and needs a real floating-point or integer dtype"
        )
    n = window_rank(kernel_size)
    out_size = expand_param(output_size, n, "output_size")
    kernel, dil, pad, strides = _check_window(kernel_size, dilation, padding, stride, n)
    if any(o <= 0 for o in out_size):
        raise TritonConvError(f"output_size should be greater than zero, got {list(out_size)}")
    batched = input.dim() == 3
    shape = tuple(input.shape) if batched else (1, *input.shape)
    kernel_numel = _prod(kernel)
    if shape[1] % kernel_numel != 0:
        raise TritonConvError(
            "Expected size of input's dimension 1 to be divisible by the product of "
            f"kernel_size, but got input.size(1)={shape[1]} and kernel_size={kernel}"
        )
    geometry = window_geometry(out_size, kernel, dil, pad, strides)
    blocks = geometry.output_numel
    if any(o < 1 for o in geometry.output) or shape[2] != blocks:
        raise TritonConvError(
            f"Given output_size={out_size}, kernel_size={kernel}, dilation={dil}, "
            f"padding={pad}, stride={strides}, expected size of input's dimension 2 to match "
            f"the calculated number of sliding blocks "
            f"{' * '.join(str(o) for o in geometry.output)} = {blocks}, but got "
            f"input.size(2)={shape[2]}."
        )
    return FoldArgs(shape[0], shape[1] // kernel_numel, geometry, batched)


# --------------------------------------------------------------------------------------------
# crop (Caffe semantics, N-D)
# --------------------------------------------------------------------------------------------

#: Most dimensions a crop input may have (the axes of ``kernels/crop.py``'s kernel).
CROP_MAX_DIMS = 6


@dataclass(frozen=True)
class CropArgs:
    """A validated crop: the output is ``input[offsets[d] : offsets[d] + sizes[d]]`` on every
    dimension ``d`` (offset 0 and the input's size on the dimensions before ``axis``)."""

    axis: int
    offsets: tuple[int, ...]
    sizes: tuple[int, ...]


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_crop(input: torch.Tensor, reference, axis, offset) -> CropArgs:
    """Validate a ``crop(input, reference, axis, offset)`` call; nothing is clamped.

    ``reference`` is a tensor or a sequence of ints with ``input``'s number of dimensions;
    ``offset`` is an int, a sequence of one int or of one int per cropped dimension, or
    ``None`` to centre the window (``(input_size - size) // 2``: an odd margin puts the extra
    element after the window).
    """
    if not isinstance(input, torch.Tensor):
        raise TritonConvError(f"crop: input must be a Tensor, got {type(input).__name__}")
    ndim = input.dim()
    if not 1 <= ndim <= CROP_MAX_DIMS:
        raise TritonConvError(
            f"crop: input must have 1 to {CROP_MAX_DIMS} dimensions, but got input of size "
            f"{shape_str(input.shape)}"
        )
    if isinstance(reference, torch.Tensor):
        ref_shape = tuple(reference.shape)
    elif isinstance(reference, Sequence) and not isinstance(reference, str):
        ref_shape = tuple(reference)
        if not all(_is_int(s) and s >= 0 for s in ref_shape):
            raise TritonConvError(
                f"crop: reference must be a Tensor or a sequence of non-negative ints, got "
                f"{reference!r}"
            )
    else:
        raise TritonConvError(
            f"crop: reference must be a Tensor or a sequence of ints, got {type(reference).__name__}"
        )
    if len(ref_shape) != ndim:
        raise TritonConvError(
            f"crop: reference has {len(ref_shape)} dimensions ({shape_str(ref_shape)}) but input "
            f"has {ndim} ({shape_str(input.shape)}); they must have the same number"
        )
    if not _is_int(axis) or not -ndim <= axis < ndim:
        raise TritonConvError(
            f"crop: axis={axis!r} is out of range for a {ndim}-D input (expected an int in "
            f"[{-ndim}, {ndim - 1}])"
        )
    axis %= ndim
    cropped = range(axis, ndim)
    for d in cropped:
        if ref_shape[d] > input.shape[d]:
            raise TritonConvError(
                f"crop: at dimension {d} the reference's size {ref_shape[d]} is larger than the "
                f"input's size {input.shape[d]} (input {shape_str(input.shape)}, reference "
                f"{shape_str(ref_shape)})"
            )
    if offset is None:
        offsets = tuple((input.shape[d] - ref_shape[d]) // 2 for d in cropped)
    else:
        offsets = (offset,) * len(cropped) if _is_int(offset) else offset
        if not isinstance(offsets, Sequence) or not all(_is_int(o) for o in offsets):
            raise TritonConvError(
                f"crop: offset must be None, an int or a sequence of ints, got {offset!r}"
            )
        offsets = tuple(offsets)
        if len(offsets) == 1:
            offsets = offsets * len(cropped)
        if len(offsets) != len(cropped):
            raise TritonConvError(
                f"crop: offset={list(offsets)} has {len(offsets)} values, but axis={axis} crops "
                f"{len(cropped)} dimensions ({axis} to {ndim - 1}); give one offset or "
                f"{len(cropped)}"
            )
    for d, o in zip(cropped, offsets):
        if o < 0:
            raise TritonConvError(f"crop: offset {o} at dimension {d} is negative")
        if o + ref_shape[d] > input.shape[d]:
            raise TritonConvError(
                f"crop: at dimension {d}, offset {o} + size {ref_shape[d]} = {o + ref_shape[d]} "
                f"reads past the input's size {input.shape[d]} (input {shape_str(input.shape)})"
            )
    return CropArgs(
        axis,
        (0,) * axis + offsets,
        tuple(input.shape[:axis]) + ref_shape[axis:],
    )
