"""The GPU replay path's host cost, measured on a CPU machine (issue 10).

On a machine without a GPU the kernels run in Triton's interpreter, whose cost hides
everything else. This probe records each call's launch plans under the interpreter once, then
switches ``launch`` to its compiled-kernel path with a no-op launcher (``launch.INTERPRETER``
off, a fake compiled entry whose C launcher does nothing, stream 0): what a repeated call then
costs is exactly what it costs the GPU machine's host apart from Triton's C launcher and the
driver. It prints per-call µs of the engine's floors (an empty ``autograd.Function`` and a native
op, forward + backward) and of ours, forward without gradients and forward + backward, on a
bf16 channels-last 3x3 convolution with and without bias (the tensors are tiny: the loop times
the host). ``--profile`` adds a cProfile of the forward + backward calls.

    TRITON_INTERPRET=1 TRITONCONV_CPU_KERNELS=1 PYTHONPATH=src python benchmarks/host_local.py

Compare two versions of the code by running both in alternation (the machine's speed drifts);
the figures are this machine's, not the GPU host's (which is about 2-3x slower per call).
"""

from __future__ import annotations

import argparse
import os

import torch

import tritonconv as tc
from tritonconv import launch
from tritonconv.bench import loop_us, profile_calls
from tritonconv.bench.host import floor_steps


def fake_gpu_launches() -> None:
    """From now on every launch takes the compiled-kernel path with a launcher that does
    nothing: the first launch of a signature 'compiles' to a no-op entry, later ones reuse it."""

    def no_op(*args, **meta):
        return None

    # as a direct launcher (``launch._direct_launcher``): what a replay keeps of a launch
    no_op.c_launch, no_op.arguments, no_op.expands = no_op, lambda grid, stream, args: (), True

    class Compiled:
        def __getitem__(self, grid):
            return no_op

    launch.INTERPRETER = False
    launch.current_device = lambda: 0
    torch._C._cuda_getCurrentRawStream = lambda device: 0
    launch._entry = lambda compiled, kernel, args, meta: (None, (), no_op)
    launch._direct_triton = lambda: True  # (replays keep their arguments, as on Triton 3.6)
    # ``kernel[grid](...)`` on a first compiled launch: nothing to compile here.
    launch._Launch.kernel = property(lambda self: Compiled(), lambda self, value: None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--rounds", type=int, default=5)
    opts = parser.parse_args()
    if not tc.INTERPRETER or os.environ.get("TRITONCONV_CPU_KERNELS") != "1":
        raise SystemExit("run with TRITON_INTERPRET=1 TRITONCONV_CPU_KERNELS=1 on a CPU machine")
    cl = torch.channels_last
    x = torch.randn(1, 16, 5, 5, dtype=torch.bfloat16).to(memory_format=cl)
    w = torch.randn(16, 16, 3, 3, dtype=torch.bfloat16).to(memory_format=cl)
    b = torch.randn(16, dtype=torch.bfloat16)
    xg, wg, bg = (t.clone().requires_grad_() for t in (x, w, b))
    dy = torch.randn_like(x)

    def step(bias):
        def run():
            xg.grad = wg.grad = bg.grad = None
            tc.conv2d(xg, wg, bias, 1, 1).backward(dy)

        return run

    rows = {
        **floor_steps(xg, wg, dy),
        "ours fwd, no grad": lambda: tc.conv2d(x, w, None, 1, 1),
        "ours fwd+bwd": step(None),
        "ours fwd+bwd, bias": step(bg),
    }
    with torch.no_grad():
        rows["ours fwd, no grad"]()
    for name in ("ours fwd+bwd", "ours fwd+bwd, bias"):
        rows[name]()  # recorded under the interpreter
        rows[name]()
    fake_gpu_launches()
    best = dict.fromkeys(rows, float("inf"))
    for _ in range(opts.rounds):  # rounds in alternation: the machine's drift hits all rows
        for name, fn in rows.items():
            with torch.set_grad_enabled("no grad" not in name):
                best[name] = min(best[name], loop_us(fn, 2000))
    for name, us in best.items():
        print(f"{name:28} {us:7.1f} µs")
    if opts.profile:
        profile_calls(rows["ours fwd+bwd"], 2000, 30)


if __name__ == "__main__":
    main()
