"""Gradients of the ops of ``library.py``: one formula per op, used two ways.

Each differentiable op has a ``setup_context(ctx, inputs, output)`` and a
``backward(ctx, grad)`` here. They are registered on the op itself
(``Op.register_autograd``), which is what ``torch.compile`` traces: AOTAutograd differentiates
the op with them and decomposes the backward ops into their kernels too. In eager mode the
same two functions form a ``torch.autograd.Function`` per op, because going through the
dispatcher's autograd key costs more than the small kernels themselves (benchmarks/NOTES.md);
:func:`run` picks the way and skips the graph entirely when nothing needs a gradient.
Backward formulas call other ops, never a kernel directly.

**Higher derivatives.** The backward ops (and their launch-plan replays) make tensors with no
autograd history, so a backward that autograd is itself recording (``create_graph=True``: a
gradient penalty, a Hessian-vector product, ``torch.autograd.functional.jvp``) takes each
op's differentiable form instead: the convolutions' and crop's gradients come from the
PyTorch operations of ``aten.py`` (the same semantics; gradients of any order, at PyTorch's
speed), unfold's and fold's from each other's differentiable ``Function``.
"""

from __future__ import annotations

import torch

from . import aten
from . import library as ops
from .launch import current_device, functorch_active, tracing
from .ops import crop as crop_ops
from .precision import allow_tf32

# ``torch.autograd.Function.apply``'s unwrapping of a dead functorch wrapper, one tensor (None
# where this torch has none: then :func:`run` takes ``apply`` itself)
_unwrap_if_dead = getattr(torch._C._functorch, "unwrap_if_dead", None)


class _StepContext:
    """Stands in for ``ctx`` in :func:`forward_backward`: what an op's ``setup_context`` keeps
    and its backward reads, with no autograd node behind it."""

    def __init__(self, needs_input_grad: tuple):
        self.needs_input_grad = needs_input_grad
        self.plan = None  # (no launch plans: the ops run themselves)

    def save_for_backward(self, *tensors):
        self.saved_tensors = tensors


def _differentiable(
    name: str, op: ops.Op, setup_context, backward_fn, tensor_args: int = 1
) -> type:
    """Register ``setup_context``/``backward_fn`` on ``op`` and make the eager
    ``autograd.Function`` of the same three pieces (``op.function``; returned too).
    ``tensor_args``: how many of the op's leading arguments may be tensors (the rest are
    plain values)."""
    op.register_autograd(backward_fn, setup_context)

    class Function(torch.autograd.Function):
        """``apply(*leading, (rest, plan))``: the op's arguments as its ``tensor_args``
        leading ones (so ``ctx.needs_input_grad`` keeps the op's own positions) and the
        rest in one tuple with ``plan``, the caller's plan of this call signature
        (``functional.Plan``, or None), whose launch plans the forward reuses and keeps for
        the backward (``ctx.plan``). One argument for the values: the autograd engine's cost
        grows with a node's inputs, about 2 µs for a convolution's seven more (NOTES.md,
        session 34)."""

        @staticmethod
        def forward(ctx, *leading_and_rest):
            *leading, (rest, plan) = leading_and_rest
            inputs = (*leading, *rest)
            replay = None if plan is None else plan.replay
            if replay is not None:  # (plain tensors only come here: ``run``)
                output = replay.run([t for t in leading if t is not None])
            else:
                output = op.impl(*inputs)
                _keep_replay(op, plan, inputs)
            setup_context(ctx, inputs, output)
            ctx.plan = plan
            return output

        @staticmethod
        def backward(ctx, *grads):
            return *backward_fn(ctx, *grads)[:tensor_args], None

    op.function = Function
    Function.tensor_args = tensor_args
    # the C++ ``apply`` that ``torch.autograd.Function.apply`` ends in (:func:`run`)
    Function.c_apply = super(torch.autograd.Function, Function).apply
    Function.setup_context_fn, Function.backward_fn = setup_context, backward_fn
    Function.__name__ = Function.__qualname__ = name
    Function.__doc__ = op.__doc__
    return Function


