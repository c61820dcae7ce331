"""The host side of suite ``more``'s layers on a CPU machine: kernels a call launches and µs.

Suite ``more`` on an H200 (session 41) had the backward of its short layers at 0.34-0.78x of
cuDNN's wall time per call while their kernels ran 1.2-2.8x faster: the host pays per launch
and per relayout. For each layer (the suite's channel counts and kernel, a small batch and
plane: the host path depends on those), this lists the kernels one forward and one backward
launch under the GPU's rules (a 132-multiprocessor GPU with TMA, as ``tests/test_gpu_paths.py``
sets them), then replays both with every launch a no-op (``host_local.fake_gpu_launches``) and
prints µs per call: tritonconv's Python and PyTorch's autograd, what the GPU host pays apart
from Triton's C launcher and the driver (about 2-3x this machine's figures), plus the PyTorch
ops a call makes itself (a copy of dW into the weight's layout), which still run, on these
small CPU tensors.

    TRITON_INTERPRET=1 TRITONCONV_CPU_KERNELS=1 PYTHONPATH=src python benchmarks/host_layers.py \\
        [--profile LAYER]    # and a cProfile of that layer's backward (a substring of its name)
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

import tritonconv as tc
from tritonconv import launch
from tritonconv.bench import loop_us, profile_calls
from tritonconv.ops import implicit_gemm

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from host_local import fake_gpu_launches

# name: (call, input shape, weight shape, bias channels or 0); bf16, 2-D ones channels-last
LAYERS = {
    "conv2d 3x3 64->64 (reference)": (lambda x, w, b: tc.conv2d(x, w, b, padding=1),
                                      (1, 64, 5, 5), (64, 64, 3, 3), 0),
    "wav2vec first conv1d 1->512 k10 s5": (lambda x, w, b: tc.conv1d(x, w, b, stride=5),
                                           (1, 1, 160), (512, 1, 10), 0),
    "wav2vec conv1d 512->512 k3 s2": (lambda x, w, b: tc.conv1d(x, w, b, stride=2),
                                      (1, 512, 15), (512, 512, 3), 0),
    "unet up 2x2 s2 128->64": (lambda x, w, b: tc.conv_transpose2d(x, w, b, stride=2),
                               (1, 128, 4, 4), (128, 64, 2, 2), 64),
    "DCGAN 4x4 s2 p1 256->128": (lambda x, w, b: tc.conv_transpose2d(x, w, b, 2, 1),
                                 (1, 256, 4, 4), (256, 128, 4, 4), 0),
    "vocoder conv_transpose1d k4 s2 p1": (lambda x, w, b: tc.conv_transpose1d(x, w, b, 2, 1),
                                          (1, 256, 8), (256, 128, 4), 0),
}  # fmt: skip


def gpu_rules() -> None:
    implicit_gemm.INTERPRETER = False
    implicit_gemm._has_tma = lambda device: True
    implicit_gemm.multiprocessor_count = lambda device: 132


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default=None, help="a layer name's substring")
    opts = parser.parse_args()
    if not tc.INTERPRETER or os.environ.get("TRITONCONV_CPU_KERNELS") != "1":
        raise SystemExit("run with TRITON_INTERPRET=1 TRITONCONV_CPU_KERNELS=1 on a CPU machine")
    gpu_rules()
    names: list[str] = []
    interpret = launch._interpret

    def spy(kernel, grid, args, meta):
        names.append(launch.kernel_name(kernel))
        return interpret(kernel, grid, args, meta)

    launch._interpret = spy
    calls = {}
    for name, (fn, xs, ws, bias) in LAYERS.items():
        x = torch.randn(xs, dtype=torch.bfloat16)
        w = torch.randn(ws, dtype=torch.bfloat16)
        if x.dim() == 4:
            x, w = x.to(memory_format=torch.channels_last), w.to(memory_format=torch.channels_last)
        x.requires_grad_()
        w.requires_grad_()
        b = torch.randn(bias, dtype=torch.bfloat16).requires_grad_() if bias else None
        leaves = [t for t in (x, w, b) if t is not None]
        names.clear()
        y = fn(x, w, b)
        forward = list(names)
        dy = torch.randn_like(y)
        names.clear()
        torch.autograd.grad(y, leaves, dy, retain_graph=True)
        print(f"{name}\n  forward  {len(forward)}: {', '.join(forward)}\n"
              f"  backward {len(names)}: {', '.join(names)}")  # fmt: skip

        def forward_call(fn=fn, x=x, w=w, b=b):
            with torch.no_grad():
                fn(x, w, b)

        def backward_call(y=y, leaves=leaves, dy=dy):
            torch.autograd.grad(y, leaves, dy, retain_graph=True)

        for f in (forward_call, backward_call):  # (recorded under the interpreter)
            f()
            f()
        calls[name] = (forward_call, backward_call)
    launch._interpret = interpret
    fake_gpu_launches()
    launch.bind_cuda_context = lambda device: None  # (descriptors: no driver here)
    print("\nµs a call with every launch a no-op (best of 3 rounds):")
    for name, (forward_call, backward_call) in calls.items():
        fwd = min(loop_us(forward_call, 500) for _ in range(3))
        bwd = min(loop_us(backward_call, 500) for _ in range(3))
        print(f"  {name:40} forward {fwd:6.1f}  backward {bwd:6.1f}")
    if opts.profile:
        name = next(n for n in calls if opts.profile in n)
        print(f"\n{name}, backward:")
        profile_calls(calls[name][1], 500, 30)


if __name__ == "__main__":
    main()
