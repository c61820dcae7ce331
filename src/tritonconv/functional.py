"""Public functions with ``torch.nn.functional``'s exact signatures (plus ``algo=``).

Each function looks up the *plan* of its call signature (``plans.py``): on the first call with a
signature it validates the arguments (``geometry.py``; errors before any kernel runs), chooses the
algorithm and normalises the op's arguments; later calls reuse that. Then it turns an unbatched
input into a batch of one and applies the op (``autograd.run``).

Like ``torch.nn.functional``, each function first hands a call with a tensor-like argument that
overrides ``__torch_function__`` (a tensor subclass, or any call under a
``TorchFunctionMode``) to that protocol, the function itself as ``func``: a subclass's
inputs give a subclass's output, as PyTorch's convolutions do. Plain tensors and parameters
pay one C check.
"""

from __future__ import annotations

import dataclasses
import math
import operator

import torch
from torch.overrides import handle_torch_function, has_torch_function_variadic

from . import aot_cache, aten, autograd, caches, choice, library
from ._runtime import INTERPRETER, check_kernel_device
from .geometry import (
    FLOAT_DTYPES,
    TritonConvError,
    check_conv,
    check_conv_transpose,
    check_crop,
    check_fold,
    check_same_device,
    check_same_dtype,
    check_unfold,
    check_workspace_limit,
    dtype_name,
    shape_str,
)
from .launch import tracing, transformed
from .ops import conv_gemm, depthwise, implicit_gemm
from .ops.common import channels_last_format, dense_strides, is_channels_last
from .plans import BoundedCache, lookup, settings, tensor_key, traced, values_key
from .precision import dot_precision

#: Convolution algorithms ``conv2d(..., algo=...)`` accepts: the forward op of each, applied as
#: ``autograd.run(op, input, weight, bias, stride, pad_before, pad_after, dilation, groups,
#: option)`` on a batched input and normalised int lists (the option: im2col+GEMM's workspace
#: limit, whether the direct op runs its depthwise kernels, or the implicit GEMM's tile
#: configuration, ``[]`` for its heuristic's). ``"aten"`` is PyTorch's own CPU convolution
#: (``aten.py``), called directly with the same arguments: what ``"auto"`` runs on CPU tensors.
CONV_OPS = {
    "implicit_gemm": library.conv_implicit_gemm,
    "im2col_gemm": library.conv2d_gemm,
    "direct": library.conv2d_direct,
    "depthwise": library.conv2d_direct,
    "aten": aten.conv,
}
CONV_ALGOS = ("auto", *CONV_OPS)
#: The same for transposed convolution: the ops run the convolution's input-gradient kernels.
TRANSPOSED_OPS = {
    "implicit_gemm": library.conv_transpose_implicit_gemm,
    "im2col_gemm": library.conv_transpose2d_gemm,
    "direct": library.conv_transpose2d_direct,
    "depthwise": library.conv_transpose2d_direct,
    "aten": aten.conv_transpose,
}


def _body(op):
    """What runs an algorithm's forward eagerly: a tritonconv op's body, or the ATen function."""
    return op.impl if isinstance(op, library.Op) else op


class Plan:
    """What a call signature determines: the op to run, its arguments after the tensors,
    whether the caller's input was batched, and, filled by ``autograd`` after the first eager
    call, the op body's launch plan for this signature (``replay``) and its backward op's per
    output-gradient layout and mask (``backward``)."""

    __slots__ = ("backward", "batched", "op", "params", "relayout", "replay")

    def __init__(self, op: library.Op, params: tuple, batched: bool = True):
        self.op, self.params, self.batched = op, params, batched
        self.replay = None
        self.backward = {}
        # a convolution's input made channels-last first (its weight is): False (not), True
        # (:func:`_in_weights_layout` each call), or the (shape, strides) of its view (one
        # channel or a 1x1 plane, whose two layouts order the same bytes: no layout rule
        # worked out again each call; :func:`_tie_view` where autograd records it)
        self.relayout = False


_UNFOLD_PLANS = BoundedCache("unfold")
_FOLD_PLANS = BoundedCache("fold")
_CONV_PLANS = BoundedCache("conv2d")
_CONV1D_PLANS = BoundedCache("conv1d")
_TRANSPOSED_PLANS = BoundedCache("conv_transpose2d")
_TRANSPOSED1D_PLANS = BoundedCache("conv_transpose1d")
_CONV3D_PLANS = BoundedCache("conv3d")
_TRANSPOSED3D_PLANS = BoundedCache("conv_transpose3d")
_CROP_PLANS = BoundedCache("crop")


def unfold(input, kernel_size, dilation=1, padding=0, stride=1):
    """Extract sliding local blocks (im2col), as ``torch.nn.functional.unfold``.

    ``(N, C, H, W) -> (N, C*KH*KW, L)`` (or unbatched ``(C, H, W) -> (C*KH*KW, L)``). Any
    real dtype, integers included (copies are exact). Beyond ``F.unfold``, the window's rank is
    ``kernel_size``'s (an int: 2-D, as ``F.unfold``):

    * a one-element ``kernel_size`` (e.g. ``(3,)``) makes it 1-D, for ``(N, C, L)`` inputs (or
      unbatched ``(C, L)``): ``-> (N, C*K, L_out)``;
    * a three-element one (e.g. ``(3, 3, 3)``) makes it 3-D, for ``(N, C, D, H, W)`` inputs (or
      unbatched ``(C, D, H, W)``): ``-> (N, C*KD*KH*KW, OD*OH*OW)``, row
      ``((c*KD + kd)*KH + kh)*KW + kw``, column ``(od*OH + oh)*OW + ow``.

    ``dilation``, ``padding`` and ``stride``: an int or one value per spatial dimension.
    """
    if has_torch_function_variadic(input) and _protocol_on():
        return handle_torch_function(
            unfold, (input,), input, kernel_size, dilation=dilation, padding=padding, stride=stride
        )
    window = (kernel_size, dilation, padding, stride)
    plan = lookup(
        _UNFOLD_PLANS,
        lambda: (tensor_key(input), values_key(window)),
        lambda: _unfold_plan(input, *window),
    )
    x = input if plan.batched else input.unsqueeze(0)
    if isinstance(plan.op, library.Op):
        cols = autograd.run(plan.op, x, *plan.params, plan=plan)
    else:  # ATen: differentiable by itself
        cols = plan.op(x, *plan.params)
    return cols if plan.batched else cols.squeeze(0)


def _runs_aten(input: torch.Tensor) -> bool:
    """Whether an op runs its ATen form (``aten.py``) on ``input``: always where
    :func:`_aten_only` says so, and on CPU tensors unless this process interprets its kernels
    and ``TRITONCONV_CPU_KERNELS=1`` asks for them (``auto`` for convolutions, and the ops
    without ``algo=``)."""
    if _aten_only(input):
        return True
    return input.device.type == "cpu" and not (INTERPRETER and choice.cpu_kernels())


def _aten_only(input) -> bool:
    """Whether every algorithm, even one asked for by name, runs the ATen form: inside a
    ``torch.func`` transform or a TorchScript trace, and on meta tensors (shapes only, as
    PyTorch's own convolutions give them)."""
    return transformed() or (isinstance(input, torch.Tensor) and input.device.type == "meta")


