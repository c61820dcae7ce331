"""Per-call wall time of a depthwise fwd+bwd on the GPU (MobileNetV3's features.7 depthwise,
3x3, stride 1 and 2, bf16 channels-last, batch 32) against F.conv2d, and a cProfile of the
strided call's host path: where a layer's eager time goes when the kernels are not the limit.

    PYTHONPATH=src python benchmarks/profile_depthwise_host.py
"""

import cProfile
import pstats

import torch
import torch.nn.functional as F

import tritonconv as tc
from tritonconv.bench import loop_us


def step(conv, x, w, dy, stride, **kw):
    y = conv(x, w, None, stride, 1, 1, x.shape[1], **kw)
    torch.autograd.grad(y, (x, w), dy)


def main():
    torch.backends.cudnn.benchmark = True
    for stride in (1, 2):
        x = torch.randn(32, 240, 28, 28, device="cuda", dtype=torch.bfloat16)
        x = x.to(memory_format=torch.channels_last).requires_grad_()
        w = torch.randn(240, 1, 3, 3, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        y = F.conv2d(x, w, None, stride, 1, 1, 240)
        dy = torch.randn_like(y)
        args = (x, w, dy, stride)
        ours = loop_us(lambda a=args: step(tc.conv2d, *a, algo="depthwise"))
        theirs = loop_us(lambda a=args: step(F.conv2d, *a))
        print(
            f"stride {stride}: fwd+bwd wall per call ours {ours:.0f} us, F.conv2d {theirs:.0f} us"
        )
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(100):
        step(tc.conv2d, x, w, dy, 2, algo="depthwise")
    torch.cuda.synchronize()
    profile.disable()
    pstats.Stats(profile).sort_stats("tottime").print_stats(14)


if __name__ == "__main__":
    main()
