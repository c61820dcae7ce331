"""Direct convolution launchers: forward, input gradient and weight gradient (2-D, any groups).

No column buffer: ``kernels/direct.py`` walks the window in registers. Integer dtypes
(int8, uint8, int16, int32, int64) accumulate in int64 and are cast once (wrapping like the
dtype), so results are bitwise those of PyTorch's CPU convolution; int64 sums wrap modulo
2**64 exactly as PyTorch's do. Floats accumulate in fp32 (fp64 for fp64).

The weight gradient is split over positions into partial tiles, summed by ``sum_partials``
in a fixed order: the split count depends only on the shapes, so reruns are bitwise equal.

Arguments arrive validated (``geometry.py``); launchers only check the device, allocate and
launch. Block sizes are chosen here; the interpreter gets larger tiles (fewer Python steps).
"""

from __future__ import annotations

import torch
import triton.language as tl

from .._runtime import INTERPRETER, check_kernel_device
from ..geometry import Geometry
from ..kernels.direct import direct_conv_kernel, direct_grad_weight_kernel
from ..launch import allocate, launch, launch_plan
from ..precision import TF32X3_PRECISIONS, dot_precision
from .common import (
    accumulator_dtype,
    cdiv,
    clamped_power_of_2,
    empty_like_format,
    multiprocessor_count,
    needs_int64,
    partial_dtype,
    sum_partials,
)

# Programs per SM the weight gradient aims for when choosing its split count.
WGRAD_PROGRAMS_PER_SM = 4
# Cap on the weight gradient's partial sums, in elements (splits x weight numel).
WGRAD_PARTIAL_LIMIT = 1 << 24


#: Longest reduction step of an fp32 dot with ``tf32x3`` products (:func:`tf32x3_block`): the
#: tensor cores truncate inside each step (kernels/mma.py), so longer steps leave a larger
#: bias (a 4608-deep GEMM's: 6.2e-8 of its RMS at 32-deep steps, 3.9e-8 at 16-deep;
#: ``tf32x3_rn`` 2.8e-8 and 5.3e-9).
TF32X3_K_BLOCK = 16


def tf32x3_block(block: int, dtype: torch.dtype) -> int:
    """A kernel's reduction block ``block``, capped at :data:`TF32X3_K_BLOCK` where fp32 takes
    ``tf32x3`` products (every launcher whose dots reduce along a block asks this)."""
    if dtype == torch.float32 and dot_precision(dtype) in TF32X3_PRECISIONS:
        return min(block, TF32X3_K_BLOCK)
    return block


def dot_dtype(dtype: torch.dtype):
    """Triton dtype ``tl.dot``'s operands are cast to: their own, except bfloat16 under the
    interpreter (its NumPy dot has none; fp32 holds bfloat16 values exactly)."""
    if dtype == torch.bfloat16:
        return tl.float32 if INTERPRETER else tl.bfloat16
    return tl.float16 if dtype == torch.float16 else tl.float32


def uses_dot(dtype: torch.dtype, *tile_dims: int) -> bool:
    """Tensor cores (``tl.dot``) pay off for 16-bit and fp32 tiles at least 16 wide."""
    return dtype in (torch.float16, torch.bfloat16, torch.float32) and min(tile_dims) >= 16