def _unfold_plan(input, kernel_size, dilation, padding, stride) -> Plan:
    args = check_unfold(input, kernel_size, dilation, padding, stride)
    g = args.geometry
    params = (list(g.kernel), list(g.dilation), list(g.pad_before), list(g.stride))
    if _runs_aten(input):
        return Plan(aten.unfold, params, args.batched)
    check_kernel_device(input, "input")
    return Plan(library.unfold, params, args.batched)


def fold(input, output_size, kernel_size, dilation=1, padding=0, stride=1):
    """Combine sliding local blocks into an image (col2im, summing overlaps), as
    ``torch.nn.functional.fold``; the adjoint of :func:`unfold`. A deterministic gather (no
    atomics); integer dtypes sum exactly in int64 and wrap like the dtype. The window's rank is
    ``kernel_size``'s, as in :func:`unfold`, and ``output_size`` gives one size per spatial
    dimension (or one int for all): a one-element ``kernel_size`` folds 1-D blocks into
    ``(N, C, L)``, a three-element one ``(N, C*KD*KH*KW, OD*OH*OW)`` into ``(N, C, D, H, W)``
    (unbatched inputs drop ``N``)."""
    if has_torch_function_variadic(input) and _protocol_on():
        return handle_torch_function(
            fold, (input,), input, output_size, kernel_size, dilation, padding, stride
        )
    window = (output_size, kernel_size, dilation, padding, stride)
    plan = lookup(
        _FOLD_PLANS,
        lambda: (tensor_key(input), values_key(window)),
        lambda: _fold_plan(input, *window),
    )
    cols = input if plan.batched else input.unsqueeze(0)
    if isinstance(plan.op, library.Op):
        image = autograd.run(plan.op, cols, *plan.params, plan=plan)
    else:  # ATen: differentiable by itself
        image = plan.op(cols, *plan.params)
    return image if plan.batched else image.squeeze(0)


def _fold_plan(input, output_size, kernel_size, dilation, padding, stride) -> Plan:
    args = check_fold(input, output_size, kernel_size, dilation, padding, stride)
    g = args.geometry
    params = (
        list(g.input),
        list(g.kernel),
        list(g.dilation),
        list(g.pad_before),
        list(g.stride),
    )
    if _runs_aten(input):
        return Plan(aten.fold, params, args.batched)
    check_kernel_device(input, "input")
    return Plan(library.fold, params, args.batched)


def _candidates(input: torch.Tensor, args) -> list[str]:
    """Every algorithm that accepts the call (3-D: the implicit GEMM, the one kernel written
    over three spatial axes). CPU tensors and ``torch.func`` transforms: ATen alone
    (:func:`_runs_aten`)."""
    if _runs_aten(input):
        return ["aten"]
    if args.geometry.ndim == 3:
        return ["implicit_gemm"]
    algos = ["im2col_gemm", "direct"] if input.dtype in FLOAT_DTYPES else ["direct"]
    if input.dtype in implicit_gemm.DTYPES:
        algos.insert(0, "implicit_gemm")
    return [*algos, "depthwise"] if args.depthwise else algos


def _choose_algo(algo: str, input: torch.Tensor, args, op: str = "conv2d") -> str:
    """The algorithm that runs: ``algo`` itself, or for ``"auto"`` the heuristic's choice
    (``_conv_plan`` measures instead when asked to)."""
    if algo not in CONV_ALGOS:
        raise TritonConvError(f"algo must be one of {list(CONV_ALGOS)}, got {algo!r}")
    if algo == "auto":
        return _rule(input, args, _candidates(input, args)).algo
    if algo == "aten":
        if input.device.type != "cpu":
            raise TritonConvError(
                f"{op}: algo='aten' runs PyTorch's CPU convolution and takes CPU tensors, got "
                f"input on {input.device}"
            )
        return algo
    if args.geometry.ndim == 3 and algo != "implicit_gemm":
        raise TritonConvError(
            f"{op}: algo={algo!r} has no 3-D kernel; 3-D convolutions run "
            "algo='implicit_gemm' (what 'auto' picks)"
        )
    if algo == "depthwise" and not args.depthwise:
        raise TritonConvError(
            f"{op}: algo='depthwise' needs one channel per group on the convolution's input "
            f"side (groups == {args.in_channels}), got groups={args.groups}"
        )
    supported = {"im2col_gemm": FLOAT_DTYPES, "implicit_gemm": implicit_gemm.DTYPES}
    if algo in supported and input.dtype not in supported[algo]:
        raise TritonConvError(
            f"{op}: algo={algo!r} has no kernel for dtype {dtype_name(input.dtype)} "
            f"(it computes in {', '.join(dtype_name(d) for d in supported[algo])})"
        )
    return algo


def _rule(input: torch.Tensor, args, candidates: list[str]) -> choice.Choice:
    """The heuristic's choice for this call: its input's layout (with the batch dimension)
    and whether it is being traced into a graph (``plans.traced``) are part of the rule."""
    channels_last = is_channels_last(input if args.batched else input.unsqueeze(0))
    return choice.heuristic(input.dtype, args, candidates, channels_last, traced())


def _workspace(workspace_limit) -> int:
    if workspace_limit is None:
        return conv_gemm.get_workspace_limit()
    return check_workspace_limit(workspace_limit)


def conv2d(
    input,
    weight,
    bias=None,
    stride=1,
    padding=0,
    dilation=1,
    groups=1,
    *,
    algo="auto",
    workspace_limit=None,
):
    """2-D convolution, as ``torch.nn.functional.conv2d``.

    ``algo`` picks the algorithm (``CONV_ALGOS``; ``"auto"`` chooses). ``workspace_limit``
    caps im2col+GEMM's column buffer in bytes (default: :func:`get_workspace_limit`).
    The output is channels-last when the input or the weight is, else contiguous (as
    PyTorch's).
    """
    options = (stride, padding, dilation, groups, algo, workspace_limit)
    return _convolution(2, input, weight, bias, options)


def conv1d(
    input,
    weight,
    bias=None,
    stride=1,
    padding=0,
    dilation=1,
    groups=1,
    *,
    algo="auto",
    workspace_limit=None,
):
    """1-D convolution, as ``torch.nn.functional.conv1d`` (``algo`` and ``workspace_limit`` as
    in :func:`conv2d`). Computed as a 2-D convolution over a height-1 plane by the same ops."""
    options = (stride, padding, dilation, groups, algo, workspace_limit)
    return _convolution(1, input, weight, bias, options)


def conv_transpose2d(
    input,
    weight,
    bias=None,
    stride=1,
    padding=0,
    output_padding=0,
    groups=1,
    dilation=1,
    *,
    algo="auto",
    workspace_limit=None,
):
    """Transposed 2-D convolution, as ``torch.nn.functional.conv_transpose2d``: the input
    gradient of the convolution with the same weight (Caffe's deconvolution), computed by that
    convolution's gradient kernels (``algo`` as in :func:`conv2d`)."""
    options = (stride, padding, output_padding, groups, dilation, algo, workspace_limit)
    return _convolution(2, input, weight, bias, options, transposed=True)


def conv_transpose1d(
    input,
    weight,
    bias=None,
    stride=1,
    padding=0,
    output_padding=0,
    groups=1,
    dilation=1,
    *,
    algo="auto",
    workspace_limit=None,
):
    """Transposed 1-D convolution, as ``torch.nn.functional.conv_transpose1d`` (see
    :func:`conv_transpose2d`; a height-1 plane)."""
    options = (stride, padding, output_padding, groups, dilation, algo, workspace_limit)
    return _convolution(1, input, weight, bias, options, transposed=True)