def run(op: ops.Op, *args, plan=None, tensors=None):
    """Apply a differentiable ``op`` to ``args``: through the op itself while tracing (its
    registered autograd), else through its eager Function, or just its body when no input
    needs a gradient (no graph node: about 14 µs less per call on the H100).

    ``plan``: the caller's plan of this call signature (``functional.Plan``). Without
    gradients the body's launch plan is kept on it (``plan.replay``), so a repeated call
    replays the recorded allocations and launches without even looking the launch plan up.
    ``tensors``: the tensors among ``args``, in order, where the caller knows them (else
    found here: a scan that costs about 1.5 µs a convolution call)."""
    if torch.compiler.is_compiling():
        return op(*args)
    if tensors is None:
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
    if tracing(*tensors):
        return op(*args)
    index = tensors[0].get_device()  # (-1 on the CPU: one call, where .device makes an object)
    if index >= 0 and index != current_device():
        # Kernels launch on the current device: make it the tensors' (cuda:1 data while
        # cuda:0 is current). The autograd engine sets it for the backward itself.
        with torch.cuda.device(index):
            return run(op, *args, plan=plan, tensors=tensors)
    if torch.is_grad_enabled() and _any_requires_grad(tensors):
        function = op.function
        count = function.tensor_args
        if _unwrap_if_dead is None or functorch_active():
            return function.apply(*args[:count], (args[count:], plan))
        # ``Function.apply`` less its Python wrapper (about 2 µs: a closure, a generator over
        # the arguments): the C++ apply, on the tensors' dead functorch wrappers unwrapped as
        # the wrapper does (a tensor that escaped a finished transform)
        leading = [_unwrap_if_dead(a) if a is not None else a for a in args[:count]]
        return function.c_apply(*leading, (args[count:], plan))
    if plan is None:
        return op.impl(*args)
    replay = plan.replay
    if replay is not None:
        return replay.run(tensors)
    output = op.impl(*args)
    _keep_replay(op, plan, args)
    return output


def _any_requires_grad(tensors: list) -> bool:
    """``any(t.requires_grad for t in tensors)`` at a quarter of its cost (no generator)."""
    for t in tensors:  # noqa: SIM110 (the loop is the point: 0.1 µs against any()'s 0.4)
        if t.requires_grad:
            return True
    return False


def forward_backward(op: ops.Op, args: tuple, needs: tuple) -> list:
    """The gradients of ``op(*args)`` that ``needs`` marks (one flag per leading argument),
    the forward and the backward run through the op's own formula with no autograd graph:
    benchmark mode's measurement of a call that needs gradients. No node, no saved-tensor
    hooks (a caller's activation checkpointing or offloading never sees the measurement's
    tensors), no engine thread. The output stands in for its own gradient (the same shape,
    strides and dtype: what a backward reads)."""
    with torch.no_grad():
        output = op.impl(*args)
        ctx = _StepContext((*needs, *[False] * (len(args) - len(needs))))
        op.function.setup_context_fn(ctx, args, output)
        return op.function.backward_fn(ctx, output)


def _recording(*tensors) -> bool:
    """Whether autograd records this backward (``create_graph=True``, eager tensors): its
    gradients must then be differentiable themselves (module docstring)."""
    return torch.is_grad_enabled() and not tracing(*tensors)


def _through_pytorch(form, tensors: list, needs, grad_output) -> list:
    """The gradients of ``form(*tensors)`` (an op's differentiable PyTorch form, ``aten.py``)
    for the ``tensors`` that ``needs`` marks, recorded as a graph of their own."""
    wanted = [t for t, need in zip(tensors, needs, strict=True) if need]
    with torch.enable_grad():
        output = form(*tensors)
        found = iter(
            torch.autograd.grad(output, wanted, grad_output, create_graph=True, allow_unused=True)
        )
    return [next(found) if need else None for need in needs]


def _channel_sums(grad_output):
    """The bias gradient ``grad_output.sum((0, 2, ...))``, differentiable."""
    return grad_output.sum((0, *range(2, grad_output.dim())))


def _keep_replay(op: ops.Op, plan, args) -> None:
    """Keep on ``plan`` the launch plan ``op``'s body just recorded for ``args`` (if any)."""
    plan_of = getattr(op.impl, "plan_of", None)
    if plan is not None and plan_of is not None:
        plan.replay = plan_of(*args)


def _backward_call(ctx, backward_op: ops.Op, tensor_args: int, *args):
    """``backward_op(*args)`` (grad_output first, the mask of wanted gradients last; its
    tensors, or None, the first ``tensor_args`` arguments), replayed from the launch plan the
    forward's plan keeps per output-gradient layout and mask: a repeated eager backward runs
    none of the op's Python. ``ctx.plan`` is None under torch.compile's registered autograd
    and for direct op calls: then the op itself."""
    plan = getattr(ctx, "plan", None)
    grad_output = args[0]
    # (compiled autograd traces this backward: the op itself then, which it can trace; a
    # tracing or subclass output gradient, which a replay of plain tensors must not take)
    if plan is None or torch.compiler.is_compiling() or tracing(grad_output):
        return backward_op(*args)
    key = (grad_output.stride(), grad_output.dtype, tuple(args[-1]), allow_tf32())
    backward = plan.backward
    replay = backward.get(key)
    if replay is not None:  # the callers drop unwanted gradients: no placeholders for them
        # (the tensors, in order: what the replay takes; a type scan of all the arguments
        # cost 1.6 µs a call)
        tensors = [a for a in args[:tensor_args] if a is not None]
        return replay.run(tensors, placeholders=False)
    result = backward_op(*args)
    plan_of = getattr(backward_op.impl, "plan_of", None)
    replay = plan_of(*args) if plan_of is not None else None
    if replay is not None and len(backward) < 16:
        # (its replays take the first ``tensor_args`` arguments' tensors: none may come later)
        assert not any(isinstance(a, torch.Tensor) for a in args[tensor_args:]), backward_op
        backward[key] = replay
    return result


