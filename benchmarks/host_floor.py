"""The host cost of each piece of one training-step convolution on the GPU machine (issue 10):
per-call wall (µs) of an empty autograd Function and of a native-autograd op (the engine's
floor), an allocation, one implicit-GEMM launch replayed from its plan, Triton's C launcher
alone (the argument tuple a replay keeps), our forward without gradients, and ours and
``F.conv2d`` forward + backward, on a ResNet-50 3x3 layer at batch 1 (kernels far shorter than
the host work, so the loop measures the host); last, ours with every compiled launch replaced
by a no-op (what is left is our Python and the allocations).

    PYTHONPATH=src python benchmarks/host_floor.py
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

import tritonconv as tc
from tritonconv import launch
from tritonconv.bench import loop_us
from tritonconv.bench.host import floor_steps, launches_replaced
from tritonconv.geometry import make_geometry
from tritonconv.ops import implicit_gemm as ig


def main() -> None:
    cl = torch.channels_last
    x = torch.randn(1, 64, 14, 14, device="cuda", dtype=torch.bfloat16).to(memory_format=cl)
    w = torch.randn(64, 64, 3, 3, device="cuda", dtype=torch.bfloat16).to(memory_format=cl)
    xg, wg = x.clone().requires_grad_(), w.clone().requires_grad_()
    dy = torch.randn_like(x)
    geometry = make_geometry((14, 14), (3, 3), (1, 1), (1, 1), (1, 1), (1, 1))
    out = torch.empty_like(x)

    def step(conv):
        def run():
            xg.grad = wg.grad = None
            conv(xg, wg, None, 1, 1).backward(dy)

        return run

    # The forward's compiled launch: Triton's C launcher called with the argument tuple its
    # replays keep (recorded, replayed once: its compiled kernel kept; replayed lean: its
    # arguments kept, the tensors' addresses as ints)
    tc.clear_caches()
    for _ in range(3):
        ig._launch_conv(x, w, None, out, geometry, 1, False, None)
    kept = list(launch._ready.entries.values())  # (this launch's only: caches cleared)

    rows = {
        "torch.empty_strided": lambda: torch.empty_strided(
            (1, 64, 14, 14), (12544, 1, 896, 64), device="cuda", dtype=torch.bfloat16
        ),
        "one launch (plan replay)": lambda: ig._launch_conv(
            x, w, None, out, geometry, 1, False, None
        ),
        # (None where nothing is kept: another Triton than 3.6, or a launch hook installed)
        "C launcher, kept arguments": (lambda: kept[-1][0](*kept[-1][1])) if kept else None,
        "ours fwd, no grad": lambda: tc.conv2d(x, w, None, 1, 1),
        "F.conv2d fwd, no grad": lambda: F.conv2d(x, w, None, 1, 1),
        **floor_steps(xg, wg, dy),
        "ours fwd+bwd": step(tc.conv2d),
        "F.conv2d fwd+bwd": step(F.conv2d),
    }

    def show(name):
        us = "     n/a" if rows[name] is None else f"{loop_us(rows[name]):8.1f}"
        print(f"{name:28} {us} µs", flush=True)

    with torch.no_grad():
        for name in list(rows)[:5]:
            show(name)
    for name in list(rows)[5:]:
        show(name)
    with launches_replaced(lambda launcher, name: lambda *args: None):
        for name in ("ours fwd+bwd",):
            print(f"{name + ', no launches':28} {loop_us(rows[name]):8.1f} µs", flush=True)
        with torch.no_grad():
            ours = loop_us(rows["ours fwd, no grad"])
            print(f"{'ours fwd, no grad, no launch':28} {ours:8.1f} µs")


if __name__ == "__main__":
    main()
