"""Probe: a convolution's three passes one by one against cuDNN's, under library variants.

Session 40 (H200) found suite ``more``'s 3-D layers' backward at 0.65x cuDNN and took it
apart here (as ``probe_3d_passes.py``): forward, input gradient and weight gradient each
timed on its own (kernel µs by CUDA-graph replay) against cuDNN's same pass, for the
library as it stands and with each TMA path switched off (``window_tma_config`` /
``wgrad_tma_config`` returning None: the pointer kernels instead) or its tap limits lifted;
every result checked against cuDNN's in fp32, and the kernels each pass launches listed.
The dense suite's layers (``--dense``) and fp32 (TF32 allowed, PyTorch's default, or off)
take the same treatment, and ``--knob NAME=VALUE`` adds a variant with a module constant of
``ops.implicit_gemm`` set (``--knob WGRAD_TF32_PRECISION='"tf32"'``: a Python literal; since
session 41 the stems' narrow weight gradients take ``ieee`` whatever that knob says).

    PYTHONPATH=src python benchmarks/probe_passes.py [--json F] [layer ...]
    PYTHONPATH=src python benchmarks/probe_passes.py --dense r50_stem_7x7s2 r50_3x3_7 \\
        --dtype float32 [--tf32-off] [--knob NAME=VALUE ...] [--variants library ...]

Without a GPU (``TRITON_INTERPRET=1 TRITONCONV_CPU_KERNELS=1``) every layer shrinks to a
toy size and each pass runs once: a check of the probe itself, not a measurement.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import sys
import time

import torch

import tritonconv
from tritonconv import library as ops
from tritonconv.bench.dense import CASES as DENSE
from tritonconv.ops import implicit_gemm as ig

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

GPU = torch.cuda.is_available()
DEVICE = "cuda" if GPU else "cpu"

# name: (input shape, weight shape, stride, padding, dilation, groups)
LAYERS = {
    "conv3d 3x3x3 64->64 16x56²": ((8, 64, 16, 56, 56), (64, 64, 3, 3, 3), 1, 1, 1, 1),
    "(2+1)D 1x3x3 64->144 16x56²": ((8, 64, 16, 56, 56), (144, 64, 1, 3, 3), 1, (0, 1, 1), 1, 1),
    "(2+1)D 3x1x1 144->64 16x56²": ((8, 144, 16, 56, 56), (64, 144, 3, 1, 1), 1, (1, 0, 0), 1, 1),
    # suite more's gan_up_4x4 as the convolution it transposes: its forward and weight
    # gradient are the transposed layer's input and weight gradients
    "DCGAN as conv 4x4 s2 128->256 32² b16": ((16, 128, 32, 32), (256, 128, 4, 4), 2, 1, 1, 1),
    "3x3 64->64 56² b32": ((32, 64, 56, 56), (64, 64, 3, 3), 1, 1, 1, 1),
    "5x5 64->64 56² b32": ((32, 64, 56, 56), (64, 64, 5, 5), 1, 2, 1, 1),
    "3x3 64->96 56² b32": ((32, 64, 56, 56), (96, 64, 3, 3), 1, 1, 1, 1),
}

VARIANTS = {
    "library": {},
    "no window TMA": {"window_tma_config": lambda *a, **k: None},
    "no wgrad TMA": {"wgrad_tma_config": lambda *a, **k: None},
    "no TMA limits": {"WINDOW_TMA_MAX_TAPS": 10**9, "WGRAD_TMA_MAX_TAP_WORK": 10**9},
}


def graph_us(fn) -> float:
    """Kernel µs a call: CUDA-graph replay on a GPU; one call's wall time without one."""
    if not GPU:
        start = time.perf_counter()
        fn()
        return (time.perf_counter() - start) * 1e6
    from probe_small_wave import graph_us as replayed

    return replayed(fn)


def kernels_of(fn) -> list[str]:
    """Names of the GPU kernels one call of ``fn`` launches (none listed without a GPU)."""
    if not GPU:
        return []
    fn()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return [e.key[:40] for e in prof.key_averages() if e.self_device_time_total > 0]


