"""Modules: subclasses of ``torch.nn`` modules that run tritonconv's kernels.

Same constructor arguments, same parameters and ``state_dict`` keys as the torch module they
subclass, so a torch checkpoint loads unchanged; the only addition is ``algo``.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from dataclasses import dataclass

import torch
from torch import nn

from . import functional
from .choice import Choice
from .ops.common import is_channels_last


class _Converted:
    """What every tritonconv convolution module adds to its torch base: ``algo`` and
    :meth:`from_torch`."""

    algo: str

    def extra_repr(self) -> str:
        return super().extra_repr() + f", algo={self.algo!r}"

    def _memo(self) -> functional.PlanMemo | None:
        """The module's last plan, reused while its calls repeat
        (``functional.memoized_convolution``); None while Dynamo traces (nothing to keep)."""
        if torch.compiler.is_compiling():
            return None
        memo = self.__dict__.get("_plan_memo")
        if memo is None:  # (made by from_torch, or unpickled from an older version)
            memo = self.__dict__["_plan_memo"] = functional.PlanMemo()
        return memo

    @classmethod
    def from_torch(cls, module: nn.Module, algo: str = "auto"):
        """A tritonconv module sharing ``module``'s parameters."""
        new = cls.__new__(cls)
        new.__dict__.update(module.__dict__)
        # Own containers (parameters are shared, but a buffer or hook added to one module must
        # not appear on the other).
        for name, value in module.__dict__.items():
            if isinstance(value, dict):
                new.__dict__[name] = type(value)(value)
        new.algo = algo
        return new


def _padded(module: nn.modules.conv._ConvNd, input):
    """(input, padding) the convolution of ``module`` runs on: a padding mode other than
    ``'zeros'`` pads first with ``torch.nn.functional.pad``, exactly as the torch module does."""
    if module.padding_mode == "zeros":
        return input, module.padding
    padded = nn.functional.pad(
        input, module._reversed_padding_repeated_twice, mode=module.padding_mode
    )
    return padded, 0


def _output_padding(module: nn.modules.conv._ConvTransposeNd, input, output_size):
    """The transposed ``module``'s output padding for ``input`` (and ``output_size``, which
    ``forward`` may be given), as the torch module computes it."""
    return module._output_padding(
        input, output_size, module.stride, module.padding, module.kernel_size,
        module.weight.dim() - 2, module.dilation,
    )  # fmt: skip


class _Convolution(_Converted):
    """``_conv_forward`` through tritonconv's convolution of ``_ndim`` spatial dimensions
    (:func:`tritonconv.conv2d` and its kin), the module's last plan reused while its calls
    repeat (``functional.memoized_convolution``); other padding modes pad first with
    ``torch.nn.functional.pad``, exactly as the torch module does."""

    _ndim = 0  # spatial dimensions (set by each subclass)

    def __init__(self, *args, algo: str = "auto", **kwargs):
        super().__init__(*args, **kwargs)
        self.algo = algo

    def _conv_forward(self, input, weight, bias):
        input, padding = _padded(self, input)
        options = (self.stride, padding, self.dilation, self.groups, self.algo, None)
        return functional.memoized_convolution(
            self._memo(), self._ndim, input, weight, bias, options
        )


class Conv1d(_Convolution, nn.Conv1d):
    """``torch.nn.Conv1d`` computed by tritonconv (``algo`` as in :func:`tritonconv.conv1d`)."""

    _ndim = 1


class Conv2d(_Convolution, nn.Conv2d):
    """``torch.nn.Conv2d`` computed by tritonconv (``algo`` as in :func:`tritonconv.conv2d`).

    ``padding_mode`` ``'reflect'``, ``'replicate'`` and ``'circular'`` pad first with
    ``torch.nn.functional.pad``, exactly as ``torch.nn.Conv2d`` does.
    """

    _ndim = 2


