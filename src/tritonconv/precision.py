"""The precision of the kernels' fp32 dots, one setting for every launcher and every plan
key: ``torch.backends.cudnn.allow_tf32`` (as PyTorch's convolutions obey it) and, with it
off, :data:`TF32_OFF_PRECISION`. A leaf module: the launch layer keys its recorded launch
plans by :func:`dot_precision` of fp32 (the precision is a compile-time argument of the
kernels those plans replay), and the ops ask it for each launch.
"""

from __future__ import annotations

import os

import torch

from ._runtime import INTERPRETER

#: ``torch.backends.cudnn.allow_tf32`` read by the C getter behind the property (whose Python
#: call costs 0.4 µs a read): for eager plan and replay keys. Dynamo cannot trace it;
#: :func:`dot_precision`, which it traces, reads the property.
allow_tf32 = torch._C._get_cudnn_allow_tf32


def dot_precision(dtype: torch.dtype) -> str:
    """``tl.dot``'s input precision. fp32 follows ``torch.backends.cudnn.allow_tf32`` (the flag
    PyTorch's convolutions obey): TF32 when allowed, else :data:`TF32_OFF_PRECISION`, fp32
    accuracy (``tf32x3_rn`` unless the environment chooses another). 16-bit inputs ignore it.

    Measured (session 10, benchmarks/probe_fp32_models.py, H100): with ``tf32x3`` (three TF32
    tensor-core products) every layer's error was within cuDNN's, yet resnet50's fp32 output
    ended 2.17x further from float64 than cuDNN's (a bias that adds up over 50 layers); with
    ``ieee`` 0.93x. Session 26 (H100/H200): the tensor cores truncate their sums;
    ``tf32x3`` ran the dense forwards at 1.43x cuDNN fp32 (``ieee``: 0.61x) with resnet50's
    output 2.15x cuDNN's distance, 0.97x with ``tf32x3`` on its 1x1 layers only
    (benchmarks/NOTES.md). Session 27 (H200): ``tf32x3_rn`` (kernels/mma.py: each step's
    truncation compensated) ran them at 1.30x with resnet50's logits 1.03-1.13x cuDNN's
    distance (the error figures above, 2.17x, 2.15x and 0.97x, were taken with benchmark
    mode's 32- and 64-deep tiles: benchmarks/NOTES.md, session 27)."""
    if dtype == torch.float32 and not torch.backends.cudnn.allow_tf32:
        if TF32_OFF_PRECISION == "tf32x3_rn" and INTERPRETER:
            return "tf32x3"  # the interpreter's dots round to nearest: nothing to correct
        return TF32_OFF_PRECISION
    return "tf32"


#: What :func:`dot_precision` may answer for fp32 with TF32 off: ``ieee`` (fp32 products and
#: sums), or three TF32 tensor-core products (kernels/mma.py), ``tf32x3_rn`` with the tensor
#: cores' truncation compensated.
TF32_OFF_PRECISIONS = ("ieee", "tf32x3", "tf32x3_rn")
#: The precisions made of three TF32 products (reduction steps capped:
#: ``ops.direct.tf32x3_block``)
TF32X3_PRECISIONS = ("tf32x3", "tf32x3_rn")
#: The precisions made of TF32 tensor-core products, which take only operand tiles whose
#: reduction axis is innermost
TF32_PRODUCTS = ("tf32", *TF32X3_PRECISIONS)

#: The TF32-off precision unless the environment chooses another: ``tf32x3_rn`` since
#: session 28. The dense forwards run at 1.30x cuDNN fp32 with it against ``ieee``'s 0.60x
#: (session 27, H200), and the models suite's models measured (session 28, H100: resnet50,
#: mobilenet_v3_large, efficientnet_b0, convnext_tiny, regnet_y_800mf, r2plus1d_18) end
#: 0.20-1.11x cuDNN's fp32 distance from float64 in output and 0.00-0.96x in their worst
#: parameter gradient (``ieee``: 0.67-1.23x and 0.59-1.13x).
DEFAULT_TF32_OFF_PRECISION = "tf32x3_rn"


def _tf32_off_precision() -> str:
    """The environment's ``TRITONCONV_TF32_OFF_PRECISION`` (default
    :data:`DEFAULT_TF32_OFF_PRECISION`), checked."""
    value = os.environ.get("TRITONCONV_TF32_OFF_PRECISION", DEFAULT_TF32_OFF_PRECISION)
    if value not in TF32_OFF_PRECISIONS:
        raise ValueError(
            f"TRITONCONV_TF32_OFF_PRECISION={value!r}: expected one of {TF32_OFF_PRECISIONS}"
        )
    return value


#: :func:`dot_precision` of fp32 with TF32 off: the environment's
#: ``TRITONCONV_TF32_OFF_PRECISION`` (read when tritonconv is imported), else
#: :data:`DEFAULT_TF32_OFF_PRECISION`;
#: probes set it (``bench.overridden``). Launch plans and call plans are keyed by
#: :func:`dot_precision` of fp32, so a changed setting never replays the old kernels.
TF32_OFF_PRECISION = _tf32_off_precision()
