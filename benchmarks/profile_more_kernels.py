"""Where suite ``more``'s layers spend their GPU time, kernel by kernel (issue 12).

For each chosen case of ``tritonconv.bench.more`` (full size, bf16 unless ``--dtype``), one
forward and one backward (every input's gradient) of ours (``algo="auto"``) and of PyTorch
under ``torch.profiler`` after warm-up: each CUDA kernel's device time per pass (the mean
over ``profile_dense_kernels.STEPS`` passes), ours and cuDNN's side by side. The suite's rows
give the totals; this says which kernel of a pass holds a layer back (the input gradient or
the weight gradient, a relayout, a reduction).

    PYTHONPATH=src python benchmarks/profile_more_kernels.py [--case gan_up_4x4 ...]
        [--dtype bfloat16]
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

from tritonconv.bench.more import CASES

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from profile_dense_kernels import _kernels


def _passes(case, dtype):
    """(name, function) of each timed pass: ours and PyTorch's forward, then backward."""
    tensors = case.make(False, dtype)
    leaves = [t for t in tensors if isinstance(t, torch.Tensor) and t.requires_grad]
    out = {}
    for side, fn in (("ours", case.ours), ("torch", case.ref)):
        y = fn(*tensors)
        dy = torch.randn_like(y)

        def forward(fn=fn):
            with torch.no_grad():
                fn(*tensors)

        def backward(y=y, dy=dy):  # (the graph kept: the backward alone, pass after pass)
            torch.autograd.grad(y, leaves, dy, retain_graph=True)

        out[side] = (forward, backward)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", action="append", help="only this case (repeatable)")
    parser.add_argument("--dtype", default="bfloat16")
    args = parser.parse_args()
    dtype = getattr(torch, args.dtype)
    torch.backends.cudnn.benchmark = True
    for case in CASES:
        if args.case and case.name not in args.case:
            continue
        passes = _passes(case, dtype)
        for index, label in enumerate(("forward", "backward")):
            print(f"\n{case.name} ({case.shape}), {label}, {args.dtype}: device µs per pass")
            for side in ("ours", "torch"):
                kernels = _kernels(passes[side][index])
                total = sum(kernels.values())
                print(f"  {side:5} total {total:8.1f}")
                for name, us in sorted(kernels.items(), key=lambda kv: -kv[1])[:6]:
                    print(f"        {us:8.1f}  {name[:90]}")


if __name__ == "__main__":
    main()
