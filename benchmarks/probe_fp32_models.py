"""Probe (issue 14): whole-model fp32 (TF32 off) output error against float64, ours and
cuDNN's, with the implicit GEMM's round-to-nearest step sums off and on
(``ops.implicit_gemm.STEP_SUMS``): does the tensor cores' fp32 accumulation explain why the
models' outputs are 2.1-2.5x further from float64 than cuDNN's while every layer alone is
within 1x (benchmarks/NOTES.md)?

    PYTHONPATH=src python benchmarks/probe_fp32_models.py [--json FILE] [model ...]
"""

from __future__ import annotations

import argparse
import json

import torch

import tritonconv
from tritonconv.bench import Options
from tritonconv.bench import models as M
from tritonconv.ops import implicit_gemm

DEFAULT = ("resnet50", "mobilenet_v3_large", "r2plus1d_18")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    opts = Options(quick=True)  # one pass each: the errors, not the times
    rows = []
    for name in args.models or DEFAULT:
        spec = M.MODELS[name]
        base = M.build(spec, False)
        x = torch.randn(M._accuracy_shape(spec.input), generator=torch.Generator().manual_seed(0))
        row = {"model": name}
        for step_sums in (False, True):
            implicit_gemm.STEP_SUMS = step_sums
            tritonconv.clear_caches()
            found = M.accuracy(base, x, opts)
            key = "step_sums" if step_sums else "plain"
            row[key] = {k: v for k, v in found.items() if k != "times"}
            ratio = found["ours_out_err"] / found["ref_out_err"]
            print(
                f"{name:20} {key:9} output ours {found['ours_out_err']:.2e} cuDNN "
                f"{found['ref_out_err']:.2e} ({ratio:.2f}x); worst grad ours "
                f"{found['ours_grad_err']:.1e} cuDNN {found['ref_grad_err']:.1e}",
                flush=True,
            )
        rows.append(row)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
