"""Suite ``more``: conv1d, conv_transpose1d/2d/3d, conv3d, causal_conv1d and 3-D unfold/fold
against PyTorch (issues 11 and 12).

Cases from the networks these ops serve, issue 12's target list: wav2vec2's first
feature-encoder conv1d (1 → 512, k10 s5) and a later one, a k3 conv1d at 512 channels, a UNet
decoder's 2x2/stride-2 transposed convolution, a GAN generator's 4x4/stride-2 one, a decoder's
3×3/stride-2 one with output padding (2-D cases channels-last), a vocoder's k4/stride-2
transposed conv1d, a Mamba block's causal depthwise conv1d (width 4, SiLU), and the 3-D
layers (video 3×3×3, (2+1)D's 1×3×3, a 3-D UNet's 2×2×2 up-convolution) in
channels_last_3d. Forward and backward (every input's gradient), ours (``algo="auto"``)
against PyTorch on the same inputs (``cudnn.benchmark`` on, TF32 off for fp32); the causal
reference is the causal-conv1d package's formula in PyTorch
(``F.conv1d(padding=width - 1)[..., :seqlen]``, then SiLU). ``Options.quick`` shrinks every
case to a toy size (the CPU path).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .. import functional
from ..ops.common import is_channels_last
from ..testing import DEVICE
from . import Options, Row, kernel_ms, suite, time_ms
from .conv import CONV_REF, exact_fp32


@dataclass(frozen=True)
class Case:
    name: str
    shape: str
    make: Callable[[bool, torch.dtype], tuple]  # (quick, dtype) -> tensors
    ours: Callable
    ref: Callable
    # bytes a call must move at least (forward, backward), from the inputs: for the
    # memory-bound cases, whose rows then report GB/s
    floor_bytes: Callable | None = None


def _t(shape, dtype, scale=1.0):
    return (torch.randn(shape, device=DEVICE) * scale).to(dtype).requires_grad_()


def _t_dim_last(shape, dtype, scale=1.0):
    """A ``(batch, dim, L)`` tensor with dim innermost (``(batch, L, dim)`` memory, transposed):
    the layout a Mamba block hands its causal conv1d (x is the in-projection's output)."""
    t = (torch.randn(shape[0], shape[2], shape[1], device=DEVICE) * scale).to(dtype)
    return t.transpose(1, 2).requires_grad_()


def _t_last(shape, dtype, scale=1.0):
    """A 4-D tensor in channels_last or a 5-D one in channels_last_3d: the layouts issue 12's
    2-D and 3-D targets are measured in (the ones image, video and medical nets run in under
    AMP)."""
    t = (torch.randn(shape, device=DEVICE) * scale).to(dtype)
    last = torch.channels_last if len(shape) == 4 else torch.channels_last_3d
    return t.to(memory_format=last).requires_grad_()


def _one_hot_window(channels: int, kernel: tuple, dtype) -> torch.Tensor:
    """The grouped conv3d weight that copies each tap of a window into its own channel:
    ``F.conv3d(x, w, groups=C)`` is a 3-D unfold (and ``F.conv_transpose3d`` with it a 3-D fold)
    by cuDNN, the fastest way PyTorch itself offers (it has no 3-D ``F.unfold``/``F.fold``)."""
    taps = kernel[0] * kernel[1] * kernel[2]
    w = torch.eye(taps, device=DEVICE).reshape(taps, 1, *kernel).repeat(channels, 1, 1, 1, 1)
    return w.to(dtype)


def _unfold3d_inputs(quick: bool, dtype):
    n, c, d, h, w = (1, 4, 3, 5, 6) if quick else (4, 32, 16, 32, 32)
    return _t((n, c, d, h, w), dtype), _one_hot_window(c, (3, 3, 3), dtype), None


def _fold3d_inputs(quick: bool, dtype):
    n, c, d, h, w = (1, 4, 3, 5, 6) if quick else (4, 32, 16, 32, 32)
    return _t((n, c * 27, d * h * w), dtype), _one_hot_window(c, (3, 3, 3), dtype), (d, h, w)


def _mamba_case(name: str, label: str, make_x) -> Case:
    """Issue 12's causal conv1d case (a Mamba block's), x made by ``make_x`` (its layout)."""
    return Case(
        name,
        label,
        lambda q, dt: (
            make_x((2, 4, 16) if q else (8, 2048, 4096), dt),
            _t((4, 4) if q else (2048, 4), dt, 0.5),
            _t((4,) if q else (2048,), dt),
        ),
        lambda x, w, b: functional.causal_conv1d(x, w, b, activation="silu"),
        _causal_ref,
        # forward: x read, y written; backward: x and dy read, dx written
        lambda x, w, b: (2 * x.nbytes, 3 * x.nbytes),
    )


def _causal_ref(x, w, b):
    width = w.shape[1]
    y = F.conv1d(x, w.unsqueeze(1), b, padding=width - 1, groups=w.shape[0])
    return F.silu(y[..., : x.shape[-1]])


CASES = [
    Case(
        "wav2vec_first_conv1d",
        "N8 C1 L16000 → K512 k10 s5",
        lambda q, dt: (
            _t((1, 1, 64) if q else (8, 1, 16000), dt),
            _t((8, 1, 10) if q else (512, 1, 10), dt, 0.3),
            None,
        ),
        lambda x, w, b: functional.conv1d(x, w, b, stride=5),
        lambda x, w, b: F.conv1d(x, w, b, stride=5),
    ),
    Case(
        "conv1d_k3",
        "N16 C512 L4096 → K512 k3 p1",
        lambda q, dt: (
            _t((1, 8, 32) if q else (16, 512, 4096), dt),
            _t((8, 8, 3) if q else (512, 512, 3), dt, 0.05),
            _t((8,) if q else (512,), dt),
        ),
        lambda x, w, b: functional.conv1d(x, w, b, padding=1),
        lambda x, w, b: F.conv1d(x, w, b, padding=1),
    ),
    Case(
        "wav2vec_conv1d",
        "N4 C512 L3199 → K512 k3 s2",
        lambda q, dt: (
            _t((1, 8, 64) if q else (4, 512, 3199), dt),
            _t((8, 8, 3) if q else (512, 512, 3), dt, 0.05),
            None,
        ),
        lambda x, w, b: functional.conv1d(x, w, b, stride=2),
        lambda x, w, b: F.conv1d(x, w, b, stride=2),
    ),
    Case(
        "unet_up_2x2",
        "N8 C128 64² → C64 2×2 s2",
        lambda q, dt: (
            _t_last((1, 4, 6, 6) if q else (8, 128, 64, 64), dt),
            _t_last((4, 2, 2, 2) if q else (128, 64, 2, 2), dt, 0.1),
            _t((2,) if q else (64,), dt),
        ),
        lambda x, w, b: functional.conv_transpose2d(x, w, b, stride=2),
        lambda x, w, b: F.conv_transpose2d(x, w, b, stride=2),
    ),
    Case(
        "gan_up_4x4",
        "N16 C256 16² → C128 4×4 s2 p1",
        lambda q, dt: (
            _t_last((1, 4, 5, 5) if q else (16, 256, 16, 16), dt),
            _t_last((4, 2, 4, 4) if q else (256, 128, 4, 4), dt, 0.05),
            None,
        ),
        lambda x, w, b: functional.conv_transpose2d(x, w, b, stride=2, padding=1),
        lambda x, w, b: F.conv_transpose2d(x, w, b, stride=2, padding=1),
    ),
    Case(
        "up_3x3_s2",
        "N16 C128 32² → C64 3×3 s2 p1 op1",
        lambda q, dt: (
            _t_last((1, 4, 5, 5) if q else (16, 128, 32, 32), dt),
            _t_last((4, 2, 3, 3) if q else (128, 64, 3, 3), dt, 0.05),
            _t((2,) if q else (64,), dt),
        ),
        lambda x, w, b: functional.conv_transpose2d(x, w, b, stride=2, padding=1, output_padding=1),
        lambda x, w, b: F.conv_transpose2d(x, w, b, stride=2, padding=1, output_padding=1),
    ),
    Case(
        "vocoder_up_k4",
        "N8 C256 L4096 → C128 k4 s2 p1",
        lambda q, dt: (
            _t((1, 4, 16) if q else (8, 256, 4096), dt),
            _t((4, 2, 4) if q else (256, 128, 4), dt, 0.05),
            None,
        ),
        lambda x, w, b: functional.conv_transpose1d(x, w, b, stride=2, padding=1),
        lambda x, w, b: F.conv_transpose1d(x, w, b, stride=2, padding=1),
    ),
    _mamba_case("mamba_causal_conv1d", "batch 8 dim 2048 seqlen 4096 width 4, SiLU", _t),
    _mamba_case(
        "mamba_causal_conv1d_dim_last",
        "the same, x dim-innermost (batch, L, dim) memory",
        _t_dim_last,
    ),
    Case(
        "conv3d_3x3x3",
        "N8 C64 16×56² → K64 3×3×3 p1 NDHWC",
        lambda q, dt: (
            _t_last((1, 16, 4, 6, 6) if q else (8, 64, 16, 56, 56), dt),
            _t_last((16, 16, 3, 3, 3) if q else (64, 64, 3, 3, 3), dt, 0.02),
            None,
        ),
        lambda x, w, b: functional.conv3d(x, w, b, padding=1),
        lambda x, w, b: F.conv3d(x, w, b, padding=1),
    ),
    Case(
        "conv3d_1x3x3",
        "N8 C64 16×56² → K144 1×3×3 p(0,1,1) NDHWC",
        lambda q, dt: (
            _t_last((1, 16, 4, 6, 6) if q else (8, 64, 16, 56, 56), dt),
            _t_last((16, 16, 1, 3, 3) if q else (144, 64, 1, 3, 3), dt, 0.04),
            None,
        ),
        lambda x, w, b: functional.conv3d(x, w, b, padding=(0, 1, 1)),
        lambda x, w, b: F.conv3d(x, w, b, padding=(0, 1, 1)),
    ),
    Case(
        "conv_transpose3d_2x2x2",
        "N2 C128 16×32² → C64 2×2×2 s2 NDHWC",
        lambda q, dt: (
            _t_last((1, 16, 3, 4, 4) if q else (2, 128, 16, 32, 32), dt),
            _t_last((16, 16, 2, 2, 2) if q else (128, 64, 2, 2, 2), dt, 0.05),
            None,
        ),
        lambda x, w, b: functional.conv_transpose3d(x, w, b, stride=2),
        lambda x, w, b: F.conv_transpose3d(x, w, b, stride=2),
    ),
    # 3-D unfold/fold (issue 12): against cuDNN's grouped conv3d / conv_transpose3d with one-hot
    # weights (the third input is fold's output size, not a bias)
    Case(
        "unfold3d_3x3x3",
        "N4 C32 16×32² 3×3×3 p1 → (N, C*27, L)",
        _unfold3d_inputs,
        lambda x, w, b: functional.unfold(x, (3, 3, 3), padding=1),
        lambda x, w, b: F.conv3d(x, w, padding=1, groups=x.shape[1]),
    ),
    Case(
        "fold3d_3x3x3",
        "(N4, C32*27, 16·32²) → N4 C32 16×32², 3×3×3 p1",
        _fold3d_inputs,
        lambda x, w, size: functional.fold(x, size, (3, 3, 3), padding=1),
        lambda x, w, size: F.conv_transpose3d(
            x.reshape(x.shape[0], x.shape[1], *size), w, padding=1, groups=x.shape[1] // 27
        ),
    ),
]


def _timed(fn, inputs, opts: Options) -> tuple[float, float, float | None, float | None]:
    """(forward ms, backward ms, forward kernel ms, backward kernel ms) of ``fn`` on
    ``inputs`` (a single input set): per call, and on the GPU alone (``kernel_ms``)."""

    def forward(_):
        with torch.no_grad():
            fn(*inputs)

    fwd = time_ms(forward, 1, opts)
    fwd_kernel = kernel_ms(forward, 1, opts)
    leaves = [t for t in inputs if isinstance(t, torch.Tensor) and t.requires_grad]
    with torch.no_grad():
        grad = torch.randn_like(fn(*inputs))
    # captured with its forward, before any graph of these inputs is kept alive (as the
    # dense suite does: bench/dense.py)
    both = kernel_ms(lambda _: torch.autograd.grad(fn(*inputs), leaves, grad), 1, opts)
    bwd_kernel = both - fwd_kernel if both is not None and fwd_kernel is not None else None
    out = fn(*inputs)
    bwd = time_ms(lambda _: torch.autograd.grad(out, leaves, grad, retain_graph=True), 1, opts)
    return fwd, bwd, fwd_kernel, bwd_kernel


@suite("more")
def more_suite(opts: Options) -> Iterator[Row]:
    """conv1d, transposed conv2d and causal conv1d vs PyTorch, forward and backward."""
    for name in opts.dtypes:
        dtype = getattr(torch, name)
        for case in CASES:
            if not opts.wants(case.name):
                continue
            inputs = case.make(opts.quick, dtype)
            with exact_fp32(dtype):
                ours = _timed(case.ours, inputs, opts)
                ref = _timed(case.ref, inputs, opts)
            common = dict(
                suite="more", case=case.name, shape=case.shape, dtype=name,
                ref_name=_reference_name(inputs[0]),
            )  # fmt: skip
            floor = case.floor_bytes(*inputs) if case.floor_bytes else (0.0, 0.0)
            for i, op in enumerate(("fwd", "bwd")):
                yield Row(
                    **common, op=op, ours_ms=ours[i], ref_ms=ref[i],
                    ours_kernel_ms=ours[2 + i], ref_kernel_ms=ref[2 + i],
                    work=floor[i], unit="GB/s" if floor[i] else "",
                )  # fmt: skip


def _reference_name(x: torch.Tensor) -> str:
    """What PyTorch ran the reference with: cuDNN (and the input's layout), or the CPU."""
    if DEVICE != "cuda":
        return CONV_REF
    names = {4: ("NCHW", "NHWC"), 5: ("NCDHW", "NDHWC")}.get(x.dim(), ("NCL", "NCL"))
    return f"cuDNN {names[is_channels_last(x)]}"
