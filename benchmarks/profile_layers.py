"""Where a call's time goes: host microseconds per layer, and GPU time per kernel.

    PYTHONPATH=src python benchmarks/profile_layers.py

Host: median wall time of back-to-back calls of each layer of the unfold path (public function,
autograd Function, custom op, launcher, bare kernel launch) on a tiny input, so the GPU work is
negligible. GPU: torch.profiler's kernel totals for one conv2d forward and backward of a few
suite cases.
"""

import statistics
import time

import torch

import tritonconv as tc
from tritonconv import autograd, library
from tritonconv.bench.conv import BY_NAME
from tritonconv.geometry import check_unfold
from tritonconv.ops import im2col as im2col_ops


def host_us(fn, n=300):
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    torch.cuda.synchronize()
    return statistics.median(times) * 1e6


def host_table():
    x = torch.randn(1, 1, 16, 16, device="cuda")
    args = check_unfold(x, 3, 1, 1, 1)
    g = args.geometry
    k, d, p, s = [3, 3], [1, 1], [1, 1], [1, 1]
    cols = torch.empty(1, 9, 256, device="cuda")
    layout = im2col_ops.unfold_layout(9, 256)
    rows = [
        ("tc.unfold (public)", lambda: tc.unfold(x, 3, padding=1)),
        ("check_unfold only", lambda: check_unfold(x, 3, 1, 1, 1)),
        ("autograd.Unfold.apply", lambda: autograd.Unfold.apply(x, k, d, p, s)),
        ("torch.ops.tritonconv.unfold", lambda: torch.ops.tritonconv.unfold(x, k, d, p, s)),
        ("library.unfold (eager op)", lambda: library.unfold(x, k, d, p, s)),
        ("ops.unfold (launcher)", lambda: im2col_ops.unfold(x, g)),
        ("ops.im2col into buffer", lambda: im2col_ops.im2col(x, cols, layout, g, 9, 0, 256)),
        ("torch.empty", lambda: torch.empty(1, 9, 256, device="cuda")),
        ("F.unfold", lambda: torch.nn.functional.unfold(x, 3, padding=1)),
        (
            "F.conv2d 1x1x16x16",
            lambda: torch.nn.functional.conv2d(x, torch.ones(1, 1, 3, 3, device="cuda"), padding=1),
        ),
    ]
    print(f"{'layer':34} host µs/call")
    for name, fn in rows:
        print(f"{name:34} {host_us(fn):10.1f}")


def gpu_table(
    names=("r50_3x3_56", "r50_3x3_28", "dw3x3_56", "dw31x31_32", "seed_1ch_112", "seed_3ch_512"),
):
    torch.backends.cuda.matmul.allow_tf32 = False
    for name in names:
        case = BY_NAME[name]
        x = torch.randn(case.input, device="cuda", requires_grad=True)
        w = torch.randn(case.weight, device="cuda", requires_grad=True)
        y = tc.conv2d(x, w, **case.kwargs)
        gy = torch.randn_like(y)
        torch.autograd.grad(y, (x, w), gy)
        torch.cuda.synchronize()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            y = tc.conv2d(x, w, **case.kwargs)
            torch.autograd.grad(y, (x, w), gy)
            torch.cuda.synchronize()
        print(f"--- {name}: GPU kernels, one forward + backward")
        for evt in sorted(prof.key_averages(), key=lambda e: -e.device_time_total)[:8]:
            print(f"  {evt.device_time_total / evt.count:9.1f} µs x{evt.count}  {evt.key[:90]}")


def host_profile(calls=2000):
    """cProfile of the public tc.unfold on a tiny input: which Python functions cost."""
    import cProfile
    import pstats

    x = torch.randn(1, 1, 16, 16, device="cuda")
    for _ in range(20):
        tc.unfold(x, 3, padding=1)
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(calls):
        tc.unfold(x, 3, padding=1)
    profiler.disable()
    torch.cuda.synchronize()
    pstats.Stats(profiler).sort_stats("tottime").print_stats(14)


def crop_table():
    x = torch.randn(32, 256, 64, 64, device="cuda", requires_grad=True)
    y = tc.crop(x, (32, 240, 57, 56), axis=1, offset=(10, 3, 5))
    gy = torch.randn_like(y)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            y = tc.crop(x, (32, 240, 57, 56), axis=1, offset=(10, 3, 5))
            torch.autograd.grad(y, x, gy)
            x.detach()[:, 10:250, 3:60, 5:61].contiguous()
        torch.cuda.synchronize()
    print("--- crop anchor: GPU kernels (per call)")
    for evt in sorted(prof.key_averages(), key=lambda e: -e.device_time_total)[:5]:
        print(f"  {evt.device_time_total / evt.count:9.1f} µs x{evt.count}  {evt.key[:90]}")


if __name__ == "__main__":
    host_profile()
    host_table()
    crop_table()
    gpu_table()
