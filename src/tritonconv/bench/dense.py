"""Suite ``dense``: the implicit-GEMM convolution against cuDNN on dense layers (issue 11).

The ResNet-50 layers and stem, dilation 2 and 32 groups of ``anchors-h100.md``, and the layers
of UNet, VGG, ConvNeXt/MobileNet pointwise and DeepLab's ASPP that the im2col path is slowest
on. Channels-last input and weight (the layout networks run in under AMP), and a few layers also
NCHW (PyTorch's default; rows ``<case>_nchw``), forward and backward (dX + dW),
``cudnn.benchmark`` on. Per dtype:

* ``bfloat16`` / ``float16``: ours vs cuDNN in that dtype;
* ``float32``: two rows each, ``tf32`` (TF32 allowed in both, PyTorch's default for
  convolutions) and ``fp32`` (TF32 off in both), the latter with each side's relative error
  against a float64 convolution of the same data in ``extra``.

Each 16-bit channels-last case also has a forward row for ``algo="auto"`` in benchmark mode
(cuDNN has ``cudnn.benchmark`` on too): the algorithm, and for the implicit GEMM the tiles,
measured fastest for that shape, named in the note.

``Options.quick`` shrinks every case to a toy size (the CPU path).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
import torch.nn.functional as F

from .. import functional
from ..ops import implicit_gemm
from ..testing import DEVICE
from . import Options, Row, input_sets, kernel_ms, suite, time_ms
from .conv import BY_NAME, ConvCase

CASES = [
    *(BY_NAME[name] for name in ("r50_3x3_56", "r50_1x1_56", "r50_3x3_28", "r50_3x3_14")),
    *(BY_NAME[name] for name in ("r50_3x3_7", "r50_stem_7x7s2", "dil2_3x3_64", "grp32_3x3_28")),
    ConvCase("unet_3x3_128", (8, 128, 128, 128), (64, 128, 3, 3), padding=1),
    ConvCase("unet_3x3_256", (8, 64, 256, 256), (64, 64, 3, 3), padding=1),
    ConvCase("vgg_first", (16, 3, 224, 224), (64, 3, 3, 3), padding=1),
    ConvCase("pw_96_384_56", (32, 96, 56, 56), (384, 96, 1, 1)),
    ConvCase("pw_40_120_28", (32, 40, 28, 28), (120, 40, 1, 1)),
    ConvCase("aspp_dil12", (8, 512, 64, 64), (256, 512, 3, 3), padding=12, dilation=12),
]
BY_LAYER = {case.name: case for case in CASES}
CHANNELS_LAST = torch.channels_last
#: Also measured with NCHW input and weight (PyTorch's default layout; rows named ``<case>_nchw``)
NCHW_CASES = ("r50_3x3_56", "r50_3x3_14", "unet_3x3_256", "pw_96_384_56")


@contextmanager
def precision(tf32: bool):
    """TF32 allowed (or not) in cuDNN and cuBLAS, cudnn.benchmark on; restored after."""
    flags = torch.backends.cudnn, torch.backends.cuda.matmul
    old = (flags[0].allow_tf32, flags[1].allow_tf32, flags[0].benchmark)
    flags[0].allow_tf32 = flags[1].allow_tf32 = tf32
    flags[0].benchmark = True
    try:
        yield
    finally:
        flags[0].allow_tf32, flags[1].allow_tf32, flags[0].benchmark = old


def _inputs(case: ConvCase, dtype, layout=CHANNELS_LAST):
    def make():
        x = torch.randn(case.input, device=DEVICE, dtype=dtype).to(memory_format=layout)
        fan_in = case.weight[1] * case.weight[2] * case.weight[3]
        w = torch.randn(case.weight, device=DEVICE, dtype=dtype) / fan_in**0.5
        w = w.to(memory_format=layout)
        return x.requires_grad_(), w.requires_grad_()

    nbytes = (torch.Size(case.input).numel() + torch.Size(case.weight).numel()) * 4
    return input_sets(make, nbytes)


def _ours(x, w, **kwargs):
    return functional.conv2d(x, w, algo="implicit_gemm", **kwargs)


def _auto(x, w, **kwargs):
    """What a user with ``cudnn.benchmark`` on gets: ``auto`` measures every algorithm and the
    implicit GEMM's tuning tiles once per shape (``precision`` turns benchmark mode on)."""
    return functional.conv2d(x, w, **kwargs)


