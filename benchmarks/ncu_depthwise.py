"""One depthwise or grouped layer's kernels (forward, input gradient, weight gradient), run
once each, for Nsight Compute (issue 13: what limits the window kernels' bandwidth, and the
grouped 3x3 layers' implicit GEMM).

    ncu --profile-from-start off --section SpeedOfLight --section Occupancy \
        --section WarpStateStats --section MemoryWorkloadAnalysis \
        python benchmarks/ncu_depthwise.py mobilenet_3x3 [bf16_cl]
    ... python benchmarks/ncu_depthwise.py regnet_16x4_56      # bf16 channels-last

Depthwise layers and variants are ``probe_depthwise_window.py``'s, grouped layers
``probe_grouped.py``'s (bf16 channels-last, the kernels ``auto`` runs). Warm-up calls first
(compilation), then one forward, one input gradient and one weight gradient between
``cudaProfilerStart``/``Stop``.
"""

import sys

import torch
from probe_depthwise_window import LAYERS, VARIANTS  # (beside this script)
from probe_grouped import LAYERS as GROUPED

import tritonconv
from tritonconv.geometry import make_geometry
from tritonconv.ops import depthwise as ops


def _depthwise(layer: str, variant: str):
    N, C, H, W, K, S = LAYERS[layer]
    dtype, channels_last = VARIANTS[variant]
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    x = torch.randn(N, C, H, W, device="cuda", dtype=dtype).to(memory_format=fmt)
    w = torch.randn(C, 1, K, K, device="cuda", dtype=dtype).to(memory_format=fmt)
    geometry = make_geometry((H, W), (K, K), (S, S), (K // 2,) * 2, (K // 2,) * 2, (1, 1))
    dy = torch.randn(N, C, *geometry.output, device="cuda", dtype=dtype).to(memory_format=fmt)

    def once():
        ops.depthwise_forward(x, w, None, geometry)
        ops.depthwise_grad_input(dy, w, x, geometry)
        ops.depthwise_grad_weight(dy, x, w.shape, geometry)

    return once


def _grouped(layer: str):
    N, C, H, K, g = GROUPED[layer]
    cl = torch.channels_last
    x = torch.randn(N, C, H, H, device="cuda", dtype=torch.bfloat16).to(memory_format=cl)
    w = torch.randn(K, C // g, 3, 3, device="cuda", dtype=torch.bfloat16).to(memory_format=cl)
    x.requires_grad_(True)
    w.requires_grad_(True)
    dy = torch.randn(N, K, H, H, device="cuda", dtype=torch.bfloat16).to(memory_format=cl)
    print(tritonconv.explain(x, w, padding=1, groups=g), file=sys.stderr)

    def once():
        y = tritonconv.conv2d(x, w, None, 1, 1, 1, g)
        torch.autograd.grad(y, (x, w), dy)

    return once


def main(layer: str, variant: str) -> None:
    once = _grouped(layer) if layer in GROUPED else _depthwise(layer, variant)
    for _ in range(3):
        once()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    once()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "mobilenet_3x3", *sys.argv[2:3] or ["bf16_cl"])
