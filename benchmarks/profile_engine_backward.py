"""Where a small convolution's forward + backward spends its host time once the autograd engine
runs the backward (issue 14's training-call gap).

``profile_call_parts.py`` on the H200 host (session 48): ours forward + backward 264 µs a call
against ``F.conv2d``'s 179 and an empty ``autograd.Function``'s 82, with our forward (graph)
36 µs and our backward node 50 µs when called on the main thread. That leaves ~100 µs that only
the engine's run of our node shows: on a CUDA tensor the engine runs the node on its device
thread. This probe stamps four moments of each call, with ``time.perf_counter_ns`` in a
wrapper around the node's ``backward``:

    t0  before ``torch.autograd.grad``     t1  the node's backward starts
    t2  the node's backward returns         t3  ``torch.autograd.grad`` returns

so *into node* (t1 - t0: the forward's graph handed to the engine, the thread switch),
*node* (t2 - t1) and *out of node* (t3 - t2: the engine's checks of the gradients, the
accumulation, the switch back) are each a median over many calls, for ours, an empty
Function and an empty Function returning as many values as ours. Then a cProfile of the
node's body as the engine runs it (a profiler enabled inside the wrapper, on that thread).

    PYTHONPATH=src python3 benchmarks/profile_engine_backward.py [--calls N]

Without CUDA it runs under the interpreter (kernels executed: slow; ``--calls 20``) and the
engine runs the node on the calling thread: only the plumbing is checked.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import time

import torch
import torch.nn.functional as F

import tritonconv as tc
from tritonconv.bench import loop_us
from tritonconv.bench.host import EmptyFunction

CASE = (
    (1, 32, 8, 8),
    (32, 32, 3, 3),
    1,
    torch.bfloat16,
)  # the dense 3x3 bf16 of profile_call_parts


class _Empty(EmptyFunction):
    """The host probes' empty Function (its own class: this probe wraps its backward)."""


class _EmptyWide(torch.autograd.Function):
    """Our node's shape: three tensor inputs and one tuple of values."""

    @staticmethod
    def forward(ctx, x, w, b, rest):
        ctx.save_for_backward(x, w)
        return torch.empty_like(x)

    @staticmethod
    def backward(ctx, grad):
        _, w = ctx.saved_tensors
        return grad, torch.empty_like(w), None, None


STAMPS: list[int] = []
PROFILE: list[cProfile.Profile | None] = [None]


def _stamped(cls: type) -> None:
    """Wrap ``cls.backward`` to stamp its start and end (and profile it when asked)."""
    inner = cls.backward

    def backward(ctx, *grads):
        STAMPS.append(time.perf_counter_ns())
        profile = PROFILE[0]
        if profile is not None:
            profile.enable()
        result = inner(ctx, *grads)
        if profile is not None:
            profile.disable()
        STAMPS.append(time.perf_counter_ns())
        return result

    cls.backward = staticmethod(backward)


def phases(call, calls: int) -> dict:
    """Median µs of each phase of ``call`` (which runs one forward and its backward through
    ``torch.autograd.grad``, the node stamped)."""
    sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
    for _ in range(10):
        call()
    sync()
    into, node, out, total = [], [], [], []
    for _ in range(calls):
        STAMPS.clear()
        t0 = time.perf_counter_ns()
        call()
        t3 = time.perf_counter_ns()
        t1, t2 = STAMPS[0], STAMPS[-1]
        into.append(t1 - t0)
        node.append(t2 - t1)
        out.append(t3 - t2)
        total.append(t3 - t0)
    sync()
    med = lambda v: statistics.median(v) / 1e3  # noqa: E731
    return {"into node": med(into), "node": med(node), "out of node": med(out), "total": med(total)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=400)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    xs, ws, padding, dtype = CASE
    x = torch.randn(xs, device=device, dtype=dtype).to(memory_format=torch.channels_last)
    w = torch.randn(ws, device=device, dtype=dtype).to(memory_format=torch.channels_last)
    xg, wg = x.clone().requires_grad_(), w.clone().requires_grad_()
    y = tc.conv2d(xg, wg, None, 1, padding)
    dy = torch.randn_like(y)
    function = type(y.grad_fn)._forward_cls
    print(f"our node: {function.__name__} ({device})")
    for cls in (function, _Empty, _EmptyWide):
        _stamped(cls)
    b = torch.zeros(ws[0], device=device, dtype=dtype)
    rest = (1, 1, 1, 1, 1, None, None)
    cases = {
        "ours": lambda: torch.autograd.grad(tc.conv2d(xg, wg, None, 1, padding), (xg, wg), dy),
        "empty Function": lambda: torch.autograd.grad(_Empty.apply(xg, wg), (xg, wg), dy),
        "empty, our shape": lambda: torch.autograd.grad(
            _EmptyWide.apply(xg, wg, b, rest), (xg, wg), dy
        ),
    }
    print(f"{'':18s}{'into node':>11s}{'node':>9s}{'out of node':>13s}{'total':>9s}  (µs, median)")
    for _ in range(2):  # (two rounds: the second after everything is warm)
        for name, call in cases.items():
            p = phases(call, args.calls)
            print(f"{name:18s}" + "".join(f"{p[k]:>{n}.1f}" for k, n in zip(p, (11, 9, 13, 9))))
    fb = lambda: torch.autograd.grad(F.conv2d(xg, wg, None, 1, padding), (xg, wg), dy)  # noqa: E731
    print(f"F.conv2d fwd+bwd loop {loop_us(fb, args.calls):.1f} µs")
    profile = PROFILE[0] = cProfile.Profile()
    for _ in range(args.calls):
        cases["ours"]()
    PROFILE[0] = None
    print(f"\ncProfile of our node's body as the engine runs it ({args.calls} calls):")
    pstats.Stats(profile).sort_stats("tottime").print_stats(args.top)


if __name__ == "__main__":
    main()
