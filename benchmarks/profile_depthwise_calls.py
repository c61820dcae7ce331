"""Per-call host time of the depthwise suite's forward (issues 13/14): the suite's per-call
ratios (events around each call, host path included) fell far below its kernel ratios.

For each case of ``bench --suite depthwise`` (bf16 channels-last): the forward without
gradients, ours and ``F.conv2d``, per call as the suite times it (``median_ms`` over the
same input sets) and as a loop synchronised once (``loop_us``), then a cProfile of our
forward on the first case (or ``--profile CASE``).

    PYTHONPATH=src python benchmarks/profile_depthwise_calls.py [case ...] [--profile CASE]
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F

import tritonconv as tc
from tritonconv.bench import input_sets, loop_us, profile_calls
from tritonconv.bench.depthwise import CASES
from tritonconv.timing import median_ms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cases", nargs="*")
    parser.add_argument("--profile", default=None)
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    torch.backends.cudnn.benchmark = True
    cases = [c for c in CASES if not args.cases or c.name in args.cases]
    cl = torch.channels_last
    for case in cases:
        kw = dict(stride=case.stride, padding=case.k // 2, groups=case.groups)

        def make(case=case):
            x = torch.randn(case.n, case.c, case.size, case.size, device="cuda")
            w = torch.randn(case.c, case.per_group, case.k, case.k, device="cuda")
            return tuple(t.bfloat16().to(memory_format=cl) for t in (x, w))

        sets = input_sets(make, 2 * sets_bytes(case), most=64)
        line = f"{case.name:22} sets {len(sets):2}"
        for name, conv in (("ours", tc.conv2d), ("cuDNN", F.conv2d)):

            def fwd(i, conv=conv, sets=sets, kw=kw):
                with torch.no_grad():
                    conv(*sets[i], **kw)

            event = 1000 * median_ms(fwd, 50, warmup=5, inputs=len(sets))
            loop = loop_us(lambda fwd=fwd: fwd(0), args.calls)
            line += f" | {name} event {event:7.1f} loop {loop:7.1f} µs"
        print(line, flush=True)
        if case.name == (args.profile or cases[0].name):
            print(tc.explain(*sets[0], **kw))
            with torch.no_grad():
                profile_calls(lambda s=sets, kw=kw: tc.conv2d(*s[0], **kw), args.calls, 25)


def sets_bytes(case) -> int:
    return case.n * case.c * case.size * case.size * 2


if __name__ == "__main__":
    main()