class Conv3d(_Convolution, nn.Conv3d):
    """``torch.nn.Conv3d`` computed by tritonconv (``algo`` as in :func:`tritonconv.conv3d`)."""

    _ndim = 3


class _Transposed(_Converted):
    """``forward(input, output_size=None)`` of the torch module through tritonconv's transposed
    convolution of ``_ndim`` spatial dimensions (:func:`tritonconv.conv_transpose2d` and its
    kin), the module's last plan reused as :class:`_Convolution`'s (with ``output_size``, whose
    output padding is worked out anew each call, the plan is looked up)."""

    _ndim = 0  # spatial dimensions (set by each subclass)

    def __init__(self, *args, algo: str = "auto", **kwargs):
        super().__init__(*args, **kwargs)
        self.algo = algo

    def forward(self, input, output_size=None):
        if self.padding_mode != "zeros":
            raise ValueError(f"Only 'zeros' padding mode is supported for {type(self).__name__}")
        output_padding = _output_padding(self, input, output_size)
        options = (self.stride, self.padding, output_padding, self.groups, self.dilation,
                   self.algo, None)  # fmt: skip
        return functional.memoized_convolution(
            self._memo(), self._ndim, input, self.weight, self.bias, options,
            transposed=True,
        )  # fmt: skip


class ConvTranspose1d(_Transposed, nn.ConvTranspose1d):
    """``torch.nn.ConvTranspose1d`` computed by tritonconv (:func:`tritonconv.conv_transpose1d`)."""

    _ndim = 1


class ConvTranspose2d(_Transposed, nn.ConvTranspose2d):
    """``torch.nn.ConvTranspose2d`` computed by tritonconv (:func:`tritonconv.conv_transpose2d`)."""

    _ndim = 2


class ConvTranspose3d(_Transposed, nn.ConvTranspose3d):
    """``torch.nn.ConvTranspose3d`` computed by tritonconv (:func:`tritonconv.conv_transpose3d`)."""

    _ndim = 3


#: torch module type -> the tritonconv module that replaces it.
CONVERTED = {
    nn.Conv1d: Conv1d,
    nn.Conv2d: Conv2d,
    nn.ConvTranspose1d: ConvTranspose1d,
    nn.ConvTranspose2d: ConvTranspose2d,
    nn.Conv3d: Conv3d,
    nn.ConvTranspose3d: ConvTranspose3d,
}


def convert(model: nn.Module, algo: str = "auto") -> nn.Module:
    """Swap every ``torch.nn`` convolution (``CONVERTED``: Conv1d/2d/3d and
    ConvTranspose1d/2d/3d) inside ``model`` for its tritonconv module, in place, and return
    ``model`` (``model`` itself a convolution: its tritonconv module, as
    ``nn.SyncBatchNorm.convert_sync_batchnorm`` does). Parameters are shared, so state dicts
    and optimisers are unaffected; a module reached more than once (shared between parents,
    or listed twice) is converted once and stays one module everywhere."""
    return _convert(model, algo, {})


def _convert(module: nn.Module, algo: str, done: dict) -> nn.Module:
    """``module`` converted (``done``: id -> (module, its replacement), of those seen)."""
    seen = done.get(id(module))
    if seen is not None:
        return seen[1]
    replacement = CONVERTED.get(type(module))
    converted = module if replacement is None else replacement.from_torch(module, algo)
    done[id(module)] = (module, converted)  # (the module kept too: its id stays its own)
    if replacement is not None:
        return converted
    for name, child in list(module._modules.items()):  # (named_children skips repeats)
        if child is not None and (converted := _convert(child, algo, done)) is not child:
            setattr(module, name, converted)
    return module


@dataclass(frozen=True)
class LayerChoice:
    """What ``algo="auto"`` runs for one convolution layer of a model, and why."""

    name: str  # the module's name in the model
    call: str  # the call: op, input shape, dtype and layout, weight shape
    choice: Choice

    def __str__(self) -> str:
        return f"{self.name}: {self.call}: {self.choice}"


