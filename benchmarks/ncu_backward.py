"""One dense layer's implicit-GEMM backward kernels, run once each, for Nsight Compute.

    ncu --section SpeedOfLight --section WarpStateStats -k regex:conv_igemm \
        python benchmarks/ncu_backward.py r50_3x3_14

Warm-up calls first (compilation), then one dgrad and one wgrad between
``cudaProfilerStart``/``Stop`` (use ``--profile-from-start off``).
"""

import sys

import torch

from tritonconv.bench.dense import BY_LAYER
from tritonconv.geometry import make_geometry
from tritonconv.ops import implicit_gemm as ig


def main(name: str) -> None:
    case = BY_LAYER[name]
    cl = torch.channels_last
    x = torch.randn(case.input, device="cuda", dtype=torch.bfloat16).to(memory_format=cl)
    w = torch.randn(case.weight, device="cuda", dtype=torch.bfloat16).to(memory_format=cl)
    s, p, d, g = (case.stride,) * 2, (case.padding,) * 2, (case.dilation,) * 2, case.groups
    geometry = make_geometry(case.input[2:], case.weight[2:], s, p, p, d)
    dy = torch.randn((case.input[0], case.weight[0], *geometry.output), device="cuda")
    dy = dy.to(x.dtype).to(memory_format=cl)
    for _ in range(3):
        ig.conv_forward(x, w, None, geometry, g)
        ig.conv_grad_input(dy, w, x, geometry, g)
        ig.conv_grad_weight(dy, x, w.shape, geometry, g)
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    ig.conv_forward(x, w, None, geometry, g)
    ig.conv_grad_input(dy, w, x, geometry, g)
    ig.conv_grad_weight(dy, x, w.shape, geometry, g)
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "r50_3x3_14")
