"""Sweep im2col / col2im launch configurations on the GPU (kernel time only, CUDA events).

    PYTHONPATH=src python benchmarks/sweep_im2col.py

Times the GEMM-layout im2col and the col2im gather of the conv path on two ResNet-50 cases for
each configuration in the grid, and prints GB/s (bytes read + written) per configuration.
"""

import itertools

import torch
from triton.testing import do_bench

from tritonconv.bench.conv import BY_NAME
from tritonconv.geometry import make_geometry
from tritonconv.ops import im2col as ops


def _set_im2col_config(**config):
    """The candidate for every plane size (both im2col configurations)."""
    ops.IM2COL_CONFIG.update(config)
    ops.IM2COL_SMALL_PLANE_CONFIG.update(config)


def case_buffers(name):
    case = BY_NAME[name]
    x = torch.randn(case.input, device="cuda")
    k = case.weight[2:]
    p = (case.padding,) * 2
    g = make_geometry(case.input[2:], k, (case.stride,) * 2, p, p, (case.dilation,) * 2)
    rows = case.input[1] * g.kernel_numel
    positions = case.input[0] * g.output_numel
    col = torch.empty(rows, positions, device="cuda")
    layout = ops.gemm_layout(rows, 0, positions, g.output_numel)
    image = torch.empty_like(x)
    moved = (x.numel() + col.numel()) * 4
    return x, col, image, layout, g, rows, positions, moved


def sweep(name):
    x, col, image, layout, g, rows, positions, moved = case_buffers(name)
    other = torch.empty_like(col)
    for label, fn in (("fill_", lambda: col.fill_(1.0)), ("copy_", lambda: col.copy_(other))):
        ms = do_bench(fn, return_mode="median")
        written = col.numel() * 4 * (2 if label == "copy_" else 1)
        print(
            f"--- {name}: ceiling {label} of the column buffer {ms * 1e3:7.1f} µs {written / ms / 1e6:7.0f} GB/s"
        )
    print(f"--- {name}: im2col (block_p, tile, warps) -> µs, GB/s")
    for block_p, tile, warps in itertools.product((32, 64, 128), (1024, 2048, 4096), (2, 4, 8)):
        _set_im2col_config(block_p=block_p, tile_elements=tile, num_warps=warps)
        ms = do_bench(
            lambda: ops.im2col(x, col, layout, g, rows, 0, positions), return_mode="median"
        )
        print(f"  {block_p:4} {tile:5} {warps}  {ms * 1e3:7.1f} µs {moved / ms / 1e6:7.0f} GB/s")
    print(f"--- {name}: col2im (block, warps) -> µs, GB/s")
    for block, warps in itertools.product((256, 512, 1024, 2048), (2, 4, 8)):
        ops.COL2IM_CONFIG.update(block=block, num_warps=warps)
        ms = do_bench(
            lambda: ops.col2im(col, layout, image, g, rows, 0, positions, False),
            return_mode="median",
        )
        print(f"  {block:5} {warps}  {ms * 1e3:7.1f} µs {moved / ms / 1e6:7.0f} GB/s")


if __name__ == "__main__":
    for case_name in ("r50_3x3_56", "r50_3x3_28"):
        sweep(case_name)
