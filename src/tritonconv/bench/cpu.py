"""Suite ``cpu``: CPU tensors, ``algo="auto"`` (PyTorch's CPU convolution, ``aten.py``) against
calling ``torch.nn.functional`` directly: what tritonconv's validation, plans and semantics
(exact integers, formats) cost a CPU user (issue 14's target: within 2x). Wall-clock medians on
the CPU whatever GPU the machine has; forward, and forward + backward for floats. unfold and
fold (``aten.unfold``/``aten.fold``) against ``F.unfold``/``F.fold`` on 2-D windows: floats
only, PyTorch having no integer unfold/fold to compare with."""

from __future__ import annotations

import functools
import statistics
import time
from collections.abc import Iterator

import torch
import torch.nn.functional as F

from .. import functional
from . import Options, Row, suite

# name, (ours, reference), input, weight, kwargs
CASES = [
    ("conv2d_3x3", (functional.conv2d, F.conv2d), (8, 32, 28, 28), (64, 32, 3, 3), {"padding": 1}),
    ("conv2d_1x1", (functional.conv2d, F.conv2d), (8, 64, 14, 14), (128, 64, 1, 1), {}),
    (
        "conv2d_dw7x7",
        (functional.conv2d, F.conv2d),
        (4, 64, 28, 28),
        (64, 1, 7, 7),
        {"padding": 3, "groups": 64},
    ),
    ("conv1d_k3", (functional.conv1d, F.conv1d), (4, 64, 1024), (64, 64, 3), {"padding": 1}),
    (
        "conv3d_3x3x3",
        (functional.conv3d, F.conv3d),
        (2, 16, 8, 16, 16),
        (16, 16, 3, 3, 3),
        {"padding": 1},
    ),
    (
        "conv_transpose2d_4x4s2",
        (functional.conv_transpose2d, F.conv_transpose2d),
        (4, 64, 16, 16),
        (64, 32, 4, 4),
        {"stride": 2, "padding": 1},
    ),
]


# name, (ours, reference), image shape (N, C, H, W), window
WINDOW_CASES = [
    (
        "unfold2d_3x3",
        (functional.unfold, F.unfold),
        (8, 64, 56, 56),
        {"kernel_size": 3, "padding": 1},
    ),
    (
        "unfold2d_4x4s2",
        (functional.unfold, F.unfold),
        (8, 64, 28, 28),
        {"kernel_size": 4, "padding": 1, "stride": 2},
    ),
    ("fold2d_3x3", (functional.fold, F.fold), (8, 64, 56, 56), {"kernel_size": 3, "padding": 1}),
    (
        "fold2d_4x4s2",
        (functional.fold, F.fold),
        (8, 64, 28, 28),
        {"kernel_size": 4, "padding": 1, "stride": 2},
    ),
]


def _pair_ms(ours, ref, reps: int) -> tuple[float, float]:
    """Wall-clock medians (ms) of two callables timed in alternation (a noisy machine then
    slows both alike)."""
    for _ in range(2):
        ours()
        ref()
    times: tuple[list, list] = ([], [])
    for _ in range(reps):
        for fn, out in ((ours, times[0]), (ref, times[1])):
            start = time.perf_counter()
            fn()
            out.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times[0]), statistics.median(times[1])


def _step(fn, x, w, kwargs):
    """One forward and backward (input and weight gradients)."""
    out = fn(x, w, **kwargs)
    torch.autograd.grad(out, (x, w), torch.ones_like(out))


def _step1(fn, x):
    """One forward and backward of a one-input function."""
    out = fn(x)
    torch.autograd.grad(out, (x,), torch.ones_like(out))


def _int64_reference(ref):
    """PyTorch's own integer convolution, computed in int64 as ours is (then wrapped)."""
    return lambda a, b, **k: ref(a.long(), b.long(), **k).to(a.dtype)


@suite("cpu")
def cpu_suite(opts: Options) -> Iterator[Row]:
    reps = 5 if opts.quick else 20
    for name, (ours, ref), x_shape, w_shape, kwargs in CASES:
        if not opts.wants(name):
            continue
        if opts.quick:
            x_shape = (1, *x_shape[1:])
        for dtype_name in opts.dtypes:
            dtype = getattr(torch, dtype_name)
            floating = dtype.is_floating_point
            if floating:
                x, w = torch.randn(x_shape, dtype=dtype), torch.randn(w_shape, dtype=dtype)
            else:
                x = torch.randint(-8, 8, x_shape, dtype=dtype)
                w = torch.randint(-8, 8, w_shape, dtype=dtype)
            common = dict(
                suite="cpu", case=name, shape=f"{tuple(x_shape)} * {tuple(w_shape)}",
                dtype=dtype_name, ref_name="torch.nn.functional (CPU)",
            )  # fmt: skip
            ref_fn = ref if floating else _int64_reference(ref)
            ours_ms, ref_ms = _pair_ms(
                functools.partial(ours, x, w, **kwargs),
                functools.partial(ref_fn, x, w, **kwargs),
                reps,
            )
            yield Row(**common, op="fwd", ours_ms=ours_ms, ref_ms=ref_ms)
            if not floating:
                continue
            xg, wg = x.clone().requires_grad_(), w.clone().requires_grad_()
            ours_ms, ref_ms = _pair_ms(
                functools.partial(_step, ours, xg, wg, kwargs),
                functools.partial(_step, ref, xg, wg, kwargs),
                reps,
            )
            yield Row(**common, op="fwd+bwd", ours_ms=ours_ms, ref_ms=ref_ms)
    yield from _window_rows(opts, reps)


def _window_rows(opts: Options, reps: int) -> Iterator[Row]:
    """unfold/fold against ``F.unfold``/``F.fold``: floats, forward and forward + backward."""
    for name, (ours, ref), image, window in WINDOW_CASES:
        if not opts.wants(name):
            continue
        if opts.quick:
            image = (1, *image[1:])
        for dtype_name in opts.dtypes:
            dtype = getattr(torch, dtype_name)
            if not dtype.is_floating_point:
                continue
            x = torch.randn(image, dtype=dtype)
            kwargs = dict(window)
            if ours is functional.fold:  # fold's input: the blocks of that image
                x = F.unfold(x, **window)
                kwargs["output_size"] = image[2:]
            ours_fn = functools.partial(ours, **kwargs)
            ref_fn = functools.partial(ref, **kwargs)
            described = ", ".join(f"{k}={v}" for k, v in window.items())
            common = dict(
                suite="cpu", case=name, shape=f"{tuple(x.shape)}, {described}", dtype=dtype_name,
                ref_name="torch.nn.functional (CPU)",
            )  # fmt: skip
            ours_ms, ref_ms = _pair_ms(
                functools.partial(ours_fn, x), functools.partial(ref_fn, x), reps
            )
            yield Row(**common, op="fwd", ours_ms=ours_ms, ref_ms=ref_ms)
            xg = x.clone().requires_grad_()
            ours_ms, ref_ms = _pair_ms(
                functools.partial(_step1, ours_fn, xg), functools.partial(_step1, ref_fn, xg), reps
            )
            yield Row(**common, op="fwd+bwd", ours_ms=ours_ms, ref_ms=ref_ms)