def _times(case: ConvCase, dtype, opts: Options, layout=CHANNELS_LAST, tuned=False):
    """{side: (fwd ms, bwd ms, fwd kernel ms, bwd kernel ms)} for ours and cuDNN on the same
    inputs: per call, and on the GPU alone (``kernel_ms``); ``tuned``: also side ``auto``
    (benchmark mode's pick, forward only, with the :class:`Choice` fifth)."""
    sets = _inputs(case, dtype, layout)
    times = {}
    sides = [("ours", _ours), ("ref", F.conv2d)]
    if tuned:
        sides.append(("auto", _auto))
    for side, fn in sides:

        def forward(i, fn=fn):
            with torch.no_grad():
                fn(*sets[i], **case.kwargs)

        fwd = time_ms(forward, len(sets), opts)
        fwd_kernel = kernel_ms(forward, len(sets), opts)
        if side == "auto":  # forward only: what benchmark mode picks, and how fast it runs
            x, w = sets[0]
            times[side] = (fwd, None, fwd_kernel, None, functional.explain(x, w, **case.kwargs))
            continue
        with torch.no_grad():
            grads = [torch.randn_like(fn(x, w, **case.kwargs)) for x, w in sets]

        def forward_backward(i, fn=fn, grads=grads):
            torch.autograd.grad(fn(*sets[i], **case.kwargs), sets[i], grads[i])

        # The backward's kernels are captured with their forward (a graph cannot take the
        # backward of a forward run outside it: its nodes are on the forward's stream), and
        # before any graph of these inputs is kept alive: a live graph's gradient nodes stay
        # on the default stream, and using them from the capture stream invalidates it.
        both = kernel_ms(forward_backward, len(sets), opts)
        bwd_kernel = both - fwd_kernel if both is not None and fwd_kernel is not None else None
        outs = [fn(x, w, **case.kwargs) for x, w in sets]

        def backward(i, outs=outs, grads=grads):
            torch.autograd.grad(outs[i], sets[i], grads[i], retain_graph=True)

        bwd = time_ms(backward, len(sets), opts)
        times[side] = (fwd, bwd, fwd_kernel, bwd_kernel)
        del outs, grads, backward
    return times


def _errors(case: ConvCase) -> dict:
    """Relative max error of ours and of cuDNN (fp32, current TF32 setting) against float64."""
    x, w = (t.detach() for t in _inputs(case, torch.float32)[0])
    exact = F.conv2d(x.double(), w.double(), **case.kwargs)
    scale = exact.abs().max().item()
    return {
        f"{side}_err": (fn(x, w, **case.kwargs).double() - exact).abs().max().item() / scale
        for side, fn in (("ours", _ours), ("ref", F.conv2d))
    }


@suite("dense")
def dense_suite(opts: Options) -> Iterator[Row]:
    """Implicit GEMM vs cuDNN, channels-last, forward and backward, every dense case."""
    for name in opts.dtypes:
        dtype = getattr(torch, name)
        modes = [("tf32", True), ("fp32", False)] if dtype == torch.float32 else [(name, True)]
        for label, tf32 in modes:
            runs = [(case, CHANNELS_LAST) for case in CASES]
            runs += [(BY_LAYER[n], torch.contiguous_format) for n in NCHW_CASES if label != "tf32"]
            for case, layout in runs:
                nchw = layout == torch.contiguous_format
                name = f"{case.name}_nchw" if nchw else case.name
                if not (opts.wants(case.name) or opts.wants(name)):
                    continue
                case = case.quick() if opts.quick else case
                with precision(tf32):
                    # benchmark mode's pick: 16-bit channels-last only (each layer's first
                    # measurement compiles ~9 tile configurations: minutes over the suite)
                    tuned = label in ("bfloat16", "float16") and not nchw
                    times = _times(case, dtype, opts, layout, tuned)
                    extra = _errors(case) if label == "fp32" and not nchw else {}
                flops = case.flops()
                common = dict(
                    suite="dense", case=name, shape=case.shape(), dtype=label,
                    ref_name="cuDNN NCHW" if nchw else "cuDNN NHWC", unit="TFLOP/s", extra=extra,
                )  # fmt: skip
                note = ", ".join(f"{k} {v:.1e}" for k, v in extra.items())
                yield Row(
                    **common, op="fwd", ours_ms=times["ours"][0], ref_ms=times["ref"][0],
                    ours_kernel_ms=times["ours"][2], ref_kernel_ms=times["ref"][2],
                    work=flops, note=note,
                )  # fmt: skip
                yield Row(
                    **common, op="bwd (dX+dW)", ours_ms=times["ours"][1], ref_ms=times["ref"][1],
                    ours_kernel_ms=times["ours"][3], ref_kernel_ms=times["ref"][3],
                    work=2 * flops,
                )  # fmt: skip
                if "auto" not in times:
                    continue
                auto = times["auto"]
                picked = auto[4].algo
                if auto[4].config:
                    picked += f" {implicit_gemm.Config(*auto[4].config)}"
                yield Row(
                    **dict(common, extra={"auto": picked}), op="fwd (auto, benchmark mode)",
                    ours_ms=auto[0], ref_ms=times["ref"][0], ours_kernel_ms=auto[2],
                    ref_kernel_ms=times["ref"][2], work=flops, note=f"auto: {picked}",
                )  # fmt: skip
