"""Probe (issue 11): the implicit GEMM's backward kernels, one at a time, against cuDNN's.

For every case of the ``dense`` bench suite, bf16 channels-last: cuDNN's input gradient and
weight gradient alone (``aten.convolution_backward`` with one output asked for), ours
(``implicit_gemm.conv_grad_input`` / ``conv_grad_weight``), and the weight gradient in three
versions: as before session 7 (one integer division per element and axis, ``dy`` addressed
through coordinates, one tap a program), with the scalar-first decode only, and as now (tap
groups too), so one run says what each change moved. Kernel time by CUDA-graph replay (``bench.kernel_ms``); results checked against
each other (the two decodes give the same bits).

    PYTHONPATH=src python benchmarks/probe_wgrad.py [--json FILE] [case ...]
"""

from __future__ import annotations

import argparse
import json

import torch

from tritonconv.bench import Options, kernel_ms, overridden
from tritonconv.bench.dense import CASES
from tritonconv.geometry import make_geometry
from tritonconv.ops import implicit_gemm as ig


def variant(old_decode: bool, tap_group_max: int):
    """The weight gradient with the older position decode (one integer division per element
    and axis, ``dy`` through coordinates) and/or at most ``tap_group_max`` taps a program."""
    values = dict(WGRAD_TAP_GROUP_MAX=tap_group_max)
    if old_decode:
        values.update(SMALL_QUOTIENT_LIMIT=0, _positions_flat=lambda t: False)
    return overridden(ig, **values)


def measure(case, opts) -> dict:
    """Kernel ms of cuDNN's and our dgrad and wgrad (old and new decode) on one dense case."""
    cl = torch.channels_last
    x = torch.randn(case.input, device="cuda", dtype=torch.bfloat16).to(memory_format=cl)
    w = torch.randn(case.weight, device="cuda", dtype=torch.bfloat16).to(memory_format=cl)
    s, p, d = (case.stride,) * 2, (case.padding,) * 2, (case.dilation,) * 2
    geometry = make_geometry(case.input[2:], case.weight[2:], s, p, p, d)
    dy = torch.randn((case.input[0], case.weight[0], *geometry.output), device="cuda")
    dy = dy.to(x.dtype).to(memory_format=cl)
    g = case.groups

    def cudnn(mask):
        return lambda i: torch.ops.aten.convolution_backward(
            dy, x, w, None, s, p, d, False, [0, 0], g, mask
        )

    def dgrad(i):
        return ig.conv_grad_input(dy, w, x, geometry, g)

    def wgrad(config=None):
        return lambda i: ig.conv_grad_weight(dy, x, w.shape, geometry, g, config)

    row = dict(case=case.name)
    row["cudnn_dgrad"] = kernel_ms(cudnn([True, False, False]), 1, opts)
    row["cudnn_wgrad"] = kernel_ms(cudnn([False, True, False]), 1, opts)
    row["dgrad"] = kernel_ms(dgrad, 1, opts)
    # the configuration before tap groups: one tap a program, the kernel width ignored
    rows = case.input[0] * geometry.output_numel
    before = ig.wgrad_config(x.dtype, case.weight[0] // g, case.weight[1], rows)
    results = []
    for name, old, group, config in (
        ("wgrad_old", True, 1, before),
        ("wgrad_1tap", False, 1, before),
        ("wgrad", False, ig.WGRAD_TAP_GROUP_MAX, None),
    ):
        with variant(old, group):
            results.append(wgrad(config)(0))
            row[name] = kernel_ms(wgrad(config), 1, opts)
    row["same_bits"] = bool(torch.equal(results[0], results[1]))
    # tap groups change the split count, hence the order of the fp32 partial sums
    scale = results[0].float().abs().max().item()
    row["tap_group_rel_diff"] = (results[2].float() - results[0].float()).abs().max().item() / scale
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cases", nargs="*")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    opts = Options(reps=40)
    torch.backends.cudnn.benchmark = True
    rows = []
    print(f"{'case':16} {'dgrad cuDNN/ours':>18} {'x':>5} "
          f"{'wgrad cuDNN/old/1tap/taps':>34} {'x old':>6} {'x 1tap':>6} {'x taps':>6}")  # fmt: skip
    for case in CASES:
        if args.cases and case.name not in args.cases:
            continue
        row = measure(case, opts)
        rows.append(row)
        print(
            f"{case.name:16} {row['cudnn_dgrad']:8.4f}/{row['dgrad']:8.4f} "
            f"{row['cudnn_dgrad'] / row['dgrad']:5.2f} {row['cudnn_wgrad']:8.4f}/"
            f"{row['wgrad_old']:7.4f}/{row['wgrad_1tap']:7.4f}/{row['wgrad']:7.4f}"
            + "".join(
                f" {row['cudnn_wgrad'] / row[k]:6.2f}" for k in ("wgrad_old", "wgrad_1tap", "wgrad")
            )
            + f" diff {row['tap_group_rel_diff']:.1e}"
            + ("" if row["same_bits"] else " BITS DIFFER"),
            flush=True,
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