# --------------------------------------------------------------------------------------------
# unfold / fold: each is the other's adjoint
# --------------------------------------------------------------------------------------------


def _unfold_setup(ctx, inputs, output):
    input, *window = inputs
    ctx.window = window
    ctx.output_size = list(input.shape[2:])


def _unfold_backward(ctx, grad_cols):  # (run: differentiable when the backward is recorded)
    return run(ops.fold, grad_cols, ctx.output_size, *ctx.window), None, None, None, None


def _fold_setup(ctx, inputs, output):
    ctx.window = inputs[2:]


def _fold_backward(ctx, grad_image):
    return run(ops.unfold, grad_image, *ctx.window), None, None, None, None, None


Unfold = _differentiable("Unfold", ops.unfold, _unfold_setup, _unfold_backward)
Fold = _differentiable("Fold", ops.fold, _fold_setup, _fold_backward)


# --------------------------------------------------------------------------------------------
# convolution: every algorithm's forward op takes
# (input, weight, bias, stride, pad_before, pad_after, dilation, groups, option)
# and its backward op (grad_output, input, weight, <the same five>, option, output_mask)
# --------------------------------------------------------------------------------------------


def _conv_setup(ctx, inputs, output):
    input, weight, bias, *params = inputs
    ctx.params = params
    ctx.has_bias = bias is not None
    ctx.save_for_backward(input, weight)


def _conv_backward(backward_op: ops.Op, form=aten.conv, op_params=None):
    """The backward of a forward op taking ``(input, weight, bias, *params)``: its three
    gradients from ``backward_op(grad_output, input, weight, *op_params(params), mask)``
    (``op_params``: the params it takes, all by default), replayed from the launch plan the
    forward's plan keeps; recorded through ``form`` (the op's PyTorch form, ``aten.py``) when
    the backward itself is differentiated."""

    def backward(ctx, grad_output):
        input, weight = ctx.saved_tensors
        needs = ctx.needs_input_grad
        mask = [needs[0], needs[1], ctx.has_bias and needs[2]]
        grads = [None, None, None]
        if any(mask) and _recording(grad_output, input, weight):
            differentiable = lambda x, w: form(x, w, None, *ctx.params)  # noqa: E731
            grads = _through_pytorch(differentiable, [input, weight], mask[:2], grad_output)
            grads.append(_channel_sums(grad_output) if mask[2] else None)
        elif any(mask):  # the bias gradient too: fused into the weight gradient where it can be
            params = ctx.params if op_params is None else op_params(ctx.params)
            grads = _backward_call(ctx, backward_op, 3, grad_output, input, weight, *params, mask)
            grads = [g if wanted else None for g, wanted in zip(grads, mask, strict=True)]
        return *grads, *([None] * len(ctx.params))

    return backward


Conv2dGemm = _differentiable(
    "Conv2dGemm",
    ops.conv2d_gemm,
    _conv_setup,
    _conv_backward(ops.conv2d_gemm_backward),
    tensor_args=3,
)
# The direct and the depthwise algorithms share one op pair (its option selects the kernels).
Conv2dDirect = _differentiable(
    "Conv2dDirect",
    ops.conv2d_direct,
    _conv_setup,
    _conv_backward(ops.conv2d_direct_backward),
    tensor_args=3,
)

ConvImplicitGemm = _differentiable(
    "ConvImplicitGemm",
    ops.conv_implicit_gemm,
    _conv_setup,
    _conv_backward(ops.conv_implicit_gemm_backward),
    tensor_args=3,
)


# --------------------------------------------------------------------------------------------
# transposed convolution: (input, weight, bias, stride, pad_before, pad_after, dilation, groups,
# output_size, option), the convolution family's forward and backward ops as its gradients
# --------------------------------------------------------------------------------------------


