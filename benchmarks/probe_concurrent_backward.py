"""Probe (session 26): a backward's input and weight gradients on two streams, A/B.

The implicit GEMM's backward launches the input gradient, then the weight gradient, on one
stream. Where each kernel fills less than the machine (DCGAN's transposed 4x4 s2: ~15 µs each,
about one wave of 64x64 tiles; ResNet-50's 7x7 and 14x14 layers), the two could overlap. This
times each layer's backward (bf16 channels-last, CUDA-graph replay, kernel time) three ways:
the library's (one stream), the same two ops with the weight gradient forked onto a second
stream and joined back, and cuDNN's ``convolution_backward`` for both gradients; and each
gradient alone.

    PYTHONPATH=src python benchmarks/probe_concurrent_backward.py [--json FILE]
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

from tritonconv import library as ops

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from probe_small_wave import time_or_run, write_rows

# name: (N, C_in, spatial, C_out, kernel, stride, padding, transposed); a transposed layer's
# weight is (C_in, C_out, *kernel)
LAYERS = {
    "dcgan_up_4x4_s2": (16, 256, (16, 16), 128, (4, 4), 2, 1, True),
    "up_3x3_s2_op1": (16, 128, (32, 32), 64, (3, 3), 2, 1, True),
    "r50_3x3_7": (32, 512, (7, 7), 512, (3, 3), 1, 1, False),
    "r50_3x3_14": (32, 256, (14, 14), 256, (3, 3), 1, 1, False),
    "r50_3x3_28": (32, 128, (28, 28), 128, (3, 3), 1, 1, False),
    "r50_1x1_7": (32, 2048, (7, 7), 512, (1, 1), 1, 0, False),
    "r2p1d_temporal_576": (8, 576, (4, 14, 14), 256, (3, 1, 1), 1, (1, 0, 0), False),
    "conv3d_3x3x3_64": (8, 64, (16, 56, 56), 64, (3, 3, 3), 1, 1, False),
    "conv1d_k3_512": (16, 512, (4096,), 512, (3,), 1, 1, False),
}


def _side_stream(cache={}):  # noqa: B006 (one side stream per device, made once)
    device = torch.cuda.current_device()
    if device not in cache:
        cache[device] = torch.cuda.Stream()
    return cache[device]


def probe(name, shape, device) -> dict:
    n, c, spatial, k, kernel, stride, pad, transposed = shape
    rank = len(spatial)
    if device == "cpu":  # a check of the script under the interpreter, toy sizes
        n, c, k, spatial = 1, 8, 8, tuple(min(s, 6) for s in spatial)
    cl = {1: torch.contiguous_format, 2: torch.channels_last, 3: torch.channels_last_3d}[rank]
    bf16 = torch.bfloat16
    stride = [stride] * rank
    pad = list(pad) if isinstance(pad, tuple) else [pad] * rank
    dil = [1] * rank
    x = torch.randn(n, c, *spatial, device=device, dtype=bf16).to(memory_format=cl)
    w_shape = (c, k, *kernel) if transposed else (k, c, *kernel)
    w = (torch.randn(*w_shape, device=device, dtype=bf16) / 20).to(memory_format=cl)
    if transposed:
        y = ops.conv_transpose_implicit_gemm(
            x, w, None, stride, pad, pad, dil, 1,
            [(s - 1) * st - 2 * p + kk for s, st, p, kk in zip(spatial, stride, pad, kernel)], [],
        )  # fmt: skip
    else:
        y = ops.conv_implicit_gemm(x, w, None, stride, pad, pad, dil, 1, [])
    dy = torch.randn_like(y)
    window = (stride, pad, pad, dil, 1, [])

    # the two gradients as the autograd functions compute them (autograd.py)
    if transposed:

        def grad_x():
            return ops.conv_implicit_gemm(dy, w, None, *window)

        def grad_w():
            return ops.conv_implicit_gemm_backward(x, dy, w, *window, [False, True, False])[1]

        def cudnn():
            return torch.ops.aten.convolution_backward(
                dy, x, w, None, stride, pad, dil, True, [0] * rank, 1, [True, True, False]
            )
    else:

        def grad_x():
            return ops.conv_implicit_gemm_backward(dy, x, w, *window, [True, False, False])[0]

        def grad_w():
            return ops.conv_implicit_gemm_backward(dy, x, w, *window, [False, True, False])[1]

        def cudnn():
            return torch.ops.aten.convolution_backward(
                dy, x, w, None, stride, pad, dil, False, [0] * rank, 1, [True, True, False]
            )

    def serial():
        return grad_x(), grad_w()

    def forked():
        if device == "cpu":
            return serial()
        main, side = torch.cuda.current_stream(), _side_stream()
        side.wait_stream(main)
        with torch.cuda.stream(side):
            gw = grad_w()
        gx = grad_x()
        main.wait_stream(side)
        return gx, gw

    row = {"layer": name}
    for label, fn in (("cudnn", cudnn), ("dx", grad_x), ("dw", grad_w), ("serial", serial),
                      ("forked", forked)):  # fmt: skip
        row[label] = min(time_or_run(fn) for _ in range(2 if device == "cuda" else 1))
    (sx, sw), (fx, fw) = serial(), forked()
    row["same"] = bool(torch.equal(sx, fx) and torch.equal(sw, fw))
    print(f"{name:20} cuDNN {row['cudnn']:7.1f} | dx {row['dx']:6.1f} dw {row['dw']:6.1f} | "
          f"serial {row['serial']:7.1f} ({row['cudnn'] / row['serial']:.2f}x) | forked "
          f"{row['forked']:7.1f} ({row['cudnn'] / row['forked']:.2f}x) | same {row['same']}",
          flush=True)  # fmt: skip
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json")
    ap.add_argument("--layers", nargs="*", default=list(LAYERS))
    args = ap.parse_args()
    torch.backends.cudnn.benchmark = True
    device = "cuda" if torch.cuda.is_available() else "cpu"
    rows = [probe(name, LAYERS[name], device) for name in args.layers]
    write_rows(args.json, rows, device)


if __name__ == "__main__":
    main()
