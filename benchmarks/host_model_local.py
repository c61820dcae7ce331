"""A converted model's host time per convolution, measured on a CPU machine (issue 14).

``host_local.py`` times one small layer in a loop; a model step is colder (session 48: 64 µs a
training call in the loop, 130 µs a convolution in a 40-convolution model, this CPU) and it
found a bug the loop could not (the caches' O(n) eviction). This probe builds a model of
``--convs`` distinct small convolutions (1x1, 3x3 and 5x5, dense and depthwise, ReLU between),
bf16 channels-last, converts it, records every plan under the interpreter, then switches to
``host_local.fake_gpu_launches`` (the compiled-launch path with no-op launches) and times per
step, in alternated rounds:

* inference (no gradients) and a training step (forward, ``.float().sum()``, backward), each
  with the modules' plan memo on and off (``functional.memoized_convolution``);
* ``--stable-addresses``: the kept launch arguments (``launch._ready``) keyed without the
  tensors' addresses, as if every step reused its addresses (the CUDA caching allocator's
  steady state: every launch a hit). Without it each launch misses, as on the CPU, whose
  allocator does not repeat addresses.

``--profile`` adds a cProfile of the memoized training step.

    TRITON_INTERPRET=1 TRITONCONV_CPU_KERNELS=1 PYTHONPATH=src \\
        python benchmarks/host_model_local.py [--convs 40] [--stable-addresses] [--profile]

The figures are this machine's; the GPU host is about 2-3x slower per call.
"""

from __future__ import annotations

import argparse
import copy
import os

import torch
from host_local import fake_gpu_launches
from torch import nn

import tritonconv as tc
import tritonconv.nn as tnn
from tritonconv import launch
from tritonconv.bench import loop_us, profile_calls
from tritonconv.caches import BoundedCache
from tritonconv.testing import without_plan_memos


class _AddressFree(BoundedCache):
    """The kept launch arguments keyed by (step, device, stream) only: every repeat a hit."""

    def get(self, key):
        return super().get(key[:3])

    def put(self, key, value) -> None:
        super().put(key[:3], value)


def model(convs: int) -> nn.Sequential:
    layers, channels = [], 8
    for i in range(convs):
        k = (1, 3, 5)[i % 3]
        depthwise = i % 4 == 1 and k > 1
        out = channels if depthwise else 8 + (i % 7) * 4
        groups = channels if depthwise else 1
        layers += [nn.Conv2d(channels, out, k, padding=k // 2, groups=groups), nn.ReLU()]
        channels = out
    return nn.Sequential(*layers).to(torch.bfloat16, memory_format=torch.channels_last)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--convs", type=int, default=40)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--stable-addresses", action="store_true")
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    if not tc.INTERPRETER or os.environ.get("TRITONCONV_CPU_KERNELS") != "1":
        raise SystemExit("run with TRITON_INTERPRET=1 TRITONCONV_CPU_KERNELS=1 on a CPU machine")
    torch.manual_seed(0)
    memoized = tnn.convert(model(args.convs))
    unmemoized = without_plan_memos(copy.deepcopy(memoized))
    x = torch.randn(1, 8, 4, 4, dtype=torch.bfloat16).to(memory_format=torch.channels_last)

    def infer(net):
        def run():
            with torch.no_grad():
                net(x)

        return run

    def train(net):
        xg = x.clone().requires_grad_()

        def run():
            net(xg).float().sum().backward()

        return run

    fns = {
        "inference, memo": infer(memoized),
        "inference, no memo": infer(unmemoized),
        "training, memo": train(memoized),
        "training, no memo": train(unmemoized),
    }
    for fn in fns.values():  # the plans recorded with the kernels run
        fn()
        fn()
    fake_gpu_launches()
    if args.stable_addresses:
        launch._ready = _AddressFree("kept launch arguments, by step", launch._ready.size)
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(args.rounds):
        for name, fn in fns.items():
            best[name] = min(best[name], loop_us(fn, args.steps))
    where = "the same addresses every step" if args.stable_addresses else "new addresses"
    print(f"{args.convs} convolutions, {where}: µs a step (best of {args.rounds} rounds)")
    for name, us in best.items():
        print(f"  {name:20s} {us:9.1f}   {us / args.convs:6.1f} a convolution")
    if args.profile:
        profile_calls(fns["training, memo"], args.steps, 30)


if __name__ == "__main__":
    main()