def _conv_transpose_backward(forward_op: ops.Op, backward_op: ops.Op):
    """y = convT(x) is the input gradient of z = conv(y, w); so dL/dx = conv(dL/dy, w) and
    dL/dw is that convolution's weight gradient with x as its output gradient."""

    def backward(ctx, grad_output):
        input, weight = ctx.saved_tensors
        if _recording(grad_output, input, weight):
            form = lambda x, w: aten.conv_transpose(x, w, None, *ctx.params)  # noqa: E731
            needs = ctx.needs_input_grad
            grads = _through_pytorch(form, [input, weight], needs[:2], grad_output)
            grad_bias = _channel_sums(grad_output) if ctx.has_bias and needs[2] else None
            return *grads, grad_bias, *([None] * 7)
        stride, pad_before, pad_after, dilation, groups, _, option = ctx.params
        if isinstance(option, list):  # the implicit GEMM's tiles, measured for this op's own
            option = []  # launch: the convolution below has its channel sides swapped
        geometry = (stride, pad_before, pad_after, dilation, groups, option)
        grad_input = grad_weight = grad_bias = None
        if ctx.needs_input_grad[0]:
            grad_input = forward_op(grad_output, weight, None, *geometry)
        if ctx.needs_input_grad[1]:
            mask = [False, True, False]
            _, grad_weight, _ = backward_op(input, grad_output, weight, *geometry, mask)
        if ctx.has_bias and ctx.needs_input_grad[2]:
            grad_bias = ops.channel_sum(grad_output)
        return grad_input, grad_weight, grad_bias, *([None] * 7)

    return backward


ConvTranspose2dGemm = _differentiable(
    "ConvTranspose2dGemm",
    ops.conv_transpose2d_gemm,
    _conv_setup,
    _conv_transpose_backward(ops.conv2d_gemm, ops.conv2d_gemm_backward),
    tensor_args=3,
)
ConvTranspose2dDirect = _differentiable(
    "ConvTranspose2dDirect",
    ops.conv_transpose2d_direct,
    _conv_setup,
    _conv_transpose_backward(ops.conv2d_direct, ops.conv2d_direct_backward),
    tensor_args=3,
)


ConvTransposeImplicitGemm = _differentiable(
    "ConvTransposeImplicitGemm",
    ops.conv_transpose_implicit_gemm,
    _conv_setup,
    # its three gradients from one backward op (dy relaid once), the backward op taking the
    # window alone (no output size, no tiles: its kernels' sides are the forward's swapped)
    _conv_backward(
        ops.conv_transpose_implicit_gemm_backward, aten.conv_transpose, lambda params: params[:5]
    ),
    tensor_args=3,
)


# --------------------------------------------------------------------------------------------
# crop: the gradient writes the output gradient into the window, zeros around it
# --------------------------------------------------------------------------------------------


def _crop_setup(ctx, inputs, output):
    input, offsets, _ = inputs
    ctx.input_size = list(input.shape)
    ctx.offsets = offsets
    ctx.dim_order = crop_ops.dim_order(input)


def _crop_backward(ctx, grad_output):
    if _recording(grad_output):
        grad_input = aten.crop_gradient(grad_output, ctx.input_size, ctx.offsets, ctx.dim_order)
    else:
        grad_input = ops.crop_backward(grad_output, ctx.input_size, ctx.offsets, ctx.dim_order)
    return grad_input, None, None


Crop = _differentiable("Crop", ops.crop, _crop_setup, _crop_backward)


# --------------------------------------------------------------------------------------------
# causal depthwise conv1d: (x, weight, bias, pad, silu); one backward op gives all three
# --------------------------------------------------------------------------------------------


def _causal_setup(ctx, inputs, output):
    x, weight, bias, pad, silu = inputs
    ctx.pad, ctx.silu, ctx.has_bias = pad, silu, bias is not None
    ctx.save_for_backward(x, weight, bias)


def _causal_backward(ctx, grad_output):
    x, weight, bias = ctx.saved_tensors
    mask = [
        ctx.needs_input_grad[0],
        ctx.needs_input_grad[1],
        ctx.has_bias and ctx.needs_input_grad[2],
    ]
    if not any(mask):
        return None, None, None, None, None
    if _recording(grad_output, x, weight):

        def form(x, weight, bias):
            out = aten.depthwise_line(x, weight, bias, ctx.pad)
            return torch.nn.functional.silu(out) if ctx.silu else out

        grads = _through_pytorch(form, [x, weight, bias], mask, grad_output)
        return *grads, None, None
    grads = _backward_call(
        ctx, ops.causal_conv1d_backward, 4, grad_output, x, weight, bias, ctx.pad, ctx.silu, mask
    )
    return *(g if wanted else None for g, wanted in zip(grads, mask, strict=True)), None, None


CausalConv1d = _differentiable(
    "CausalConv1d", ops.causal_conv1d, _causal_setup, _causal_backward, tensor_args=3
)
