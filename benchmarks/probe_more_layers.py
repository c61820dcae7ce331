"""Probe (issue 12): tiles for suite ``more``'s 3-D layers below cuDNN, and a column split.

Suite ``more`` (session 23, H100, bf16 channels_last_3d, kernel time) left three 3-D layers
under cuDNN: (2+1)D's 1×3×3 64 → 144 forward 0.68×, the 3-D UNet's 2×2×2 stride-2 transposed
convolution forward 0.64×, the 3×3×3 64 → 64 forward 0.93× and backward 0.90×. This probe
times, on each, the heuristic's tiles against every 16-bit tuning configuration and a few
more (kernel time, CUDA-graph replay), cuDNN beside them, each result checked against the
heuristic's. For destination widths a power-of-two tile pads (144 channels: three 64-wide
column tiles compute 192), it also times a **column split**: the first 128 columns as one
launch with 128-wide tiles and the remaining 16 as a second launch with 16-wide ones (the
weight, bias and output sliced along the destination channels), which computes no padding
column but reads the input twice.

    PYTHONPATH=src python benchmarks/probe_more_layers.py [--json FILE] [layer ...]
"""

from __future__ import annotations

import argparse
import functools
import math
import os
import sys

import torch
import torch.nn.functional as F

from tritonconv.geometry import make_geometry
from tritonconv.ops import implicit_gemm as ig
from tritonconv.ops.common import empty_like_format

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from probe_small_wave import time_or_run, write_rows

C = ig.Config
# name: (N, C, spatial, K, kernel, stride, padding, transposed)
LAYERS = {
    "r2plus1d_1x3x3_144": (8, 64, (16, 56, 56), 144, (1, 3, 3), 1, (0, 1, 1), False),
    "unet3d_up_2x2x2": (2, 128, (16, 32, 32), 64, (2, 2, 2), 2, (0, 0, 0), True),
    "video_3x3x3_64": (8, 64, (16, 56, 56), 64, (3, 3, 3), 1, (1, 1, 1), False),
    # r2plus1d_18's second stage: 288 channels, 256 + 32 (session 24)
    "r2plus1d_1x3x3_288": (8, 128, (8, 28, 28), 288, (1, 3, 3), 1, (0, 1, 1), False),
    # a 3x3 64 -> 192 layer: 128 + 64 columns against three 64-wide tiles (session 25)
    "conv_3x3_192": (32, 64, (1, 56, 56), 192, (1, 3, 3), 1, (0, 1, 1), False),
    # DCGAN's 4x4 s2 p1 transposed convolution (suite more): its input gradient is this
    # forward, dy (N16 C128 32x32) -> dx (C256 16x16) (session 25)
    "dcgan_dx_4x4_s2": (16, 128, (1, 32, 32), 256, (1, 4, 4), (1, 2, 2), (0, 1, 1), False),
}
EXTRA = [C(256, 64, 64, 8, 3), C(128, 64, 64, 4, 3), C(64, 64, 64, 4, 3), C(256, 128, 64, 8, 3),
         C(128, 128, 64, 8, 3), C(128, 64, 128, 4, 3), C(256, 64, 128, 8, 3),
         C(128, 64, 32, 4, 4),
         # 256-row tiles sharing an SM (session 25: two programs rather than one)
         C(256, 64, 64, 8, 2), C(256, 64, 32, 8, 4), C(256, 64, 32, 8, 3), C(256, 64, 64, 4, 2)]  # fmt: skip
# Column tiles of 128 + 16/32 channels, a second accumulator (BLOCK_N2, session 25): for
# destination widths 128 does not divide
TAIL = [C(128, 128, 64, 8, 3, 16), C(128, 128, 64, 4, 3, 16), C(128, 128, 32, 8, 4, 16),
        C(64, 128, 64, 4, 3, 16), C(256, 128, 64, 8, 3, 16), C(128, 128, 64, 8, 2, 16),
        C(128, 128, 64, 8, 3, 32), C(128, 64, 64, 4, 3, 16), C(128, 128, 64, 8, 3, 64)]  # fmt: skip
# (main part's tiles, rest's tiles) of the column split
SPLITS = [
    (C(256, 128, 64, 8, 3), C(128, 16, 64, 4, 3)),
    (C(128, 128, 64, 8, 3), C(128, 16, 64, 4, 3)),
    (C(256, 128, 64, 8, 3), C(256, 16, 64, 4, 3)),
    (C(128, 128, 32, 8, 4), C(128, 16, 64, 4, 4)),
]


