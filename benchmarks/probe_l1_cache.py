"""Probe (issue 11): the implicit GEMM's tap loads through L1, against Triton's default.

Triton lowers the kernels' 16-byte tile loads to ``cp.async.cg`` (``LDGSTS.E.BYPASS``: L2 to
shared memory, L1 bypassed). A 3x3 convolution's source tile for tap ``(kh, kw + 1)`` is the
tile of tap ``(kh, kw)`` one pixel further: at 64 channels in bf16 a pixel is one 128-byte line,
so 127 of the tile's 128 lines are the ones the previous step loaded. With ``.ca`` those lines
can come from L1 instead of L2. This measures, per dense-suite layer (bf16 channels-last, the
heuristic's tiles), the forward, the input gradient and the weight gradient by CUDA-graph
replay with each variant of ``ops.implicit_gemm.L1_CACHE`` (alternated, two rounds), checks
that every variant's result is bitwise the default's, and prints cuDNN's times beside them.

    PYTHONPATH=src python benchmarks/probe_l1_cache.py [--json out.json] [--cases a,b]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys

import torch
import torch.nn.functional as F

from tritonconv.bench.dense import CASES
from tritonconv.caches import clear_caches
from tritonconv.geometry import make_geometry
from tritonconv.ops import implicit_gemm as ig

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from probe_small_wave import graph_us

GPU = torch.cuda.is_available()
DEVICE = "cuda" if GPU else "cpu"  # the CPU (interpreter): toy sizes, a check of the script


def _time(fn) -> float:
    if GPU:
        return graph_us(fn)
    fn()
    return 1.0


FORWARD_VARIANTS = {
    "default": {},
    "src .ca": {"src": ".ca"},
    "src+w .ca": {"src": ".ca", "w": ".ca"},
}
WGRAD_VARIANTS = {"default": {}, "x .ca": {"x": ".ca"}}


def _set(variant: dict) -> None:
    ig.L1_CACHE.update({"src": "", "w": "", "x": ""}, **variant)
    clear_caches()  # the launch plans recorded the previous variant's meta


def layer(case) -> dict:
    cl, dtype = torch.channels_last, torch.bfloat16
    x = torch.randn(case.input, device=DEVICE, dtype=dtype).to(memory_format=cl)
    w = torch.randn(case.weight, device=DEVICE, dtype=dtype) / math.prod(case.weight[1:]) ** 0.5
    w = w.to(memory_format=cl)
    out = case.output()
    dy = torch.randn(out, device=DEVICE, dtype=dtype).to(memory_format=cl)
    r, s = case.weight[2:]
    p, d, st, g = case.padding, case.dilation, case.stride, case.groups
    geometry = make_geometry(case.input[2:], (r, s), (st, st), (p, p), (p, p), (d, d))
    runs = {
        "fwd": (FORWARD_VARIANTS, lambda: ig.conv_forward(x, w, None, geometry, g)),
        "dX": (FORWARD_VARIANTS, lambda: ig.conv_grad_input(dy, w, x, geometry, g)),
        "dW": (
            WGRAD_VARIANTS,
            lambda: ig.conv_grad_weight(dy, x, w.shape, geometry, g, weight_strides=w.stride()),
        ),
    }
    row = {"case": case.name, "shape": case.shape()}
    kw = dict(stride=st, padding=p, dilation=d, groups=g)
    row["cudnn fwd"] = _time(lambda: F.conv2d(x, w, **kw))
    for name, mask in (("dX", (True, False, False)), ("dW", (False, True, False))):
        row[f"cudnn {name}"] = _time(
            lambda mask=mask: torch.ops.aten.convolution_backward(
                dy, x, w, None, (st, st), (p, p), (d, d), False, (0, 0), g, mask
            )
        )
    for pass_name, (variants, run) in runs.items():
        _set({})
        reference = run()
        times = {v: [] for v in variants}
        for _ in range(2):  # alternated rounds
            for label, variant in variants.items():
                _set(variant)
                result = run()
                if not torch.equal(result, reference):
                    raise AssertionError(f"{case.name} {pass_name} {label}: not bitwise equal")
                times[label].append(_time(run))
        for label, ts in times.items():
            row[f"{pass_name} {label}"] = min(ts)
    _set({})
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json")
    ap.add_argument("--cases", default="")
    args = ap.parse_args()
    wanted = set(filter(None, args.cases.split(",")))
    rows = []
    for case in CASES:
        if wanted and case.name not in wanted:
            continue
        row = layer(case if GPU else case.quick())
        rows.append(row)
        parts = [f"{k} {v:.1f}" for k, v in row.items() if isinstance(v, float)]
        print(f"{case.name:14s} " + "  ".join(parts), flush=True)
    print("\nµs, best of two alternated rounds; ratio = default / variant (above 1: faster)")
    for pass_name, variants in (
        ("fwd", FORWARD_VARIANTS),
        ("dX", FORWARD_VARIANTS),
        ("dW", WGRAD_VARIANTS),
    ):
        for label in list(variants)[1:]:
            ratios = [r[f"{pass_name} default"] / r[f"{pass_name} {label}"] for r in rows]
            geo = math.exp(sum(map(math.log, ratios)) / len(ratios))
            cells = " ".join(f"{r['case']}={q:.2f}" for r, q in zip(rows, ratios, strict=True))
            print(f"{pass_name} {label}: geomean {geo:.3f}  {cells}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