def _conv_tiles(dtype, src_per_group: int, dst_per_group: int):
    """(USE_DOT, BLOCK_P, BLOCK_S, BLOCK_D) for ``direct_conv_kernel``. Without ``tl.dot`` the
    kernel walks source channels one at a time (``BLOCK_S`` unused) over a ``[P, D]`` tile."""
    if uses_dot(dtype, src_per_group, dst_per_group):
        block_s = tf32x3_block(clamped_power_of_2(src_per_group, 16, 32), dtype)
        block_d = clamped_power_of_2(dst_per_group, 16, 64)
        return True, 128 if INTERPRETER else 64, block_s, block_d
    block_d = clamped_power_of_2(dst_per_group, 1, 16)
    budget = 16384 if INTERPRETER else 1024  # elements of the [P, D] accumulator
    return False, max(16, budget // block_d), 1, block_d


@launch_plan
def _launch_conv(src, weight, bias, dst, geometry: Geometry, groups: int, transposed: bool):
    """dst = direct conv (or, ``transposed``, its input gradient) of src; see the kernel."""
    N, C_src = src.shape[:2]
    C_dst = dst.shape[1]
    src_per_group, dst_per_group = C_src // groups, C_dst // groups
    use_dot, block_p, block_s, block_d = _conv_tiles(src.dtype, src_per_group, dst_per_group)
    num_positions = N * dst.shape[2] * dst.shape[3]
    w_so, w_si, w_skh, w_skw = weight.stride()
    out_per_group = weight.shape[0] // groups
    w_ss, w_sd = (w_so, w_si) if transposed else (w_si, w_so)
    grid = (cdiv(num_positions, block_p), groups * cdiv(dst_per_group, block_d))
    launch(
        direct_conv_kernel,
        grid,
        src,
        weight,
        bias if bias is not None else weight,
        dst,
        num_positions,
        *src.shape[2:],
        *dst.shape[2:],
        src_per_group,
        dst_per_group,
        *geometry.kernel,
        *geometry.stride,
        *geometry.pad_before,
        *geometry.dilation,
        *src.stride(),
        *dst.stride(),
        out_per_group * w_so,
        w_ss,
        w_sd,
        w_skh,
        w_skw,
        TRANSPOSED=transposed,
        HAS_BIAS=bias is not None,
        USE_DOT=use_dot,
        DOT_PRECISION=dot_precision(src.dtype),
        DOT_DTYPE=dot_dtype(src.dtype),
        ACC_DTYPE=accumulator_dtype(src.dtype),
        BLOCK_P=block_p,
        BLOCK_S=block_s,
        BLOCK_D=block_d,
        INDEX_64=needs_int64(src, dst, weight),
        num_warps=4,
    )


def conv2d_forward(x, weight, bias, geometry: Geometry, groups: int) -> torch.Tensor:
    """y = conv2d(x, weight, bias) for a batched (N, C, H, W) input, in x's memory format."""
    check_kernel_device(x, "input")
    out = empty_like_format((x.shape[0], weight.shape[0], *geometry.output), x)
    if out.numel() == 0:
        return out
    _launch_conv(x, weight, bias, out, geometry, groups, False)
    return out


def conv2d_grad_input(
    grad_out, weight, like, geometry: Geometry, groups: int, shape=None
) -> torch.Tensor:
    """dx of a direct convolution, gathered (no atomics); ``like`` gives dtype and memory
    format, and the shape unless ``shape`` does (a transposed convolution's output)."""
    check_kernel_device(grad_out, "grad_output")
    shape = tuple(like.shape) if shape is None else tuple(shape)
    grad_in = empty_like_format(shape, like, zero=grad_out.numel() == 0)
    if grad_in.numel() == 0 or grad_out.numel() == 0:
        return grad_in
    _launch_conv(grad_out, weight, None, grad_in, geometry, groups, True)
    return grad_in


def _grad_weight_tiles(dtype, out_per_group: int, rows: int):
    """(USE_DOT, BLOCK_D, BLOCK_R, BLOCK_P) for ``direct_grad_weight_kernel``."""
    if uses_dot(dtype, out_per_group, rows):
        return (
            True,
            clamped_power_of_2(out_per_group, 16, 64),
            clamped_power_of_2(rows, 16, 64),
            tf32x3_block(128 if INTERPRETER else 32, dtype),
        )
    block_d = clamped_power_of_2(out_per_group, 1, 8)
    block_r = clamped_power_of_2(rows, 1, 16)
    budget = 16384 if INTERPRETER else 2048
    return False, block_d, block_r, max(16, budget // (block_d * block_r))


def conv2d_grad_weight(grad_out, x, weight_shape, geometry: Geometry, groups: int):
    """dW of a direct convolution: split over positions, partials summed in a fixed order."""
    check_kernel_device(x, "input")
    N, C = x.shape[:2]
    C_out = weight_shape[0]
    in_per_group, out_per_group = C // groups, C_out // groups
    rows = in_per_group * geometry.kernel_numel
    num_positions = N * geometry.output_numel
    if num_positions == 0:
        return allocate(weight_shape, x.dtype, x.device, zero=True)
    use_dot, block_d, block_r, block_p = _grad_weight_tiles(x.dtype, out_per_group, rows)
    tiles = groups * cdiv(out_per_group, block_d) * cdiv(rows, block_r)
    position_blocks = cdiv(num_positions, block_p)
    if INTERPRETER:  # two splits, so the split reduction is tested on CPU too
        splits = 2
    else:
        splits = cdiv(WGRAD_PROGRAMS_PER_SM * multiprocessor_count(x.device), tiles)
    splits = max(1, min(splits, position_blocks, WGRAD_PARTIAL_LIMIT // (C_out * rows)))
    per_split = cdiv(position_blocks, splits) * block_p
    splits = cdiv(num_positions, per_split)
    acc_dtype = partial_dtype(x.dtype)  # int64 for integers: exact
    partial = allocate((splits, C_out, rows), acc_dtype, x.device)
    launch(
        direct_grad_weight_kernel,
        (tiles, splits),
        grad_out,
        x,
        partial,
        num_positions,
        per_split,
        *geometry.input,
        *geometry.output,
        in_per_group,
        out_per_group,
        *geometry.kernel,
        *geometry.stride,
        *geometry.pad_before,
        *geometry.dilation,
        *grad_out.stride(),
        *x.stride(),
        C_out * rows,
        USE_DOT=use_dot,
        DOT_PRECISION=dot_precision(x.dtype),
        DOT_DTYPE=dot_dtype(x.dtype),
        ACC_DTYPE=accumulator_dtype(x.dtype),
        BLOCK_D=block_d,
        BLOCK_R=block_r,
        BLOCK_P=block_p,
        INDEX_64=needs_int64(grad_out, x, partial),
        num_warps=4,
    )
    grad_weight = allocate(weight_shape, x.dtype, x.device)
    sum_partials(partial, grad_weight)
    return grad_weight