def explain_model(model: nn.Module, *example_inputs) -> list[LayerChoice]:
    """For every convolution module of ``model`` (``torch.nn`` or tritonconv, any dimension),
    in call order: the algorithm and tile configuration tritonconv's ``algo="auto"`` picks for
    the call it receives on ``example_inputs``, and why (:func:`tritonconv.explain`, benchmark
    mode and the on-disk choices included). One forward pass without gradients; the model
    runs its own convolutions (a torch model: torch's), so only the choices are tritonconv's."""
    layers: list[LayerChoice] = []
    visit_convolutions(model, example_inputs, functools.partial(_explain_layer, layers))
    return layers


def visit_convolutions(model: nn.Module, example_inputs: tuple, visit) -> None:
    """One forward pass of ``model`` on ``example_inputs`` without gradients, calling
    ``visit(name, module, args, kwargs)`` just before each convolution module (``torch.nn`` or
    tritonconv, any dimension; ``name`` in ``model``) runs, with the arguments it is given:
    how :func:`explain_model`, :func:`tritonconv.warmup` and the model benchmarks see the
    calls a model makes. Arguments given by keyword come positionally where the module's
    ``forward`` takes them so (``args[0]`` the input, then a transposed convolution's
    ``output_size``)."""

    def hook(name, module, args, kwargs):
        with contextlib.suppress(TypeError):  # (a forward of its own: arguments as given)
            bound = inspect.signature(type(module).forward).bind(module, *args, **kwargs)
            args, kwargs = bound.args[1:], bound.kwargs  # (the class's: not a patched one)
        visit(name, module, tuple(args), kwargs)

    hooks = [
        module.register_forward_pre_hook(functools.partial(hook, name), with_kwargs=True)
        for name, module in model.named_modules()
        if isinstance(module, nn.modules.conv._ConvNd)
    ]
    try:
        with torch.no_grad():
            model(*example_inputs)
    finally:
        for handle in hooks:
            handle.remove()


def _explain_layer(layers: list, name: str, module, args, kwargs) -> None:
    input = args[0]
    dims = module.weight.dim() - 2
    transposed = isinstance(module, nn.modules.conv._ConvTransposeNd)
    if transposed:
        padding = module.padding
        output_padding = _output_padding(module, input, args[1] if len(args) > 1 else None)
    else:
        input, padding = _padded(module, input)
        output_padding = 0
    found = functional.explain(
        input, module.weight, module.bias, module.stride, padding, module.dilation,
        module.groups, transposed=transposed, output_padding=output_padding,
        algo=getattr(module, "algo", "auto"),
    )  # fmt: skip
    op = f"conv{'_transpose' if transposed else ''}{dims}d"
    layout = "channels-last" if is_channels_last(input) else "contiguous"
    call = (
        f"{op} input {list(input.shape)} {str(input.dtype).replace('torch.', '')} {layout}, "
        f"weight {list(module.weight.shape)}"
    )
    layers.append(LayerChoice(name, call, found))


class Crop(nn.Module):
    """Caffe's Crop layer: ``forward(input, reference)`` crops ``input`` to ``reference``'s size
    from dimension ``axis`` on, starting at ``offset`` (see :func:`tritonconv.crop`). Used in
    fully-convolutional networks to align a skip connection with an upsampled map."""

    def __init__(self, axis: int = 2, offset=0):
        super().__init__()
        self.axis = axis
        self.offset = offset

    def forward(self, input, reference):
        return functional.crop(input, reference, self.axis, self.offset)

    def extra_repr(self) -> str:
        return f"axis={self.axis}, offset={self.offset!r}"


__all__ = [
    "CONVERTED",
    "Conv1d",
    "Conv2d",
    "Conv3d",
    "ConvTranspose1d",
    "ConvTranspose2d",
    "ConvTranspose3d",
    "Crop",
    "LayerChoice",
    "convert",
    "explain_model",
    "visit_convolutions",
]
