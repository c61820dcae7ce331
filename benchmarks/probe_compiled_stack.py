"""Why the host suite's compiled 8-conv stack is slower with our convolutions under
``mode="reduce-overhead"`` than with ``torch.nn.Conv2d`` (issue 10), and where its compile time
goes: compiles the stack both ways with Inductor's performance hints logged (a CUDA graph that
Inductor skips says why there), prints the per-call wall of each, the number of CUDA graphs
each compile recorded, and Dynamo's compile-time breakdown for ours; ``--profile``: the top
of a cProfile of 200 reduce-overhead calls of each (where the replay's host time goes), and
who calls the functions that run more often per call in ours than in nn.Conv2d's.

Compile times: Inductor's and AOTAutograd's on-disk graph caches are off here (a second process
would hit them), and each tritonconv compile reports how many access analyses PyTorch ran
(Triton IR generated per traced launch; ``tritonconv.access_cache`` memoises them). To measure
the memo, run in alternation (Triton's own cubin cache warms on the first run):
``probe_compiled_stack.py``, ``TRITONCONV_ACCESS_CACHE=0 probe_compiled_stack.py``, and the
first again.

    PYTHONPATH=src python benchmarks/probe_compiled_stack.py [--profile]
"""

from __future__ import annotations

import cProfile
import logging
import os
import pstats
import sys
import time

os.environ.setdefault("TORCHINDUCTOR_FX_GRAPH_CACHE", "0")
os.environ.setdefault("TORCHINDUCTOR_AUTOGRAD_CACHE", "0")

import torch  # (after the cache settings it reads)
import torch._dynamo.utils
from torch import nn

import tritonconv.nn as tnn
from tritonconv import access_cache
from tritonconv.bench import loop_us
from tritonconv.bench.host import ConvStack


class _Reasons(logging.Handler):
    """Keeps Inductor's log lines that say whether and why a graph is (not) CUDA-graphed."""

    def __init__(self):
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record):
        text = record.getMessage()
        if any(k in text for k in ("skipping cudagraph", "reason=", "partitions", "Partition")):
            self.lines.append(text[:240])


def _count_analyses() -> list:
    """A list that gains an entry each time PyTorch analyses a traced launch's accesses (with
    the memo on, each miss of it)."""
    from torch._higher_order_ops import triton_kernel_wrap as wrap

    calls = []
    if access_cache.install():
        real = access_cache.original
        access_cache.original = lambda *a: calls.append(1) or real(*a)
    else:
        real = wrap.identify_accessed_tensors
        wrap.identify_accessed_tensors = lambda *a: calls.append(1) or real(*a)
    return calls


def main() -> None:
    analyses = _count_analyses()
    print(f"access analyses memoised: {access_cache.install()}")
    torch._logging.set_logs(perf_hints=True, cudagraphs=True)
    reasons = _Reasons()
    for name in ("torch._inductor", "torch._inductor.cudagraph_trees"):
        logging.getLogger(name).addHandler(reasons)
    x = torch.randn(1, 64, 56, 56, device="cuda", dtype=torch.bfloat16)
    x = x.to(memory_format=torch.channels_last)
    for name, conv in (("nn.Conv2d", nn.Conv2d), ("tritonconv", tnn.Conv2d)):
        torch.manual_seed(0)
        model = ConvStack(conv).to("cuda", torch.bfloat16).eval()
        model = model.to(memory_format=torch.channels_last)
        for mode in ("default", "reduce-overhead"):
            torch._dynamo.reset()
            torch._dynamo.utils.compile_times(repr="str", aggregate=True)  # clear
            compiled = torch.compile(
                model, fullgraph=True, **({} if mode == "default" else {"mode": mode})
            )
            reasons.lines.clear()
            analyses.clear()
            start = time.perf_counter()
            with torch.no_grad():
                compiled(x)
                torch.cuda.synchronize()
                compile_s = time.perf_counter() - start
                us = loop_us(lambda c=compiled: c(x))
            print(
                f"== {name:10} {mode:16} {us:8.1f} µs/call, first call {compile_s:.2f} s"
                + (f", {len(analyses)} access analyses" if name == "tritonconv" else "")
            )
            if name == "tritonconv":
                print("\n".join(f"   | {line}" for line in reasons.lines[:12]))
            if name == "tritonconv" and mode == "default":
                times = torch._dynamo.utils.compile_times(repr="str", aggregate=True)
                print("\n".join(f"   : {line[:150]}" for line in times.splitlines()[:14]))
            if mode == "reduce-overhead":
                with torch.no_grad(), torch.profiler.profile() as prof:
                    compiled(x)
                    torch.cuda.synchronize()
                events = prof.key_averages()
                graphed = [e for e in events if "cudaGraphLaunch" in e.key]
                print(f"   cudaGraphLaunch events: {len(graphed)}; GPU work of one call:")
                for e in events:
                    if e.self_device_time_total > 0:
                        print(f"   {e.count:3}x {e.self_device_time_total:8.1f} µs  {e.key[:80]}")
                if "--profile" in sys.argv:
                    profile = cProfile.Profile()
                    with torch.no_grad():
                        profile.enable()
                        for _ in range(200):
                            compiled(x)
                        torch.cuda.synchronize()
                        profile.disable()
                    stats = pstats.Stats(profile).sort_stats("tottime")
                    stats.print_stats(18)
                    stats.print_callers("update_wrapper|eval_frame.py.*\\(_fn\\)")


if __name__ == "__main__":
    main()
