"""Probe (issue 11): bigger tiles with a split reduction for layers under one wave.

ResNet-50's 3x3 512 -> 512 at 7x7 (batch 32: 1568 output rows, a 4608-long reduction) runs
64x64 tiles (200 programs for 132 multiprocessors) at about 0.65x cuDNN. Its traffic from L2
is (rows / BLOCK_M) weight reads plus (channels / BLOCK_N) reads of the image's taps: 118 +
113 MB with 64x64 tiles, about 8.5 TB/s in its 27 µs, near what L2 delivers. 128x128 or
128x256 tiles halve or quarter that, and a split reduction (``SPLIT_K``: fp32 partials summed
by a second kernel) gives their few tiles enough programs to fill the machine. This times, by
CUDA-graph replay (the partials' sum included), each layer's forward and input gradient over
tiles x forced split counts, against cuDNN, each result checked against the default's.

    PYTHONPATH=src python benchmarks/probe_split_tiles.py [--json out.json]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys

import torch
import torch.nn.functional as F

from tritonconv.caches import clear_caches
from tritonconv.geometry import make_geometry
from tritonconv.ops import implicit_gemm as ig

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from probe_small_wave import ranked, time_or_run

GPU = torch.cuda.is_available()
DEVICE = "cuda" if GPU else "cpu"
C = ig.Config
# name: (batch, in channels, size, out channels, kernel, padding); bf16 channels-last
LAYERS = {
    "3x3 512@7": (32, 512, 7, 512, 3, 1),
    "3x3 256@14": (32, 256, 14, 256, 3, 1),
    "1x1 2048->512@7": (32, 2048, 7, 512, 1, 0),
    "1x1 512->2048@7": (32, 512, 7, 2048, 1, 0),
    "1x1 1024->256@14": (32, 1024, 14, 256, 1, 0),
}
CONFIGS = [C(128, 128, 64, 8, 3), C(256, 128, 64, 8, 3), C(128, 256, 64, 8, 3),
           C(128, 128, 64, 4, 4), C(64, 128, 64, 4, 4)]  # fmt: skip
SPLITS = (1, 2, 3, 4, 6)


def _splits(count):
    real = ig.split_k
    ig.split_k = real if count is None else (lambda programs, steps, *rest: min(count, steps))
    clear_caches()
    return real


def layer(name, n, c, size, k, kernel, pad) -> dict:
    if not GPU:
        n, c, size, k = 1, min(c, 32), min(size, 5), min(k, 32)
    cl, dtype = torch.channels_last, torch.bfloat16
    x = torch.randn(n, c, size, size, device=DEVICE, dtype=dtype).to(memory_format=cl)
    w = torch.randn(k, c, kernel, kernel, device=DEVICE, dtype=dtype) / (c * kernel**2) ** 0.5
    w = w.to(memory_format=cl)
    geometry = make_geometry((size, size), (kernel,) * 2, (1, 1), (pad,) * 2, (pad,) * 2, (1, 1))
    dy = torch.randn(n, k, *geometry.output, device=DEVICE, dtype=dtype).to(memory_format=cl)
    row = {"layer": name}
    passes = {
        "fwd": (lambda cfg: ig.conv_forward(x, w, None, geometry, 1, cfg),
                lambda: F.conv2d(x, w, padding=pad)),
        "dX": (lambda cfg: ig.conv_grad_input(dy, w, x, geometry, 1, config=cfg),
               lambda: torch.ops.aten.convolution_backward(
                   dy, x, w, None, (1, 1), (pad, pad), (1, 1), False, (0, 0), 1,
                   (True, False, False))),
    }  # fmt: skip
    for pass_name, (run, cudnn) in passes.items():
        transposed = pass_name == "dX"
        src, dst = (k, c) if transposed else (c, k)
        heuristic = ig.launch_config(
            dtype, n, src, dst, (size, size), (1, 1), (kernel,) * 2, 1, transposed, DEVICE
        )
        reference = run(heuristic).float()
        scale = reference.abs().max().item()
        timed = [(time_or_run(cudnn), "cuDNN")]
        timed.append(
            (time_or_run(functools.partial(run, heuristic)), f"{heuristic}* (rule's split)")
        )
        for cfg in CONFIGS:
            for count in SPLITS:
                real = _splits(count)
                try:
                    err = (run(cfg).float() - reference).abs().max().item() / scale
                    assert err < 2e-2, f"{name} {pass_name} {cfg} split {count}: error {err}"
                    timed.append((time_or_run(functools.partial(run, cfg)), f"{cfg} split {count}"))
                except AssertionError:
                    raise
                except Exception as error:
                    print(f"  {name} {pass_name} {cfg} split {count}: {type(error).__name__}")
                finally:
                    ig.split_k = real
                    clear_caches()
        row[pass_name], cells = ranked(timed, timed[0][0], 7)  # (timed[0]: cuDNN's)
        print(f"{name} {pass_name}: {cells}", flush=True)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json")
    args = ap.parse_args()
    rows = [layer(name, *shape) for name, shape in LAYERS.items()]
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