def conv3d(
    input,
    weight,
    bias=None,
    stride=1,
    padding=0,
    dilation=1,
    groups=1,
    *,
    algo="auto",
    workspace_limit=None,
):
    """3-D convolution, as ``torch.nn.functional.conv3d`` (``algo``: ``"auto"`` or
    ``"implicit_gemm"``, the kernel written over three spatial axes; every real dtype,
    integers exact). The output is ``channels_last_3d`` when the input or the weight is (as
    PyTorch's)."""
    options = (stride, padding, dilation, groups, algo, workspace_limit)
    return _convolution(3, input, weight, bias, options)


def conv_transpose3d(
    input,
    weight,
    bias=None,
    stride=1,
    padding=0,
    output_padding=0,
    groups=1,
    dilation=1,
    *,
    algo="auto",
    workspace_limit=None,
):
    """Transposed 3-D convolution, as ``torch.nn.functional.conv_transpose3d``: the 3-D
    convolution's input gradient, by the same implicit-GEMM kernel (see :func:`conv3d`)."""
    options = (stride, padding, output_padding, groups, dilation, algo, workspace_limit)
    return _convolution(3, input, weight, bias, options, transposed=True)


def _convolution(ndim: int, input, weight, bias, options, *, transposed=False):
    """Every convolution function: under Dynamo, one call it does not trace into
    (:func:`_untraced_convolution`; not while ``torch.export`` traces: its graphs take no
    ``nonstrict_trace`` call); else look the plan up, lift 1-D to a height-1 plane, run.
    First the ``__torch_function__`` protocol (module docstring): ``options`` are the public
    function's arguments after ``bias``, in its order, ``algo`` and ``workspace_limit`` last."""
    if has_torch_function_variadic(input, weight, bias) and _protocol_on():
        *positional, algo, workspace_limit = options
        return handle_torch_function(
            _PUBLIC[ndim, transposed],
            _present(input, weight, bias),
            input,
            weight,
            bias,
            *positional,
            algo=algo,
            workspace_limit=workspace_limit,
        )
    input, weight, bias = _autocast(input, weight, bias)
    if torch.compiler.is_dynamo_compiling() and not _exporting():
        out = _untraced_convolution(ndim, input, weight, bias, options, transposed)
        if out is not None:
            return out
    plan = _convolution_plan(ndim, input, weight, bias, options, transposed)
    return _apply_convolution(plan, ndim, input, weight, bias)


def _protocol_on() -> bool:
    """Whether the ``__torch_function__`` protocol is on for this call: always in eager
    (``has_torch_function_variadic`` already says no inside ``Tensor.__torch_function__``),
    and while Dynamo traces only if torch-function dispatch is enabled, since Dynamo's model
    of ``has_torch_function_variadic`` ignores ``DisableTorchFunctionSubclass`` (without
    this, a subclass input re-entered the protocol with nothing to dispatch to: a
    ``TypeError`` under ``fullgraph=True``)."""
    return not torch.compiler.is_dynamo_compiling() or torch._C._is_torch_function_enabled()


def _present(*args) -> tuple:
    """The arguments that are not None: the ``relevant_args`` of ``handle_torch_function``.
    (Dynamo of torch 2.11 cannot trace PyTorch's own ``hasattr(type(None),
    "__torch_function__")`` on an optional argument left None: a graph break that
    ``fullgraph=True`` refuses.)"""
    return tuple(a for a in args if a is not None)


def _exporting() -> bool:
    """Whether ``torch.export`` is tracing. (Its flag itself: torch 2.11's Dynamo answers
    ``torch.compiler.is_exporting()`` with True under ``torch.compile`` too.)"""
    return getattr(torch.compiler, "_is_exporting_flag", False)


# The public function of each (ndim, transposed), for ``__torch_function__``
_PUBLIC = {
    (1, False): conv1d,
    (2, False): conv2d,
    (3, False): conv3d,
    (1, True): conv_transpose1d,
    (2, True): conv_transpose2d,
    (3, True): conv_transpose3d,
}
_PLAN_CACHES = {
    (1, False): _CONV1D_PLANS,
    (2, False): _CONV_PLANS,
    (3, False): _CONV3D_PLANS,
    (1, True): _TRANSPOSED1D_PLANS,
    (2, True): _TRANSPOSED_PLANS,
    (3, True): _TRANSPOSED3D_PLANS,
}


def _convolution_plan(ndim: int, input, weight, bias, options, transposed: bool) -> Plan:
    return lookup(
        _PLAN_CACHES[ndim, transposed],
        lambda: (_signature(input, weight, bias), values_key(options)),
        lambda: _conv_plan(input, weight, bias, *options, ndim=ndim, transposed=transposed),
    )


def _signature(input, weight, bias) -> tuple:
    """What a convolution's plan key holds besides its options and :func:`plans.settings`:
    the tensors' keys, the workspace limit and the gradient mask (a module's memo holds the
    same: :func:`memoized_convolution`)."""
    return (
        tensor_key(input),
        tensor_key(weight),
        tensor_key(bias),
        conv_gemm.get_workspace_limit(),
        _grad_mask(input, weight, bias),
    )


class PlanMemo:
    """A caller's last convolution plan (a module's: :func:`memoized_convolution`). One
    reference (``entry``: state, options, plan), so threads sharing it (``nn.DataParallel``'s
    replicas) at worst miss; copies and pickles of its owner start empty (a plan holds kernels
    and launch plans, nothing a copy of a model should carry)."""

    __slots__ = ("entry",)

    def __init__(self):
        self.entry = None

    def __deepcopy__(self, memo):
        return PlanMemo()

    def __reduce__(self):
        return PlanMemo, ()


# Types whose calls a memo takes: plain tensors and parameters (no ``__torch_function__``)
_MEMO_TYPES = frozenset({torch.Tensor, torch.nn.Parameter})


def memoized_convolution(
    memo: PlanMemo | None, ndim: int, input, weight, bias, options, *, transposed: bool = False
):
    """``_convolution(ndim, input, weight, bias, options, transposed=...)`` for a caller that
    repeats one call: a module, whose ``options`` are its attributes, the same objects each
    call. Where the call is plain eager (plain tensors, no torch-function mode, autocast,
    tracer or transform) and its tensors' signature, gradient mask and every setting a plan
    key holds (:func:`plans.settings`, the workspace limit, the caches' generation) equal
    the last call's, with the same option objects (kept only where they are immutable:
    ints, strings, tuples of them), the last call's plan runs without its key
    being built or looked up (on the CPU, 2.6 µs a call in a loop and 5-10 µs a convolution
    in a model's step; the key's ``repr`` of the options alone 1.1). Anything else takes the full path, as does every call without a memo
    (``memo`` None: while Dynamo traces). A plan is kept only where the plan cache keeps
    plans (a cache sized 0 keeps none) and where nothing the state holds changed while it was
    looked up (another thread's settings: the plan would be the new settings')."""
    if memo is None or torch.compiler.is_compiling():
        return _convolution(ndim, input, weight, bias, options, transposed=transposed)
    state = _memo_state(ndim, transposed, input, weight, bias)
    if state is None:
        return _convolution(ndim, input, weight, bias, options, transposed=transposed)
    entry = memo.entry
    if entry is not None and entry[0] == state and _same_objects(entry[1], options):
        plan = entry[2]
    else:
        plan = _convolution_plan(ndim, input, weight, bias, options, transposed)
        if (
            _literals(options)  # (a list could change in place under the same identity)
            and _PLAN_CACHES[ndim, transposed].size > 0
            and _memo_state(ndim, transposed, input, weight, bias) == state
        ):
            memo.entry = (state, options, plan)
    return _apply_convolution(plan, ndim, input, weight, bias)


