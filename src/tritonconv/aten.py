"""Algorithm ``"aten"``: PyTorch's own CPU operations, the fast default for CPU tensors.

Our Triton kernels run on CPU tensors only through Triton's interpreter, which is fine for
testing them (CI does) and far too slow for use: a 31×31 depthwise convolution takes minutes.
So ``algo="auto"`` on CPU tensors runs this path instead (``TRITONCONV_CPU_KERNELS=1`` keeps the
interpreted kernels, as the test suite does), with the semantics of every other algorithm:

* the same validated, normalised arguments (its functions take what the ops take, after
  :mod:`functional` lifted a 1-D call to a height-1 plane), asymmetric padding included
  (``padding='same'`` with an even kernel);
* integers are exact: computed in int64 by PyTorch's integer convolution and cast back, so
  int8/int16/int32/uint8 wrap exactly as the kernels' int64 accumulation does;
* gradients come from PyTorch's autograd through the same operations (floats only, as
  everywhere).

The same holds for the other public ops, which :mod:`functional` runs here on CPU tensors under
the same rule (:func:`unfold`, :func:`fold`, :func:`crop`, and the causal convolutions'
:func:`depthwise_line`): each takes what its ``library`` op takes and returns the same shape,
dtype and memory format; fold sums integers in int64 and wraps them like the dtype. Their
gradients are PyTorch's autograd through the same operations, or, where those are in-place
strided slices, a small ``autograd.Function`` whose backward is the kernels' formula (unfold's
is fold and fold's unfold; crop's the gradient in the window, zeros around it, in the input's
layout), itself differentiable.

It sits beside ``library.py``: no kernel, no custom op; ``torch.compile`` sees the PyTorch
operations themselves.
"""

from __future__ import annotations

import itertools
import math

import torch
import torch.nn.functional as F

from .launch import functorch_active
from .ops.common import channels_last_format, dense_strides, is_channels_last, partial_dtype
from .ops.crop import dim_order

_CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}
_CONV_TRANSPOSE = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}


def _exact(*tensors):
    """The tensors to compute with (int64 for integer dtypes) and the dtype to return."""
    dtype = tensors[0].dtype
    if dtype.is_floating_point:
        return tensors, dtype
    return tuple(None if t is None else t.to(torch.int64) for t in tensors), dtype


def _pad(before, after) -> list[int]:
    """``F.pad``'s argument (last axis first) for per-axis padding before and after."""
    pads = []
    for b, a in zip(reversed(before), reversed(after)):
        pads += [b, a]
    return pads


def conv(input, weight, bias, stride, pad_before, pad_after, dilation, groups, option=None):
    """The convolution of a batched input with normalised arguments (as the ops take them)."""
    (x, w, b), dtype = _exact(input, weight, bias)
    rank = x.dim() - 2
    if list(pad_before) == list(pad_after):
        y = _CONV[rank](x, w, b, list(stride), list(pad_before), list(dilation), groups)
    else:
        x = F.pad(x, _pad(pad_before, pad_after))
        y = _CONV[rank](x, w, b, list(stride), 0, list(dilation), groups)
    return _like(y, input, dtype)


def conv_transpose(
    input, weight, bias, stride, pad_before, pad_after, dilation, groups, output_size, option=None
):
    """The transposed convolution (the convolution's input gradient) of a batched input: the
    full transposed output cropped to ``output_size`` from ``pad_before`` on (zero-extended
    where ``output_padding`` reaches past it), plus the bias."""
    (x, w, b), dtype = _exact(input, weight, bias)
    rank = x.dim() - 2
    full = _CONV_TRANSPOSE[rank](x, w, None, list(stride), 0, 0, groups, list(dilation))
    y = full
    for axis, (start, size) in enumerate(zip(pad_before, output_size)):
        dim = axis + 2
        available = full.shape[dim] - start
        y = y.narrow(dim, start, min(size, available))
        if size > available:
            extra = [0, 0] * (rank - 1 - axis) + [0, size - available]
            y = F.pad(y, extra)
    if b is not None:
        y = y + b.view(1, -1, *([1] * rank))
    return _like(y, input, dtype)


