"""Probe (issue 12): suite ``more``'s 3-D layers pass by pass, and which kernels each runs.

Session 40's suite ``more`` on an H200 had the 3x3x3 and (2+1)D 1x3x3 layers' backward at
0.65x cuDNN (kernel time), where session 26 measured 0.88x and 1.03x on an H100. This times
each pass on its own (forward, input gradient, weight gradient; kernel µs by CUDA-graph
replay) against cuDNN's same pass, for the library as it stands and with each TMA path
switched off (``window_tma_config`` / ``wgrad_tma_config`` returning None: the pointer
kernels instead), checks every result against cuDNN's in fp32, and lists the kernels each
pass launches.

    PYTHONPATH=src python benchmarks/probe_3d_passes.py [--json F] [layer ...]

Session 40 added 2-D rows at the edges of the limits it set from these (``WINDOW_TMA_MAX_TAPS``,
``WGRAD_TMA_MAX_TAP_WORK``), and a variant with both limits lifted.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch

import tritonconv
from tritonconv import library as ops
from tritonconv.ops import implicit_gemm as ig

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from probe_small_wave import graph_us

# name: (input shape, weight shape, padding); 2-D rows for the tap and waste limits' edges
LAYERS = {
    "conv3d 3x3x3 64->64 16x56²": ((8, 64, 16, 56, 56), (64, 64, 3, 3, 3), (1, 1, 1)),
    "(2+1)D 1x3x3 64->144 16x56²": ((8, 64, 16, 56, 56), (144, 64, 1, 3, 3), (0, 1, 1)),
    "(2+1)D 3x1x1 144->64 16x56²": ((8, 144, 16, 56, 56), (64, 144, 3, 1, 1), (1, 0, 0)),
    "3x3 64->64 56² b32": ((32, 64, 56, 56), (64, 64, 3, 3), (1, 1)),
    "5x5 64->64 56² b32": ((32, 64, 56, 56), (64, 64, 5, 5), (2, 2)),
    "3x3 64->96 56² b32": ((32, 64, 56, 56), (96, 64, 3, 3), (1, 1)),
}

VARIANTS = {
    "library": {},
    "no window TMA": {"window_tma_config": lambda *a, **k: None},
    "no wgrad TMA": {"wgrad_tma_config": lambda *a, **k: None},
    "no TMA limits": {"WINDOW_TMA_MAX_TAPS": 10**9, "WGRAD_TMA_MAX_TAP_WORK": 10**9},
}


def kernels_of(fn) -> list[str]:
    """Names of the GPU kernels one call of ``fn`` launches."""
    fn()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return [e.key[:40] for e in prof.key_averages() if e.self_device_time_total > 0]


def probe_layer(name: str, xs, ws, pad, rows: list) -> None:
    """Every variant's three passes of one layer against cuDNN's (appended to ``rows``)."""
    rank = len(ws) - 2
    layout = torch.channels_last_3d if rank == 3 else torch.channels_last
    conv = torch.nn.functional.conv3d if rank == 3 else torch.nn.functional.conv2d
    ones, zeros, pad = [1] * rank, [0] * rank, list(pad)
    torch.manual_seed(0)
    x = torch.randn(xs, device="cuda", dtype=torch.bfloat16).to(memory_format=layout)
    w = (torch.randn(ws, device="cuda", dtype=torch.bfloat16) * 0.05).to(memory_format=layout)
    y = conv(x, w, padding=pad)
    dy = torch.randn_like(y)
    geo = (ones, pad, pad, ones, 1)

    def ref(mask):
        return lambda: torch.ops.aten.convolution_backward(
            dy, x, w, None, ones, pad, ones, False, zeros, 1, mask
        )

    cudnn = {
        "fwd": graph_us(lambda: conv(x, w, padding=pad)),
        "dX": graph_us(ref([True, False, False])),
        "dW": graph_us(ref([False, True, False])),
    }
    want = {
        "fwd": y.float(),
        "dX": ref([True, False, False])()[0].float(),
        "dW": ref([False, True, False])()[1].float(),
    }
    passes = {
        "fwd": lambda: ops.conv_implicit_gemm(x, w, None, *geo, []),
        "dX": lambda: ops.conv_implicit_gemm_backward(dy, x, w, *geo, [], [True, False, False])[0],
        "dW": lambda: ops.conv_implicit_gemm_backward(dy, x, w, *geo, [], [False, True, False])[1],
    }
    print(f"{name}: cuDNN fwd {cudnn['fwd']:.1f} dX {cudnn['dX']:.1f} dW {cudnn['dW']:.1f} µs")
    for variant, patches in VARIANTS.items():
        saved = {k: getattr(ig, k) for k in patches}
        for k, v in patches.items():
            setattr(ig, k, v)
        tritonconv.clear_caches()
        try:
            row = {"layer": name, "variant": variant}
            shown = []
            for p, fn in passes.items():
                got = fn().float()
                err = ((got - want[p]).abs().max() / want[p].abs().max()).item()
                us = graph_us(fn)
                row[p] = {"us": us, "cudnn_us": cudnn[p], "rel_err": err,
                          "kernels": kernels_of(fn)}  # fmt: skip
                bad = " BAD" if err > 2e-2 else ""
                shown.append(f"{p} {us:6.1f} ({cudnn[p] / us:.2f}x, err {err:.1e}{bad})")
            print(f"  {variant:14} " + "  ".join(shown))
            print("     kernels: " + "; ".join(", ".join(row[p]["kernels"]) for p in passes))
            rows.append(row)
        finally:
            for k, v in saved.items():
                setattr(ig, k, v)
            tritonconv.clear_caches()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", default=None)
    parser.add_argument("layers", nargs="*", help="substrings of the layers' names")
    args = parser.parse_args()
    rows = []
    for name, (xs, ws, pad) in LAYERS.items():
        if not args.layers or any(s in name for s in args.layers):
            probe_layer(name, xs, ws, pad, rows)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
