"""Probe (issue 11/14, session 20): the host time of a 1x1 layer's call with the TMA GEMM
(``pointwise_tma_kernel``: three host-made descriptors per launch) against the pointer-load
implicit GEMM, on a tiny layer (the GPU work negligible), eager, in one process.

Session 20's eager models ran slower with the TMA path (resnet50 training 0.76x cuDNN against
0.85x without it, same H100) although its kernels are faster: this says whether the calls'
host time is why, and where it goes (cProfile of the TMA replays).

    PYTHONPATH=src python benchmarks/probe_tma_host.py
"""

from __future__ import annotations

import cProfile
import pstats
import time

import torch

import tritonconv as tc
from tritonconv.ops import implicit_gemm

RULE = implicit_gemm.pointwise_tma_config


def per_call_us(fn, calls: int) -> float:
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / calls * 1e6


def main() -> None:
    x = torch.randn(1, 64, 8, 8, device="cuda", dtype=torch.bfloat16)
    x = x.contiguous(memory_format=torch.channels_last)
    w = torch.randn(256, 64, 1, 1, device="cuda", dtype=torch.bfloat16)
    xg = x.clone().requires_grad_()

    def forward():
        tc.conv2d(x, w, algo="implicit_gemm")

    def step():
        tc.conv2d(xg, w, algo="implicit_gemm").sum().backward()

    def cudnn_forward():
        torch.nn.functional.conv2d(x, w)

    for rnd in range(3):
        for name, rule in (("tma", RULE), ("pointer", lambda *a, **k: None)):
            implicit_gemm.pointwise_tma_config = rule
            tc.clear_caches()
            for _ in range(20):
                forward()
                step()
            f = per_call_us(forward, 2000)
            s = per_call_us(step, 500)
            c = per_call_us(cudnn_forward, 2000)
            print(f"round {rnd} {name:8s} forward {f:6.1f} µs  fwd+bwd (x grad) {s:6.1f} µs  "
                  f"(cuDNN forward {c:6.1f} µs)", flush=True)  # fmt: skip
    implicit_gemm.pointwise_tma_config = RULE
    tc.clear_caches()
    for _ in range(20):
        forward()
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(2000):
        forward()
    torch.cuda.synchronize()
    profile.disable()
    pstats.Stats(profile).sort_stats("tottime").print_stats(14)


if __name__ == "__main__":
    main()
