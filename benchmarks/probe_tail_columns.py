"""Probe (session 25): the second accumulator (``tail_columns``) on input gradients, A/B.

The rule was measured on forwards (``probe_more_layers.py``); the input gradient takes it too
wherever its destination, the forward's input, is 144, 288 or 576 channels wide: r2plus1d's
temporal 3x1x1 convolutions (144 -> 64, 288 -> 128, 576 -> 256) and the spatial 1x3x3 ones
that read the temporal ones' output. Kernel time (CUDA-graph replay) of each input gradient
with the rule on and off, in alternating rounds, cuDNN's input gradient beside them, results
compared between the two.

    PYTHONPATH=src python benchmarks/probe_tail_columns.py [--json FILE]
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

import tritonconv
from tritonconv.bench import overridden
from tritonconv.geometry import make_geometry
from tritonconv.ops import implicit_gemm as ig

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from probe_small_wave import time_or_run, write_rows

# name: (N, C_in, spatial, C_out, kernel, padding) of the forward convolution; dx has C_in
LAYERS = {
    "temporal_144_64_b2": (2, 144, (16, 56, 56), 64, (3, 1, 1), (1, 0, 0)),
    "temporal_144_64_b8": (8, 144, (16, 56, 56), 64, (3, 1, 1), (1, 0, 0)),
    "temporal_288_128_b8": (8, 288, (8, 28, 28), 128, (3, 1, 1), (1, 0, 0)),
    "temporal_576_256_b8": (8, 576, (4, 14, 14), 256, (3, 1, 1), (1, 0, 0)),
    "spatial_144_64_b8": (8, 144, (16, 56, 56), 64, (1, 3, 3), (0, 1, 1)),
}


def probe(name, shape, device) -> dict:
    n, c, spatial, k, kernel, pad = shape
    if device == "cpu":  # a check of the script under the interpreter, toy sizes
        n, spatial = 1, tuple(min(s, 4) for s in spatial)
    cl, bf16 = torch.channels_last_3d, torch.bfloat16
    geometry = make_geometry(spatial, kernel, (1, 1, 1), pad, pad, (1, 1, 1))
    x = torch.randn(n, c, *spatial, device=device, dtype=bf16).to(memory_format=cl)
    w = (torch.randn(k, c, *kernel, device=device, dtype=bf16) / 20).to(memory_format=cl)
    dy = torch.randn(n, k, *geometry.output, device=device, dtype=bf16).to(memory_format=cl)

    def cudnn():
        return torch.ops.aten.convolution_backward(
            dy, x, w, None, [1, 1, 1], list(pad), [1, 1, 1], False, [0, 0, 0], 1,
            [True, False, False],
        )[0]  # fmt: skip

    def ours():
        return ig.conv_grad_input(dy, w, x, geometry, 1)

    row = {"layer": name, "cudnn_us": time_or_run(cudnn), "us": {"on": [], "off": []}}
    outputs = {}
    for _ in range(3 if device == "cuda" else 1):
        for setting in ("on", "off"):
            with overridden(ig, TAIL_COLUMNS=setting == "on"):
                tritonconv.clear_caches()  # (launch plans recorded under the other setting)
                outputs[setting] = ours().float()
                row["us"][setting].append(time_or_run(ours))
    want = cudnn().float()
    scale = want.abs().max().item()
    row["diff_on_off"] = (outputs["on"] - outputs["off"]).abs().max().item() / scale
    row["diff_cudnn"] = (outputs["on"] - want).abs().max().item() / scale
    on, off = min(row["us"]["on"]), min(row["us"]["off"])
    print(f"{name:22} cuDNN {row['cudnn_us']:7.1f} | rule on {on:7.1f} ({row['cudnn_us'] / on:.2f}x)"
          f" | off {off:7.1f} ({row['cudnn_us'] / off:.2f}x) | on/off diff {row['diff_on_off']:.1e}"
          f", vs cuDNN {row['diff_cudnn']:.1e}", flush=True)  # fmt: skip
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json")
    args = ap.parse_args()
    torch.backends.cudnn.benchmark = True
    device = "cuda" if torch.cuda.is_available() else "cpu"
    rows = [probe(name, shape, device) for name, shape in LAYERS.items()]
    write_rows(args.json, rows, device)


if __name__ == "__main__":
    main()
