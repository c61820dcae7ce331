"""Where the compiled 8-conv stack's time goes, ours against ``torch.nn.Conv2d`` (issue 10):
compiles the stack both ways in the default mode and in ``mode="reduce-overhead"`` (Inductor's
CUDA-graph lines logged: a graph it skips says why), then times the two in alternation, per
call in a loop of back-to-back calls (the host's throughput) and per synchronised call alone;
prints the GPU work of one CUDA-graph call of each and Dynamo's compile-time breakdown for
ours; ``--profile``: the top of a cProfile of 200 reduce-overhead calls of each (where the
replay's host time goes).

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
import statistics
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


def _compile(model, mode: str, x, analyses: list, reasons: _Reasons, label: str):
    """``model`` compiled in ``mode`` (fullgraph), its first call timed; prints the compile's
    time, its access analyses and (ours) Inductor's CUDA-graph lines."""
    torch._dynamo.utils.compile_times(repr="str", aggregate=True)  # clear
    compiled = torch.compile(model, fullgraph=True, **({} if mode == "default" else {"mode": mode}))
    reasons.lines.clear()
    analyses.clear()
    start = time.perf_counter()
    with torch.no_grad():
        compiled(x)
        torch.cuda.synchronize()
    print(
        f"== {label:10} {mode:16} first call {time.perf_counter() - start:.2f} s"
        + (f", {len(analyses)} access analyses" if label == "tritonconv" else "")
    )
    if label == "tritonconv":
        print("\n".join(f"   | {line}" for line in reasons.lines[:4]))
        times = torch._dynamo.utils.compile_times(repr="str", aggregate=True)
        print("\n".join(f"   : {line[:150]}" for line in times.splitlines()[3:12]))
    return compiled


def _alternated(calls: dict, rounds: int = 7, block: int = 50) -> dict:
    """Median over ``rounds`` of (µs per call in a loop of ``block`` calls synchronised once,
    µs of one synchronised call) for each function, measured in alternation."""
    loops, walls = ({k: [] for k in calls} for _ in range(2))
    with torch.no_grad():
        for _ in range(rounds):
            for name, fn in calls.items():
                loops[name].append(loop_us(fn, calls=block, warmup=2))
                walls[name].append(loop_us(fn, calls=1, warmup=0))
    return {k: (statistics.median(loops[k]), statistics.median(walls[k])) for k in calls}


def main() -> None:
    analyses = _count_analyses()
    print(f"access analyses memoised: {access_cache.install()}")
    torch._logging.set_logs(perf_hints=True, cudagraphs=True)
    reasons = _Reasons()
    for name in ("torch._inductor", "torch._inductor.cudagraph_trees"):
        logging.getLogger(name).addHandler(reasons)
    x = torch.randn(1, 64, 56, 56, device="cuda", dtype=torch.bfloat16)
    x = x.to(memory_format=torch.channels_last)
    models = {}
    for name, conv in (("nn.Conv2d", nn.Conv2d), ("tritonconv", tnn.Conv2d)):
        torch.manual_seed(0)
        model = ConvStack(conv).to("cuda", torch.bfloat16).eval()
        models[name] = model.to(memory_format=torch.channels_last)
    for mode in ("default", "reduce-overhead"):
        torch._dynamo.reset()
        compiled = {k: _compile(m, mode, x, analyses, reasons, k) for k, m in models.items()}
        torch._logging.set_logs()  # (no logging while timing)
        calls = {k: (lambda c=c: c(x)) for k, c in compiled.items()}
        for name, (loop, wall) in _alternated(calls).items():
            print(f"   {name:10} {mode:16} {loop:7.1f} µs/call in a loop, {wall:7.1f} µs alone")
        if mode == "reduce-overhead":
            for name, fn in calls.items():
                with torch.no_grad(), torch.profiler.profile() as prof:
                    fn()
                    torch.cuda.synchronize()
                print(f"   {name}: GPU work of one call:")
                for e in prof.key_averages():
                    if e.self_device_time_total > 0:
                        print(f"   {e.count:3}x {e.self_device_time_total:8.1f} µs  {e.key[:80]}")
            if "--profile" in sys.argv:
                for name, fn in calls.items():
                    profile = cProfile.Profile()
                    with torch.no_grad():
                        profile.enable()
                        for _ in range(200):
                            fn()
                        torch.cuda.synchronize()
                        profile.disable()
                    print(f"   ---- {name}: cProfile of 200 calls")
                    pstats.Stats(profile).sort_stats("tottime").print_stats(16)
        torch._logging.set_logs(perf_hints=True, cudagraphs=True)


if __name__ == "__main__":
    main()
