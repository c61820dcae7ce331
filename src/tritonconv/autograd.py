"""Thin ``torch.autograd.Function`` classes over the custom ops of ``library.py``.

Forward saves what backward needs; backward calls other custom ops. Nothing here launches a
kernel directly, so ``torch.compile`` sees only custom ops.
"""

from __future__ import annotations

import torch

from . import library
from .ops import crop as crop_ops

ops = library  # the ops: custom ops under torch.compile, direct calls in eager mode


class _NoGraph:
    """Stands in for ``ctx`` when autograd has nothing to record: what forward saves is dropped."""

    def save_for_backward(self, *tensors):
        pass


def run(function: type[torch.autograd.Function], *args):
    """``function.apply(*args)``, or just its forward when no input needs a gradient: no graph
    node is made (about 14 µs less per call on the H100, benchmarks/NOTES.md)."""
    if torch.is_grad_enabled() and any(
        isinstance(a, torch.Tensor) and a.requires_grad for a in args
    ):
        return function.apply(*args)
    return function.forward(_NoGraph(), *args)


class Unfold(torch.autograd.Function):
    """im2col; its adjoint (the gradient) is col2im."""

    @staticmethod
    def forward(ctx, input, kernel_size, dilation, padding, stride):
        ctx.window = (kernel_size, dilation, padding, stride)
        ctx.output_size = list(input.shape[2:])
        return ops.unfold(input, kernel_size, dilation, padding, stride)

    @staticmethod
    def backward(ctx, grad_cols):
        grad = ops.fold(grad_cols, ctx.output_size, *ctx.window)
        return grad, None, None, None, None


class Fold(torch.autograd.Function):
    """col2im; its adjoint (the gradient) is im2col."""

    @staticmethod
    def forward(ctx, input, output_size, kernel_size, dilation, padding, stride):
        ctx.window = (kernel_size, dilation, padding, stride)
        return ops.fold(input, output_size, kernel_size, dilation, padding, stride)

    @staticmethod
    def backward(ctx, grad_image):
        return ops.unfold(grad_image, *ctx.window), None, None, None, None, None


class Conv2dGemm(torch.autograd.Function):
    """Convolution by im2col + GEMM; gradients for input, weight and bias."""

    @staticmethod
    def forward(ctx, input, weight, bias, stride, pad_before, pad_after, dilation, groups, limit):
        ctx.params = (stride, pad_before, pad_after, dilation, groups, limit)
        ctx.has_bias = bias is not None
        ctx.save_for_backward(input, weight)
        return ops.conv2d_gemm(
            input, weight, bias, stride, pad_before, pad_after, dilation, groups, limit
        )

    @staticmethod
    def backward(ctx, grad_output):
        input, weight = ctx.saved_tensors
        grad_input = grad_weight = grad_bias = None
        mask = list(ctx.needs_input_grad[:2])
        if any(mask):
            grad_input, grad_weight = ops.conv2d_gemm_backward(
                grad_output, input, weight, *ctx.params, mask
            )
            grad_input = grad_input if mask[0] else None
            grad_weight = grad_weight if mask[1] else None
        if ctx.has_bias and ctx.needs_input_grad[2]:
            grad_bias = grad_output.sum(dim=(0, 2, 3))
        return grad_input, grad_weight, grad_bias, None, None, None, None, None, None


def _direct_conv_function(depthwise: bool, name: str, doc: str):
    """An autograd Function over the ``conv2d_direct*`` ops, on the depthwise kernels or not.
    ``workspace_limit`` is accepted for the common signature and unused (no workspace)."""

    class Function(torch.autograd.Function):
        @staticmethod
        def forward(ctx, input, weight, bias, stride, pad_before, pad_after, dilation, groups, _):
            ctx.params = (stride, pad_before, pad_after, dilation, groups, depthwise)
            ctx.has_bias = bias is not None
            ctx.save_for_backward(input, weight)
            return ops.conv2d_direct(
                input, weight, bias, stride, pad_before, pad_after, dilation, groups, depthwise
            )

        @staticmethod
        def backward(ctx, grad_output):
            input, weight = ctx.saved_tensors
            grad_input = grad_weight = grad_bias = None
            if ctx.needs_input_grad[0]:
                grad_input = ops.conv2d_direct_grad_input(grad_output, weight, input, *ctx.params)
            if ctx.needs_input_grad[1]:
                grad_weight = ops.conv2d_direct_grad_weight(
                    grad_output, input, list(weight.shape), *ctx.params
                )
            if ctx.has_bias and ctx.needs_input_grad[2]:
                grad_bias = grad_output.sum(dim=(0, 2, 3))
            return grad_input, grad_weight, grad_bias, None, None, None, None, None, None

    Function.__name__ = Function.__qualname__ = name
    Function.__doc__ = doc
    return Function


Conv2dDirect = _direct_conv_function(
    False, "Conv2dDirect", "Direct convolution (any groups; integer dtypes exact)."
)
Conv2dDepthwise = _direct_conv_function(
    True, "Conv2dDepthwise", "Depthwise convolution (groups == in_channels), specialised kernels."
)


class Crop(torch.autograd.Function):
    """Crop ``input[offsets[d] : offsets[d] + sizes[d]]``; the gradient writes the output
    gradient into the window and zeros around it, in the input's layout."""

    @staticmethod
    def forward(ctx, input, offsets, sizes):
        ctx.input_size = list(input.shape)
        ctx.offsets = offsets
        ctx.dim_order = crop_ops.dim_order(input)
        return ops.crop(input, offsets, sizes)

    @staticmethod
    def backward(ctx, grad_output):
        grad_input = ops.crop_backward(grad_output, ctx.input_size, ctx.offsets, ctx.dim_order)
        return grad_input, None, None