def _toy(xs, ws):
    """A layer shrunk for the interpreter: batch 1, at most 32 channels, 6 positions a side."""
    groups_in = xs[1] // ws[1]
    c_in = min(xs[1], 32 * groups_in) if groups_in > 1 else min(xs[1], 32)
    per_group = c_in // groups_in
    c_out = max(groups_in, min(ws[0], 32) // groups_in * groups_in)
    spatial = [min(s, max(6, k + 2)) for s, k in zip(xs[2:], ws[2:], strict=True)]
    return (1, c_in, *spatial), (c_out, per_group, *ws[2:])


def layer_inputs(xs, ws, stride, pad, dilation, dtype) -> tuple:
    """(x, w, F.conv2d or F.conv3d, stride, pad, dilation as per-axis lists) of a layer of
    :data:`LAYERS`, channels-last (a toy size without a GPU), seeded: the probes' common
    set-up."""
    if not GPU:
        xs, ws = _toy(xs, ws)
    rank = len(ws) - 2
    layout = torch.channels_last_3d if rank == 3 else torch.channels_last
    conv = torch.nn.functional.conv3d if rank == 3 else torch.nn.functional.conv2d

    def per_axis(v):
        return list(v) if isinstance(v, tuple | list) else [v] * rank

    torch.manual_seed(0)
    x = torch.randn(xs, device=DEVICE, dtype=dtype).to(memory_format=layout)
    w = (torch.randn(ws, device=DEVICE, dtype=dtype) * 0.05).to(memory_format=layout)
    return x, w, conv, per_axis(stride), per_axis(pad), per_axis(dilation)


def probe_layer(name, xs, ws, stride, pad, dilation, groups, dtype, variants, rows) -> None:
    """Every variant's three passes of one layer against cuDNN's (appended to ``rows``)."""
    x, w, conv, stride, pad, dilation = layer_inputs(xs, ws, stride, pad, dilation, dtype)
    rank = w.dim() - 2
    kwargs = {"stride": stride, "padding": pad, "dilation": dilation, "groups": groups}
    y = conv(x, w, **kwargs)
    dy = torch.randn_like(y)
    geo = (stride, pad, pad, dilation, groups)

    def ref(mask):
        return lambda: torch.ops.aten.convolution_backward(
            dy, x, w, None, stride, pad, dilation, False, [0] * rank, groups, mask
        )

    cudnn = {
        "fwd": graph_us(lambda: conv(x, w, **kwargs)),
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
    for variant in variants:
        patches = VARIANTS[variant]
        saved = {k: getattr(ig, k) for k in patches}
        for k, v in patches.items():
            setattr(ig, k, v)
        tritonconv.clear_caches()
        try:
            row = {"layer": name, "variant": variant, "dtype": str(dtype)}
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
            if GPU:
                print("     kernels: " + "; ".join(", ".join(row[p]["kernels"]) for p in passes))
            rows.append(row)
        finally:
            for k, v in saved.items():
                setattr(ig, k, v)
            tritonconv.clear_caches()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", default=None)
    parser.add_argument("--dense", nargs="*", default=[], help="dense suite cases by name")
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    parser.add_argument("--tf32-off", action="store_true", help="fp32 without TF32 (both sides)")
    parser.add_argument("--knob", action="append", default=[], help="NAME=VALUE: a variant")
    parser.add_argument("--variants", nargs="*", default=None, help="only these variants")
    parser.add_argument("layers", nargs="*", help="substrings of LAYERS' names")
    args = parser.parse_args()
    dtype = getattr(torch, args.dtype)
    for knob in args.knob:
        name, value = knob.split("=", 1)
        if not hasattr(ig, name):
            parser.error(f"ops.implicit_gemm has no {name}")
        VARIANTS[f"{name}={value}"] = {name: ast.literal_eval(value)}
    variants = args.variants or list(VARIANTS)
    layers = {}
    for case in DENSE:
        if case.name in args.dense:
            layers[case.name] = (case.input, case.weight, case.stride, case.padding,
                                 case.dilation, case.groups)  # fmt: skip
    if args.layers or not args.dense:
        for name, layer in LAYERS.items():
            if not args.layers or any(s in name for s in args.layers):
                layers[name] = layer
    tf32 = not args.tf32_off
    flags = torch.backends.cudnn, torch.backends.cuda.matmul
    old = flags[0].allow_tf32, flags[1].allow_tf32
    flags[0].allow_tf32 = flags[1].allow_tf32 = tf32
    rows = []
    try:
        for name, layer in layers.items():
            probe_layer(name, *layer, dtype, variants, rows)
    finally:
        flags[0].allow_tf32, flags[1].allow_tf32 = old
    if args.json:
        device = torch.cuda.get_device_name() if GPU else "cpu"
        with open(args.json, "w") as f:
            json.dump({"device": device, "dtype": args.dtype, "tf32": tf32, "rows": rows}, f,
                      indent=1)  # fmt: skip


if __name__ == "__main__":
    main()
