"""Probe (issue 14): which convolution layers make a model's fp32 output drift from float64.

The models suite found resnet50's fp32 (TF32 off) output 2.4x further from a float64 run with
our convolutions than with cuDNN's (target: within 2x). This takes every convolution call of one
eval forward pass (the suite's own ``capture_layers``), runs each layer alone in fp32 with TF32
off, ours (``algo="auto"``) and cuDNN, on the captured input, and prints per layer the relative
distance (max |error| / max |float64|) of the output, and of dx and dW for one random ``dy``,
each beside cuDNN's, worst ratio first, and the output's signed mean error (a drift that adds
up across layers while each layer's maximum error stays small).

    PYTHONPATH=src python benchmarks/probe_fp32_layers.py [--models resnet50,mobilenet_v3_large]
"""

from __future__ import annotations

import argparse
import copy
import json
import os

if not __import__("torch").cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
    os.environ.setdefault("TRITONCONV_CPU_KERNELS", "1")

import torch

from tritonconv import nn as tnn
from tritonconv.bench.conv import exact_fp32
from tritonconv.bench.models import MODELS, build, capture_layers


def _relative(actual: torch.Tensor, exact: torch.Tensor) -> float:
    scale = exact.abs().max().item()
    return (actual.double() - exact).abs().max().item() / scale if scale else 0.0


def _signed(actual: torch.Tensor, exact: torch.Tensor) -> float:
    """Mean signed error over mean magnitude: a systematic drift (e.g. accumulation that
    truncates toward zero) shows here while maximum errors stay small."""
    return ((actual.double() - exact).mean() / exact.abs().mean()).item()


def layer_errors(call, device) -> dict:
    """Distances to float64 of ours and cuDNN for one captured layer call."""
    ref = call.module
    ours = tnn.CONVERTED[type(ref)].from_torch(ref)
    x = call.args[0].detach()
    exact = copy.deepcopy(ref).double()
    x64 = x.double().requires_grad_()
    y64 = exact(x64)
    dy = torch.randn(y64.shape, generator=torch.Generator().manual_seed(2)).to(device)
    dx64, dw64 = torch.autograd.grad(y64, (x64, exact.weight), dy.double())
    found = {}
    for side, module in (("ours", ours), ("ref", ref)):
        xs = x.clone().requires_grad_()
        y = module(xs)
        dx, dw = torch.autograd.grad(y, (xs, module.weight), dy)
        found[side] = dict(
            out=_relative(y.detach(), y64.detach()),
            bias=_signed(y.detach(), y64.detach()),
            dx=_relative(dx, dx64),
            dw=_relative(dw, dw64),
        )
    found["algo"] = tnn.explain_model(ours, x)[0].choice.algo
    return found


def _line(r: dict) -> str:
    return (
        f"{r['model'][:9] + '/' + r['layer']:34.34} {r['algo']:14} "
        f"{r['ours_out']:.1e}/{r['ref_out']:.1e} {r['ratio_out']:5.2f} "
        f"{r['ratio_dx']:9.2f} {r['ratio_dw']:9.2f} {r['ours_bias']:+.1e}/{r['ref_bias']:+.1e}"
        f"  {r['shape']}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet50")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    rows = []
    print(f"{'layer':34} {'algo':14} {'out ours/ref':>20} {'dx ratio':>9} {'dw ratio':>9} "
          f"{'signed ours/ref':>17}  shape")  # fmt: skip
    for name in args.models.split(","):
        spec = MODELS[name]
        quick = not cuda
        model = build(spec, quick).to(device).eval()
        shape = spec.quick_input if quick else (args.batch, *spec.input[1:])
        x = torch.randn(shape, generator=torch.Generator().manual_seed(0)).to(device)
        with exact_fp32(torch.float32):
            calls = capture_layers(model, x)
            for call in calls:
                e = layer_errors(call, device)
                row = dict(model=name, layer=call.names[0], count=len(call.names))
                row.update(shape=call.describe(), algo=e["algo"])
                row["ours_bias"], row["ref_bias"] = e["ours"]["bias"], e["ref"]["bias"]
                for key in ("out", "dx", "dw"):
                    row[f"ours_{key}"] = e["ours"][key]
                    row[f"ref_{key}"] = e["ref"][key]
                    row[f"ratio_{key}"] = e["ours"][key] / max(e["ref"][key], 1e-30)
                rows.append(row)
                print(_line(row), flush=True)
    print("worst first:")
    for r in sorted(rows, key=lambda r: -r["ratio_out"]):
        print(_line(r))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
