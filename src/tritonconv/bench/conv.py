"""Suites ``conv`` (im2col+GEMM convolution vs cuDNN) and ``im2col`` (unfold/fold vs PyTorch).

The cases are those of ``anchors-h100.md``. Forward and backward (dX + dW) are timed for ours
and cuDNN (``cudnn.benchmark=True``) on the same inputs; fp32 rows run with TF32 off in both
cuBLAS and cuDNN. ``Options.quick`` shrinks every case to a toy size (the CPU path).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .. import functional
from ..testing import DEVICE
from . import Options, Row, input_sets, suite, time_ms

#: What F.conv2d runs on this device (the reference every conv row is timed against).
CONV_REF = "cuDNN NCHW" if DEVICE == "cuda" else "torch CPU"


@dataclass(frozen=True)
class ConvCase:
    name: str
    input: tuple[int, int, int, int]
    weight: tuple[int, int, int, int]
    stride: int = 1
    padding: int = 0
    dilation: int = 1
    groups: int = 1

    @property
    def kwargs(self) -> dict:
        return dict(
            stride=self.stride, padding=self.padding, dilation=self.dilation, groups=self.groups
        )

    def shape(self) -> str:
        N, C, H, W = self.input
        K, _, R, S = self.weight
        extra = "".join(
            f" {label}{v}"
            for label, v, default in (
                ("s", self.stride, 1),
                ("p", self.padding, 0),
                ("dil", self.dilation, 1),
                ("g", self.groups, 1),
            )
            if v != default
        )
        return f"N{N} C{C} {H}×{W} → K{K} {R}×{S}{extra}"

    def output(self) -> tuple[int, int, int, int]:
        N, _, H, W = self.input
        K, _, R, S = self.weight
        oh = (H + 2 * self.padding - self.dilation * (R - 1) - 1) // self.stride + 1
        ow = (W + 2 * self.padding - self.dilation * (S - 1) - 1) // self.stride + 1
        return N, K, oh, ow

    def flops(self) -> float:
        N, K, OH, OW = self.output()
        _, c_per_group, R, S = self.weight
        return 2.0 * N * K * OH * OW * c_per_group * R * S

    def quick(self) -> ConvCase:
        """A toy version with the same kernel geometry (the interpreter's scale)."""
        _, C, H, _ = self.input
        K, _, R, S = self.weight
        groups = min(self.groups, 2)
        c = min(C, 2 * groups) if self.groups == 1 else groups
        k = min(K, 2 * groups)
        ext = self.dilation * (max(R, S) - 1) + 1
        side = max(ext - 2 * self.padding, min(H, 12))
        return ConvCase(
            self.name,
            (1, c, side, side),
            (k, c // groups, R, S),
            self.stride,
            self.padding,
            self.dilation,
            groups,
        )


CASES = [
    ConvCase("r50_3x3_56", (32, 64, 56, 56), (64, 64, 3, 3), padding=1),
    ConvCase("r50_1x1_56", (32, 64, 56, 56), (256, 64, 1, 1)),
    ConvCase("r50_3x3_28", (32, 128, 28, 28), (128, 128, 3, 3), padding=1),
    ConvCase("r50_3x3_14", (32, 256, 14, 14), (256, 256, 3, 3), padding=1),
    ConvCase("r50_3x3_7", (32, 512, 7, 7), (512, 512, 3, 3), padding=1),
    ConvCase("r50_stem_7x7s2", (32, 3, 224, 224), (64, 3, 7, 7), stride=2, padding=3),
    ConvCase("dw3x3_56", (32, 144, 56, 56), (144, 1, 3, 3), padding=1, groups=144),
    ConvCase("dw31x31_32", (16, 256, 32, 32), (256, 1, 31, 31), padding=15, groups=256),
    ConvCase("dil2_3x3_64", (16, 256, 64, 64), (256, 256, 3, 3), padding=2, dilation=2),
    ConvCase("grp32_3x3_28", (32, 256, 28, 28), (256, 8, 3, 3), padding=1, groups=32),
    ConvCase("seed_1ch_112", (1, 1, 112, 112), (1, 1, 3, 3), padding=1),
    ConvCase("seed_3ch_512", (1, 3, 512, 512), (1, 3, 3, 3), padding=1),
]
BY_NAME = {c.name: c for c in CASES}
#: Cases with an F.unfold/F.fold anchor (non-grouped).
UNFOLD_CASES = [c for c in CASES if c.groups == 1]


@contextmanager
def exact_fp32(dtype: torch.dtype):
    """TF32 off for fp32 rows (cuBLAS and cuDNN), cudnn.benchmark on."""
    old = (
        torch.backends.cuda.matmul.allow_tf32,
        torch.backends.cudnn.allow_tf32,
        torch.backends.cudnn.benchmark,
    )
    if dtype == torch.float32:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    try:
        yield
    finally:
        (
            torch.backends.cuda.matmul.allow_tf32,
            torch.backends.cudnn.allow_tf32,
            torch.backends.cudnn.benchmark,
        ) = old


def _cases(opts: Options, cases) -> Iterator[ConvCase]:
    for case in cases:
        if opts.wants(case.name):
            yield case.quick() if opts.quick else case


def _make_inputs(case: ConvCase, dtype, memory_format=torch.contiguous_format, grad=False):
    def make():
        x = torch.randn(case.input, device=DEVICE, dtype=dtype).to(memory_format=memory_format)
        w = torch.randn(case.weight, device=DEVICE, dtype=dtype) / (case.weight[1] * 9) ** 0.5
        return x.requires_grad_(grad), w.requires_grad_(grad)

    nbytes = (torch.Size(case.input).numel() + torch.Size(case.weight).numel()) * 4
    return input_sets(make, nbytes)


def time_conv_pair(case: ConvCase, dtype, opts: Options, ours_fn, memory_format=None):
    """(ours fwd, ref fwd, ours bwd, ref bwd) in ms for ``ours_fn(x, w, **kwargs)`` vs F.conv2d."""
    fmt = memory_format or torch.contiguous_format
    sets = _make_inputs(case, dtype, fmt, grad=True)
    kwargs = case.kwargs
    results = []
    with exact_fp32(dtype):
        for fn in (ours_fn, F.conv2d):

            def forward(i, fn=fn):
                with torch.no_grad():
                    fn(*sets[i], **kwargs)

            fwd = time_ms(forward, len(sets), opts)
            outs = [fn(x, w, **kwargs) for x, w in sets]
            grads = [torch.randn_like(y) for y in outs]

            def backward(i, outs=outs, grads=grads):
                torch.autograd.grad(outs[i], sets[i], grads[i], retain_graph=True)

            results.append((fwd, time_ms(backward, len(sets), opts)))
    (ours_f, ours_b), (ref_f, ref_b) = results
    return ours_f, ref_f, ours_b, ref_b


def _gemm(x, w, **kwargs):
    return functional.conv2d(x, w, algo="im2col_gemm", **kwargs)


@suite("conv")
def conv_suite(opts: Options) -> Iterator[Row]:
    """im2col+GEMM conv2d against cuDNN, forward and backward, every case."""
    for name in opts.dtypes:
        dtype = getattr(torch, name)
        for case in _cases(opts, CASES):
            ours_f, ref_f, ours_b, ref_b = time_conv_pair(case, dtype, opts, _gemm)
            flops = case.flops()
            common = dict(suite="conv", case=case.name, shape=case.shape(), dtype=name)
            yield Row(
                **common, op="fwd", ours_ms=ours_f, ref_ms=ref_f, ref_name=CONV_REF,
                work=flops, unit="TFLOP/s",
            )  # fmt: skip
            yield Row(
                **common, op="bwd (dX+dW)", ours_ms=ours_b, ref_ms=ref_b, ref_name=CONV_REF,
                work=2 * flops, unit="TFLOP/s",
            )  # fmt: skip


def _im2col_rows(case: ConvCase, name: str, opts: Options) -> Iterator[Row]:
    dtype = getattr(torch, name)
    window = dict(
        kernel_size=case.weight[2:],
        dilation=case.dilation,
        padding=case.padding,
        stride=case.stride,
    )
    xs = input_sets(
        lambda: torch.randn(case.input, device=DEVICE, dtype=dtype),
        torch.Size(case.input).numel() * 4,
    )
    cols = [F.unfold(x, **window) for x in xs]
    size = case.input[2:]
    moved = xs[0].numel() * xs[0].element_size() + cols[0].numel() * cols[0].element_size()
    common = dict(suite="im2col", case=case.name, shape=case.shape(), dtype=name)
    ours = time_ms(lambda i: functional.unfold(xs[i], **window), len(xs), opts)
    ref = time_ms(lambda i: F.unfold(xs[i], **window), len(xs), opts)
    yield Row(
        **common, op="unfold", ours_ms=ours, ref_ms=ref, ref_name="F.unfold", work=moved,
        unit="GB/s",
    )  # fmt: skip
    ours = time_ms(lambda i: functional.fold(cols[i], size, **window), len(cols), opts)
    ref = time_ms(lambda i: F.fold(cols[i], size, **window), len(cols), opts)
    yield Row(
        **common, op="fold", ours_ms=ours, ref_ms=ref, ref_name="F.fold", work=moved, unit="GB/s"
    )


@suite("im2col")
def im2col_suite(opts: Options) -> Iterator[Row]:
    """unfold vs F.unfold and fold vs F.fold; GB/s counts bytes read + written."""
    for name in opts.dtypes:
        for case in _cases(opts, UNFOLD_CASES):
            yield from _im2col_rows(case, name, opts)
