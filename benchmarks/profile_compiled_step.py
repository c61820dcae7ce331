"""Eager and compiled training step of a converted torchvision model against the torch model:
ms per step (wall, synchronised once per loop) and the compiled step's top GPU kernels, so a
step far slower than its kernels shows up as host-bound (issue 14; RESULTS.md session 17).

bf16 channels-last, train mode, the models suite's step (forward, ``.float().square().mean()``,
backward into ``.grad``). Needs CUDA and torchvision.

    PYTHONPATH=src python benchmarks/profile_compiled_step.py [--model efficientnet_b0]
        [--batch 32] [--steps 10] [--top 18]
"""

from __future__ import annotations

import argparse
import time

import torch
import torchvision
from torch._dynamo.utils import counters
from torch.profiler import ProfilerActivity, profile

import tritonconv.nn as tnn


def _step(model: torch.nn.Module, x: torch.Tensor) -> None:
    for p in model.parameters():
        p.grad = None
    model(x).float().square().mean().backward()


def _ms_per_step(model: torch.nn.Module, x: torch.Tensor, steps: int) -> float:
    for _ in range(3):  # (the compile, the caches)
        _step(model, x)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(steps):
        _step(model, x)
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / steps * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="efficientnet_b0")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--top", type=int, default=18)
    args = parser.parse_args()
    x = torch.randn(args.batch, 3, 224, 224, device="cuda")
    x = x.to(torch.bfloat16, memory_format=torch.channels_last)
    for side in ("ours", "torch"):
        torch.manual_seed(0)
        model = getattr(torchvision.models, args.model)()
        if side == "ours":
            tnn.convert(model)
        model = model.to("cuda", torch.bfloat16).to(memory_format=torch.channels_last).train()
        torch._dynamo.reset()
        compiled = torch.compile(model)
        for label, m in (("eager", model), ("compiled", compiled)):
            print(f"{side} {label}: {_ms_per_step(m, x, args.steps):.2f} ms/step", flush=True)
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(3):
                _step(compiled, x)
            torch.cuda.synchronize()
        gpu_ms = sum(e.self_device_time_total for e in prof.key_averages()) / 3e3
        print(f"{side} compiled: {gpu_ms:.2f} ms of GPU time per step; top kernels:")
        table = prof.key_averages().table(sort_by="cuda_time_total", row_limit=args.top)
        print(table, flush=True)
        print(f"{side} Dynamo: {dict(counters['stats'])}", flush=True)


if __name__ == "__main__":
    main()
