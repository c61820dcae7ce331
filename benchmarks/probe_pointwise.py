"""Probe (issues 11/14): the ResNet-50 / MobileNetV3 1x1 convolutions and 3-channel stems,
bf16 channels-last batch 32, by kernel time (CUDA-graph replay): cuDNN against each of our
algorithms that takes them (``implicit_gemm``; ``im2col_gemm``, whose 1x1 stride-1 case is one
cuBLAS GEMM per pass; ``direct`` for the stems), forward and forward + backward, so ``auto``'s
rule for these layers rests on a measurement.

    PYTHONPATH=src python benchmarks/probe_pointwise.py [--json FILE]
"""

from __future__ import annotations

import argparse
import json

import torch
import torch.nn.functional as F

import tritonconv
from tritonconv.bench import Options, kernel_ms

# (name, input NCHW, weight, stride, padding)
LAYERS = [
    ("r50_l1_c1", (32, 64, 56, 56), (64, 64, 1, 1), 1, 0),
    ("r50_l1_c3", (32, 64, 56, 56), (256, 64, 1, 1), 1, 0),
    ("r50_l1_1_c1", (32, 256, 56, 56), (64, 256, 1, 1), 1, 0),
    ("r50_l2_c3", (32, 128, 28, 28), (512, 128, 1, 1), 1, 0),
    ("r50_l2_1_c1", (32, 512, 28, 28), (128, 512, 1, 1), 1, 0),
    ("r50_l3_c3", (32, 256, 14, 14), (1024, 256, 1, 1), 1, 0),
    ("r50_l3_1_c1", (32, 1024, 14, 14), (256, 1024, 1, 1), 1, 0),
    ("r50_l4_c3", (32, 512, 7, 7), (2048, 512, 1, 1), 1, 0),
    ("r50_l4_1_c1", (32, 2048, 7, 7), (512, 2048, 1, 1), 1, 0),
    ("mbv3_f5_c3", (32, 120, 28, 28), (40, 120, 1, 1), 1, 0),
    ("mbv3_f9_c1", (32, 80, 14, 14), (184, 80, 1, 1), 1, 0),
    ("mbv3_f9_c3", (32, 184, 14, 14), (80, 184, 1, 1), 1, 0),
    ("r50_stem", (32, 3, 224, 224), (64, 3, 7, 7), 2, 3),
    ("mbv3_stem", (32, 3, 224, 224), (16, 3, 3, 3), 2, 1),
]


def measure(name, shape, wshape, stride, padding, opts) -> dict:
    cl = torch.channels_last
    x = torch.randn(shape, device="cuda", dtype=torch.bfloat16).to(memory_format=cl)
    w = (torch.randn(wshape, device="cuda") * 0.05).to(torch.bfloat16).to(memory_format=cl)
    xg, wg = x.clone().requires_grad_(), w.clone().requires_grad_()
    dy = torch.randn_like(F.conv2d(x, w, None, stride, padding))
    algos = ["implicit_gemm", "im2col_gemm"] + (["direct"] if shape[1] <= 4 else [])
    row = {"layer": name}

    def fwd(conv):
        return lambda i: conv(x, w, None, stride, padding)

    def both(conv):
        return lambda i: torch.autograd.grad(conv(xg, wg, None, stride, padding), (xg, wg), dy)

    torch_conv = F.conv2d
    row["cudnn"] = (kernel_ms(fwd(torch_conv), 1, opts), kernel_ms(both(torch_conv), 1, opts))
    reference = both(torch_conv)(0)
    for algo in algos:

        def conv(*a, algo=algo):
            return tritonconv.conv2d(*a, algo=algo)

        got = both(conv)(0)
        err = max(
            ((g.float() - r.float()).abs().max() / r.float().abs().max()).item()
            for g, r in zip(got, reference)
        )
        row[algo] = (kernel_ms(fwd(conv), 1, opts), kernel_ms(both(conv), 1, opts), err)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    torch.backends.cudnn.benchmark = True
    opts = Options(reps=20)
    rows = []
    for layer in LAYERS:
        row = measure(*layer, opts)
        rows.append(row)
        cf, cb = row["cudnn"]
        text = f"{row['layer']:12} cuDNN fwd {cf:.4f} fwd+bwd {cb:.4f}"
        for algo in ("implicit_gemm", "im2col_gemm", "direct"):
            if algo in row:
                f, b, e = row[algo]
                text += f" | {algo} {f:.4f} ({cf / f:.2f}x) {b:.4f} ({cb / b:.2f}x) err {e:.0e}"
        print(text, flush=True)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