def _column_split(x, w, out, geometry, main: int, configs) -> None:
    """``out`` = conv(x, w) as two launches over output channels [0, main) and [main, K)."""
    for part, cfg in zip((slice(0, main), slice(main, None)), configs, strict=True):
        ig._launch_conv(x, w[part], None, out[:, part], geometry, 1, False, cfg)


def probe(name: str, shape, device) -> dict:
    n, c, spatial, k, kernel, stride, pad, transposed = shape
    gpu = device == "cuda"
    if not gpu:  # toy sizes: a check of the script under the interpreter
        n, c, k, spatial = 1, 16, k // 8, tuple(max(s // 8, 2) for s in spatial)
    dtype, cl = torch.bfloat16, torch.channels_last_3d
    strides = (stride,) * 3 if isinstance(stride, int) else stride
    if transposed:  # the convolution whose input gradient this is: k -> c channels
        geometry = make_geometry([s * stride for s in spatial], kernel, strides, pad, pad, (1,) * 3)
        x = torch.randn(n, c, *spatial, device=device, dtype=dtype).to(memory_format=cl)
        w = torch.randn(c, k, *kernel, device=device, dtype=dtype).to(memory_format=cl)
        like = torch.empty(n, k, *geometry.input, device=device, dtype=dtype)
        like = like.to(memory_format=cl)
        ref = functools.partial(F.conv_transpose3d, x, w, stride=stride)
        heuristic = ig.launch_config(
            dtype, n, c, k, geometry.input, strides, kernel, 1, True, device
        )

        def ours(cfg):
            return ig.conv_grad_input(x, w, like, geometry, 1, config=cfg)

    else:
        geometry = make_geometry(spatial, kernel, strides, pad, pad, (1,) * 3)
        x = torch.randn(n, c, *spatial, device=device, dtype=dtype).to(memory_format=cl)
        w = torch.randn(k, c, *kernel, device=device, dtype=dtype) / (c * math.prod(kernel)) ** 0.5
        w = w.to(memory_format=cl)
        ref = functools.partial(F.conv3d, x, w, stride=strides, padding=pad)
        heuristic = ig.launch_config(
            dtype, n, c, k, geometry.output, strides, kernel, 1, False, device
        )

        def ours(cfg):
            return ig.conv_forward(x, w, None, geometry, 1, cfg)

    want = ours(heuristic).float()
    scale = want.abs().max().item()
    cudnn = time_or_run(ref)
    print(f"{name}: cuDNN {cudnn:.1f} µs, heuristic {heuristic}", flush=True)
    timed = {}
    configs = [heuristic, *ig.TUNING_CONFIGS["16-bit"], *EXTRA, *(TAIL if k % 128 else ())]
    toy = [C(32, 16, 16, 4, 1), C(32, 16, 16, 4, 1, 16)]
    for cfg in dict.fromkeys(C(*c) for c in configs) if gpu else toy:
        try:
            got = ours(cfg)
        except Exception as error:  # a configuration that does not fit
            print(f"  {cfg}: {type(error).__name__}")
            continue
        err = (got.float() - want).abs().max().item() / scale
        timed[str(cfg)] = time_or_run(functools.partial(ours, cfg))
        print(f"  {cfg}{'*' if cfg == heuristic else ''} {timed[str(cfg)]:.1f} µs"
              f" ({cudnn / timed[str(cfg)]:.2f}x)  err {err:.1e}", flush=True)  # fmt: skip
    main = k // 128 * 128 if gpu else k // 2
    if not transposed and 0 < main < k:
        for configs in SPLITS if gpu else [(ig.Config(32, 16, 16, 4, 1),) * 2]:
            out = empty_like_format((n, k, *geometry.output), x)
            run = functools.partial(_column_split, x, w, out, geometry, main, configs)
            try:
                run()
            except Exception as error:
                print(f"  split {configs}: {type(error).__name__}")
                continue
            err = (out.float() - want).abs().max().item() / scale
            label = f"split {main}|{k - main} {configs[0]} + {configs[1]}"
            timed[label] = time_or_run(run)
            print(f"  {label} {timed[label]:.1f} µs ({cudnn / timed[label]:.2f}x)  err {err:.1e}",
                  flush=True)  # fmt: skip
    return {"layer": name, "cudnn_us": cudnn, "heuristic": str(heuristic), "us": timed}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("layers", nargs="*")
    ap.add_argument("--json")
    args = ap.parse_args()
    torch.backends.cudnn.benchmark = True
    device = "cuda" if torch.cuda.is_available() else "cpu"
    rows = [probe(name, shape, device) for name, shape in LAYERS.items()
            if name in (args.layers or LAYERS)]  # fmt: skip
    write_rows(args.json, rows, device)


if __name__ == "__main__":
    main()
