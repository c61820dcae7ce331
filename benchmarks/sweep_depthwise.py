"""Sweep the small-kernel depthwise launch configurations on the GPU (kernel time only).

    PYTHONPATH=src python benchmarks/sweep_depthwise.py

Case dw3x3_56 (N32 C144 56x56, 3x3, pad 1, groups 144) in fp32 and bf16, NCHW and
channels-last. For each configuration in a small grid (``ops.DEPTHWISE_CONFIG``), times the
forward, the stride-1 input gradient and the weight gradient launchers directly with
``do_bench(..., return_mode="median")`` and prints µs and GB/s (x/dy read + y/dx written, or x +
dy read for dW). Each configuration is first checked against ``torch.nn.functional.conv2d`` /
``torch.nn.grad`` in float64: a wrong result is flagged ``WRONG`` in the line. The config that
was in ``DEPTHWISE_CONFIG`` is restored at the end; copy the winner into ops/depthwise.py.
"""

import copy
import itertools

import torch
import torch.nn.functional as F
from triton.testing import do_bench

from tritonconv.geometry import make_geometry
from tritonconv.ops import depthwise as ops

N, C, H, W, K = 32, 144, 56, 56, 3
GEOMETRY = make_geometry((H, W), (K, K), (1, 1), (1, 1), (1, 1), (1, 1))
# 6 configurations per case and kernel, 24 per kernel over the four cases.
NCHW_TILES = [(bh, bw, nw) for bh, bw in ((8, 64), (16, 64), (32, 64)) for nw in (4, 8)]
CL_TILES = [
    (bc, bh, bw, nw) for bc, bh, bw in ((16, 8, 8), (32, 4, 8), (32, 8, 8)) for nw in (4, 8)
]


def _err(got, want):
    return (got.double() - want).abs().max().item()


def _tolerance(dtype, ref):
    """Relative to the reference's largest magnitude: bf16 output rounding is 2^-9 of it."""
    return ref.abs().max().item() * (1e-2 if dtype == torch.bfloat16 else 1e-5)


def sweep(dtype, channels_last):
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    x = torch.randn(N, C, H, W, device="cuda", dtype=dtype).to(memory_format=fmt)
    w = torch.randn(C, 1, K, K, device="cuda", dtype=dtype)
    dy = torch.randn(N, C, H, W, device="cuda", dtype=dtype).to(memory_format=fmt)
    xd, wd, dyd = x.double(), w.double(), dy.double()
    y_ref = F.conv2d(xd, wd, padding=1, groups=C)
    dx_ref = torch.nn.grad.conv2d_input(xd.shape, wd, dyd, padding=1, groups=C)
    dw_ref = torch.nn.grad.conv2d_weight(xd, wd.shape, dyd, padding=1, groups=C)
    moved = 2 * x.numel() * x.element_size()
    launchers = {
        "fwd": (lambda: ops.depthwise_forward(x, w, None, GEOMETRY), y_ref),
        "dX": (lambda: ops.depthwise_grad_input(dy, w, x, GEOMETRY), dx_ref),
        "dW": (lambda: ops.depthwise_grad_weight(dy, x, w.shape, GEOMETRY)[0], dw_ref),
    }
    layout = "channels-last" if channels_last else "NCHW"
    name = f"dw3x3_56 {str(dtype).removeprefix('torch.')} {layout}"
    scratch = torch.empty_like(x)
    for label, fn in (("copy_", lambda: scratch.copy_(x)),):
        ms = do_bench(fn, return_mode="median")
        print(f"--- {name}: ceiling {label} {ms * 1e3:7.1f} µs {moved / ms / 1e6:7.0f} GB/s")
    fwd_key = "fwd_channels_last" if channels_last else "fwd_nchw"
    wgrad_key = "wgrad_channels_last" if channels_last else "wgrad_nchw"
    grid = CL_TILES if channels_last else [(1, *t) for t in NCHW_TILES]
    for kernel, key in (("fwd", fwd_key), ("dX", fwd_key), ("dW", wgrad_key)):
        fn, ref = launchers[kernel]
        print(f"--- {name}: {kernel} (block_c, block_h, block_w, warps) -> µs, GB/s, max err")
        for block_c, block_h, block_w, warps in grid:
            ops.DEPTHWISE_CONFIG[key].update(
                block_h=block_h, block_w=block_w, num_warps=warps, block_c=block_c
            )
            err = _err(fn(), ref)
            flag = "" if err <= _tolerance(dtype, ref) else "  WRONG"
            ms = do_bench(fn, return_mode="median")
            print(
                f"  {block_c:3} {block_h:3} {block_w:3} {warps}  {ms * 1e3:7.1f} µs"
                f" {moved / ms / 1e6:7.0f} GB/s  err {err:.2e}{flag}"
            )


if __name__ == "__main__":
    saved = copy.deepcopy(ops.DEPTHWISE_CONFIG)
    try:
        for dtype, channels_last in itertools.product(
            (torch.float32, torch.bfloat16), (False, True)
        ):
            sweep(dtype, channels_last)
        target = ops.DEPTHWISE_CONFIG["wgrad_nchw"]["target_programs"]
        print(f"(dW splits the batch to about target_programs={target} programs)")
    finally:
        ops.DEPTHWISE_CONFIG.clear()
        ops.DEPTHWISE_CONFIG.update(saved)