def _memo_state(ndim: int, transposed: bool, input, weight, bias) -> tuple | None:
    """What a memoized plan depends on besides the options (None: a call the memo does not
    take: the calls :func:`_convolution` and :func:`plans.lookup` would treat other than a
    cache hit): :func:`_convolution_plan`'s key less the options, its cache, and the caches'
    generation."""
    if (
        type(input) not in _MEMO_TYPES
        or type(weight) not in _MEMO_TYPES
        or (bias is not None and type(bias) not in _MEMO_TYPES)
        or torch._C._is_torch_function_mode_enabled()
        or torch._C._is_any_autocast_enabled()
        or traced()
        or transformed()
    ):
        return None
    signature = _signature(input, weight, bias)
    return ndim, transposed, signature, *settings(), caches.generation


def _same_objects(a: tuple, b: tuple) -> bool:
    """Whether tuples ``a`` and ``b`` hold the same objects, position by position (equal values
    are not enough: ``True == 1``, and a plan's key tells them apart)."""
    return len(a) == len(b) and all(map(operator.is_, a, b))


def _apply_convolution(plan: Plan, ndim: int, input, weight, bias):
    relayout = plan.relayout
    if relayout is True:  # (the plan was made for the input these make)
        input = _in_weights_layout(input, weight, ndim)
    elif relayout:  # (as_strided costs a third as much, but its backward a copy)
        graph = input.requires_grad and torch.is_grad_enabled()
        input = _tie_view(input, plan.batched) if graph else input.as_strided(*relayout)
    x = input if plan.batched else input.unsqueeze(0)
    if bias is not None:  # the kernels read the bias densely
        bias = bias.contiguous()
    if ndim == 1:
        x, weight = x.unsqueeze(2), weight.unsqueeze(2)
    if isinstance(plan.op, library.Op):
        tensors = [x, weight] if bias is None else [x, weight, bias]
        out = autograd.run(plan.op, x, weight, bias, *plan.params, plan=plan, tensors=tensors)
    else:  # ATen: differentiable by itself
        out = plan.op(x, weight, bias, *plan.params)
    if ndim == 1:  # as F.conv1d: a contiguous output whatever the input's strides
        out = out.squeeze(2).contiguous()
    return out if plan.batched else out.squeeze(0)


def _untraced_convolution(ndim: int, input, weight, bias, options, transposed: bool):
    """While Dynamo traces: the convolution as one call Dynamo does not trace into, or None
    where it cannot be one (then Dynamo traces the call itself).

    Dynamo guards every global and function it traces, and checks those guards on every call
    of the compiled code: tracing validation, geometry and the algorithm choice cost a
    compiled 8-convolution stack ~300 guards, 11 µs a call on the CPU (benchmarks/NOTES.md,
    session 15). Here Dynamo puts one opaque call into its graph, guards only what the
    caller passes (the module's attributes, as for ``nn.Conv2d``), and AOTAutograd traces the
    body, so Inductor still sees the ops' Triton kernels. The call is
    :func:`_convolution_in_graph`, which Dynamo writes into its graph as it is
    (``allow_in_graph``) with the options as one constant, where they are literals (the usual
    case); else a ``nonstrict_trace`` call, which takes symbolic values but costs Dynamo
    ~30 ms more a call to trace (it flattens the arguments by running PyTorch's pytree code
    as Python; session 16). A call whose plan cannot be built (bad arguments) returns ``[]``
    from the body, and Dynamo then traces the call, which raises the same error as eager.
    Arguments neither takes (values other than ints, strings and tuples or lists of them,
    e.g. NumPy integers or 0-dim tensors) take the traced path, as do calls inside a
    higher-order op's body (:func:`_in_graph_allowed`)."""
    # (Dynamo runs this as Python, bytecode by bytecode, for every convolution it compiles:
    # plain loops and tests here, no generator expressions, which cost it ~3 ms each)
    tensor = torch.Tensor
    if not (isinstance(input, tensor) and isinstance(weight, tensor)):
        return None
    if (bias is not None and not isinstance(bias, tensor)) or not _in_graph_allowed():
        return None
    # What the body reads besides its arguments, read here so that Dynamo guards it: the
    # default workspace limit (``set_workspace_limit`` after compiling recompiles), on CPU
    # tensors whether the interpreter runs the kernels, and cuDNN's TF32 switch.
    if options[-1] is None:
        options = (*options[:-1], conv_gemm.get_workspace_limit())
    if input.device.type == "cpu":
        choice.cpu_kernels()
    tf32 = torch.backends.cudnn.allow_tf32
    if _literals(options):
        out = _convolution_in_graph((ndim, transposed, options, tf32), input, weight, bias)
    elif _plain_values(options):  # symbolic values: leaves of a nonstrict_trace call
        call = {
            "ndim": ndim,
            "transposed": transposed,
            "count": len(options),
            "options": {i: v for i, v in enumerate(options) if v is not None},
        }  # (None is no pytree leaf: left out, and put back in the body)
        tensors = [input, weight] if bias is None else [input, weight, bias]
        out = torch._dynamo.nonstrict_trace(_convolution_body)(call, tensors)
    else:
        return None
    return out if isinstance(out, torch.Tensor) else None


def _literals(options: tuple) -> bool:
    """Whether every option is an int, string or None, or a tuple of those (no SymInt)."""
    for value in options:
        if type(value) is tuple:
            for item in value:
                if type(item) not in _LITERALS:
                    return False
        elif type(value) not in _LITERALS:
            return False
    return True


_LITERALS = (int, str, bool, type(None))


def _plain_values(options: tuple) -> bool:
    """Whether each option is None or a value a ``nonstrict_trace`` call takes as a constant
    (asked only where :func:`_literals` said no: symbolic values are rare)."""
    return all(value is None or _plain_value(value) for value in options)


def _in_graph_allowed() -> bool:
    """While Dynamo traces: whether a convolution may be one call in its graph, which it may
    not inside a higher-order op's body (``torch.cond``, ``torch.compiler.
    nested_compile_region``, checkpointing), where torch 2.11 cannot take a ``nonstrict_trace``
    call (an internal error). Run by Dynamo while it traces, its answer a constant (the marker
    ``torch._dynamo.assume_constant_result`` sets), so it also registers
    :func:`_convolution_in_graph` with Dynamo the first time, without tritonconv importing
    ``torch._dynamo`` (1 s) where nothing is compiled. False when Dynamo's internals are not
    as expected (the traced path is right everywhere)."""
    try:
        from torch._dynamo.symbolic_convert import InstructionTranslator

        if InstructionTranslator.current_tx().output.current_tracer.parent is not None:
            return False
        if not _registered:
            torch._dynamo.allow_in_graph(_convolution_in_graph)
            _registered.append(True)
        aot_cache.mark(_convolution_in_graph)  # (anew: what it keys on may have changed)
        return hasattr(torch._dynamo, "nonstrict_trace")  # (torch >= 2.7)
    except Exception:  # (another torch's internals)
        return False


