"""Probe (issue 11): the implicit GEMM's weight-gradient tiles and split count, swept.

For the dense suite's cases (bf16 channels-last; ``--dtype float32``: fp32 with TF32 allowed,
ours then ``bf16x3``; ``--tf32-off``: fp32 with TF32 off on both sides, ours ``bf16x6``, whose
split count is set per programs an SM the same way), cuDNN's weight gradient alone against ours
with the heuristic's tiles (``wgrad_config``) and with each of ``CONFIGS``, dW in the weight's
layout (channels-last, as the models run; also the rule's for a contiguous weight), at
``WGRAD_PROGRAMS_PER_SM`` 1, 2 (the rule's) and 4, so the table says which tile and split
count each layer wants and how far the rule is from it. Every result is checked against
cuDNN's (relative max difference). Kernel time by CUDA-graph replay (``bench.kernel_ms``), µs.

    PYTHONPATH=src python benchmarks/probe_wgrad_tiles.py [--json FILE] [--dtype float32]
        [--tf32-off] [--wgrad-precision tf32] [case ...]

``--wgrad-precision`` sets ours' fp32 products with TF32 allowed (``WGRAD_TF32_PRECISION``:
plain ``tf32``, one TF32 product a multiply-add as cuDNN's, against the library's ``bf16x3``;
session 40 found it compiles to tensor-core instructions offline).
"""

from __future__ import annotations

import argparse
import json

import torch

from tritonconv.bench import Options, kernel_ms, overridden
from tritonconv.bench.conv import ConvCase
from tritonconv.bench.dense import CASES
from tritonconv.geometry import make_geometry
from tritonconv.ops import implicit_gemm as ig

CONFIGS = (
    None,  # the heuristic's
    ig.Config(64, 64, 64, 4, 4),
    ig.Config(64, 64, 64, 4, 3),  # three width taps a program fit (two with four stages)
    ig.Config(64, 64, 32, 4, 5),  # three taps too
    ig.Config(128, 64, 64, 4, 3),
    ig.Config(64, 128, 64, 4, 3),
    ig.Config(128, 128, 64, 8, 3),
    ig.Config(128, 128, 32, 8, 4),
    ig.Config(128, 256, 32, 8, 3),
    ig.Config(64, 64, 128, 4, 3),
)
PROGRAMS_PER_SM = (1, 2, 4)
# Weight gradients outside the dense suite (session 25): DCGAN's 4x4 s2 p1 transposed
# convolution (suite more, N16 256 -> 128 at 16x16 -> 32x32) as the convolution whose input
# gradient it is, dy its input (256 channels at 16x16), x its output gradient (128 at 32x32)
EXTRA = [ConvCase("dcgan_dw_4x4_s2", (16, 128, 32, 32), (256, 128, 4, 4), stride=2, padding=1)]
DEFAULT = ("r50_3x3_56", "r50_3x3_28", "r50_3x3_14", "r50_3x3_7", "dil2_3x3_64",
           "unet_3x3_128", "unet_3x3_256", "aspp_dil12")  # fmt: skip


