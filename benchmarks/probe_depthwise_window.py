"""Probe (issue 13): the sliding-window depthwise kernels against the kernels they replace.

``depthwise_window_kernel`` (forward and stride-1 dX) and ``depthwise_window_grad_weight_kernel``
(dW) load each source column of a kernel row once for every output column it meets; the
kernels they replace load one shifted tile per tap (forward/dX: ``depthwise_kernel``; dW:
``depthwise_small_grad_weight_kernel`` in 3 x 3 tap blocks) or, for NCHW floats from 7 wide,
run the banded tensor-core kernels. Per layer and dtype/layout this times, by CUDA-graph replay
over input sets that together overflow the L2 cache (kernel time, every call reading its
inputs from DRAM as in a network), without a bias unless ``--bias`` (cuDNN adds a bias in a
kernel of its own), in one process:

* cuDNN forward and forward + backward (``cudnn.benchmark`` on);
* ours "before": the window kernels switched off (``WINDOW_MIN_TAPS`` past every kernel):
  the unrolled small kernels, the general FMA kernel or the band kernels;
* ours with the window kernels, whatever the kernel size (the library's thresholds,
  ``WINDOW_MIN_TAPS`` and ``WINDOW_MAX_KW``, are what this decides), forward over a few tile
  configurations (tiles; kernel rows unrolled or looped) and forward + backward with the
  forward's best and a few dW configurations; each configuration's output and gradients are
  first checked against float64.

    PYTHONPATH=src python benchmarks/probe_depthwise_window.py [--json out.json]
        [--layers convnext_7x7_early,...] [--variants bf16_cl,fp32_cl,fp32_nchw]
        [--fwd-tiles library 32,16,8,4,1 32,8,8,8,1 ...]
        [--wgrad-tiles 32,8,16,4 32,8,16,4,1 ...]

``library`` among the forward tiles stands for the library's own tiles; a dW tile's
optional fifth number is ``max_taps`` (kernel rows a dW program takes: 1 is one row each).

A short table comes last: per row, cuDNN / before / window (best) in ms, forward and
forward + backward, and the ratios cuDNN/ours.
"""

from __future__ import annotations

import argparse
import copy
import functools
import json
import sys

import torch
import torch.nn.functional as F

import tritonconv as tc
from tritonconv.bench import input_sets
from tritonconv.caches import clear_caches
from tritonconv.ops import depthwise as ops

# name: N, C, H, W, kernel, stride
LAYERS = {
    "convnext_7x7_early": (32, 96, 56, 56, 7, 1),
    "convnext_7x7_late": (32, 768, 7, 7, 7, 1),
    "convnext_7x7_mid": (32, 384, 14, 14, 7, 1),
    "replk_13x13": (16, 256, 28, 28, 13, 1),
    "mobilenet_5x5_s2": (32, 240, 28, 28, 5, 2),
    "mobilenet_5x5": (32, 480, 14, 14, 5, 1),
    "mobilenet_3x3": (32, 144, 56, 56, 3, 1),
    "efficientnet_3x3_s2": (32, 96, 112, 112, 3, 2),
    "dw3x3_56_c256": (32, 256, 56, 56, 3, 1),
    "replk_31x31": (16, 128, 56, 56, 31, 1),
    # MobileNetV3-large's narrow layers (channels filling no 32-channel block)
    "mobilenetv3_3x3_16": (32, 16, 112, 112, 3, 1),
    "mobilenetv3_3x3_72": (32, 72, 56, 56, 3, 1),
    "mobilenetv3_5x5_s2_72": (32, 72, 56, 56, 5, 2),
    "mobilenetv3_5x5_120": (32, 120, 28, 28, 5, 1),
}
VARIANTS = {
    "bf16_cl": (torch.bfloat16, True),
    "fp32_cl": (torch.float32, True),
    "fp32_nchw": (torch.float32, False),
}
# the layers each variant runs by default (every configuration compiles its own kernels)
RUNS = {
    "bf16_cl": [
        "convnext_7x7_early",
        "convnext_7x7_late",
        "mobilenet_5x5",
        "mobilenet_3x3",
        "efficientnet_3x3_s2",
        "dw3x3_56_c256",
    ],
    "fp32_cl": ["mobilenet_3x3"],
    "fp32_nchw": ["convnext_7x7_early", "mobilenet_3x3", "replk_13x13", "replk_31x31"],
}
# (block_c, block_h, block_w, num_warps, unroll kernel rows): the library's default for 7x7
# and for 3x3/5x5 first (a wide kernel runs only the first)
FWD_CONFIGS = [(32, 8, 8, 4, 0), (32, 16, 8, 4, 1), (32, 8, 8, 4, 1), (32, 8, 16, 4, 0)]
NCHW_FWD_CONFIGS = [(4, 64, 8, 4, 0), (4, 64, 8, 4, 1), (8, 32, 8, 4, 1)]
WGRAD_CONFIGS = [(32, 8, 16, 4), (32, 8, 8, 4)]
NCHW_WGRAD_CONFIGS = [(4, 64, 8, 4), (8, 32, 8, 4)]


