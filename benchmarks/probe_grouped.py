"""Probe (issues 11 and 13): how many groups a program of the implicit GEMM should run.

Grouped 3x3 layers of ResNeXt-50 (4, 8, 16 and 32 channels a group), RegNet-Y-800MF (16) and
the dense suite's groups-32 layer, bf16 channels-last, stride 1. For each: cuDNN's forward,
input gradient and weight gradient alone, ours with the forward/input-gradient pack width
``PACK_CHANNELS`` at 16 (the rule before session 21), 32 and 64, and our weight gradient with
``WGRAD_PACK_CHANNELS`` at 0 (no packing, before session 21), 16, 32, 64 and 128. Every
variant's result is checked against the first one's (relative max difference). Kernel time by
CUDA-graph replay (``bench.kernel_ms``), µs.

    PYTHONPATH=src python benchmarks/probe_grouped.py [--json FILE] [--dtype float32] [layer ...]

``--dtype float32``: fp32 with TF32 allowed on both sides; the weight gradient's sweep is then
``WGRAD_PACK_CHANNELS_TF32`` (its ``bf16x3`` products).
"""

from __future__ import annotations

import argparse
import json

import torch

from tritonconv.bench import Options, kernel_ms, overridden
from tritonconv.geometry import make_geometry
from tritonconv.ops import implicit_gemm as ig

# name: (N, C, H, K, groups), 3x3 padding 1 stride 1, square images
LAYERS = {
    "resnext_4x32_56": (32, 128, 56, 128, 32),
    "grp32_3x3_28": (32, 256, 28, 256, 32),
    "resnext_16x32_14": (32, 512, 14, 512, 32),
    "resnext_32x32_7": (32, 1024, 7, 1024, 32),
    "regnet_16x4_56": (32, 64, 56, 64, 4),
    "regnet_16x9_28": (32, 144, 28, 144, 9),
    "regnet_16x20_14": (32, 320, 14, 320, 20),
    "regnet_16x49_7": (32, 784, 7, 784, 49),
}
FORWARD_PACKS = (16, 32, 64)
WGRAD_PACKS = (0, 16, 32, 64, 128)


def _diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.float() - b.float()).abs().max() / b.float().abs().max()).item()


def measure(name: str, opts: Options, dtype=torch.bfloat16) -> dict:
    N, C, H, K, g = LAYERS[name]
    cl = torch.channels_last
    x = torch.randn(N, C, H, H, device="cuda", dtype=dtype).to(memory_format=cl)
    w = torch.randn(K, C // g, 3, 3, device="cuda", dtype=dtype) / (9 * C / g) ** 0.5
    w = w.to(memory_format=cl)
    dy = torch.randn(N, K, H, H, device="cuda", dtype=dtype).to(memory_format=cl)
    geometry = make_geometry((H, H), (3, 3), (1, 1), (1, 1), (1, 1), (1, 1))

    def cudnn(mask):
        return lambda i: torch.ops.aten.convolution_backward(
            dy, x, w, None, (1, 1), (1, 1), (1, 1), False, [0, 0], g, mask
        )

    row = dict(layer=name, shape=f"N{N} C{C} {H}x{H} -> K{K} 3x3 g{g}")
    row["cudnn_fwd"] = kernel_ms(lambda i: torch.conv2d(x, w, None, 1, 1, 1, g), 1, opts)
    row["cudnn_dgrad"] = kernel_ms(cudnn([True, False, False]), 1, opts)
    row["cudnn_wgrad"] = kernel_ms(cudnn([False, True, False]), 1, opts)
    ref = {}
    for channels in FORWARD_PACKS:
        with overridden(ig, PACK_CHANNELS=channels, WIDE_PACK_CHANNELS=0):  # (no wide rule)
            pack = ig.group_pack(x.dtype, C // g, K // g, g, N * H * H, x.device)
            fwd = lambda i: ig.conv_forward(x, w, None, geometry, g)  # noqa: E731
            dgrad = lambda i: ig.conv_grad_input(dy, w, x, geometry, g)  # noqa: E731
            results = fwd(0), dgrad(0)
            ref.setdefault("fwd", results[0])
            ref.setdefault("dgrad", results[1])
            row[f"fwd_{channels}"] = dict(
                pack=pack,
                ms=kernel_ms(fwd, 1, opts),
                diff=_diff(results[0], ref["fwd"]),
            )
            row[f"dgrad_{channels}"] = dict(
                pack=pack,
                ms=kernel_ms(dgrad, 1, opts),
                diff=_diff(results[1], ref["dgrad"]),
            )
    cudnn_dw = cudnn([False, True, False])(0)[1]
    for channels in WGRAD_PACKS:
        knob = "WGRAD_PACK_CHANNELS" if dtype != torch.float32 else "WGRAD_PACK_CHANNELS_TF32"
        with overridden(ig, **{knob: channels}):
            pack = ig.wgrad_pack(x.dtype, C // g, K // g, g)
            wgrad = lambda i: ig.conv_grad_weight(dy, x, w.shape, geometry, g)  # noqa: E731
            result = wgrad(0)
            row[f"wgrad_{channels}"] = dict(
                pack=pack, ms=kernel_ms(wgrad, 1, opts), diff=_diff(result, cudnn_dw)
            )
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("layers", nargs="*")
    parser.add_argument("--json", default=None)
    parser.add_argument("--dtype", default="bfloat16")
    args = parser.parse_args()
    dtype = getattr(torch, args.dtype)
    torch.backends.cudnn.allow_tf32 = True
    opts = Options(reps=40)
    torch.backends.cudnn.benchmark = True
    rows = []
    us = lambda ms: f"{1000 * ms:7.1f}"  # noqa: E731
    for name in args.layers or LAYERS:
        row = measure(name, opts, dtype)
        rows.append(row)
        print(f"\n{name}: {row['shape']}", flush=True)
        for op in ("fwd", "dgrad", "wgrad"):
            packs = WGRAD_PACKS if op == "wgrad" else FORWARD_PACKS
            base = row[f"cudnn_{op}"]
            cells = [
                f"{c}:p{row[f'{op}_{c}']['pack']} {us(row[f'{op}_{c}']['ms'])}"
                f" ({base / row[f'{op}_{c}']['ms']:.2f}x, d {row[f'{op}_{c}']['diff']:.0e})"
                for c in packs
            ]
            print(f"  {op:6} cuDNN {us(base)} | " + " | ".join(cells), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
