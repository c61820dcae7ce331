"""Where the time of one eager call goes (issue 10).

    python benchmarks/profile_host.py [--stub] [--profile] [--kernels] [--calls N]

For each host case of ``tritonconv bench --suite host`` (batch-1 layers) and each algorithm that
accepts it: host µs per call in a loop (synchronised once at the end: the host's cost per call
once the GPU keeps up), forward and forward + backward, ours and ``F.conv2d``.
``--kernels`` adds the GPU kernels of one forward + backward (torch.profiler, µs each).
``--profile`` prints the top of a cProfile of the forward calls, ``--profile-backward`` of
forward + backward (ours and F.conv2d, the backward on the calling thread). ``--stub``
replaces every kernel launch by a no-op: what remains is tritonconv's own Python (for a CPU
machine, where the interpreter would dominate). ``--case NAME`` (repeatable) picks cases.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats

import torch
import torch.nn.functional as F

import tritonconv as tc
from tritonconv import launch
from tritonconv.bench import kernel_times, loop_us
from tritonconv.bench.host import HOST_CASES, make_case


def stub_launches() -> None:
    """Interpret no kernel (every interpreter launch, planned or not, goes through
    ``launch._interpret``); only meaningful under the interpreter."""
    launch._interpret = lambda *args: None


def algorithms(case) -> list[str]:
    algos = ["direct"]
    if case.groups == case.input[1]:
        algos.append("depthwise")
    else:
        algos.append("im2col_gemm")
    return ["auto", *algos]


def profile_case(case, opts) -> None:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    x, w, b, kwargs = make_case(case, device, requires_grad=False)
    xg, wg, bg, _ = make_case(case, device, requires_grad=True)
    dy = torch.randn_like(F.conv2d(x, w, b, **kwargs))
    convs = {"F.conv2d": F.conv2d}
    for algo in algorithms(case):
        convs[algo] = lambda *a, algo=algo, **k: tc.conv2d(*a, algo=algo, **k)
    print(f"{case.name} ({case.shape()})")
    for name, conv in convs.items():

        def forward(conv=conv):
            return conv(x, w, b, **kwargs)

        def forward_backward(conv=conv):
            for t in (xg, wg, bg):
                t.grad = None
            conv(xg, wg, bg, **kwargs).backward(dy)

        fwd = loop_us(forward, opts.calls)
        both = loop_us(forward_backward, max(10, opts.calls // 4))
        print(f"  {name:12s} fwd {fwd:7.1f} µs   fwd+bwd {both:7.1f} µs")
        if opts.kernels and device == "cuda":
            for kernel, _, us in kernel_times(forward_backward):
                print(f"      {us:8.1f} µs  {kernel[:70]}")
    if opts.profile:
        profiler = cProfile.Profile()
        profiler.enable()
        for _ in range(opts.calls):
            tc.conv2d(x, w, b, **kwargs)
        profiler.disable()
        pstats.Stats(profiler).sort_stats("tottime").print_stats(15)
    if opts.profile_backward:
        # The autograd engine runs a CUDA backward on its device thread, which cProfile does
        # not see: run it on this thread for the profile.
        torch.autograd.set_multithreading_enabled(False)
        try:
            for name in ("auto", "F.conv2d"):
                profiler = cProfile.Profile()
                conv = convs[name]
                profiler.enable()
                for _ in range(opts.calls):
                    for t in (xg, wg, bg):
                        t.grad = None
                    conv(xg, wg, bg, **kwargs).backward(dy)
                profiler.disable()
                print(f"  fwd+bwd profile, {name}:")
                pstats.Stats(profiler).sort_stats("tottime").print_stats(14)
        finally:
            torch.autograd.set_multithreading_enabled(True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stub", action="store_true")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--kernels", action="store_true")
    parser.add_argument("--profile-backward", action="store_true")
    parser.add_argument("--case", action="append", help="only these host cases")
    parser.add_argument("--calls", type=int, default=200)
    opts = parser.parse_args()
    if opts.stub:
        stub_launches()
    print("Triton launch hooks:", launch._hooks(), "installed:", launch._hooks_installed())
    for case in HOST_CASES:
        if not opts.case or case.name in opts.case:
            profile_case(case, opts)
    print("launch-signature cache entries:", len(launch._cache.entries))


if __name__ == "__main__":
    main()
