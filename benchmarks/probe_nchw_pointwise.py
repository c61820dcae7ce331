"""Probe: 1x1 convolutions on NCHW inputs (PyTorch's default layout), each algorithm vs cuDNN.

The implicit GEMM reads channels-last rows, so an NCHW input is first transposed (one pass
over it), while ``im2col_gemm``'s pointwise case is a batched cuBLAS GEMM on the tensors as
they lie (``out[n] = W @ x[n]``). Per layer and dtype: forward and forward + backward, kernel
time (CUDA-graph replay) and per-call wall time, for cuDNN, ``implicit_gemm`` and
``im2col_gemm``, with each algorithm's max relative difference from cuDNN.

    PYTHONPATH=src python benchmarks/probe_nchw_pointwise.py [--dtype bfloat16] [--json FILE]
"""

from __future__ import annotations

import argparse
import json

import torch
import torch.nn.functional as F

import tritonconv
from tritonconv.bench import Options, kernel_ms, time_ms

# (name, input shape, output channels)
LAYERS = [
    ("pw_96_384_56", (32, 96, 56, 56), 384),
    ("r50_1x1_64_256_56", (32, 64, 56, 56), 256),
    ("r50_1x1_1024_256_14", (32, 1024, 14, 14), 256),
    ("mbv3_120_40_28", (32, 120, 28, 28), 40),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    dtype = getattr(torch, args.dtype)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    opts = Options(reps=30)
    sides = {
        "cudnn": F.conv2d,
        "implicit_gemm": lambda x, w: tritonconv.conv2d(x, w, algo="implicit_gemm"),
        "im2col_gemm": lambda x, w: tritonconv.conv2d(x, w, algo="im2col_gemm"),
    }
    rows = []
    for name, shape, k in LAYERS:
        if device == "cpu":  # (a check of the script: toy sizes)
            shape, k = (2, shape[1] // 8, 5, 5), max(8, k // 8)
        x = torch.randn(shape, device=device, dtype=dtype).requires_grad_()
        w = torch.randn(k, shape[1], 1, 1, device=device, dtype=dtype) / shape[1] ** 0.5
        w = w.requires_grad_()
        dy = torch.randn(shape[0], k, *shape[2:], device=device, dtype=dtype)
        # (no graph of these inputs may stay alive: it would invalidate the captures below)
        y = F.conv2d(x, w)
        want = [t.detach().float() for t in (y, *torch.autograd.grad(y, (x, w), dy))]
        del y
        row = {"layer": name}
        for side, fn in sides.items():

            def forward(i, fn=fn, x=x, w=w):
                with torch.no_grad():
                    fn(x, w)

            def both(i, fn=fn, x=x, w=w, dy=dy):
                torch.autograd.grad(fn(x, w), (x, w), dy)

            y = fn(x, w)
            got = [y.detach(), *torch.autograd.grad(y, (x, w), dy)]
            del y
            diff = max(
                ((g.float() - r).abs().max() / r.abs().max()).item()
                for g, r in zip(got, want, strict=True)
            )
            row[side] = dict(
                fwd_kernel=kernel_ms(forward, 1, opts), both_kernel=kernel_ms(both, 1, opts),
                fwd_wall=time_ms(forward, 1, opts), both_wall=time_ms(both, 1, opts), diff=diff,
            )  # fmt: skip
        rows.append(row)
        ref = row["cudnn"]
        cells = []
        for side in sides:
            r = row[side]
            parts = []
            for key in ("fwd_kernel", "both_kernel"):
                ms = r[key]
                parts.append("—" if ms is None or ref[key] is None else
                             f"{1000 * ms:6.1f} ({ref[key] / ms:.2f})")  # fmt: skip
            cells.append(f"{side} {' / '.join(parts)} wall {1000 * r['fwd_wall']:5.0f}/"
                         f"{1000 * r['both_wall']:5.0f} d {r['diff']:.0e}")  # fmt: skip
        print(f"{name:20} " + " | ".join(cells), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
