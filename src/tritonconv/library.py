"""torch.library ops: the boundary torch.compile sees.

Each op takes validated, normalised arguments (int lists, batched tensors) and calls launchers in
``ops/``, which launch every kernel through :func:`tritonconv.launch.launch`.

On CUDA the ops are ``torch.library.triton_op``: under ``torch.compile`` AOTAutograd decomposes
them into their Triton kernels (recorded with ``wrap_triton``) and the PyTorch ops around them,
so Inductor schedules our kernels itself, CUDA-graphs them and autotunes around them. Under
Triton's interpreter (CPU tensors) they are ordinary custom ops, opaque to the compiler. Either
way an op's body is also its fake implementation: run on fake tensors it allocates the outputs
and launches nothing (``launch`` skips or records), so shapes, strides and dtypes cannot drift
from the real op. Autograd formulas are registered on the ops (``autograd.py``).

In eager mode :class:`Op` calls the body directly, skipping the dispatcher (about 35 µs per
call on the H100, benchmarks/NOTES.md); anything being traced goes through ``torch.ops``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ._runtime import INTERPRETER
from .geometry import TritonConvError, make_geometry, window_geometry
from .launch import call, launch_plan, placeholder, tracing
from .ops import causal as causal_ops
from .ops import common, conv_gemm, depthwise, direct, implicit_gemm
from .ops import crop as crop_ops
from .ops import im2col as im2col_ops


class Op:
    """One tritonconv op, registered as ``torch.ops.tritonconv.<name>``."""

    def __init__(self, name: str, fn):
        qualname = f"tritonconv::{name}"
        if INTERPRETER:
            self.definition = torch.library.custom_op(qualname, fn, mutates_args=())
            self.definition.register_fake(fn)
        else:
            self.definition = torch.library.triton_op(qualname, fn, mutates_args=())
        self.traced = getattr(torch.ops.tritonconv, name)
        # Eager calls: the body, replayed from its launch plan (it only allocates, launches
        # and calls PyTorch through ``launch.call``), so a repeated call runs none of its Python.
        self.impl = launch_plan(fn)
        self.__doc__ = fn.__doc__

    def register_autograd(self, backward, setup_context) -> None:
        self.definition.register_autograd(backward, setup_context=setup_context)

    def __call__(self, *args):
        if torch.compiler.is_compiling() or tracing(
            *(a for a in args if isinstance(a, torch.Tensor))
        ):
            return self.traced(*args)
        return self.impl(*args)


def _dense_bias(bias: Tensor | None) -> None:
    """The kernels read the bias as a dense vector (the public functions pass one)."""
    if bias is not None and bias.dim() == 1 and bias.shape[0] > 1 and bias.stride(0) != 1:
        raise TritonConvError("tritonconv ops need a contiguous bias (pass bias.contiguous())")


def _nothing(like: Tensor) -> Tensor:
    """The empty tensor a backward op returns for a gradient its output mask leaves out (an
    eager backward's replay, which drops it, allocates none: ``autograd._backward_call``)."""
    return placeholder(like.dtype, like.device)


def _gradients(grad_output: Tensor, input: Tensor, grad_input, grad_weight, grad_bias, mask):
    """A convolution backward op's (grad_input, grad_weight, grad_bias): the bias gradient
    from :func:`channel_sum` when asked for and not already fused into the weight gradient's
    kernels; an empty tensor for a gradient ``mask`` leaves out."""
    if mask[2] and grad_bias is None:
        grad_bias = common.channel_sum(grad_output)
    return tuple(_nothing(input) if g is None else g for g in (grad_input, grad_weight, grad_bias))


def custom_op(name: str):
    """Decorator: ``fn`` (type-annotated, no mutation) becomes the op ``tritonconv::<name>``;
    its body may only allocate, launch and call PyTorch through ``launch`` (a launch plan
    replays it)."""
    return lambda fn: Op(name, fn)


# --------------------------------------------------------------------------------------------
# unfold / fold
# --------------------------------------------------------------------------------------------


@custom_op("unfold")
def unfold(
    input: Tensor,
    kernel_size: list[int],
    dilation: list[int],
    padding: list[int],
    stride: list[int],
) -> Tensor:
    geometry = window_geometry(input.shape[2:], kernel_size, dilation, padding, stride)
    return im2col_ops.unfold(input, geometry)


@custom_op("fold")
def fold(
    input: Tensor,
    output_size: list[int],
    kernel_size: list[int],
    dilation: list[int],
    padding: list[int],
    stride: list[int],
) -> Tensor:
    geometry = window_geometry(output_size, kernel_size, dilation, padding, stride)
    return im2col_ops.fold(input, geometry)


# --------------------------------------------------------------------------------------------
# convolution by im2col + GEMM
# --------------------------------------------------------------------------------------------


def _conv_geometry(input_size, weight_size, stride, pad_before, pad_after, dilation):
    return make_geometry(input_size[2:], weight_size[2:], stride, pad_before, pad_after, dilation)


@custom_op("conv2d_gemm")
def conv2d_gemm(
    input: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    stride: list[int],
    pad_before: list[int],
    pad_after: list[int],
    dilation: list[int],
    groups: int,
    workspace_limit: int,
) -> Tensor:
    _dense_bias(bias)
    geometry = _conv_geometry(input.shape, weight.shape, stride, pad_before, pad_after, dilation)
    return conv_gemm.conv2d_forward(input, weight, bias, geometry, groups, workspace_limit)


@custom_op("conv2d_gemm_backward")
def conv2d_gemm_backward(
    grad_output: Tensor,
    input: Tensor,
    weight: Tensor,
    stride: list[int],
    pad_before: list[int],
    pad_after: list[int],
    dilation: list[int],
    groups: int,
    workspace_limit: int,
    output_mask: list[bool],
) -> tuple[Tensor, Tensor, Tensor]:
    """(grad_input, grad_weight, grad_bias); one left out by ``output_mask`` is an empty
    tensor."""
    geometry = _conv_geometry(input.shape, weight.shape, stride, pad_before, pad_after, dilation)
    grad_input, grad_weight = conv_gemm.conv2d_backward(
        grad_output, input, weight, geometry, groups, workspace_limit, *output_mask[:2]
    )
    return _gradients(grad_output, input, grad_input, grad_weight, None, output_mask)


# --------------------------------------------------------------------------------------------
# direct convolution (``depthwise=True``: the depthwise kernels, groups == in_channels)
# --------------------------------------------------------------------------------------------


@custom_op("conv2d_direct")
def conv2d_direct(
    input: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    stride: list[int],
    pad_before: list[int],
    pad_after: list[int],
    dilation: list[int],
    groups: int,
    depthwise_kernels: bool,
) -> Tensor:
    _dense_bias(bias)
    geometry = _conv_geometry(input.shape, weight.shape, stride, pad_before, pad_after, dilation)
    if depthwise_kernels:
        return depthwise.depthwise_forward(input, weight, bias, geometry)
    return direct.conv2d_forward(input, weight, bias, geometry, groups)


@custom_op("conv2d_direct_backward")
def conv2d_direct_backward(
    grad_output: Tensor,
    input: Tensor,
    weight: Tensor,
    stride: list[int],
    pad_before: list[int],
    pad_after: list[int],
    dilation: list[int],
    groups: int,
    depthwise_kernels: bool,
    output_mask: list[bool],
) -> tuple[Tensor, Tensor, Tensor]:
    """(grad_input, grad_weight, grad_bias); one left out by ``output_mask`` is an empty
    tensor."""
    geometry = _conv_geometry(input.shape, weight.shape, stride, pad_before, pad_after, dilation)
    grad_input = grad_weight = grad_bias = None
    if output_mask[0]:
        if depthwise_kernels:
            grad_input = depthwise.depthwise_grad_input(grad_output, weight, input, geometry)
        else:
            grad_input = direct.conv2d_grad_input(grad_output, weight, input, geometry, groups)
    if output_mask[1]:
        weight_size = list(weight.shape)
        if depthwise_kernels:
            grad_weight, grad_bias = depthwise.depthwise_grad_weight(
                grad_output, input, weight_size, geometry, output_mask[2]
            )
        else:
            grad_weight = direct.conv2d_grad_weight(
                grad_output, input, weight_size, geometry, groups
            )
    return _gradients(grad_output, input, grad_input, grad_weight, grad_bias, output_mask)


# --------------------------------------------------------------------------------------------
# implicit GEMM, any spatial rank (1-D/2-D/3-D: 3-5-D tensors); the option is a tile
# configuration, ``[]`` for the heuristic's
# --------------------------------------------------------------------------------------------


def _config(config: list[int]) -> implicit_gemm.Config | None:
    return implicit_gemm.Config(*config) if config else None


@custom_op("conv_implicit_gemm")
def conv_implicit_gemm(
    input: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    stride: list[int],
    pad_before: list[int],
    pad_after: list[int],
    dilation: list[int],
    groups: int,
    config: list[int],
) -> Tensor:
    _dense_bias(bias)
    geometry = _conv_geometry(input.shape, weight.shape, stride, pad_before, pad_after, dilation)
    return implicit_gemm.conv_forward(input, weight, bias, geometry, groups, _config(config))


@custom_op("conv_implicit_gemm_backward")
def conv_implicit_gemm_backward(
    grad_output: Tensor,
    input: Tensor,
    weight: Tensor,
    stride: list[int],
    pad_before: list[int],
    pad_after: list[int],
    dilation: list[int],
    groups: int,
    config: list[int],
    output_mask: list[bool],
) -> tuple[Tensor, Tensor, Tensor]:
    """(grad_input, grad_weight, grad_bias); one left out by ``output_mask`` is an empty
    tensor. ``config`` is the forward's: the gradients use their own heuristic tiles."""
    geometry = _conv_geometry(input.shape, weight.shape, stride, pad_before, pad_after, dilation)
    return _implicit_gemm_gradients(grad_output, input, weight, geometry, groups, output_mask,
                                    transposed=False)  # fmt: skip


def _implicit_gemm_gradients(
    grad_output, input, weight, geometry, groups: int, output_mask, transposed: bool
) -> tuple[Tensor, Tensor, Tensor]:
    """The implicit GEMM's backward of a convolution of ``geometry`` or (``transposed``) of
    the transposed convolution that is its input gradient: ``dx`` the convolution's input
    gradient (transposed: the convolution itself, of dy), ``dw`` its weight gradient (with the
    roles of x and dy swapped when transposed); dy relaid channels-last once for both
    kernels where it is not."""
    grad_input = grad_weight = None
    if output_mask[0] and output_mask[1]:  # both kernels read it channels-last: one relayout
        grad_output = implicit_gemm.channels_innermost(grad_output)
    if output_mask[0] and transposed:
        grad_input = implicit_gemm.conv_forward(
            grad_output, weight, None, geometry, groups, None, input
        )
    elif output_mask[0]:
        grad_input = implicit_gemm.conv_grad_input(grad_output, weight, input, geometry, groups)
    if output_mask[1]:
        dy, x = (input, grad_output) if transposed else (grad_output, input)
        grad_weight = implicit_gemm.conv_grad_weight(
            dy, x, list(weight.shape), geometry, groups, None, weight.stride()
        )
    return _gradients(grad_output, input, grad_input, grad_weight, None, output_mask)


# --------------------------------------------------------------------------------------------
# transposed convolution: the input gradient of the convolution with the same weight, whose
# input has ``output_size`` (so it reuses that convolution's dX kernels; Caffe's deconvolution)
# --------------------------------------------------------------------------------------------


def _transposed(input: Tensor, weight: Tensor, groups: int, output_size, window):
    """(geometry of the convolution whose input gradient this is, the output's shape)."""
    geometry = make_geometry(output_size, weight.shape[2:], *window)
    return geometry, (input.shape[0], weight.shape[1] * groups, *output_size)


def _add_bias(out: Tensor, bias: Tensor | None) -> Tensor:
    if bias is not None:
        call(torch.Tensor.add_, out, bias.view(1, -1, *([1] * (out.dim() - 2))))
    return out


@custom_op("conv_transpose2d_gemm")
def conv_transpose2d_gemm(
    input: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    stride: list[int],
    pad_before: list[int],
    pad_after: list[int],
    dilation: list[int],
    groups: int,
    output_size: list[int],
    workspace_limit: int,
) -> Tensor:
    window = (stride, pad_before, pad_after, dilation)
    geometry, shape = _transposed(input, weight, groups, output_size, window)
    out, _ = conv_gemm.conv2d_backward(
        input, input, weight, geometry, groups, workspace_limit, True, False, shape
    )
    return _add_bias(out, bias)


@custom_op("conv_transpose2d_direct")
def conv_transpose2d_direct(
    input: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    stride: list[int],
    pad_before: list[int],
    pad_after: list[int],
    dilation: list[int],
    groups: int,
    output_size: list[int],
    depthwise_kernels: bool,
) -> Tensor:
    window = (stride, pad_before, pad_after, dilation)
    geometry, shape = _transposed(input, weight, groups, output_size, window)
    if depthwise_kernels:
        out = depthwise.depthwise_grad_input(input, weight, input, geometry, shape)
    else:
        out = direct.conv2d_grad_input(input, weight, input, geometry, groups, shape)
    return _add_bias(out, bias)


@custom_op("conv_transpose_implicit_gemm")
def conv_transpose_implicit_gemm(
    input: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    stride: list[int],
    pad_before: list[int],
    pad_after: list[int],
    dilation: list[int],
    groups: int,
    output_size: list[int],
    config: list[int],
) -> Tensor:
    _dense_bias(bias)
    window = (stride, pad_before, pad_after, dilation)
    geometry, shape = _transposed(input, weight, groups, output_size, window)
    return implicit_gemm.conv_grad_input(
        input, weight, input, geometry, groups, shape, bias, _config(config)
    )


@custom_op("conv_transpose_implicit_gemm_backward")
def conv_transpose_implicit_gemm_backward(
    grad_output: Tensor,
    input: Tensor,
    weight: Tensor,
    stride: list[int],
    pad_before: list[int],
    pad_after: list[int],
    dilation: list[int],
    groups: int,
    output_mask: list[bool],
) -> tuple[Tensor, Tensor, Tensor]:
    """(grad_input, grad_weight, grad_bias) of :func:`conv_transpose_implicit_gemm`; one left
    out by ``output_mask`` is an empty tensor. ``y = convT(x)`` is the input gradient of ``z =
    conv(y, w)``: ``dx = conv(dy, w)``, ``dw`` that convolution's weight gradient with x as its
    output gradient, ``db`` dy's channel sums. One op (one launch plan a backward replays) with
    dy relaid channels-last once for both kernels where it is not."""
    geometry = _conv_geometry(grad_output.shape, weight.shape, stride, pad_before, pad_after,
                              dilation)  # fmt: skip
    return _implicit_gemm_gradients(grad_output, input, weight, geometry, groups, output_mask,
                                    transposed=True)  # fmt: skip


@custom_op("channel_sum")
def channel_sum(input: Tensor) -> Tensor:
    """``input.sum((0, 2, ...))`` in a fixed order: a transposed convolution's bias gradient
    (the convolutions' backward ops compute theirs themselves)."""
    return common.channel_sum(input)


# --------------------------------------------------------------------------------------------
# crop
# --------------------------------------------------------------------------------------------


@custom_op("crop")
def crop(input: Tensor, offsets: list[int], sizes: list[int]) -> Tensor:
    return crop_ops.crop(input, offsets, sizes)


@custom_op("crop_backward")
def crop_backward(
    grad_output: Tensor, input_size: list[int], offsets: list[int], dim_order: list[int]
) -> Tensor:
    """``dim_order``: the input's dimensions from the largest stride to the smallest."""
    return crop_ops.crop_backward(grad_output, input_size, offsets, dim_order)


# --------------------------------------------------------------------------------------------
# causal depthwise conv1d: x (batch, dim, L) in the weight's dtype, the window shifted by ``pad``
# (width - 1 for a causal convolution, 0 over an input that already holds its history)
# --------------------------------------------------------------------------------------------


@custom_op("causal_conv1d")
def causal_conv1d(x: Tensor, weight: Tensor, bias: Tensor | None, pad: int, silu: bool) -> Tensor:
    _dense_bias(bias)
    return causal_ops.causal_conv1d(x, weight, bias, pad, silu)


@custom_op("causal_conv1d_backward")
def causal_conv1d_backward(
    grad_output: Tensor,
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    pad: int,
    silu: bool,
    output_mask: list[bool],
) -> tuple[Tensor, Tensor, Tensor]:
    """(grad_x, grad_weight, grad_bias); one left out by ``output_mask`` is an empty tensor."""
    _dense_bias(bias)
    return causal_ops.causal_conv1d_backward(grad_output, x, weight, bias, pad, silu, output_mask)
