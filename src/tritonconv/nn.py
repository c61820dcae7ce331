"""Modules: subclasses of ``torch.nn`` modules that run tritonconv's kernels.

Same constructor arguments, same parameters and ``state_dict`` keys as the torch module they
subclass, so a torch checkpoint loads unchanged; the only addition is ``algo``.
"""

from __future__ import annotations

from torch import nn

from . import functional


class Conv2d(nn.Conv2d):
    """``torch.nn.Conv2d`` computed by tritonconv (``algo`` as in :func:`tritonconv.conv2d`).

    ``padding_mode`` ``'reflect'``, ``'replicate'`` and ``'circular'`` pad first with
    ``torch.nn.functional.pad``, exactly as ``torch.nn.Conv2d`` does.
    """

    def __init__(self, *args, algo: str = "auto", **kwargs):
        super().__init__(*args, **kwargs)
        self.algo = algo

    def _conv_forward(self, input, weight, bias):
        padding = self.padding
        if self.padding_mode != "zeros":
            input = nn.functional.pad(
                input, self._reversed_padding_repeated_twice, mode=self.padding_mode
            )
            padding = 0
        return functional.conv2d(
            input, weight, bias, self.stride, padding, self.dilation, self.groups, algo=self.algo
        )

    def extra_repr(self) -> str:
        return super().extra_repr() + f", algo={self.algo!r}"

    @classmethod
    def from_torch(cls, module: nn.Conv2d, algo: str = "auto") -> Conv2d:
        """A tritonconv Conv2d sharing ``module``'s parameters."""
        new = cls.__new__(cls)
        new.__dict__.update(module.__dict__)
        # Own containers (parameters are shared, but a buffer or hook added to one module must
        # not appear on the other).
        for name, value in module.__dict__.items():
            if isinstance(value, dict):
                new.__dict__[name] = type(value)(value)
        new.algo = algo
        return new


def convert(model: nn.Module, algo: str = "auto") -> nn.Module:
    """Swap every ``torch.nn.Conv2d`` inside ``model`` for :class:`Conv2d`, in place."""
    for name, child in model.named_children():
        if type(child) is nn.Conv2d:
            setattr(model, name, Conv2d.from_torch(child, algo))
        else:
            convert(child, algo)
    return model


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


__all__ = ["Conv2d", "Crop", "convert"]