def measure(case, opts, args_rule_only=False, dtype=torch.bfloat16, tf32_off=False) -> dict:
    cl = torch.channels_last
    x = torch.randn(case.input, device="cuda", dtype=dtype).to(memory_format=cl)
    w = torch.randn(case.weight, device="cuda", dtype=dtype).to(memory_format=cl)
    s, p, d = (case.stride,) * 2, (case.padding,) * 2, (case.dilation,) * 2
    geometry = make_geometry(case.input[2:], case.weight[2:], s, p, p, d)
    dy = torch.randn((case.input[0], case.weight[0], *geometry.output), device="cuda")
    dy = dy.to(x.dtype).to(memory_format=cl)
    g = case.groups
    mask = [False, True, False]

    def cudnn(i):
        return torch.ops.aten.convolution_backward(dy, x, w, None, s, p, d, False, [0, 0], g, mask)

    want = cudnn(0)[1].float()
    rows = case.input[0] * geometry.output_numel
    rule = ig.wgrad_config(x.dtype, case.weight[0] // g, case.weight[1], rows, case.weight[3])
    row = dict(case=case.name, rule=str(rule), cudnn=kernel_ms(cudnn, 1, opts), runs=[])
    if tf32_off:  # our fp32 FMA products beside the bfloat16 pieces swept below
        with overridden(ig, WGRAD_TF32_OFF_PRECISION="ieee"):
            row["ours_ieee"] = kernel_ms(
                lambda i: ig.conv_grad_weight(dy, x, w.shape, geometry, g, None, w.stride()),
                1,
                opts,
            )
        row["cudnn_fp32"] = row["cudnn"]
        row["rule_own_split"] = kernel_ms(  # the rule's tiles and split count, as shipped
            lambda i: ig.conv_grad_weight(dy, x, w.shape, geometry, g, None, w.stride()), 1, opts
        )
    elif dtype == torch.float32:  # TF32 off on both sides: cuDNN's fp32, our ieee products
        with overridden(torch.backends.cudnn, allow_tf32=False):
            row["cudnn_fp32"] = kernel_ms(cudnn, 1, opts)
            row["ours_ieee"] = kernel_ms(
                lambda i: ig.conv_grad_weight(dy, x, w.shape, geometry, g, None, w.stride()),
                1,
                opts,
            )
    # the rule's, for a contiguous weight (nn.Conv2d's default layout)
    row["rule_contiguous_weight"] = kernel_ms(
        lambda i: ig.conv_grad_weight(dy, x, w.shape, geometry, g), 1, opts
    )
    for per_sm in (2,) if args_rule_only else PROGRAMS_PER_SM:
        # (fp32's bfloat16-piece products take their own count: wgrad_programs_per_sm)
        per_sm_rule = (lambda *_, n=per_sm: n) if tf32_off else ig.wgrad_programs_per_sm
        with overridden(ig, WGRAD_PROGRAMS_PER_SM=per_sm, wgrad_programs_per_sm=per_sm_rule):
            for config in CONFIGS:
                if config == rule:
                    continue

                def ours(i, config=config):  # dW in the weight's layout, as autograd asks
                    return ig.conv_grad_weight(dy, x, w.shape, geometry, g, config, w.stride())

                if args_rule_only and config is not None:
                    continue
                try:
                    got = ours(0).float()
                    ms = kernel_ms(ours, 1, opts)
                except Exception as error:  # out of resources: recorded, not fatal
                    row["runs"].append(dict(config=str(config), per_sm=per_sm, error=str(error)))
                    continue
                diff = ((got - want).abs().max() / want.abs().max()).item()
                taps = ig.wgrad_tap_group(case.weight[3], case.weight[1], config or rule, x.dtype)
                name = ("rule" if config is None else str(config)) + f" t{taps}"
                row["runs"].append(dict(config=name, per_sm=per_sm, ms=ms, diff=diff))
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cases", nargs="*")
    parser.add_argument("--json", default=None)
    parser.add_argument("--rule-only", action="store_true", help="the rule's tiles alone")
    parser.add_argument("--dtype", default="bfloat16", help="float32: TF32 allowed on both sides")
    parser.add_argument("--tf32-off", action="store_true", help="fp32, TF32 off on both sides")
    parser.add_argument("--wgrad-precision", default=None, help="WGRAD_TF32_PRECISION for ours")
    args = parser.parse_args()
    if args.wgrad_precision:
        ig.WGRAD_TF32_PRECISION = args.wgrad_precision
    dtype = torch.float32 if args.tf32_off else getattr(torch, args.dtype)
    torch.backends.cudnn.allow_tf32 = not args.tf32_off
    opts = Options(reps=30)
    torch.backends.cudnn.benchmark = True
    out = []
    for case in [*CASES, *EXTRA]:
        if case.name not in (args.cases or DEFAULT):
            continue
        row = measure(case, opts, args.rule_only, dtype, args.tf32_off)
        out.append(row)
        runs = [r for r in row["runs"] if "ms" in r]
        best = min(runs, key=lambda r: r["ms"])
        rule = next(r for r in runs if r["config"].startswith("rule") and r["per_sm"] == 2)
        print(
            f"{case.name:14} cuDNN {1000 * row['cudnn']:7.1f} | rule {row['rule']} "
            f"{1000 * rule['ms']:7.1f} ({row['cudnn'] / rule['ms']:.2f}x) | best "
            f"{best['config']} p{best['per_sm']} {1000 * best['ms']:7.1f} "
            f"({row['cudnn'] / best['ms']:.2f}x) | max diff "
            f"{max(r['diff'] for r in runs):.0e} | rule, contiguous weight "
            f"{1000 * row['rule_contiguous_weight']:7.1f}"
            + (
                f" | TF32 off: cuDNN {1000 * row['cudnn_fp32']:7.1f}, ours (ieee) "
                f"{1000 * row['ours_ieee']:7.1f}"
                + (
                    f", rule with its split {1000 * row['rule_own_split']:7.1f}"
                    if "rule_own_split" in row
                    else ""
                )
                if "ours_ieee" in row
                else ""
            ),
            flush=True,
        )
        for r in runs:
            print(f"    {r['config']:>18} p{r['per_sm']} {1000 * r['ms']:7.1f}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
