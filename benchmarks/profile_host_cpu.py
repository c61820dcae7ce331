"""The Python cost of one convolution call, on a CPU machine (issue 14's host gap).

Runs a small depthwise layer through tritonconv's kernels under Triton's interpreter once (so
its plans and launch plans are recorded), then replaces the interpreter's kernel execution
with a no-op: what remains of each call is tritonconv's Python (plan lookup, autograd,
launch-plan replay, allocation) and PyTorch's autograd, the part of the per-call time the
GPU host pays too (there Triton's C launcher replaces the no-op). Prints µs per call of the
no-gradient forward and of forward + ``autograd.grad``, then a cProfile of the second.

    TRITON_INTERPRET=1 TRITONCONV_CPU_KERNELS=1 PYTHONPATH=src \\
        python benchmarks/profile_host_cpu.py [--calls N] [--top K]

Session 33 (this machine, Python 3.11, runs differ by up to 1.5x): 18.5-28.7 µs a forward,
96-147 µs forward + backward.
"""

from __future__ import annotations

import argparse
import time

import torch

import tritonconv as tc
from tritonconv import launch
from tritonconv.bench import profile_calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args()
    if not launch.INTERPRETER:
        raise SystemExit("run under TRITON_INTERPRET=1 TRITONCONV_CPU_KERNELS=1 (see above)")
    C = 32
    x = torch.randn(8, C, 7, 7).to(memory_format=torch.channels_last).requires_grad_()
    w = torch.randn(C, 1, 7, 7).requires_grad_()
    dy = torch.randn(8, C, 7, 7).to(memory_format=torch.channels_last)

    def forward():
        with torch.no_grad():
            tc.conv2d(x, w, None, 1, 3, 1, C)

    def forward_backward():
        torch.autograd.grad(tc.conv2d(x, w, None, 1, 3, 1, C), (x, w), dy)

    forward(), forward_backward()  # record the plans with the kernels run
    launch._interpret = lambda *a, **k: None
    for name, fn in (("forward", forward), ("forward + backward", forward_backward)):
        for _ in range(50):
            fn()
        start = time.perf_counter()
        for _ in range(args.calls):
            fn()
        print(f"{name}: {(time.perf_counter() - start) / args.calls * 1e6:.1f} µs a call")
    profile_calls(forward_backward, args.calls, args.top)


if __name__ == "__main__":
    main()
