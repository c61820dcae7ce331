"""Where a converted model's training step spends its host time on the GPU machine (issues 10/14).

The models suite's steps are host-bound at batch 32 (NOTES.md, session 9). For one torchvision
model (bf16 channels-last, train mode, the suite's step: forward, ``.float().square().mean()``,
backward into ``.grad``), ours converted against the torch model:

* ms per step, wall and process CPU time, synchronised once per loop (the host's pace), the
  two alternated ``--rounds`` times, and the median speed ratio of each;
* ms per step of ours with every compiled launch a no-op (what is left is Python and
  allocations: the host floor our convolutions set);
* GPU time per step of each (sum of its kernels' device time, torch.profiler), so a step
  slower than its host work shows whether the GPU or the host paces it; the top kernels;
* host µs per launch inside Triton's C launcher, by kernel, timed around each call in a step;
* the top of a cProfile of ours and of the torch model by internal time.

    PYTHONPATH=src python benchmarks/profile_model_host.py [--model resnet50] [--batch 32]
        [--steps 20] [--top 30]
"""

from __future__ import annotations

import argparse
import copy
import time

import torch

import tritonconv.nn as tnn
from tritonconv.bench import profile_calls
from tritonconv.bench.host import launches_replaced


def step_fn(model, x):
    params = [p for p in model.parameters() if p.requires_grad]

    def run():
        for p in params:
            p.grad = None
        model(x).float().square().mean().backward()

    return run


def ms_per_step(fn, steps: int) -> tuple[float, float]:
    """(wall, process CPU) ms per step: the CPU time counts the host's work (every thread,
    the autograd engine's included) but not the time the shared machine takes the CPU away,
    so it compares host paths where the wall time is too noisy to."""
    sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
    fn()
    sync()
    start, cpu = time.perf_counter(), time.process_time()
    for _ in range(steps):
        fn()
    sync()
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    return wall / steps * 1e3, cpu / steps * 1e3


def gpu_ms_per_step(fn, steps: int = 3, top: int = 8) -> float:
    """Device time of ``fn``'s kernels per step, and print the ``top`` kernels."""
    activities = [torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities) as prof:
        for _ in range(steps):
            fn()
        torch.cuda.synchronize()
    events = sorted(
        (e for e in prof.key_averages() if e.self_device_time_total > 0),
        key=lambda e: -e.self_device_time_total,
    )
    for e in events[:top]:
        print(
            f"   {e.count // steps:4}x {e.self_device_time_total / steps / 1e3:7.3f} ms  {e.key[:80]}"
        )
    return sum(e.self_device_time_total for e in events) / steps / 1e3


def launcher_us(fn, steps: int) -> None:
    """Host µs spent inside Triton's C launcher per launch, by kernel, over ``steps`` steps."""
    spent: dict[str, list[float]] = {}

    def timer(launcher, name):
        def timed(*args):
            start = time.perf_counter_ns()
            launcher(*args)
            spent.setdefault(name, []).append((time.perf_counter_ns() - start) / 1e3)

        return timed

    with launches_replaced(timer):
        for _ in range(steps):
            fn()
        torch.cuda.synchronize()
    total = sum(sum(v) for v in spent.values()) / steps
    count = sum(len(v) for v in spent.values()) / steps
    print(f"C launcher: {count:.0f} launches/step, {total / 1e3:.2f} ms/step in it")
    for name, times in sorted(spent.items(), key=lambda kv: -sum(kv[1])):
        times = sorted(times)
        print(
            f"   {name[:40]:40} {len(times) // steps:4}/step  median {times[len(times) // 2]:6.1f}"
            f"  max {times[-1]:7.1f} µs"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--quick", action="store_true", help="only the alternated step times and their ratio"
    )
    args = parser.parse_args()
    import torchvision

    cl = torch.channels_last
    ref = getattr(torchvision.models, args.model)().cuda().to(torch.bfloat16, memory_format=cl)
    ours = tnn.convert(copy.deepcopy(ref))
    ref.train()
    ours.train()
    x = torch.randn(args.batch, 3, 224, 224, device="cuda").to(torch.bfloat16, memory_format=cl)
    fns = {"ours": step_fn(ours, x), "torch": step_fn(ref, x)}
    for fn in fns.values():  # compile, record plans, let cuDNN pick
        for _ in range(3):
            fn()
    torch.cuda.synchronize()
    ratios, cpu_ratios = [], []
    for _ in range(args.rounds):
        times = {name: ms_per_step(fn, args.steps) for name, fn in fns.items()}
        ratios.append(times["torch"][0] / times["ours"][0])
        cpu_ratios.append(times["torch"][1] / times["ours"][1])
        print(
            "  ".join(f"{n} {wall:7.2f} (CPU {cpu:6.2f})" for n, (wall, cpu) in times.items()),
            "ms/step",
            flush=True,
        )
    for what, r in (("wall", sorted(ratios)), ("host CPU", sorted(cpu_ratios))):
        print(
            f"{args.model}: {what} torch/ours median {r[len(r) // 2]:.3f} "
            f"(min {r[0]:.3f}, max {r[-1]:.3f}) over {args.rounds} rounds"
        )
    if args.quick:
        return
    with launches_replaced(lambda launcher, name: lambda *a: None):
        wall, cpu = ms_per_step(fns["ours"], args.steps)
    print(f"ours, no launches: {wall:7.2f} (CPU {cpu:6.2f}) ms/step")
    for name, fn in fns.items():
        print(f"{name}: GPU {gpu_ms_per_step(fn):.2f} ms/step")
    launcher_us(fns["ours"], args.steps)
    for name, fn in fns.items():
        print(f"\n=== cProfile {name}, {args.steps} steps ===")
        profile_calls(fn, args.steps, args.top)


if __name__ == "__main__":
    main()