_in_graph_allowed._dynamo_marked_constant = True  # (without importing torch._dynamo)
_registered: list = []


def _plain_value(value) -> bool:
    """An int, string or SymInt, or a tuple or list of them: what a ``nonstrict_trace`` call
    takes as a constant."""
    if isinstance(value, (tuple, list)):
        return all(isinstance(v, (int, str, torch.SymInt)) for v in value)
    return isinstance(value, (int, str, torch.SymInt))


def _convolution_in_graph(call: tuple, input, weight, bias):
    """:func:`_planned_convolution` of a call with literal options, ``(ndim, transposed, options,
    allow_tf32)``: what Dynamo writes into its graph as one call (:func:`_untraced_convolution`;
    ``allow_tf32`` is there for the keys of AOTAutograd's cache, ``aot_cache``)."""
    ndim, transposed, options, _ = call
    return _planned_convolution(ndim, transposed, options, input, weight, bias)


def _convolution_body(call: dict, tensors: list):
    """:func:`_planned_convolution` of a ``nonstrict_trace`` call, whose options come as a
    dict without its None entries (:func:`_untraced_convolution`)."""
    options = tuple(call["options"].get(i) for i in range(call["count"]))
    return _planned_convolution(call["ndim"], call["transposed"], options, *tensors)


def _planned_convolution(ndim: int, transposed: bool, options, input, weight, bias=None):
    """:func:`_convolution` after autocast, run untraced by Dynamo (on fake tensors, then by
    AOTAutograd's tracer): its plan, or ``[]`` where that raises (the caller then traces it)."""
    try:
        plan = _convolution_plan(ndim, input, weight, bias, options, transposed)
    except Exception:  # (any error: the traced call raises it again)
        return []
    return _apply_convolution(plan, ndim, input, weight, bias)


# Device types whose autocast state a call may ask (others, such as meta, have none).
_AUTOCAST_DEVICES = ("cuda", "cpu")


def _autocast(input, weight, bias):
    """Under ``torch.autocast``, PyTorch runs convolutions in the autocast dtype: floating
    tensors other than float64 are cast to it first, as for ``F.conv*`` (the ops have no
    autocast rule of their own). Anything else as it is (validation sees it)."""
    if not torch._C._is_any_autocast_enabled() or not isinstance(input, torch.Tensor):
        return input, weight, bias
    device = input.device.type
    if device not in _AUTOCAST_DEVICES or not torch.is_autocast_enabled(device):
        return input, weight, bias
    dtype = torch.get_autocast_dtype(device)

    def cast(t):
        eligible = isinstance(t, torch.Tensor) and t.is_floating_point()
        return t.to(dtype) if eligible and t.dtype != torch.float64 else t

    return cast(input), cast(weight), cast(bias)


def _in_weights_layout(input, weight, ndim: int):
    """PyTorch's layout rule for 2-D and 3-D convolutions: a channels-last weight makes the
    convolution, and so its output, channels-last (``channels_last_3d``) whatever the input's
    layout (an unbatched input as its batch of one); the input is copied so (as cuDNN does)
    and the ops keep its layout. Anything else is left to validation. Worked out when a plan
    is made (``Plan.relayout``), not per call."""
    if not (
        isinstance(input, torch.Tensor)
        and isinstance(weight, torch.Tensor)
        and weight.dim() == ndim + 2
        and input.dim() in (ndim + 1, ndim + 2)
        and is_channels_last(weight)
    ):
        return input
    batched = input.dim() == ndim + 2
    batch = input if batched else input.unsqueeze(0)
    if is_channels_last(batch):
        return input
    fmt = channels_last_format(ndim + 2)
    if batch.is_contiguous(memory_format=fmt):  # one channel or a 1x1 plane: the same order
        order = (0, *range(2, ndim + 2), 1)
        batch = batch.as_strided(batch.shape, dense_strides(batch.shape, order))
    else:
        batch = batch.contiguous(memory_format=fmt)
    return batch if batched else batch.squeeze(0)


def _conv_plan(input, weight, bias, *options, ndim: int, transposed: bool) -> Plan:
    given = input
    if ndim > 1 and not transformed():  # (a transform's tensors have no layout to ask)
        input = _in_weights_layout(input, weight, ndim)
    args, algo, name, limit = _validated(input, weight, bias, options, ndim, transposed)
    params = _params(args, ndim, transposed, limit)
    config = ()
    if _aten_only(input):
        algo = "aten"  # whatever was asked
    elif algo == "auto":
        found = _auto(input, weight, bias, args, params, name, ndim, transposed)
        algo, config = found.algo, found.config
    ops = TRANSPOSED_OPS if transposed else CONV_OPS
    plan = Plan(ops[algo], params(algo, config), args.batched)
    if input is not given:
        # (a view of the same memory, not a copy, that the cheaper view makes exactly; real
        # tensors only: a traced plan is not kept)
        view = not traced() and not tracing(given) and input.data_ptr() == given.data_ptr()
        view = view and _tie_view(given, args.batched).stride() == input.stride()
        plan.relayout = (tuple(input.shape), tuple(input.stride())) if view else True
    return plan


def _tie_view(input, batched: bool):
    """``input`` with one channel or a 1x1 plane, contiguous in both layouts, as the
    channels-last view :func:`_in_weights_layout` makes of it, by a reshape and a dimension
    move: views whose gradients are views (``as_strided``'s backward allocates a zero copy of
    the storage and scatters into it: two kernels a training step). The plan checks that the
    strides come out the same."""
    x = input if batched else input.unsqueeze(0)
    if x.shape[1] == 1:  # (one channel: a last dimension of one, moved to the channels)
        x = x.squeeze(1).unsqueeze(-1).movedim(-1, 1)
    else:  # (a 1x1 plane: the channels last, the plane's ones before them)
        x = x.reshape(x.shape[0], *([1] * (x.dim() - 2)), x.shape[1]).movedim(-1, 1)
    return x if batched else x.squeeze(0)


def _validated(input, weight, bias, options, ndim: int, transposed: bool):
    """(args, algo as asked, op name, workspace limit) of a validated convolution call."""
    name = f"conv{'_transpose' if transposed else ''}{ndim}d"
    if transposed:
        stride, padding, output_padding, groups, dilation, algo, workspace_limit = options
        args = check_conv_transpose(
            input, weight, bias, stride, padding, output_padding, groups, dilation,
            ndim=ndim, op=name,
        )  # fmt: skip
    else:
        stride, padding, dilation, groups, algo, workspace_limit = options
        args = check_conv(
            input, weight, bias, stride, padding, dilation, groups, ndim=ndim, op=name
        )
    limit = _workspace(workspace_limit)
    if algo != "auto":
        _choose_algo(algo, input, args, name)  # rejects an unknown or unfit algorithm
    # the kernels' device: for a kernel asked for by name, or one auto may choose
    named = algo not in ("auto", "aten") and not _aten_only(input)
    if named or (algo == "auto" and _candidates(input, args) != ["aten"]):
        for arg, t in (("input", input), ("weight", weight), ("bias", bias)):
            if t is not None:
                check_kernel_device(t, arg)
    return args, algo, name, limit


