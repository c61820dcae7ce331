"""Suite ``depthwise``: issue 13's depthwise and small-group convolutions against cuDNN, with
the bandwidth they reach beside the copy's.

Cases: ConvNeXt's 7×7 depthwise (early and late stage), MobileNetV3's 3×3, 5×5 and 5×5
stride 2, EfficientNet's 3×3 stride 2, RepLKNet's 31×31, and grouped 3×3 layers of 16
(RegNet) and 8 channels a group; batch 32 (RepLK 16). Each dtype runs in the layout these
networks use it in: 16-bit floats channels-last (AMP), fp32 NCHW.

Per case, ours (``algo="auto"``) and cuDNN (``cudnn.benchmark`` on, TF32 off for fp32) on
the same inputs: the forward and the forward + backward (every input's gradient), per call
and on the GPU alone (CUDA-graph replay), over input sets that together overflow the L2
cache (up to :data:`MOST_SETS`; the smallest layer, ConvNeXt's late 7x7 in bf16, takes 27),
so every call reads from DRAM as in a network. Beside them, a copy of the input
(``Tensor.copy_``: its bytes read and written once) timed the same way: the forward row's
``of_copy`` is the forward's bandwidth (input read + output written) over the copy's, both
on kernel time (per call where either has none), issue 13's "% of the measured copy
bandwidth". Each row's note names the algorithm ``auto`` ran (benchmark mode measures a
no-gradient call's forward, and a training call's forward and backward together). ``Options.quick`` shrinks every case to a toy size (the CPU path).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .. import functional
from ..ops import implicit_gemm
from ..testing import DEVICE
from . import Options, Row, input_sets, kernel_ms, suite, time_ms
from .conv import exact_fp32


@dataclass(frozen=True)
class Case:
    name: str
    n: int
    c: int
    size: int  # height = width
    k: int
    stride: int = 1
    per_group: int = 1  # channels a group: 1 is depthwise

    @property
    def groups(self) -> int:
        return self.c // self.per_group

    @property
    def shape(self) -> str:
        kind = "depthwise" if self.per_group == 1 else f"{self.per_group} ch a group"
        s = f" s{self.stride}" if self.stride > 1 else ""
        return f"N{self.n} C{self.c} {self.size}² {self.k}×{self.k}{s} {kind}"

    def quick(self) -> Case:
        """A toy version (the interpreter): a few channels and pixels, kernels up to 7."""
        c = 2 * self.per_group if self.per_group > 1 else 4
        k = min(self.k, 7)
        return Case(self.name, 1, c, k + 3, k, self.stride, self.per_group)


CASES = [
    Case("convnext_7x7_early", 32, 96, 56, 7),
    Case("convnext_7x7_late", 32, 768, 7, 7),
    Case("mobilenet_3x3", 32, 144, 56, 3),
    Case("mobilenet_5x5", 32, 480, 14, 5),
    Case("mobilenet_5x5_s2", 32, 240, 28, 5, stride=2),
    Case("efficientnet_3x3_s2", 32, 96, 112, 3, stride=2),
    # MobileNetV3-large's own narrow layers, whose channel counts fill no 32-channel block
    # (session 48's models run: kernel time 0.66-0.88x cuDNN's forward)
    Case("mobilenetv3_3x3_16", 32, 16, 112, 3),
    Case("mobilenetv3_3x3_72", 32, 72, 56, 3),
    Case("mobilenetv3_5x5_s2_72", 32, 72, 56, 5, stride=2),
    Case("mobilenetv3_5x5_120", 32, 120, 28, 5),
    Case("replk_31x31", 16, 128, 56, 31),
    Case("regnet_3x3_16ch", 32, 64, 56, 3, per_group=16),
    Case("grouped_3x3_8ch", 32, 256, 28, 3, per_group=8),
]


# Input sets at most (each about a layer's input and output): enough for the smallest case
# to overflow the H100's 50 MB L2 twice.
MOST_SETS = 64


def _layout(dtype: torch.dtype) -> torch.memory_format:
    """The layout a network runs this dtype in: channels-last under AMP, NCHW in fp32."""
    return torch.contiguous_format if dtype == torch.float32 else torch.channels_last


def _rows(case: Case, name: str, opts: Options) -> Iterator[Row]:
    dtype = getattr(torch, name)
    fmt = _layout(dtype)
    kwargs = dict(stride=case.stride, padding=case.k // 2, groups=case.groups)

    def make():
        x = torch.randn(case.n, case.c, case.size, case.size, device=DEVICE)
        w = torch.randn(case.c, case.per_group, case.k, case.k, device=DEVICE) / case.k
        x, w = (t.to(dtype).to(memory_format=fmt).requires_grad_() for t in (x, w))
        dy = torch.randn_like(F.conv2d(x.detach(), w.detach(), **kwargs))
        return x, w, dy, torch.empty_like(x.detach())

    x_bytes = case.n * case.c * case.size * case.size * dtype.itemsize
    sets = input_sets(make, 2 * x_bytes, most=MOST_SETS)
    count = len(sets)
    y_bytes = sets[0][2].nbytes

    def timed(fn) -> tuple[float, float | None]:
        return time_ms(fn, count, opts), kernel_ms(fn, count, opts)

    def copy(i):
        sets[i][3].copy_(sets[i][0].detach())

    results = {}
    with exact_fp32(dtype):
        for side, conv in (("ours", functional.conv2d), ("ref", F.conv2d)):

            def forward(i, conv=conv):
                with torch.no_grad():
                    conv(sets[i][0], sets[i][1], **kwargs)

            def forward_backward(i, conv=conv):
                x, w, dy, _ = sets[i]
                torch.autograd.grad(conv(x, w, **kwargs), (x, w), dy)

            results[side] = (timed(forward), timed(forward_backward))
        copy_ms, copy_kernel_ms = timed(copy)
        # what ``auto`` ran (measured in benchmark mode, as above): the no-gradient forward's
        # algorithm, and the training call's (chosen on forward + backward)
        with torch.no_grad():
            inference = functional.explain(sets[0][0], sets[0][1], **kwargs)
        training = functional.explain(sets[0][0], sets[0][1], **kwargs)
    algo = _named(inference)
    if training.algo != inference.algo or training.config != inference.config:
        algo += f"; training: {_named(training)}"
    ref_name = "cuDNN " + ("NCHW" if fmt == torch.contiguous_format else "NHWC")
    if DEVICE != "cuda":
        ref_name = "PyTorch CPU"
    # bytes a pass must move: forward x in, y out; dX reads dy, writes dx; dW reads dy and x
    work = {"fwd": x_bytes + y_bytes, "fwd+bwd": 3 * x_bytes + 3 * y_bytes}
    for i, op in enumerate(("fwd", "fwd+bwd")):
        (ours_ms, ours_kernel), (ref_ms, ref_kernel) = results["ours"][i], results["ref"][i]
        of_copy = None
        if op == "fwd":  # both on kernel time, or both per call
            kernel = ours_kernel is not None and copy_kernel_ms is not None
            ours_t, copy_t = (ours_kernel, copy_kernel_ms) if kernel else (ours_ms, copy_ms)
            of_copy = (work[op] / ours_t) / (2 * x_bytes / copy_t)
        yield Row(
            suite="depthwise", case=case.name, shape=case.shape, op=op, dtype=name,
            ours_ms=ours_ms, ref_ms=ref_ms, ref_name=ref_name, work=work[op], unit="GB/s",
            ours_kernel_ms=ours_kernel, ref_kernel_ms=ref_kernel, of_copy=of_copy,
            note=f"auto: {algo}",
            extra=dict(copy_ms=copy_ms, copy_kernel_ms=copy_kernel_ms, layout=str(fmt),
                       auto=algo),
        )  # fmt: skip


def _named(picked) -> str:
    """An ``explain`` answer's algorithm, with its implicit-GEMM tiles if it has them."""
    return picked.algo + (f" {implicit_gemm.Config(*picked.config)}" if picked.config else "")


@suite("depthwise")
def depthwise_suite(opts: Options) -> Iterator[Row]:
    """Depthwise and small-group conv2d vs cuDNN, with the forward's share of the copy's
    bandwidth."""
    for case in CASES:
        if not opts.wants(case.name):
            continue
        case = case.quick() if opts.quick else case
        for name in opts.dtypes:
            yield from _rows(case, name, opts)
