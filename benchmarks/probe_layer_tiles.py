"""Probe (issue 12): the pointer kernel's tiles for one layer's forward and input gradient.

Suite ``more`` misses ≥ 1.0x cuDNN on the 3×3×3 conv3d (forward 0.91x, input gradient
0.93x, session 41-42) and on (2+1)D's 3×1×1 144 -> 64 forward (0.75x), all on
``conv_igemm_kernel`` with the heuristic's 128x64x64 / 128x64x32 tiles. For each layer of
``probe_passes.LAYERS`` named, this times the forward and the input gradient (kernel µs by
CUDA-graph replay) with the library's choice and with each candidate tile (``config`` passed
explicitly, which also keeps the TMA paths out), beside cuDNN's same pass; every result is
checked against cuDNN's in fp32. Prints the best few per pass.

    PYTHONPATH=src python benchmarks/probe_layer_tiles.py [--json F] [layer substring ...]

Without a GPU each layer shrinks to a toy size and a few candidates run once (a check of the
probe itself).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch

from tritonconv import library as ops
from tritonconv.ops import implicit_gemm as ig

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from probe_passes import GPU, LAYERS, graph_us, layer_inputs

C = ig.Config
CANDIDATES = [
    C(128, 64, 64, 4, 3), C(128, 64, 64, 4, 4), C(128, 64, 64, 4, 5), C(128, 64, 32, 4, 5),
    C(128, 64, 32, 4, 6), C(128, 64, 64, 8, 3), C(128, 64, 64, 8, 4), C(128, 64, 128, 8, 3),
    C(256, 64, 64, 8, 3), C(256, 64, 64, 8, 4), C(256, 64, 32, 8, 4), C(256, 64, 32, 8, 5),
    C(64, 64, 64, 4, 4), C(64, 64, 64, 4, 5), C(128, 128, 64, 8, 3), C(128, 128, 64, 8, 4),
    C(256, 128, 64, 8, 3), C(128, 32, 64, 4, 4), C(64, 64, 128, 4, 3),
]  # fmt: skip


def probe(name, xs, ws, stride, pad, dilation, groups, candidates, rows) -> None:
    x, w, conv, stride, pad, dilation = layer_inputs(xs, ws, stride, pad, dilation, torch.bfloat16)
    rank = w.dim() - 2
    y = conv(x, w, stride=stride, padding=pad, dilation=dilation, groups=groups)
    dy = torch.randn_like(y)
    window = (stride, pad, pad, dilation)

    def ref_dx():
        mask = [True, False, False]
        return torch.ops.aten.convolution_backward(
            dy, x, w, None, stride, pad, dilation, False, [0] * rank, groups, mask
        )[0]

    def fwd(config):
        return lambda: ops.conv_implicit_gemm(x, w, None, *window, groups, list(config))

    def dx(config):
        # the input gradient is the transposed convolution of dy (output size: x's)
        return lambda: ops.conv_transpose_implicit_gemm(
            dy, w, None, *window, groups, list(x.shape[2:]), list(config)
        )

    library = {
        "fwd": lambda: ops.conv_implicit_gemm(x, w, None, *window, groups, []),
        "dX": lambda: ops.conv_implicit_gemm_backward(
            dy, x, w, *window, groups, [], [True, False, False]
        )[0],
    }
    want = {"fwd": y.float(), "dX": ref_dx().float()}
    cudnn = {
        "fwd": graph_us(lambda: conv(x, w, stride=stride, padding=pad, dilation=dilation,
                                     groups=groups)),
        "dX": graph_us(ref_dx),
    }  # fmt: skip
    print(f"{name}: cuDNN fwd {cudnn['fwd']:.1f} dX {cudnn['dX']:.1f} µs")
    for p, make in (("fwd", fwd), ("dX", dx)):
        results = [("library", graph_us(library[p]), library[p])]
        for config in candidates:
            fn = make(config)
            try:
                results.append((str(config), graph_us(fn), fn))
            except Exception as e:  # a tile that does not fit (shared memory): skipped
                print(f"  {p} {config}: {type(e).__name__} {str(e).splitlines()[0][:80]}")
        for label, us, fn in results:
            err = ((fn().float() - want[p]).abs().max() / want[p].abs().max()).item()
            rows.append({"layer": name, "pass": p, "config": label, "us": us,
                         "cudnn_us": cudnn[p], "rel_err": err})  # fmt: skip
            if err > 2e-2:
                print(f"  {p} {label}: BAD err {err:.1e}")
        best = sorted(results[1:], key=lambda r: r[1])[:5]
        lib = results[0][1]
        print(f"  {p} library {lib:7.1f} µs ({cudnn[p] / lib:.2f}x); best: "
              + ", ".join(f"{label} {us:.1f} ({cudnn[p] / us:.2f}x)" for label, us, _ in best))  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", default=None)
    parser.add_argument("layers", nargs="*", default=["3x3x3", "3x1x1"])
    args = parser.parse_args()
    candidates = CANDIDATES if GPU else CANDIDATES[:2]
    rows = []
    for name, layer in LAYERS.items():
        if any(s in name for s in args.layers):
            probe(name, *layer, candidates, rows)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name() if GPU else "cpu",
                       "torch": torch.__version__, "rows": rows}, f, indent=1)  # fmt: skip


if __name__ == "__main__":
    main()