def _like(y, input, dtype):
    """``y`` in ``dtype`` (integers wrap) and in the input's memory format, as the kernels
    write their outputs (channels-last in, channels-last out; otherwise contiguous)."""
    if not functorch_active():  # (a transform's tensors have no layout to keep)
        layout = channels_last_format(y.dim())
        fmt = layout if is_channels_last(input) else torch.contiguous_format
        y = y.contiguous(memory_format=fmt)
    return y if y.dtype == dtype else y.to(dtype)


# --------------------------------------------------------------------------------------------
# unfold / fold / crop / the causal depthwise line: the same ops from PyTorch's CPU operations
# --------------------------------------------------------------------------------------------


#: Dtypes whose unfold/fold PyTorch's im2col/col2im (``F.unfold``/``F.fold``) compute as the
#: kernels do: a copy, and overlapping taps summed in the dtype itself in the same order.
_IM2COL_DTYPES = (torch.float32, torch.float64)


def _blocks(size, kernel, dilation, padding, stride) -> list[int]:
    """The number of window positions along each spatial axis."""
    return [
        (n + 2 * p - d * (k - 1) - 1) // s + 1
        for n, k, d, p, s in zip(size, kernel, dilation, padding, stride)
    ]


def _plane(kernel_size, dilation, padding, stride):
    """A 1-D window's arguments as a height-1 plane's (``F.unfold``/``F.fold`` are 2-D only)."""
    return (1, *kernel_size), (1, *dilation), (0, *padding), (1, *stride)


def unfold(input, kernel_size, dilation, padding, stride):
    """``library.unfold``: the blocks of a batched ``(N, C, *spatial)`` input (1 to 3 spatial
    axes, every dtype) as ``(N, C*prod(kernel), prod(blocks))``, contiguous, never a view.

    float32/float64 in 1-D and 2-D: ``F.unfold`` (1-D as a height-1 plane), its gradient
    ``F.fold``. Otherwise :func:`_gather_blocks`, whose gradient is :func:`fold` of the output
    gradient (as the kernels': each op's backward is the other op; float16/bfloat16 gradients
    are then summed in float32 as theirs). A copy either way: integers are exact."""
    rank = input.dim() - 2
    if rank <= 2 and input.dtype in _IM2COL_DTYPES:
        if rank == 2:
            return F.unfold(input, kernel_size, dilation, padding, stride)
        window = _plane(kernel_size, dilation, padding, stride)
        return F.unfold(input.unsqueeze(2), *window)
    if input.requires_grad and torch.is_grad_enabled() and not functorch_active():
        return _Unfold.apply(input, kernel_size, dilation, padding, stride)
    return _gather_blocks(input, kernel_size, dilation, padding, stride)


def fold(input, output_size, kernel_size, dilation, padding, stride):
    """``library.fold``: the blocks of a batched ``(N, C*prod(kernel), L)`` input summed into
    a contiguous ``(N, C, *output_size)`` image, each element's taps added in the kernels'
    order (``k1``, ``k2``, ``k3``) in their accumulator dtype: int64 for integers (cast back
    once, so they wrap like the dtype), float32 for float16/bfloat16. Deterministic.

    float32/float64 in 1-D and 2-D: ``F.fold`` (1-D as a height-1 plane). Otherwise
    :func:`_sum_blocks`, whose gradient is :func:`unfold`'s of the image gradient."""
    rank = len(output_size)
    if rank <= 2 and input.dtype in _IM2COL_DTYPES:
        if rank == 2:
            return F.fold(input, output_size, kernel_size, dilation, padding, stride)
        window = _plane(kernel_size, dilation, padding, stride)
        return F.fold(input, (1, *output_size), *window).squeeze(2)
    if functorch_active():
        return _scatter_blocks(input, output_size, kernel_size, dilation, padding, stride)
    if input.requires_grad and torch.is_grad_enabled():
        return _Fold.apply(input, output_size, kernel_size, dilation, padding, stride)
    return _sum_blocks(input, output_size, kernel_size, dilation, padding, stride)


