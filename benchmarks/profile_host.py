"""Where the host time of one eager call goes (issue 10).

    python benchmarks/profile_host.py [--stub] [--profile] [--calls N]

Times the host-overhead cases of ``tritonconv bench --suite host`` (batch-1 layers) per call,
forward only and forward + backward, with the GPU kept busy-free (a synchronisation only at the
end of each timed loop, so the figure is the host's cost per call once the GPU keeps up).
``--stub`` replaces every kernel launch by a no-op: what remains is tritonconv's own Python
(useful on a CPU machine, where the interpreter would dominate). ``--profile`` prints the
top of a cProfile of the forward calls.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time

import torch

import tritonconv as tc
from tritonconv.bench.host import HOST_CASES, make_case
from tritonconv.ops import crop, depthwise, direct, im2col


def stub_launches() -> None:
    for module in (crop, depthwise, direct, im2col):
        module.launch = lambda *args, **meta: None


def per_call_us(fn, calls: int) -> float:
    fn()
    sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
    sync()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    sync()
    return (time.perf_counter() - start) / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stub", action="store_true")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--calls", type=int, default=200)
    opts = parser.parse_args()
    if opts.stub:
        stub_launches()
    for case in HOST_CASES:
        profile_case(case, opts)


def profile_case(case, opts) -> None:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    x, w, b, kwargs = make_case(case, device, requires_grad=False)
    fwd = per_call_us(lambda: tc.conv2d(x, w, b, **kwargs), opts.calls)
    xg, wg, bg, _ = make_case(case, device, requires_grad=True)
    dy = torch.ones_like(tc.conv2d(xg.detach(), wg.detach(), bg.detach(), **kwargs))

    def fwd_bwd():
        tc.conv2d(xg, wg, bg, **kwargs).backward(dy)

    both = per_call_us(fwd_bwd, max(10, opts.calls // 4))
    print(f"{case.name:28s} fwd {fwd:7.1f} µs   fwd+bwd {both:7.1f} µs")
    if opts.profile:
        profiler = cProfile.Profile()
        profiler.enable()
        for _ in range(opts.calls):
            tc.conv2d(x, w, b, **kwargs)
        profiler.disable()
        pstats.Stats(profiler).sort_stats("tottime").print_stats(12)


if __name__ == "__main__":
    main()
