"""Per-kernel GPU time of one training step of a dense-suite layer, ours and cuDNN's.

For each case of the ``dense`` suite (bf16 channels-last, as that suite runs it): the forward
and the backward of ``tritonconv.conv2d(algo="implicit_gemm")`` and of ``F.conv2d``, repeated,
under torch.profiler; every kernel's mean µs per step, by name. It says which of the backward's
kernels (input gradient, weight gradient, the split sum) holds a layer back, with times that do
not depend on how a benchmark subtracts a forward from a forward + backward.

    PYTHONPATH=src python benchmarks/profile_dense_kernels.py [--json FILE] [case ...]
"""

from __future__ import annotations

import argparse
import collections
import json

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

import tritonconv
from tritonconv.bench.dense import CASES

STEPS = 20


def _kernels(fn) -> dict[str, float]:
    """{kernel name: mean µs per call of ``fn``} over STEPS calls (after a warm-up)."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(STEPS):
            fn()
        torch.cuda.synchronize()
    totals = collections.Counter()
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            totals[event.name[:60]] += event.device_time / STEPS
    return dict(totals.most_common())


def measure(case) -> dict:
    cl = torch.channels_last
    x = torch.randn(case.input, device="cuda", dtype=torch.bfloat16).to(memory_format=cl)
    w = torch.randn(case.weight, device="cuda", dtype=torch.bfloat16) / 30
    w = w.to(memory_format=cl)
    x.requires_grad_(), w.requires_grad_()
    out = {}
    for side, conv in (
        ("ours", lambda x, w: tritonconv.conv2d(x, w, algo="implicit_gemm", **case.kwargs)),
        ("cudnn", lambda x, w: F.conv2d(x, w, **case.kwargs)),
    ):
        dy = torch.randn_like(conv(x, w))

        def step(conv=conv, dy=dy):
            torch.autograd.grad(conv(x, w), (x, w), dy)

        out[side] = _kernels(step)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cases", nargs="*")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    torch.backends.cudnn.benchmark = True
    rows = {}
    for case in CASES:
        if args.cases and case.name not in args.cases:
            continue
        rows[case.name] = measure(case)
        print(f"\n{case.name} ({case.shape()})")
        for side, kernels in rows[case.name].items():
            total = sum(kernels.values())
            print(f"  {side:5} total {total:7.1f} µs")
            for name, us in kernels.items():
                print(f"      {us:7.1f}  {name}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
