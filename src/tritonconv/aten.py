"""Algorithm ``"aten"``: PyTorch's own CPU convolutions, the fast default for CPU tensors.

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

It sits beside ``library.py``: no kernel, no custom op; ``torch.compile`` sees the PyTorch
operations themselves.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .ops.common import channels_last_format, is_channels_last

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
    layout = channels_last_format(y.dim())
    y = y.contiguous(memory_format=layout if is_channels_last(input) else torch.contiguous_format)
    return y if y.dtype == dtype else y.to(dtype)
