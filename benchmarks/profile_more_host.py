"""Where a suite-``more`` layer's backward call spends its wall time on the GPU machine.

Suite ``more`` (session 42, H200) had wav2vec's k3 s2 conv1d backward at 0.44 ms a call
against 0.09 ms of its kernels, and the vocoder's at 0.30 against 0.09: the host, not the
GPU. For each named case (the suite's own tensors, bf16), this prints the per-call µs of
ours and PyTorch's backward in a loop synchronised once at the end (the host's throughput),
the kernels of one backward of each (torch.profiler), and the top of a cProfile of ours;
``--forward``: the same for the forward call (wav2vec's first conv1d: one launch, 109 µs a
call against 67 for cuDNN's, with its kernel 2.25x faster).

    PYTHONPATH=src python benchmarks/profile_more_host.py [--case NAME ...] [--calls N] [--forward]
"""

from __future__ import annotations

import argparse

import torch

from tritonconv.bench import kernel_times, loop_us, profile_calls
from tritonconv.bench.more import CASES


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", nargs="*", default=["wav2vec_conv1d", "vocoder_up_k4"])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--forward", action="store_true", help="the forward call instead")
    args = parser.parse_args()
    which = "forward" if args.forward else "backward"
    for case in (c for c in CASES if c.name in args.case):
        x, w, b = case.make(False, torch.bfloat16)
        leaves = [t for t in (x, w, b) if isinstance(t, torch.Tensor) and t.requires_grad]
        print(f"==== {case.name} ({case.shape}), {which}")
        runs = {}
        for name, conv in (("ours", case.ours), ("torch", case.ref)):
            out = conv(x, w, b)
            dy = torch.randn_like(out)

            def backward(out=out, dy=dy, leaves=leaves):
                torch.autograd.grad(out, leaves, dy, retain_graph=True)

            def forward(conv=conv, inputs=(x, w, b)):
                conv(*inputs)

            runs[name] = forward if args.forward else backward
        # each twice, alternating: a first loop's figure is not taken alone (session 42)
        for name in ("ours", "torch", "ours", "torch"):
            print(f"{name:6} {loop_us(runs[name], args.calls):8.1f} µs a call (loop)")
        for name in ("ours", "torch"):
            print(f"{name} kernels:")
            for kernel, count, us in kernel_times(runs[name]):
                print(f"   {count}x {us:8.1f} µs  {kernel[:90]}")
        profile_calls(runs["ours"], args.calls, args.top)


if __name__ == "__main__":
    main()
