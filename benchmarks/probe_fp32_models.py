"""Probe (issue 14): whole-model fp32 (TF32 off) output and parameter-gradient error against
float64, ours and cuDNN's (the models suite's accuracy phase alone, one pass per model, no
speed phases), for chasing the models whose outputs are over 2x cuDNN's distance.

    PYTHONPATH=src python benchmarks/probe_fp32_models.py [--json FILE] [model ...]
        [--warmup]           # first the models suite's warm-up of the model, as the suite does
        [--precision tf32x3] # fp32 dots at TF32-off on tensor cores (default: ieee)
        [--k-block 32]       # tf32x3's reduction step (default TF32X3_K_BLOCK)
"""

from __future__ import annotations

import argparse
import json

import torch

from tritonconv.bench import Options
from tritonconv.bench import models as M
from tritonconv.ops import direct, implicit_gemm
from tritonconv.warmup import warm_calls

DEFAULT = ("resnet50", "mobilenet_v3_large", "r2plus1d_18")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*")
    parser.add_argument("--json", default=None)
    parser.add_argument("--warmup", action="store_true")
    parser.add_argument("--precision", default=None, choices=["ieee", "tf32x3"])
    parser.add_argument("--k-block", type=int, default=None, help="tf32x3's reduction step")
    args = parser.parse_args()
    if args.precision:
        direct.TF32_OFF_PRECISION = args.precision
    if args.k_block:
        implicit_gemm.TF32X3_K_BLOCK = args.k_block
    opts = Options(quick=True)  # one pass each: the errors, not the times
    rows = []
    for name in args.models or DEFAULT:
        spec = M.MODELS[name]
        base = M.build(spec, False)
        if args.warmup:
            calls = M.warmup_calls(base, spec.input, M.model_options(Options()))
            warm_calls(calls)
        shape = M._accuracy_shape(spec.input)
        x = torch.randn(shape, generator=torch.Generator().manual_seed(0))
        found = {k: v for k, v in M.accuracy(base, x, opts).items() if k != "times"}
        rows.append(dict(model=name, **found))
        ratio = found["ours_out_err"] / found["ref_out_err"]
        print(
            f"{name:20} output ours {found['ours_out_err']:.2e} cuDNN {found['ref_out_err']:.2e}"
            f" ({ratio:.2f}x); worst grad ours {found['ours_grad_err']:.1e} cuDNN "
            f"{found['ref_grad_err']:.1e}",
            flush=True,
        )
        if args.json:
            with open(args.json, "w") as f:
                json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