def graph_ms(fn, count: int) -> float:
    """Kernel time per call: one pass over ``count`` input sets (together larger than the L2
    cache: each call reads its inputs from DRAM, as in a network) captured in a CUDA graph and
    replayed (``bench.kernel_ms``), per call."""
    from tritonconv.bench import Options, kernel_ms

    ms = kernel_ms(fn, count, Options())
    return float("inf") if ms is None else ms


def _step(leaves, dy, kw, module=F):
    x, w, *b = leaves
    torch.autograd.grad(module.conv2d(x, w, *b, **kw), leaves, dy)


@functools.cache
def _defaults():
    return copy.deepcopy(ops.WINDOW_CONFIG), ops.WINDOW_MIN_TAPS, ops.WINDOW_MAX_KW


def configure(window: bool, layout: str, kernel: int, fwd=None, wgrad=None) -> None:
    """Switch the window kernels on (with these tiles, for any kernel size: the library's
    thresholds are what this measures) or off; forget every cached plan."""
    config, min_taps, max_kw = _defaults()
    ops.WINDOW_CONFIG = copy.deepcopy(config)
    ops.WINDOW_MIN_TAPS = min(min_taps, kernel * kernel) if window else 10**9
    ops.WINDOW_MAX_KW = max(max_kw, kernel) if window else max_kw
    for op, tiles in (("fwd", fwd), ("wgrad", wgrad)):
        if tiles is not None:
            entry = ops.WINDOW_CONFIG[f"{op}_{layout}"]
            names = ("block_c", "block_h", "block_w", "num_warps")
            entry.update(zip((*names, "max_taps") if op == "wgrad" else names, tiles))
            if op == "fwd":  # rows unrolled or looped, over the tile's own rows
                straddle = len(tiles) > 5 and bool(tiles[5])
                entry.update(
                    unrolled=((31, tiles[1], straddle),) if tiles[4] else (), straddle=straddle
                )
    clear_caches()


