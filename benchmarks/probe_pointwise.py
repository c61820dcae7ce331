"""Probe (issues 11/14): the ResNet-50 / MobileNetV3 1x1 convolutions and 3-channel stems,
bf16 channels-last batch 32, by kernel time (CUDA-graph replay): cuDNN against each of our
algorithms that takes them (``implicit_gemm``; ``im2col_gemm``, whose 1x1 stride-1 case is one
cuBLAS GEMM per pass; ``direct`` for the stems), forward and forward + backward, so ``auto``'s
rule for these layers rests on a measurement.

    PYTHONPATH=src python benchmarks/probe_pointwise.py [--json FILE] [--layers a,b] [--wall]
"""

from __future__ import annotations

import argparse
import json

import torch
import torch.nn.functional as F

import tritonconv
from tritonconv.bench import Options, kernel_ms, loop_us

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
    ("convnext_stem", (32, 3, 224, 224), (96, 3, 4, 4), 4, 0),
    # few output channels (auto: direct for <= 8, im2col_gemm for 9-15): session 10's models
    # suite lost 1 ms a step on UNet's head, 0.6 ms per call on EfficientNet's SE squeeze
    ("unet_head", (8, 64, 256, 256), (2, 64, 1, 1), 1, 0),
    ("eff_se_fc1", (32, 240, 1, 1), (10, 240, 1, 1), 1, 0),
    ("eff_se_fc1_b", (32, 96, 1, 1), (4, 96, 1, 1), 1, 0),
]


def measure(name, shape, wshape, stride, padding, opts, wall=False) -> dict:
    cl = torch.channels_last
    x = torch.randn(shape, device="cuda", dtype=torch.bfloat16).to(memory_format=cl)
    w = (torch.randn(wshape, device="cuda") * 0.05).to(torch.bfloat16).to(memory_format=cl)
    xg, wg = x.clone().requires_grad_(), w.clone().requires_grad_()
    dy = torch.randn_like(F.conv2d(x, w, None, stride, padding))
    algos = ["implicit_gemm", "im2col_gemm"]
    algos += ["direct"] if shape[1] <= 4 or wshape[0] <= 16 else []
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
        if wall:
            row[algo] += (step_us(xg, wg, dy, stride, padding, conv),)
    if wall:
        row["cudnn"] += (step_us(xg, wg, dy, stride, padding, torch_conv),)
    return row


def step_us(x, w, dy, stride, padding, conv, calls: int = 200) -> float:
    """Per-call wall of a training step's convolution (forward, backward into ``.grad``)."""

    def step():
        x.grad = w.grad = None
        conv(x, w, None, stride, padding).backward(dy)

    return loop_us(step, calls)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", default=None)
    parser.add_argument("--layers", default="", help="comma-separated names (default: all)")
    parser.add_argument("--wall", action="store_true", help="also each training-step wall")
    args = parser.parse_args()
    wanted = set(filter(None, args.layers.split(",")))
    torch.backends.cudnn.benchmark = True
    opts = Options(reps=20)
    rows = []
    for layer in LAYERS:
        if wanted and layer[0] not in wanted:
            continue
        row = measure(*layer, opts, wall=args.wall)
        rows.append(row)
        cf, cb = row["cudnn"][:2]
        text = f"{row['layer']:12} cuDNN fwd {cf:.4f} fwd+bwd {cb:.4f}"
        text += f" step {row['cudnn'][2]:.0f} µs" if args.wall else ""
        for algo in ("implicit_gemm", "im2col_gemm", "direct"):
            if algo in row:
                f, b, e = row[algo][:3]
                text += f" | {algo} {f:.4f} ({cf / f:.2f}x) {b:.4f} ({cb / b:.2f}x) err {e:.0e}"
                text += f" step {row[algo][3]:.0f} µs" if args.wall else ""
        print(text, flush=True)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
