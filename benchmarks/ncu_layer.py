"""A layer's forward, ours and cuDNN's, run once each, for Nsight Compute.

    ncu --profile-from-start off --section SpeedOfLight --section MemoryWorkloadAnalysis \\
        --section WarpStateStats python benchmarks/ncu_layer.py "conv3d 3x3x3"

The layer is the first of ``probe_passes.LAYERS`` whose name contains the argument (bf16,
channels-last). Warm-up calls first (compilation, cuDNN's choice), then one forward of each
between ``cudaProfilerStart``/``Stop``: what limits ours beside what limits cuDNN's.
"""

from __future__ import annotations

import os
import sys

import torch

from tritonconv import library as ops

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from probe_passes import LAYERS, layer_inputs


def main(name: str) -> None:
    key = next(k for k in LAYERS if name in k)
    xs, ws, stride, pad, dilation, groups = LAYERS[key]
    x, w, conv, stride, pad, dilation = layer_inputs(xs, ws, stride, pad, dilation, torch.bfloat16)
    torch.backends.cudnn.benchmark = True

    def ours():
        return ops.conv_implicit_gemm(x, w, None, stride, pad, pad, dilation, groups, [])

    def theirs():
        return conv(x, w, None, stride, pad, dilation, groups)

    for _ in range(3):
        ours(), theirs()
    torch.cuda.synchronize()
    print(f"{key}: profiling one forward of each")
    torch.cuda.cudart().cudaProfilerStart()
    ours()
    theirs()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "conv3d 3x3x3")