def _gather_blocks(input, kernel_size, dilation, padding, stride):
    """unfold by strided windows of the zero-padded input (``Tensor.unfold`` along each axis,
    every ``dilation``-th tap), copied once into rows ``(c, k1, k2, k3)`` by columns
    ``(o1, o2, o3)``."""
    rank = input.dim() - 2
    N, C = input.shape[:2]
    blocks = _blocks(input.shape[2:], kernel_size, dilation, padding, stride)
    x = F.pad(input, _pad(padding, padding)) if any(padding) else input
    for axis, (k, d, s) in enumerate(zip(kernel_size, dilation, stride)):
        x = x.unfold(2 + axis, (k - 1) * d + 1, s)  # the windows: a new last dimension
        if d > 1:
            x = x[..., ::d]
    # (N, C, *blocks, *kernel) -> (N, C, *kernel, *blocks), copied
    x = x.permute(0, 1, *range(2 + rank, 2 + 2 * rank), *range(2, 2 + rank))
    x = x.clone(memory_format=torch.contiguous_format)
    return x.view(N, C * math.prod(kernel_size), math.prod(blocks))


def _sum_blocks(input, output_size, kernel_size, dilation, padding, stride):
    """fold by a zero (padded) image in the accumulator dtype and, per tap, one strided-slice
    add of that tap's rows; then the padding cropped and the sum cast back, in one copy."""
    dtype = input.dtype
    N, rows, _ = input.shape
    taps = math.prod(kernel_size)
    blocks = _blocks(output_size, kernel_size, dilation, padding, stride)
    accumulator = partial_dtype(dtype)
    cols = input.reshape(N, rows // taps, taps, *blocks)
    padded = [n + 2 * p for n, p in zip(output_size, padding)]
    image = torch.zeros((N, rows // taps, *padded), dtype=accumulator, device=input.device)
    starts = itertools.product(*(range(0, k * d, d) for k, d in zip(kernel_size, dilation)))
    for tap, start in zip(cols.unbind(2), starts):
        window = (slice(o, o + (b - 1) * s + 1, s) for o, b, s in zip(start, blocks, stride))
        image[(slice(None), slice(None), *window)].add_(tap)  # int8 + int64: exact
    if any(padding):
        image = image[(..., *(slice(p, p + n) for p, n in zip(padding, output_size)))]
    if image.dtype == dtype and image.is_contiguous():
        return image
    return torch.empty(image.shape, dtype=dtype, device=image.device).copy_(image)


def _scatter_blocks(input, output_size, kernel_size, dilation, padding, stride):
    """fold out of place (one ``index_add`` of every tap's rows into the flattened padded
    image), as the ``torch.func`` transforms need: they batch and differentiate it themselves
    (:func:`_sum_blocks` adds into a buffer in place). Integers sum in int64, wrapping like
    the dtype once cast back."""
    dtype = input.dtype
    N, rows, _ = input.shape
    kernel, taps = list(kernel_size), math.prod(kernel_size)
    blocks = _blocks(output_size, kernel_size, dilation, padding, stride)
    padded = [n + 2 * p for n, p in zip(output_size, padding)]
    # each (tap, block)'s index in the flattened padded image: tap-major, as the rows are
    index = torch.zeros((), dtype=torch.int64, device=input.device)
    rank = len(kernel)
    for axis in range(rank):
        k = torch.arange(kernel[axis], device=input.device) * dilation[axis]
        o = torch.arange(blocks[axis], device=input.device) * stride[axis]
        coordinate = k.view([-1 if a == axis else 1 for a in range(rank)] + [1] * rank)
        coordinate = coordinate + o.view([1] * rank + [-1 if a == axis else 1 for a in range(rank)])
        index = index * padded[axis] + coordinate
    cols = input.reshape(N, rows // taps, taps * math.prod(blocks)).to(partial_dtype(dtype))
    image = cols.new_zeros(N, rows // taps, math.prod(padded))
    image = image.index_add(2, index.reshape(-1), cols).view(N, rows // taps, *padded)
    image = image[(..., *(slice(p, p + n) for p, n in zip(padding, output_size)))]
    return image.to(dtype).contiguous()


class _Unfold(torch.autograd.Function):
    """:func:`_gather_blocks` with :func:`fold` as its gradient (3-D; float16/bfloat16)."""

    @staticmethod
    def forward(ctx, input, kernel_size, dilation, padding, stride):
        ctx.size, ctx.window = list(input.shape[2:]), (kernel_size, dilation, padding, stride)
        return _gather_blocks(input, kernel_size, dilation, padding, stride)

    @staticmethod
    def backward(ctx, grad):
        return fold(grad, ctx.size, *ctx.window), None, None, None, None


class _Fold(torch.autograd.Function):
    """:func:`_sum_blocks` with :func:`unfold` as its gradient."""

    @staticmethod
    def forward(ctx, input, output_size, kernel_size, dilation, padding, stride):
        ctx.window = (kernel_size, dilation, padding, stride)
        return _sum_blocks(input, output_size, kernel_size, dilation, padding, stride)

    @staticmethod
    def backward(ctx, grad):
        return unfold(grad, *ctx.window), None, None, None, None, None


def crop(input, offsets, sizes):
    """``library.crop``: ``input[offsets[d] : offsets[d] + sizes[d]]`` on every dimension,
    copied into a new dense tensor whose dimensions lie in memory in the input's order (by
    decreasing stride, ties in dimension order: channels-last stays channels-last). Any dtype,
    exact. The gradient (floats) is the kernels': the output gradient inside the window, zeros
    around it, laid out in the input's order too."""
    if functorch_active():  # out of place, for the transforms to batch and differentiate
        return _window(input, offsets, sizes).clone()
    if input.requires_grad and torch.is_grad_enabled():
        return _Crop.apply(input, offsets, sizes)
    return _copy_window(input, offsets, sizes)


def _dense(shape, order, like, zero=False):
    out = torch.empty_strided(
        shape, dense_strides(shape, order), dtype=like.dtype, device=like.device
    )
    return out.zero_() if zero else out


def _window(t, offsets, sizes):
    """The view ``t[offsets[d] : offsets[d] + sizes[d]]``."""
    for d, (offset, size) in enumerate(zip(offsets, sizes)):
        if offset or size != t.shape[d]:
            t = t.narrow(d, offset, size)
    return t


def _copy_window(input, offsets, sizes):
    return _dense(sizes, dim_order(input), input).copy_(_window(input, offsets, sizes))


class _Crop(torch.autograd.Function):
    """:func:`_copy_window` with the kernels' gradient (and its layout)."""

    @staticmethod
    def forward(ctx, input, offsets, sizes):
        ctx.size, ctx.offsets, ctx.order = list(input.shape), offsets, dim_order(input)
        return _copy_window(input, offsets, sizes)

    @staticmethod
    def backward(ctx, grad):
        return crop_gradient(grad, ctx.size, ctx.offsets, ctx.order), None, None


def crop_gradient(grad, size, offsets, order):
    """The gradient of a crop of a ``size`` input: ``grad`` inside the window at ``offsets``,
    zeros around it, dense in the dimension ``order`` (as the kernels write it); differentiable
    in ``grad``."""
    grad_input = _dense(size, order, grad, zero=True)
    _window(grad_input, offsets, grad.shape).copy_(grad)
    return grad_input


def depthwise_line(x, weight, bias, pad_before: int):
    """The causal convolutions' line (``functional._causal_line``): ``F.conv1d(x,
    weight[:, None], bias, groups=dim)`` over ``x`` (batch, dim, seqlen) left-padded by
    ``pad_before`` zeros, computed as the kernels compute it, on a height-1 plane by
    :func:`conv` (so the output's format follows the same rule, integers exact)."""
    dim, width = weight.shape
    plane = x.unsqueeze(2)
    w = weight.reshape(dim, 1, 1, width)
    # A line shorter than one window (an empty sequence): more zeros first, whose outputs are
    # dropped, so PyTorch's convolution takes it (the kernels give no output, as this does).
    short = max(0, width - x.shape[-1] - pad_before)
    out = conv(plane, w, bias, [1, 1], [0, pad_before + short], [0, 0], [1, 1], dim)
    return out.squeeze(2)[..., short:]
