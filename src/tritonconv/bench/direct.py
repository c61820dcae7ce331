"""Suite ``direct``: depthwise and direct convolution against cuDNN, and exact int64 convolution.

Cases (``anchors-h100.md``): dw3x3_56, dw31x31_32, seed_1ch_112, seed_3ch_512, each through
``tritonconv.conv2d(algo="auto")`` (depthwise kernels for the first three, the direct kernel
for seed_3ch_512; the row's note says which). Forward and backward (dX + dW) are timed in both
NCHW and channels-last, ours and cuDNN (``cudnn.benchmark=True``, TF32 off for fp32), and every
row is compared with cuDNN's *best* layout. int64 rows time our GPU convolution against
PyTorch's CPU int64 convolution and against cuDNN fp32 on the same shapes.

Rates: GB/s (bytes of input + output, the floor of a memory-bound pass) for the 3x3 cases,
TFLOP/s (2 per multiply-add of the convolution, padding taps included) for the 31x31 case.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterator

import torch
import torch.nn.functional as F

from .. import functional
from ..testing import DEVICE
from . import Options, Row, input_sets, suite, time_ms
from .conv import BY_NAME, ConvCase, exact_fp32, time_conv_pair

CASES = [BY_NAME[name] for name in ("dw3x3_56", "dw31x31_32", "seed_1ch_112", "seed_3ch_512")]
LAYOUTS = {"NCHW": torch.contiguous_format, "NHWC": torch.channels_last}


def _auto(x, w, **kwargs):
    return functional.conv2d(x, w, **kwargs)


def _algo(case: ConvCase, dtype) -> str:
    x = torch.empty(case.input, dtype=dtype, device="meta")
    w = torch.empty(case.weight, dtype=dtype, device="meta")
    args = functional.check_conv(x, w, None, case.stride, case.padding, case.dilation, case.groups)
    return functional._choose_algo("auto", x, args)


def _work(case: ConvCase, itemsize: int) -> tuple[float, float, str]:
    """(forward work, backward work, unit) of one call."""
    if max(case.weight[2:]) > 3:
        return case.flops(), 2 * case.flops(), "TFLOP/s"
    x_bytes = torch.Size(case.input).numel() * itemsize
    y_bytes = torch.Size(case.output()).numel() * itemsize
    # backward: dX reads dy, writes dx; dW reads dy and x
    return x_bytes + y_bytes, 2 * y_bytes + 2 * x_bytes, "GB/s"


def _float_rows(case: ConvCase, name: str, opts: Options) -> Iterator[Row]:
    dtype = getattr(torch, name)
    timings = {
        layout: time_conv_pair(case, dtype, opts, _auto, memory_format=fmt)
        for layout, fmt in LAYOUTS.items()
    }
    best_f = min(LAYOUTS, key=lambda layout: timings[layout][1])
    best_b = min(LAYOUTS, key=lambda layout: timings[layout][3])
    ref = "cuDNN" if DEVICE == "cuda" else "torch CPU"
    work_f, work_b, unit = _work(case, torch.empty((), dtype=dtype).element_size())
    common = dict(suite="direct", case=case.name, shape=case.shape(), dtype=name)
    for layout, (ours_f, _, ours_b, _) in timings.items():
        note = f"ours {layout}, algo={_algo(case, dtype)}"
        yield Row(
            **common, op=f"fwd {layout}", ours_ms=ours_f, ref_ms=timings[best_f][1],
            ref_name=f"{ref} best ({best_f})", work=work_f, unit=unit, note=note,
        )  # fmt: skip
        yield Row(
            **common, op=f"bwd (dX+dW) {layout}", ours_ms=ours_b, ref_ms=timings[best_b][3],
            ref_name=f"{ref} best ({best_b})", work=work_b, unit=unit, note=note,
        )  # fmt: skip


def _cpu_ms(fn, reps: int) -> float:
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def _int64_rows(case: ConvCase, opts: Options) -> Iterator[Row]:
    def make():
        x = torch.randint(-8, 8, case.input, device=DEVICE)
        return x, torch.randint(-8, 8, case.weight, device=DEVICE)

    sets = input_sets(make, torch.Size(case.input).numel() * 8)
    kwargs = case.kwargs
    ours = time_ms(lambda i: functional.conv2d(*sets[i], **kwargs), len(sets), opts)
    x_cpu, w_cpu = (t.cpu() for t in sets[0])
    cpu = _cpu_ms(lambda: F.conv2d(x_cpu, w_cpu, **kwargs), 1 if opts.quick else 3)
    with exact_fp32(torch.float32):
        floats = [
            (x.float().to(memory_format=fmt), w.float())
            for x, w in sets
            for fmt in LAYOUTS.values()
        ]
        with torch.no_grad():
            cudnn = min(
                time_ms(lambda i, j=j: F.conv2d(*floats[2 * i + j], **kwargs), len(sets), opts)
                for j in range(len(LAYOUTS))
            )
    work, _, unit = _work(case, 8)
    common = dict(suite="direct", case=case.name, shape=case.shape(), dtype="int64", op="fwd")
    ref = "cuDNN fp32 best layout" if DEVICE == "cuda" else "torch CPU fp32"
    yield Row(**common, ours_ms=ours, ref_ms=cpu, ref_name="torch CPU int64", work=work, unit=unit)
    yield Row(**common, ours_ms=ours, ref_ms=cudnn, ref_name=ref, work=work, unit=unit)


def _quick(case: ConvCase) -> ConvCase:
    """A toy version for the interpreter: 8x8 images, 2 channels, the kernel capped at 7x7
    (still the banded kernel's side of ``BAND_MIN_KW``)."""
    _, C, _, _ = case.input
    K, _, R, _ = case.weight
    k = min(R, 7)
    channels, groups = min(C, 2), min(case.groups, 2)
    shape = (min(K, 2), channels // groups, k, k)
    return ConvCase(case.name, (1, channels, 8, 8), shape, padding=k // 2, groups=groups)


@suite("direct")
def direct_suite(opts: Options) -> Iterator[Row]:
    """Depthwise/direct conv2d against cuDNN's best layout, and exact int64 convolution."""
    for case in CASES:
        if not opts.wants(case.name):
            continue
        case = _quick(case) if opts.quick else case
        for name in opts.dtypes:
            yield from _float_rows(case, name, opts)
        yield from _int64_rows(case, opts)
