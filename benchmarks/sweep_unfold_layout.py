"""im2col kernel time in F.unfold's (N, C*KH*KW, L) layout per launch configuration (GPU).

    PYTHONPATH=src python benchmarks/sweep_unfold_layout.py

Kernel time from torch.profiler (so host overhead does not enter), for the ResNet-50 3x3 cases.
"""

import itertools

import torch

import tritonconv as tc
from tritonconv.ops import im2col as ops

CASES = {
    "r50_3x3_56": (32, 64, 56, 56),
    "r50_3x3_28": (32, 128, 28, 28),
    "r50_3x3_14": (32, 256, 14, 14),
    "r50_3x3_7": (32, 512, 7, 7),
}


def _set_im2col_config(**config):
    """The candidate for every plane size (both im2col configurations)."""
    ops.IM2COL_CONFIG.update(config)
    ops.IM2COL_SMALL_PLANE_CONFIG.update(config)


def kernel_us(x, reps=10):
    tc.unfold(x, 3, padding=1)
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            tc.unfold(x, 3, padding=1)
        torch.cuda.synchronize()
    events = [e for e in prof.key_averages() if e.key.startswith("im2col_kernel")]
    return events[0].device_time_total / events[0].count


def main():
    for name, shape in CASES.items():
        x = torch.randn(shape, device="cuda")
        moved = x.numel() * 4 * 10  # input once + 9 column copies
        for block_p, tile, warps in itertools.product((32, 64, 128), (1024, 2048), (2, 4)):
            _set_im2col_config(block_p=block_p, tile_elements=tile, num_warps=warps)
            us = kernel_us(x)
            print(
                f"{name:11} {block_p:4} {tile:5} {warps}  {us:7.1f} µs {moved / us / 1e3:6.0f} GB/s"
            )


if __name__ == "__main__":
    main()