def check(x, w, b, dy, kw) -> float:
    """Largest error of y, dx, dW (, db) relative to the float64 result's largest magnitude."""
    leaves = [t.detach().requires_grad_() for t in (x, w, b) if t is not None]
    y = tc.conv2d(*leaves, **kw, algo="depthwise")
    got = (y, *torch.autograd.grad(y, leaves, dy))
    ref_leaves = [t.detach().double().requires_grad_() for t in leaves]
    ref = F.conv2d(*ref_leaves, **kw)
    want = (ref, *torch.autograd.grad(ref, ref_leaves, dy.double()))
    return max(
        ((g.double() - r).abs().max() / r.abs().max().clamp_min(1e-30)).item()
        for g, r in zip(got, want)
    )


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default=None)
    ap.add_argument("--layers", default=None, help="every variant on these (default: RUNS)")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--bias", action="store_true", help="with a bias (cuDNN adds it apart)")
    ap.add_argument(
        "--fwd-tiles",
        nargs="+",
        default=None,
        help="forward tiles to sweep instead of the defaults: block_c,block_h,block_w,warps,unroll"
        "[,straddle: 1 lets the channel block overrun the channels]"
        " ('library': the library's own)",
    )
    ap.add_argument(
        "--wgrad-tiles",
        nargs="+",
        default=None,
        help="dW tiles to sweep instead of the defaults: block_c,block_h,block_w,warps[,max_taps]",
    )
    args = ap.parse_args()
    runs = [
        (v, layer)
        for v in args.variants.split(",")
        for layer in (args.layers.split(",") if args.layers else RUNS[v])
    ]
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = False  # fp32 compared at fp32 (ours is FMA fp32 here)
    rows, bad = [], 0
    for variant, name in runs:
        dtype, channels_last = VARIANTS[variant]
        layout = "channels_last" if channels_last else "nchw"
        fwd_configs = FWD_CONFIGS if channels_last else NCHW_FWD_CONFIGS
        if args.fwd_tiles:  # "library": the library's own tiles
            fwd_configs = [
                None if t == "library" else tuple(int(v) for v in t.split(","))
                for t in args.fwd_tiles
            ]
        wgrad_configs = WGRAD_CONFIGS if channels_last else NCHW_WGRAD_CONFIGS
        if args.wgrad_tiles:
            wgrad_configs = [tuple(int(v) for v in t.split(",")) for t in args.wgrad_tiles]
        N, C, H, W, k, s = LAYERS[name]
        if k > 13:  # a wide kernel's unrolled window compiles slowly: the defaults only
            fwd_configs, wgrad_configs = fwd_configs[:1], wgrad_configs[:1]
        fmt = torch.channels_last if channels_last else torch.contiguous_format
        kw = dict(stride=s, padding=k // 2, groups=C)

        def make(N=N, C=C, H=H, W=W, k=k, fmt=fmt, dtype=dtype, kw=kw):
            x = torch.randn(N, C, H, W, device="cuda", dtype=dtype).to(memory_format=fmt)
            w = torch.randn(C, 1, k, k, device="cuda", dtype=dtype) / k
            b = torch.randn(C, device="cuda", dtype=dtype) if args.bias else None
            dy = torch.randn_like(F.conv2d(x, w, b, **kw))
            leaves = [t.detach().requires_grad_() for t in (x, w, b) if t is not None]
            return x, w, b, dy, leaves

        sets = input_sets(make, 2 * N * C * H * W * torch.finfo(dtype).bits // 8)
        count = len(sets)
        x, w, b, dy, _ = sets[0]

        def fwd(i, module=tc, sets=sets, kw=kw):
            x, w, b = sets[i][:3]
            extra = dict(algo="depthwise") if module is tc else {}
            module.conv2d(x, w, b, **kw, **extra)

        def step(i, module=tc, sets=sets, kw=kw):
            extra = dict(algo="depthwise") if module is tc else {}
            _step(sets[i][4], sets[i][3], dict(kw, **extra), module)

        row = dict(layer=name, variant=variant, shape=[N, C, H, W, k, s], bias=args.bias)
        copies = [torch.empty_like(entry[0]) for entry in sets]

        def copy(i, sets=sets, copies=copies):  # the input's bytes read and written once
            copies[i].copy_(sets[i][0])

        row["copy_ms"] = graph_ms(copy, count)
        row["cudnn_fwd_ms"] = graph_ms(functools.partial(fwd, module=F), count)
        row["cudnn_fwd_bwd_ms"] = graph_ms(functools.partial(step, module=F), count)
        configure(False, layout, k)
        row["before_error"] = check(x, w, b, dy, kw)
        row["before_fwd_ms"] = graph_ms(fwd, count)
        row["before_fwd_bwd_ms"] = graph_ms(step, count)
        tol = 2e-2 if dtype == torch.bfloat16 else 1e-4
        best = (float("inf"), None)
        for tiles in fwd_configs:
            configure(True, layout, k, fwd=tiles)
            err = check(x, w, b, dy, kw)
            bad += not err < tol
            t = graph_ms(fwd, count)
            row.setdefault("window_fwd", []).append(dict(tiles=tiles, ms=t, error=err))
            best = min(best, (t, tiles), key=lambda pair: pair[0])
        row["window_fwd_ms"], row["window_fwd_tiles"] = best
        best_step = (float("inf"), None)
        for tiles in wgrad_configs:
            configure(True, layout, k, fwd=row["window_fwd_tiles"], wgrad=tiles)
            err = check(x, w, b, dy, kw)
            bad += not err < tol
            t = graph_ms(step, count)
            row.setdefault("window_fwd_bwd", []).append(dict(tiles=tiles, ms=t, error=err))
            best_step = min(best_step, (t, tiles), key=lambda pair: pair[0])
        row["window_fwd_bwd_ms"], row["window_wgrad_tiles"] = best_step
        rows.append(row)
        print(json.dumps(row), flush=True)
    configure(False, "nchw", 1)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    print("\nlayer                 variant    | fwd ms cuDNN / before / window (x)  "
          "| fwd+bwd ms cuDNN / before / window (x)")  # fmt: skip
    for r in rows:
        print(
            f"{r['layer']:21} {r['variant']:10} | {r['cudnn_fwd_ms']:.4f} / "
            f"{r['before_fwd_ms']:.4f} / {r['window_fwd_ms']:.4f} "
            f"({r['cudnn_fwd_ms'] / r['window_fwd_ms']:.2f}x) {r['window_fwd_tiles']} | "
            f"{r['cudnn_fwd_bwd_ms']:.4f} / {r['before_fwd_bwd_ms']:.4f} / "
            f"{r['window_fwd_bwd_ms']:.4f} ({r['cudnn_fwd_bwd_ms'] / r['window_fwd_bwd_ms']:.2f}x)"
            f" {r['window_wgrad_tiles']}"
        )
    for r in rows:
        if r["shape"][5] == 1:  # stride 1: the forward moves the copy's bytes
            print(
                f"{r['layer']:21} {r['variant']:10} forward at "
                f"{r['copy_ms'] / r['window_fwd_ms']:.0%} of the copy's bandwidth "
                f"(copy {r['copy_ms']:.4f} ms)"
            )
    print(f"window configurations off tolerance: {bad}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
