"""How much of a converted model's host-paced training step any Python convolution node costs,
against what ours costs (issue 14's training gap).

The models suite's bf16 training steps at batch 32 are host-paced on both sides (session 40:
mobilenet_v3_large's GPU time 5.3 ms a step against 23-28 ms of wall), so ours loses by its
host time per convolution. This probe times the suite's step (forward, ``.float().square()
.mean()``, backward into ``.grad``; ``profile_model_host.step_fn``) for four versions of one
torchvision model (``--variants``), alternated round by round:

* ``torch``: the model as it is (cuDNN, C++ autograd nodes);
* ``ours``: ``tritonconv.nn.convert`` of it (``ours, unmemoized``: each module's plan looked
  up every call, as before session 48's ``functional.memoized_convolution``);
* ``python node``: every convolution as a Python ``autograd.Function`` whose forward is
  ``F.conv2d`` and whose backward is ``aten.convolution_backward`` -- cuDNN's kernels and
  host path under a Python node, the least a Python-implemented convolution can cost;
* ``empty node``: the same Function launching nothing (outputs from ``torch.empty``): the
  Python node's own share.

``ours - python node`` is what our code costs beyond any Python convolution; ``python node -
torch`` what a Python node costs beyond a C++ one.

    (cd benchmarks && PYTHONPATH=../src python3 probe_model_floor.py [--models resnet50 ...]
        [--variants torch ours ...] [--modes train infer])

Then the hit rate of the kept launch arguments (``launch._ready``) over ``--steps`` more
steps of each ``ours`` variant. ``--modes infer`` times no-gradient forwards in eval mode
instead (the ``python node`` then costs a forward through ``autograd.Function`` without a
graph, the ``empty node`` one allocation); ``--modes train infer`` both, one build each.
"""

from __future__ import annotations

import argparse
import copy
import statistics

import torch
import torch.nn.functional as F
from profile_model_host import ms_per_step, step_fn
from torch import nn

import tritonconv.nn as tnn
from tritonconv import launch
from tritonconv.testing import without_plan_memos


class _PythonConv(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, module, empty):
        ctx.save_for_backward(x, weight)
        ctx.module, ctx.empty, ctx.has_bias = module, empty, bias is not None
        if empty:
            return torch.empty(module.out_shape, dtype=x.dtype, device=x.device).to(
                memory_format=torch.channels_last
            )
        return F.conv2d(x, weight, bias, module.stride, module.padding, module.dilation,
                        module.groups)  # fmt: skip

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        m = ctx.module
        if ctx.empty:
            gb = torch.empty(weight.shape[0], dtype=x.dtype, device=x.device)
            return (
                torch.empty_like(x),
                torch.empty_like(weight),
                gb if ctx.has_bias else None,
                None,
                None,
            )
        gx, gw, gb = torch.ops.aten.convolution_backward(
            grad, x, weight, [weight.shape[0]] if ctx.has_bias else None, m.stride, m.padding,
            m.dilation, False, [0, 0], m.groups, [True, True, ctx.has_bias],
        )  # fmt: skip
        return gx, gw, gb if ctx.has_bias else None, None, None


class _Stub(nn.Conv2d):
    empty = False

    def forward(self, x):
        if not hasattr(self, "out_shape"):
            with torch.no_grad():
                self.out_shape = tuple(super().forward(x).shape)
        return _PythonConv.apply(x, self.weight, self.bias, self, self.empty)


def _stubbed(model: nn.Module, empty: bool) -> nn.Module:
    model = copy.deepcopy(model)
    for m in model.modules():
        if type(m) is nn.Conv2d:
            m.__class__ = _Stub
            m.empty = empty
    return model


VARIANTS = ("torch", "ours", "ours, unmemoized", "python node", "empty node")


def _variant(key: str, ref: nn.Module) -> nn.Module:
    if key.startswith("ours"):
        model = tnn.convert(copy.deepcopy(ref))
        return without_plan_memos(model) if key == "ours, unmemoized" else model
    if key == "torch":
        return ref
    return _stubbed(ref, key == "empty node")


def _inference(model: nn.Module, x: torch.Tensor):
    def run():
        with torch.no_grad():
            model(x)

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["mobilenet_v3_large", "resnet50"])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    parser.add_argument(
        "--modes", nargs="+", default=["train"], choices=("train", "infer"),
        help="training steps, no-gradient forwards (eval mode), or both (one build each)",
    )  # fmt: skip
    args = parser.parse_args()
    import torchvision

    cl = torch.channels_last
    device = "cuda" if torch.cuda.is_available() else "cpu"  # (the CPU: a smoke test)
    size = 224 if device == "cuda" else 64
    for name in args.models:
        ref = getattr(torchvision.models, name)().to(device, torch.bfloat16, memory_format=cl)
        x = torch.randn(args.batch, 3, size, size, device=device).to(
            torch.bfloat16, memory_format=cl
        )
        convs = sum(1 for m in ref.modules() if isinstance(m, nn.Conv2d))
        models = {key: _variant(key, ref) for key in ["torch", *args.variants]}
        for mode in args.modes:
            fns = {}
            for key, model in models.items():
                model.train(mode == "train")
                fns[key] = step_fn(model, x) if mode == "train" else _inference(model, x)
                for _ in range(3):
                    fns[key]()
            _report(name, args, convs, mode, fns, device)


def _report(name: str, args, convs: int, mode: str, fns: dict, device: str) -> None:
    """Time ``fns`` in alternated rounds and print ms a step and µs a convolution over torch,
    then the kept launch arguments' hits."""
    if device == "cuda":
        torch.cuda.synchronize()
    wall = {key: [] for key in fns}
    cpu = {key: [] for key in fns}
    for _ in range(args.rounds):
        for key, fn in fns.items():
            w, c = ms_per_step(fn, args.steps)
            wall[key].append(w)
            cpu[key].append(c)
    what = "inference (no gradients)" if mode == "infer" else "training step"
    print(f"== {name}, batch {args.batch}, {convs} convolutions, {what}: ms, median of "
          f"{args.rounds} rounds (wall / process CPU)")  # fmt: skip
    base = statistics.median(wall["torch"])
    for key in fns:
        w, c = statistics.median(wall[key]), statistics.median(cpu[key])
        per_conv = (w - base) / convs * 1e3
        print(f"  {key:16s} {w:7.2f} / {c:7.2f}   torch/this {base / w:.3f}   "
              f"{per_conv:+6.1f} µs a convolution over torch")  # fmt: skip
    for key in (k for k in fns if k.startswith("ours")):
        hits, misses = _kept_launches(fns[key], args.steps)
        print(f"  {key}: kept launch arguments (launch._ready) {hits} hits, {misses} "
              f"misses in {args.steps} steps")  # fmt: skip


def _kept_launches(fn, steps: int) -> tuple[int, int]:
    """Hits and misses of the kept launch arguments (``launch._ready``, keyed by the
    launches' addresses) over ``steps`` calls of ``fn``: whether a model's steps repeat their
    addresses (a miss rebuilds a launch's arguments and puts them in the cache)."""
    counts = [0, 0]
    get = launch._ready.get

    def counted(key):
        found = get(key)
        counts[found is None] += 1
        return found

    launch._ready.get = counted
    try:
        for _ in range(steps):
            fn()
    finally:
        del launch._ready.get
    return counts[0], counts[1]


if __name__ == "__main__":
    main()