def _params(args, ndim: int, transposed: bool, limit: int):
    """``params(algo)``: the op's arguments after the tensors, for each algorithm."""
    g = args.geometry
    stride, before, after, dil = g.stride, g.pad_before, g.pad_after, g.dilation
    if ndim == 1:  # a height-1 plane: unit stride and dilation, no padding along the height
        stride, before, after, dil = (1, *stride), (0, *before), (0, *after), (1, *dil)
    common = [list(stride), list(before), list(after), list(dil), args.groups]
    if transposed:  # the transposed convolution's output size
        common.append(([1] if ndim == 1 else []) + list(g.input))

    def params(algo: str, config: tuple = ()) -> tuple:
        option = {
            "im2col_gemm": limit, "direct": False, "depthwise": True,
            "implicit_gemm": list(config), "aten": None,
        }  # fmt: skip
        return (*common, option[algo])

    return params


def _auto(input, weight, bias, args, params, name, ndim, transposed) -> choice.Choice:
    """``algo="auto"``: a measured choice on record for this signature (this process, or the
    disk cache ``tune`` and benchmark mode fill) if there is one; else measured now when asked
    for; else the heuristic. While torch.compile traces: the heuristic."""
    candidates = _candidates(input, args)
    rule = _rule(input, args, candidates)
    if len(candidates) == 1 and candidates != ["implicit_gemm"]:
        return rule  # nothing to choose (a 3-D call still has the implicit GEMM's tiles)
    x = input if args.batched else input.unsqueeze(0)
    w = weight
    if ndim == 1:
        x, w = x.unsqueeze(2), weight.unsqueeze(2)
    if torch.compiler.is_dynamo_compiling():
        # The rule: sizes may be symbolic (dynamic=True, or a recompile after a shape changed),
        # which Dynamo can neither print into a record's key nor tell from constants. (Traced
        # by AOTAutograd instead, below: a record for these sizes, or the rule.)
        return rule
    # (the dots' precision too: fp32's TF32 flag and TF32-off products change the timings)
    key = repr(
        (name, tuple(x.shape), x.stride(), str(x.dtype), tuple(w.shape), w.stride(),
         bias is not None, params("direct")[:-1], dot_precision(x.dtype))
    )  # fmt: skip
    # A call that needs gradients is chosen on its forward and backward together (the
    # backward runs the forward's algorithm); a choice recorded for the forward alone (what
    # ``tune`` measures) serves it until one is measured for it.
    needs = _grad_mask(input, weight, bias)
    training_key = key if needs is None else repr((key, "backward", needs))
    if not choice.benchmark_enabled() or tracing(input, weight, bias):
        found = choice.recorded(training_key, candidates)
        return found or choice.recorded(key, candidates) or rule
    configs = {}  # (computed here only: torch.compile would trace it above)
    if "implicit_gemm" in candidates:
        launch_args = _launch_args(args, transposed, input)
        configs["implicit_gemm"] = implicit_gemm.tuning_configs(input.dtype, *launch_args)
    if len(candidates) == 1 and len(configs["implicit_gemm"]) < 2:
        return rule
    ops = TRANSPOSED_OPS if transposed else CONV_OPS
    # (the bias as the call passes it: dense, ``_apply_convolution``)
    xs, ws, bs = choice.measure_inputs(x, w, None if bias is None else bias.contiguous())
    if needs is not None:
        step = _training_step(ops, params, (xs, ws, bs), needs)
        return choice.measured(training_key, candidates, step, configs, "forward + backward")
    return choice.measured(
        key, candidates, lambda a, c: _body(ops[a])(xs, ws, bs, *params(a, c)), configs
    )


def _grad_mask(input, weight, bias) -> tuple[bool, bool, bool] | None:
    """Which of the call's tensors need a gradient (None: none, or gradients off): the
    backward the call's algorithm will also run."""
    if not torch.is_grad_enabled():
        return None
    # (attributes: a plan key's; something other than tensors raises AttributeError, on which
    # the plan lookup lets validation say what is wrong)
    mask = (input.requires_grad, weight.requires_grad, bias is not None and bias.requires_grad)
    return mask if mask[0] or mask[1] or mask[2] else None


def _training_step(ops: dict, params, tensors, needs):
    """``run(algo, config)`` for benchmark mode: the algorithm's forward and the backward of
    the gradients ``needs`` asks for, on ``tensors`` (fresh measurement inputs), without an
    autograd graph (``autograd.forward_backward``)."""
    return lambda algo, config: autograd.forward_backward(
        ops[algo], (*tensors, *params(algo, config)), needs
    )


def _launch_args(args, transposed: bool, input) -> tuple:
    """What ``implicit_gemm.launch_config`` takes after the dtype, for this call."""
    g = args.geometry  # of the convolution; a transposed call is that convolution's dX
    if transposed:
        sides, spatial = (args.out_per_group, args.in_per_group), g.input
    else:
        sides, spatial = (args.in_per_group, args.out_per_group), g.output
    return (args.batch, *sides, spatial, g.stride, g.kernel, args.groups, transposed, input.device)


def explain(
    input,
    weight,
    bias=None,
    stride=1,
    padding=0,
    dilation=1,
    groups=1,
    *,
    transposed=False,
    output_padding=0,
    algo="auto",
    workspace_limit=None,
) -> choice.Choice:
    """Which algorithm a convolution call runs, and why: the call is given as to
    :func:`conv1d`/:func:`conv2d` (or, ``transposed=True``, :func:`conv_transpose1d`/``2d``);
    its dimension comes from the weight's. With benchmark mode on (:func:`set_benchmark`,
    ``TRITONCONV_BENCHMARK=1`` or ``torch.backends.cudnn.benchmark``) the answer is measured
    (or read from the on-disk cache) exactly as the call itself would."""
    ndim = weight.dim() - 2 if isinstance(weight, torch.Tensor) else 2
    if transposed:
        options = (stride, padding, output_padding, groups, dilation, algo, workspace_limit)
    else:
        options = (stride, padding, dilation, groups, algo, workspace_limit)
    args, algo, name, limit = _validated(input, weight, bias, options, ndim, transposed)
    if algo != "auto":
        found = choice.Choice(algo, "asked for (algo=...)")
    else:
        params = _params(args, ndim, transposed, limit)
        found = _auto(input, weight, bias, args, params, name, ndim, transposed)
    if found.algo == "depthwise" and not transposed and args.geometry.ndim == 2:
        kernels = depthwise.describe(args.geometry, input, weight)
        return dataclasses.replace(found, reason=f"{found.reason}; {kernels}")
    if found.algo != "implicit_gemm":
        return found
    # (every TMA path reads channels-last rows; a channels-last weight makes the input so)
    channels_last = _channels_innermost(input, ndim) or is_channels_last(weight)
    forward = _gemm_tiles(input, args, transposed, found.config, channels_last)
    input_gradient = _gemm_tiles(input, args, not transposed, None, channels_last)
    weight_gradient = _weight_gradient_tiles(input, args)
    reason = (
        f"{found.reason}; forward tiles {forward}; input gradient tiles {input_gradient}; "
        f"weight gradient tiles {weight_gradient}"
    )
    return dataclasses.replace(found, reason=reason)


