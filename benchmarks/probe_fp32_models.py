"""Probe (issue 14): whole-model fp32 (TF32 off) output and parameter-gradient error against
float64, ours and cuDNN's (the models suite's accuracy phase alone, one pass per model, no
speed phases), for chasing the models whose outputs are over 2x cuDNN's distance.

    PYTHONPATH=src python benchmarks/probe_fp32_models.py [--json FILE] [model ...]
        [--warmup]           # first the models suite's warm-up of the model, as the suite does
        [--precision P ...]  # fp32 dots at TF32-off (ieee, tf32x3, tf32x3_rn; default: the
                             # library's); several: each against the same float64 and cuDNN runs
        [--k-block 32]       # tf32x3's reduction step (default TF32X3_K_BLOCK)
        [--only pointwise]   # --precision on one layer family only (pointwise, window, stem)
        [--seeds 0 1]        # inputs: one run per seed (default 0)
"""

from __future__ import annotations

import argparse
import json
import math

import torch

from tritonconv import precision
from tritonconv.bench import models as M
from tritonconv.bench.conv import exact_fp32
from tritonconv.ops import direct, implicit_gemm
from tritonconv.warmup import warm_calls

DEFAULT = ("resnet50", "mobilenet_v3_large", "r2plus1d_18")

# layer families for --only: (source channels, kernel) -> whether the layer is one of them
FAMILIES = {
    "pointwise": lambda channels, kernel: math.prod(kernel) == 1,
    "window": lambda channels, kernel: math.prod(kernel) > 1 and channels > 4,
    "stem": lambda channels, kernel: channels <= 4,
}


_LAUNCH_CONV = implicit_gemm._launch_conv


def _only(value: str, family) -> None:
    """The implicit GEMM's forward and input-gradient launches of ``family``'s layers with
    precision ``value`` at TF32-off, every other launch ``ieee`` (launch plans record it per
    layer signature, which fixes the family)."""
    original = _LAUNCH_CONV

    def launch_conv(src, weight, bias, dst, geometry, *args):
        groups, transposed = args[0], args[1]
        channels = weight.shape[1] * groups if not transposed else weight.shape[0]
        chosen = value if family(channels, geometry.kernel) else "ieee"
        saved, precision.TF32_OFF_PRECISION = precision.TF32_OFF_PRECISION, chosen
        try:
            return original(src, weight, bias, dst, geometry, *args)
        finally:
            precision.TF32_OFF_PRECISION = saved

    implicit_gemm._launch_conv = launch_conv


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*")
    parser.add_argument("--json", default=None)
    parser.add_argument("--warmup", action="store_true")
    parser.add_argument(
        "--precision", nargs="+", default=[None], choices=precision.TF32_OFF_PRECISIONS
    )
    parser.add_argument("--k-block", type=int, default=None, help="tf32x3's reduction step")
    parser.add_argument("--only", choices=list(FAMILIES), default=None,
                        help="--precision for this layer family only (the rest ieee)")  # fmt: skip
    parser.add_argument("--seeds", type=int, nargs="+", default=[0], help="the inputs' seeds")
    args = parser.parse_args()
    if args.k_block:
        direct.TF32X3_K_BLOCK = args.k_block
    rows = []
    # tritonconv's choices as the models suite makes them (its heuristic): ``accuracy`` runs
    # under ``exact_fp32``, which turns ``cudnn.benchmark`` on, and alone that would put
    # tritonconv in benchmark mode too (measured tiles; until session 27 this probe ran so)
    with M._choices():
        for name, seed in ((n, s) for n in args.models or DEFAULT for s in args.seeds):
            spec = M.MODELS[name]
            base = M.build(spec, False)
            if args.warmup:
                calls = M.warmup_calls(base, spec.input, M.model_options(M.Options()))
                warm_calls(calls)
            shape = M._accuracy_shape(spec.input)
            x = torch.randn(shape, generator=torch.Generator().manual_seed(seed))
            ref, ours, x, exact = M.accuracy_sides(base, x)
            with exact_fp32(torch.float32):
                cudnn = M.distances(ref, x, exact)
                for value in args.precision:
                    if value and args.only:
                        _only(value, FAMILIES[args.only])
                    elif value:
                        precision.TF32_OFF_PRECISION = value
                    found = M.distances(ours, x, exact)
                    row = dict(model=name, seed=seed, precision=precision.TF32_OFF_PRECISION)
                    row.update({f"ours_{k}": v for k, v in found.items()})
                    row.update({f"ref_{k}": v for k, v in cudnn.items()})
                    rows.append(row)
                    print(
                        f"{name:20} {seed} {row['precision']:9} output ours {found['out_err']:.2e} "
                        f"cuDNN {cudnn['out_err']:.2e} ({found['out_err'] / cudnn['out_err']:.2f}x);"
                        f" worst grad ours {found['grad_err']:.1e} cuDNN {cudnn['grad_err']:.1e}"
                        f" ({found['grad_err'] / cudnn['grad_err']:.2f}x)",
                        flush=True,
                    )
            if args.json:
                with open(args.json, "w") as f:
                    json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
