"""Where one convolution call's host time goes, layer by layer (issue 14's host gap).

Times, as the best of several rounds of back-to-back calls (µs a call), each layer of a small
call's path on its own: the plan lookup (and the key it builds), ``autograd.run``, the
launch-plan replay, one recorded launch, one allocation; then whole calls without and with
gradients, against ``F.conv2d`` and a trivial ``autograd.Function`` (the floor of a Python
autograd node; the same with its gradients allocated; a native op's graph, whose node is
C++, for what a Python node costs over one). The backward is also timed as its
node called on this thread (``grad_fn.apply(dy)``: no autograd engine, whose CUDA backward runs on
a device thread of its own, out of a profiler's sight) and as its launch-plan replay alone.
The layers are small enough that the GPU never paces a loop.

On a GPU machine::

    PYTHONPATH=src python benchmarks/profile_call_parts.py [--json F]

On a CPU machine the kernels run once under the interpreter (recording the plans), then the
interpreter is replaced by a no-op, so the figures are the Python alone (``F.conv2d``'s rows
there still compute: compare ours with the empty Function's, not with them)::

    TRITON_INTERPRET=1 TRITONCONV_CPU_KERNELS=1 PYTHONPATH=src \\
        python benchmarks/profile_call_parts.py
"""

from __future__ import annotations

import argparse
import json

import torch
import torch.nn.functional as F

import tritonconv as tc
from tritonconv import autograd, launch
from tritonconv import functional as fn
from tritonconv.bench import loop_us
from tritonconv.bench.host import EmptyFunction
from tritonconv.plans import tensor_key, values_key

# (name, input shape, weight shape, groups, padding, dtype, channels-last)
CASES = [
    ("depthwise 7x7 fp32", (1, 32, 7, 7), (32, 1, 7, 7), 32, 3, torch.float32, True),
    ("grouped 3x3 bf16", (1, 32, 8, 8), (32, 8, 3, 3), 4, 1, torch.bfloat16, True),
    ("dense 3x3 bf16", (1, 32, 8, 8), (32, 32, 3, 3), 1, 1, torch.bfloat16, True),
]


class _Floor(torch.autograd.Function):
    """An autograd node that does nothing: what any Python ``Function`` costs a call."""

    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return torch.empty_like(x)

    @staticmethod
    def backward(ctx, grad):
        return grad, None


def best_us(fns: dict, rounds: int, calls: int) -> dict:
    """Best per-call µs of each function over ``rounds`` rounds of ``calls`` back-to-back calls
    (``bench.loop_us``), the functions interleaved round by round (a noisy host shifts all of
    them alike)."""
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(rounds):
        for name, f in fns.items():
            best[name] = min(best[name], loop_us(f, calls, warmup=20))
    return best


def parts(case, device: str, rounds: int, calls: int) -> dict:
    _, xs, ws, groups, padding, dtype, last = case
    x = torch.randn(xs, device=device, dtype=dtype)
    if last:
        x = x.to(memory_format=torch.channels_last)
    w = torch.randn(ws, device=device, dtype=dtype)
    options = (1, padding, 1, groups, "auto", None)
    with torch.no_grad():
        tc.conv2d(x, w, None, 1, padding, 1, groups)
    xg, wg = x.clone().requires_grad_(), w.clone().requires_grad_()
    y = tc.conv2d(xg, wg, None, 1, padding, 1, groups)
    dy = torch.randn_like(y)
    torch.autograd.grad(y, (xg, wg), dy, retain_graph=True)
    with torch.no_grad():  # (the engine runs a backward without grad mode)
        y.grad_fn.apply(dy)  # (the backward's launch plan, for the same call on this thread)
    plan_g = fn._convolution_plan(2, xg, wg, None, options, False)
    floor = _Floor.apply(xg, wg)
    cuda = device == "cuda"
    if not cuda:  # the plans are recorded: from here on, kernels are not run
        launch._interpret = lambda *a, **k: None
    plan = fn._convolution_plan(2, x, w, None, options, False)
    replay = plan.replay
    steps = [] if replay is None else [s for s in replay.steps if type(s).__name__ == "_Launch"]
    # (the launch's table: the forward's tensors, then its allocations as recorded; these
    # small forwards' replays append nothing else)
    table = [x, w] + [
        torch.empty_strided(s.shape, s.strides, dtype=s.dtype, device=s.device)
        for s in ([] if replay is None else replay.steps)
        if type(s).__name__ == "_Alloc"
    ]
    where = None
    if cuda:
        d = launch.current_device()
        where = (d, torch._C._cuda_getCurrentRawStream(d), launch._hooks_installed())

    def no_grad(f):
        def call():
            with torch.no_grad():
                f()

        return call

    fns = {
        "F.conv2d fwd": no_grad(lambda: F.conv2d(x, w, None, 1, padding, 1, groups)),
        "ours fwd": no_grad(lambda: tc.conv2d(x, w, None, 1, padding, 1, groups)),
        "  plan lookup": lambda: fn._convolution_plan(2, x, w, None, options, False),
        "    its key (tensors, values)": lambda: (
            tensor_key(x),
            tensor_key(w),
            tensor_key(None),
            values_key(options),
        ),
        "  apply (run + reshapes)": no_grad(lambda: fn._apply_convolution(plan, 2, x, w, None)),
        "    autograd.run": no_grad(
            lambda: autograd.run(plan.op, x, w, None, *plan.params, plan=plan, tensors=[x, w])
        ),
    }
    if replay is not None:
        fns["      replay"] = lambda: replay.run([x, w])
    if steps and cuda:
        fns["        one launch"] = lambda: steps[0].run(table, where)
    fns["        one allocation"] = lambda: torch.empty_like(x)
    fns["F.conv2d fwd+bwd"] = lambda: torch.autograd.grad(
        F.conv2d(xg, wg, None, 1, padding, 1, groups), (xg, wg), dy
    )
    fns["ours fwd (graph)"] = lambda: tc.conv2d(xg, wg, None, 1, padding, 1, groups)
    fns["ours fwd+bwd"] = lambda: torch.autograd.grad(
        tc.conv2d(xg, wg, None, 1, padding, 1, groups), (xg, wg), dy
    )
    fns["  backward node, this thread"] = no_grad(lambda: y.grad_fn.apply(dy))
    backward = next(iter(plan_g.backward.values()), None)
    if backward is not None:
        fns["    backward replay"] = lambda: backward.run([dy, x, w], placeholders=False)
    fns["empty Function fwd+bwd"] = lambda: torch.autograd.grad(
        _Floor.apply(xg, wg), (xg, wg), x, allow_unused=True
    )
    fns["  + 2 allocations"] = lambda: torch.autograd.grad(EmptyFunction.apply(xg, wg), (xg, wg), x)
    fns["  node, this thread"] = no_grad(lambda: floor.grad_fn.apply(x))
    # the same graph through a C++ node (a native op's backward, on the engine's device
    # thread as ours): what a Python Function costs over it
    fns["native op (mul) fwd+bwd"] = lambda: torch.autograd.grad(xg * 2, xg, x)
    return best_us(fns, rounds, calls)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--calls", type=int, default=400)
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu" and not launch.INTERPRETER:
        raise SystemExit("no GPU: run under TRITON_INTERPRET=1 TRITONCONV_CPU_KERNELS=1")
    results = {}
    for case in CASES:
        results[case[0]] = figures = parts(case, device, args.rounds, args.calls)
        print(f"== {case[0]} ({device})")
        for name, us in figures.items():
            print(f"{name:<28} {us:8.2f} µs")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": device, "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