def _gemm_tiles(input, args, transposed: bool, measured, channels_last: bool) -> str:
    """The implicit GEMM's tiles for the call's convolution (``transposed``: its input
    gradient, which is also a transposed call's forward), as its launcher picks them;
    ``channels_last``: whether the tensors it reads and writes are (else no TMA path)."""
    g = args.geometry
    sides = (args.in_per_group, args.out_per_group)  # (source, destination) of the GEMM
    sides = sides[::-1] if transposed else sides
    rows = args.batch * math.prod(g.input if transposed else g.output)
    if measured:
        return f"{implicit_gemm.describe(input.dtype, measured)} (measured)"
    if not channels_last:
        return _pointer_tiles(input, args, transposed, sides)
    tap = transposed and implicit_gemm.tap_gemm_config(
        input.dtype, args.batch, *sides, g, args.groups, input.device
    )
    if tap:
        return (
            f"{tap} as one TMA GEMM scattered by tap (a kernel equal to its stride: "
            "where input and output are dense channels-last and 16-byte aligned)"
        )
    tma = implicit_gemm.pointwise_tma_config(
        input.dtype, rows, *sides, g, args.groups, input.device
    )
    if tma is not None:
        return (
            f"{tma} as one TMA GEMM (a 1x1 layer: where "
            "input and output are dense channels-last and 16-byte aligned)"
        )
    window = implicit_gemm.window_tma_config(
        input.dtype, args.batch, *sides, g, args.groups, transposed, input.device
    )
    if window is not None:
        return (
            f"{window} as TMA boxes, the padding the hardware's zero fill (a stride-1 window: "
            "where input and output are dense channels-last and 16-byte aligned)"
        )
    return _pointer_tiles(input, args, transposed, sides)


def _channels_innermost(input, ndim: int) -> bool:
    """Whether the call's input has its channels innermost (a channels-last layout), as the
    TMA paths' tensors must (the output, and so the output gradient, follows the input's
    layout); other layouts run the pointer-load kernel there."""
    channel_axis = input.dim() - ndim - 1  # (0 for an unbatched input)
    return input.stride(channel_axis) == 1 or input.shape[channel_axis] == 1


def _pointer_tiles(input, args, transposed: bool, sides: tuple) -> str:
    """The pointer-load kernel's tiles for the call's convolution (``transposed`` and
    ``sides``, the GEMM's (source, destination) channels, as in :func:`_gemm_tiles`), with
    the width taps or stride phases folded where they are."""
    g = args.geometry
    if not transposed and implicit_gemm.foldable(input.dtype, args.in_per_group, g, args.groups):
        folded, fg = g.kernel[-1] * args.in_per_group, implicit_gemm.folded_geometry(g)
        tiles = implicit_gemm.launch_config(
            input.dtype, args.batch, folded, args.out_per_group, fg.output, fg.stride, fg.kernel,
            1, False, input.device,
        )  # fmt: skip
        tiles = implicit_gemm.describe(input.dtype, tiles)
        return f"{tiles} (width taps folded into {folded} channels)"
    if transposed and implicit_gemm.phases_foldable(input.dtype, sides[1], g, args.groups):
        channels = sides[1] * math.prod(g.stride)
        fg = implicit_gemm.phase_folded_geometry(g, g.input)
        tiles = implicit_gemm.launch_config(
            input.dtype, args.batch, sides[0], channels, fg.output, fg.stride, fg.kernel, 1,
            False, input.device,
        )  # fmt: skip
        tiles = implicit_gemm.describe(input.dtype, tiles)
        return f"{tiles} (stride phases folded into {channels} channels)"
    tiles = implicit_gemm.launch_config(input.dtype, *_launch_args(args, transposed, input))
    return implicit_gemm.describe(input.dtype, tiles)


def _weight_gradient_tiles(input, args) -> str:
    """The weight gradient's tiles, products, packing and folding, as its launcher picks them
    (the same for a convolution and its transposed call: a GEMM over the convolution's output
    positions)."""
    g = args.geometry
    channels = (args.in_per_group * args.groups, args.out_per_group * args.groups)
    tma = implicit_gemm.wgrad_tma_config(
        input.dtype, args.batch, *channels, g, args.groups, input.device
    )
    if tma is not None:
        return (
            f"{tma} as TMA row boxes, the padding the hardware's zero fill (dy and the input "
            "read channels-last: NCHW ones from a copy, channels-last ones where dense and "
            "16-byte aligned)"
        )
    plan = implicit_gemm.wgrad_plan(
        input.dtype, args.batch * math.prod(g.output), *channels, g, args.groups
    )
    # (fp32's products are named; 16-bit and integer inputs' are their own type's)
    notes = [f"{plan.precision} products"] if input.dtype == torch.float32 else []
    if plan.pack > 1:
        notes.append(f"{plan.pack} groups a program")
    if plan.fold_width:
        notes.append(f"width taps folded into {plan.fold_width * args.in_per_group} channels")
    return f"{plan.config} ({', '.join(notes)})" if notes else str(plan.config)


def conv2d_workspace(
    input_shape,
    weight_shape,
    stride=1,
    padding=0,
    dilation=1,
    groups=1,
    *,
    dtype=torch.float32,
    workspace_limit=None,
) -> conv_gemm.WorkspacePlan:
    """The column-buffer plan im2col+GEMM uses for these shapes (bytes, chunks)."""
    x = torch.empty(input_shape, dtype=dtype, device="meta")
    w = torch.empty(weight_shape, dtype=dtype, device="meta")
    args = check_conv(x, w, None, stride, padding, dilation, groups)
    _choose_algo("im2col_gemm", x, args)  # the same dtype rule as the convolution itself
    return conv_gemm.plan_workspace(
        args.batch,
        args.in_channels,
        args.geometry,
        torch.empty((), dtype=dtype).element_size(),
        _workspace(workspace_limit),
    )


def crop(input, reference, axis=2, offset=0):
    """Crop ``input`` to ``reference``'s size from dimension ``axis`` on (Caffe's Crop layer).

    Dimensions before ``axis`` (negative counts from the end) keep ``input``'s size; from
    ``axis`` on the output has the size of ``reference`` (a tensor, of which only the shape is
    read, or a sequence of ints; either with ``input``'s number of dimensions) and starts at
    ``offset``: one int for every cropped dimension, one int per cropped dimension, or
    ``None`` to centre the window (offset ``(input_size - size) // 2``, so an odd margin leaves
    the extra element after the window). A window reaching past the input is an error.

    Any dtype and layout, 1 to 6 dimensions. The output is a new tensor (never a view) laid out
    in the input's dimension order (channels-last stays channels-last); the gradient flows to
    ``input`` only.
    """
    if has_torch_function_variadic(input, reference) and _protocol_on():
        return handle_torch_function(crop, (input, reference), input, reference, axis, offset)
    plan = lookup(
        _CROP_PLANS,
        lambda: (
            tensor_key(input),
            tensor_key(reference) if isinstance(reference, torch.Tensor) else None,
            values_key((None if isinstance(reference, torch.Tensor) else reference, axis, offset)),
        ),
        lambda: _crop_plan(input, reference, axis, offset),
    )
    if isinstance(plan.op, library.Op):
        return autograd.run(plan.op, input, *plan.params, plan=plan)
    return plan.op(input, *plan.params)  # ATen: differentiable by itself


def _crop_plan(input, reference, axis, offset) -> Plan:
    args = check_crop(input, reference, axis, offset)
    params = (list(args.offsets), list(args.sizes))
    if _runs_aten(input):
        return Plan(aten.crop, params)
    check_kernel_device(input, "input")
    return Plan(library.crop, params)


# --------------------------------------------------------------------------------------------
# causal depthwise conv1d (Mamba-family blocks), the causal-conv1d package's semantics
# --------------------------------------------------------------------------------------------

