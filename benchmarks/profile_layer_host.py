"""Where one training-step convolution's host time goes on the GPU machine (issues 10/14).

A ResNet-50 layer (bf16 channels-last, batch 32, a channels-last weight as ``convert`` and
``model.to(memory_format=channels_last)`` leave it), called as a model's training step calls
it: forward, ``backward`` into the leaves' ``.grad`` (set to None before each step, as
``zero_grad`` does). Prints the per-call wall of ours and ``F.conv2d`` (synchronised once at
the end of the loop), the GPU kernels of one step of each (torch.profiler), and the top of a
cProfile of ours.

    PYTHONPATH=src python benchmarks/profile_layer_host.py [--layer 3x3|1x1] [--calls N]
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F

import tritonconv as tc
from tritonconv.bench import kernel_times, loop_us, profile_calls

LAYERS = {
    "3x3": ((32, 256, 14, 14), (256, 256, 3, 3), 1),
    "1x1": ((32, 1024, 14, 14), (256, 1024, 1, 1), 0),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layer", default="3x3", choices=sorted(LAYERS))
    parser.add_argument("--calls", type=int, default=300)
    args = parser.parse_args()
    xs, ws, pad = LAYERS[args.layer]
    cl = torch.channels_last
    x = torch.randn(xs, device="cuda", dtype=torch.bfloat16).to(memory_format=cl)
    x.requires_grad_()
    w = torch.randn(ws, device="cuda", dtype=torch.bfloat16).to(memory_format=cl)
    w.requires_grad_()
    dy = torch.randn_like(F.conv2d(x, w, None, 1, pad))

    def step(conv):
        def run():
            x.grad = w.grad = None
            conv(x, w, None, 1, pad).backward(dy)

        return run

    ours, theirs = step(tc.conv2d), step(F.conv2d)

    runs = [("ours", ours), ("F.conv2d", theirs), ("ours", ours)]
    for name, fn in runs:
        print(f"{name:18} fwd+bwd {loop_us(fn, args.calls):8.1f} µs/call")
    print("dW layout:", w.grad.stride(), "weight:", w.stride())
    for name, fn in runs[:2]:
        print(f"{name} kernels:")
        for kernel, count, us in kernel_times(fn):
            print(f"   {count}x {us:8.1f} µs  {kernel[:90]}")
    ours()
    profile_calls(ours, args.calls, 25)


if __name__ == "__main__":
    main()
