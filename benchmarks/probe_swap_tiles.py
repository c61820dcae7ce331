"""Probe (issue 11): the implicit GEMM's transposed product, and tiles for short reductions.

Two hypotheses about the forward's weakest dense layers (bf16 channels-last, H100):

1. **64-column tiles are shared-memory bound.** A layer with 64 output channels (UNet's 3x3 at
   256², ResNet-50's 3x3 at 56²) runs ``wgmma.m64n64k16`` with both operands from shared
   memory: 4 KB read per 64x64x16 product, which at 128 B/clock takes as long as the tensor
   cores take for the product at peak. Computing ``acc^T = W^T X^T`` instead (``SWAP``: the
   output channels as the MMA's 64 rows, 128-256 positions as its columns) reads 6-10 KB per
   2-4x the work.
2. **One-step reductions leave no overlap.** ResNet-50's 1x1 64 -> 256 at 56² reduces 64
   channels: one step, so the pipeline's 3 stages only cost shared memory (256x128x64 tiles:
   147 KB, one program per SM), and each program loads, multiplies and stores in turn. Tiles
   of 1-2 stages let 3-4 programs share an SM and overlap one's stores with another's loads.

Each layer's forward (and for some the input gradient) is timed by CUDA-graph replay with
the heuristic's tiles and with candidate tiles, each with and without ``SWAP``; every result
is checked against the default's (bf16 rounding).

    PYTHONPATH=src python benchmarks/probe_swap_tiles.py [--json out.json] [--cases a,b]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys

import torch
import torch.nn.functional as F

from tritonconv.bench.dense import BY_LAYER
from tritonconv.caches import clear_caches
from tritonconv.geometry import make_geometry
from tritonconv.ops import implicit_gemm as ig

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from probe_small_wave import ranked, time_or_run

GPU = torch.cuda.is_available()
DEVICE = "cuda" if GPU else "cpu"  # the CPU (interpreter): toy sizes, a check of the script
C = ig.Config
FEW_STEPS = [C(128, 128, 64, 8, 1), C(128, 128, 64, 4, 1), C(256, 128, 64, 8, 1),
             C(128, 256, 64, 8, 1), C(128, 64, 64, 4, 1), C(128, 128, 64, 8, 2),
             C(256, 128, 64, 8, 2), C(128, 128, 32, 4, 2)]  # fmt: skip
NARROW = [C(256, 64, 64, 4, 3), C(256, 64, 64, 8, 3), C(128, 64, 64, 4, 3), C(256, 64, 64, 8, 4)]
WIDE = [C(128, 128, 64, 8, 3), C(256, 128, 64, 8, 3), C(128, 128, 64, 4, 4)]
# layer: (configs besides the heuristic's, passes)
PLAN = {
    "r50_1x1_56": (FEW_STEPS, ("fwd",)),
    "pw_96_384_56": (FEW_STEPS, ("fwd",)),
    "unet_3x3_256": (NARROW, ("fwd", "dX")),
    "r50_3x3_56": (NARROW, ("fwd", "dX")),
    "unet_3x3_128": (NARROW, ("fwd",)),
    "dil2_3x3_64": (WIDE, ("fwd",)),
    "r50_3x3_28": (WIDE, ("fwd",)),
    "r50_3x3_14": (WIDE, ("fwd",)),
    "r50_3x3_7": (WIDE, ("fwd",)),
}


def _swap(flag: bool) -> None:
    ig.swap_rule = lambda dtype, config: flag
    clear_caches()  # the launch plans recorded the previous setting


def layer(name: str) -> dict:
    case = BY_LAYER[name] if GPU else BY_LAYER[name].quick()
    extra, passes = PLAN[name]
    cl, dtype = torch.channels_last, torch.bfloat16
    x = torch.randn(case.input, device=DEVICE, dtype=dtype).to(memory_format=cl)
    w = torch.randn(case.weight, device=DEVICE, dtype=dtype) / math.prod(case.weight[1:]) ** 0.5
    w = w.to(memory_format=cl)
    dy = torch.randn(case.output(), device=DEVICE, dtype=dtype).to(memory_format=cl)
    r, s = case.weight[2:]
    p, d, st = case.padding, case.dilation, case.stride
    geometry = make_geometry(case.input[2:], (r, s), (st, st), (p, p), (p, p), (d, d))
    n, c, k = case.input[0], case.input[1], case.weight[0]
    out_spatial = case.output()[2:]
    row = {"case": name, "shape": case.shape()}
    kw = dict(stride=st, padding=p, dilation=d)
    row["cudnn fwd"] = time_or_run(lambda: F.conv2d(x, w, **kw))
    if "dX" in passes:
        row["cudnn dX"] = time_or_run(
            lambda: torch.ops.aten.convolution_backward(
                dy, x, w, None, (st, st), (p, p), (d, d), False, (0, 0), 1, (True, False, False)
            )
        )
    for pass_name in passes:
        transposed = pass_name == "dX"
        args = (n, k, c, case.input[2:]) if transposed else (n, c, k, out_spatial)
        heuristic = ig.launch_config(dtype, *args, (st, st), (r, s), 1, transposed, DEVICE)
        if pass_name == "fwd":
            run = lambda cfg: ig.conv_forward(x, w, None, geometry, 1, cfg)  # noqa: E731
        else:
            run = lambda cfg: ig.conv_grad_input(dy, w, x, geometry, 1, config=cfg)  # noqa: E731
        _swap(False)
        reference = run(heuristic).float()
        scale = reference.abs().max().item()
        timed = []
        for cfg in dict.fromkeys([ig.Config(*heuristic), *extra]):
            for flag in (False, True):
                _swap(flag)
                try:
                    result = run(cfg).float()
                    us = time_or_run(lambda cfg=cfg, run=run: run(cfg))
                except Exception as error:  # a configuration that does not fit
                    print(f"  {name} {pass_name} {cfg} swap={flag}: {type(error).__name__}")
                    continue
                err = (result - reference).abs().max().item() / scale
                if err > 2e-2:
                    raise AssertionError(f"{name} {pass_name} {cfg} swap={flag}: error {err}")
                label = f"{cfg}{' swap' if flag else ''}{'*' if cfg == heuristic else ''}"
                timed.append((us, label))
        _swap(False)
        ref = row[f"cudnn {pass_name}"]
        row[pass_name], cells = ranked(timed, ref, 6)
        print(f"{name} {pass_name}: cuDNN {ref:.1f} µs | {cells}", flush=True)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json")
    ap.add_argument("--cases", default="")
    args = ap.parse_args()
    wanted = [c for c in args.cases.split(",") if c] or list(PLAN)
    rows = [layer(name) for name in wanted]
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