CAUSAL_ACTIVATIONS = (None, "silu", "swish")


def _check_causal(x, weight, bias, activation, op: str):
    for name, t in (("x", x), ("weight", weight)):
        if not isinstance(t, torch.Tensor):
            raise TritonConvError(f"{op}: {name} must be a Tensor, got {type(t).__name__}")
    if weight.dim() != 2 or weight.shape[1] < 1:
        raise TritonConvError(
            f"{op}: weight must be (dim, width) with width >= 1, got weight of size "
            f"{shape_str(weight.shape)}"
        )
    if x.dim() not in (2, 3):
        raise TritonConvError(
            f"{op}: x must be (batch, dim, seqlen) (or (batch, dim) for one decoding step), got "
            f"x of size {shape_str(x.shape)}"
        )
    dim = weight.shape[0]
    if x.shape[1] != dim:
        raise TritonConvError(
            f"{op}: x has {x.shape[1]} channels (dimension 1) but weight has {dim} "
            f"(weight of size {shape_str(weight.shape)}, x of size {shape_str(x.shape)})"
        )
    if bias is not None and (bias.dim() != 1 or bias.shape[0] != dim):
        raise TritonConvError(
            f"{op}: bias must have {dim} elements, got bias of size {shape_str(bias.shape)}"
        )
    if activation not in CAUSAL_ACTIVATIONS:
        raise TritonConvError(
            f"{op}: activation must be one of {list(CAUSAL_ACTIVATIONS)}, got {activation!r}"
        )
    check_same_device(x=x, weight=weight, bias=bias)
    check_same_dtype(weight=weight, bias=bias)
    if activation is not None and not weight.dtype.is_floating_point:
        raise TritonConvError(
            f"{op}: activation={activation!r} needs a floating-point weight, got {weight.dtype}"
        )
    if _runs_aten(x):  # PyTorch's own convolution (aten.depthwise_line)
        return
    for name, t in (("x", x), ("weight", weight), ("bias", bias)):
        if t is not None:
            check_kernel_device(t, name)


def _causal_line(x, weight, bias, pad: int, activation):
    """``act(F.conv1d(x, weight[:, None], bias, groups=dim))`` over ``x`` left-padded by ``pad``
    zeros (none on the right): the causal kernels (bias and SiLU fused), or on CPU tensors
    PyTorch's convolution (``aten.depthwise_line``; see :func:`_runs_aten`)."""
    if _runs_aten(x):
        out = aten.depthwise_line(x, weight, bias, pad)
        return out if activation is None else torch.nn.functional.silu(out)
    bias = bias.contiguous() if bias is not None else None  # the kernels read it densely
    return autograd.run(library.causal_conv1d, x, weight, bias, pad, activation is not None)


def causal_conv1d(
    x,
    weight,
    bias=None,
    activation=None,
    initial_states=None,
    return_final_states=False,
):
    """Causal depthwise 1-D convolution with the causal-conv1d package's semantics.

    ``x`` (batch, dim, seqlen), any strides (channel-first or channel-last memory); ``weight``
    (dim, width); ``bias`` (dim,); ``activation`` None or ``"silu"``/``"swish"``. The output is
    ``F.conv1d(x, weight[:, None], bias, padding=width - 1, groups=dim)[..., :seqlen]`` (then
    SiLU), computed without the padded tail: left padding only. ``initial_states``
    (batch, dim, width - 1) stand in for the zeros before the sequence; with
    ``return_final_states`` the last ``width - 1`` inputs (zero-filled on the left when the
    sequence is shorter) are returned too, as ``(out, final_states)``. ``x`` is computed in
    ``weight``'s dtype and the output cast back to ``x``'s, as the package does.
    """
    if has_torch_function_variadic(x, weight, bias, initial_states) and _protocol_on():
        return handle_torch_function(
            causal_conv1d,
            _present(x, weight, bias, initial_states),
            x,
            weight,
            bias,
            activation,
            initial_states,
            return_final_states,
        )
    _check_causal(x, weight, bias, activation, "causal_conv1d")
    if x.dim() != 3:
        raise TritonConvError(
            f"causal_conv1d: x must be (batch, dim, seqlen), got x of size {shape_str(x.shape)}"
        )
    dtype_in = x.dtype
    xw = x.to(weight.dtype)
    width = weight.shape[1]
    if initial_states is None:
        out = _causal_line(xw, weight, bias, width - 1, activation)
        full = xw
    else:
        expected = (x.shape[0], x.shape[1], width - 1)
        if tuple(initial_states.shape) != expected:
            raise TritonConvError(
                f"causal_conv1d: initial_states must be {shape_str(expected)}, got "
                f"{shape_str(initial_states.shape)}"
            )
        state = initial_states.to(weight.dtype)
        if x.stride(1) == 1 and x.shape[1] > 1:  # channel-last x: keep the layout (one pass)
            full = torch.cat([state.transpose(1, 2), xw.transpose(1, 2)], dim=1).transpose(1, 2)
        else:
            full = torch.cat([state, xw], dim=-1)
        out = _causal_line(full, weight, bias, 0, activation)
    out = out.to(dtype_in)
    if not return_final_states:
        return out
    tail = full[..., max(0, full.shape[-1] - (width - 1)) :]
    final = torch.nn.functional.pad(tail, (width - 1 - tail.shape[-1], 0)).to(dtype_in)
    return out, final


def causal_conv1d_update(x, conv_state, weight, bias=None, activation=None):
    """One decoding step of :func:`causal_conv1d` with a rolling state (causal-conv1d's
    ``causal_conv1d_update``). ``x`` (batch, dim) or (batch, dim, seqlen); ``conv_state``
    (batch, dim, state_len >= width - 1) holds the latest inputs and is updated in place
    (shifted left by seqlen, ``x`` appended). Returns the outputs for ``x``'s positions, shaped
    like ``x``."""
    if has_torch_function_variadic(x, conv_state, weight, bias) and _protocol_on():
        return handle_torch_function(
            causal_conv1d_update, _present(x, conv_state, weight, bias), x, conv_state, weight, bias,
            activation,
        )  # fmt: skip
    _check_causal(x, weight, bias, activation, "causal_conv1d_update")
    single = x.dim() == 2
    steps = x.unsqueeze(-1) if single else x
    if steps.dim() != 3:
        raise TritonConvError(
            "causal_conv1d_update: x must be (batch, dim) or (batch, dim, seqlen), got x of "
            f"size {shape_str(x.shape)}"
        )
    batch, dim, seqlen = steps.shape
    width = weight.shape[1]
    if conv_state.dim() != 3 or conv_state.shape[:2] != (batch, dim):
        raise TritonConvError(
            f"causal_conv1d_update: conv_state must be ({batch}, {dim}, state_len), got "
            f"{shape_str(conv_state.shape)}"
        )
    state_len = conv_state.shape[-1]
    if state_len < width - 1:
        raise TritonConvError(
            f"causal_conv1d_update: conv_state holds {state_len} steps, fewer than "
            f"width - 1 = {width - 1}"
        )
    window = torch.cat([conv_state, steps], dim=-1).to(weight.dtype)
    conv_state.copy_(window[..., -state_len:])
    out = _causal_line(window[..., -(width - 1 + seqlen) :], weight, bias, 0, activation)
    out = out.to(x.dtype)
    return out.squeeze(-1) if single else out
