"""Probe (issue 11, session 27): each convolution's own fp32 error against float64 inside a
model, per TF32-off precision, to find which layers carry a model's error.

``tf32x3_rn`` cut a 4608-deep GEMM's bias 7x, yet resnet50's output error only went from
2.16x to 1.67x cuDNN's distance (benchmarks/NOTES.md, session 27). This runs the model once
in float64 (eval, the models suite's accuracy input), captures every convolution's input,
and for each layer computes, on that input rounded to fp32, ours (each precision) and
cuDNN's fp32 (TF32 off) against the float64 convolution of the same fp32 operands: RMS error
and bias (mean error along the exact result's sign), both relative to the RMS of the exact
result. Layers whose bias is far from cuDNN's are the ones to look at.

    PYTHONPATH=src:<torchvision> python benchmarks/probe_layer_bias.py [--model resnet50]
        [--precisions ieee tf32x3 tf32x3_rn] [--json FILE] [--outputs 3]

``--outputs S``: instead, the whole fp32 model's error (ours per precision, cuDNN) on S seeded
inputs: the output's max-abs error over its max (the models suite's measure) and RMS error,
and the pooled features' (``--pool``, resnet50's ``avgpool``) RMS error split into the part
common to the batch's samples (per feature, a coherent error that pooling and the batch do
not average away) and the rest.
"""

from __future__ import annotations

import argparse
import json
import math

import torch
import torch.nn.functional as F

import tritonconv
from tritonconv import precision
from tritonconv.bench import models as M
from tritonconv.bench import overridden
from tritonconv.testing import exact_fp32


def _rms(t: torch.Tensor) -> float:
    return t.pow(2).mean().sqrt().item()


def _errors(y: torch.Tensor, exact: torch.Tensor) -> tuple[float, float]:
    err = y.double() - exact
    scale = _rms(exact) or 1.0
    return _rms(err) / scale, (err * exact.sign()).mean().item() / scale


def _model_errors(args, spec) -> list[dict]:
    exact_model = M.build(spec, False).eval().to(args.device, torch.float64)
    models = {"cudnn": M.build(spec, False).eval().to(args.device)}
    ours, _ = M.converted(models["cudnn"])
    pooled = {}

    def capture(model, key):
        getattr(model, args.pool).register_forward_hook(
            lambda m, i, o: pooled.__setitem__(key, o.flatten(1).double())
        )

    capture(exact_model, "exact")
    capture(models["cudnn"], "cudnn")
    capture(ours, "ours")
    rows = []
    shape = M._accuracy_shape(spec.input)
    for seed in range(args.outputs):
        x = torch.randn(shape, generator=torch.Generator().manual_seed(seed)).to(args.device)
        with torch.no_grad():
            y64 = exact_model(x.double())
            f64 = pooled["exact"]
        fscale = _rms(f64)
        results = {}
        # --grad: the fp32 forwards with autograd recording (the models suite's accuracy phase)
        with torch.set_grad_enabled(args.grad), exact_fp32():
            for label in ["cudnn", *args.precisions]:
                if label == "cudnn":
                    y, key = models["cudnn"](x), "cudnn"
                else:
                    with overridden(precision, TF32_OFF_PRECISION=label):
                        y, key = ours(x), "ours"
                err = y.detach().double() - y64
                ferr = pooled[key].detach() - f64
                common = ferr.mean(0, keepdim=True)
                results[label] = {
                    "out_max": err.abs().max().item() / y64.abs().max().item(),
                    "out_rms": _rms(err) / _rms(y64),
                    "pool_common": _rms(common) / fscale,
                    "pool_rest": _rms(ferr - common) / fscale,
                }
        rows.append({"seed": seed, **results})
        for label, r in results.items():
            print(f"seed {seed} {label:10} output max {r['out_max']:.2e} rms {r['out_rms']:.2e}"
                  f"   pooled common {r['pool_common']:.2e} rest {r['pool_rest']:.2e}", flush=True)  # fmt: skip
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="resnet50")
    ap.add_argument("--precisions", nargs="+", default=["ieee", "tf32x3", "tf32x3_rn"])
    ap.add_argument("--json")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--outputs", type=int, default=0, help="whole-model errors on this many inputs")
    ap.add_argument("--pool", default="avgpool", help="--outputs: the pooling module's name")
    ap.add_argument("--grad", action="store_true", help="--outputs: forwards recording autograd")
    args = ap.parse_args()
    spec = M.MODELS[args.model]
    # tritonconv's choices by its heuristic, as the models suite makes them (no recorded
    # choice from the on-disk cache may send a layer elsewhere)
    with M._choices():
        rows = _model_errors(args, spec) if args.outputs else _layer_errors(args, spec)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


def _layer_errors(args, spec) -> list[dict]:
    model = M.build(spec, False).eval().to(args.device, torch.float64)
    shape = M._accuracy_shape(spec.input)
    x = torch.randn(shape, generator=torch.Generator().manual_seed(0)).to(
        args.device, torch.float64
    )
    captured = []
    hooks = [
        m.register_forward_hook(lambda m, i, o, name=name: captured.append((name, m, i[0])))
        for name, m in model.named_modules()
        if isinstance(m, torch.nn.Conv2d | torch.nn.Conv3d)
    ]
    with torch.no_grad():
        model(x)
    for h in hooks:
        h.remove()
    rows, layers = [], []
    with exact_fp32(), torch.no_grad():
        for name, m, inp in captured:
            three_d = isinstance(m, torch.nn.Conv3d)
            ours, ref = (tritonconv.conv3d, F.conv3d) if three_d else (tritonconv.conv2d, F.conv2d)
            x32, w32 = inp.float(), m.weight.float()
            geometry = (m.stride, m.padding, m.dilation, m.groups)
            exact = ref(x32.double(), w32.double(), None, *geometry)
            layers.append((ours, x32, w32, geometry, exact))
            rows.append({
                "layer": name,
                "kernel": list(m.kernel_size),
                "reduction": m.in_channels // m.groups * math.prod(m.kernel_size),
                "cudnn": _errors(ref(x32, w32, None, *geometry), exact),
            })  # fmt: skip
        for precision in args.precisions:
            with overridden(precision, TF32_OFF_PRECISION=precision):
                for row, (ours, x32, w32, geometry, exact) in zip(rows, layers):
                    row[precision] = _errors(ours(x32, w32, None, *geometry), exact)
    print(f"{'layer':28} {'kernel':8} {'K':>5}  bias ×1e-9: {'cuDNN':>7} "
          + " ".join(f"{p:>9}" for p in args.precisions) + "   rms ×1e-7: cuDNN "
          + " ".join(f"{p:>9}" for p in args.precisions))  # fmt: skip
    for row in rows:
        kernel = "x".join(map(str, row["kernel"]))
        biases = " ".join(f"{row[p][1] * 1e9:9.2f}" for p in args.precisions)
        rmss = " ".join(f"{row[p][0] * 1e7:9.2f}" for p in args.precisions)
        print(f"{row['layer']:28} {kernel:8} {row['reduction']:5}  {'':11}"
              f"{row['cudnn'][1] * 1e9:7.2f} {biases}   {'':10}{row['cudnn'][0] * 1e7:5.2f} {rmss}")  # fmt: skip
    for p in ["cudnn", *args.precisions]:
        mean_bias = sum(r[p][1] for r in rows) / len(rows)
        print(f"mean bias {p:10} {mean_bias:+.2e}   sum {sum(r[p][1] for r in rows):+.2e}")
    return rows


if __name__ == "__main__":
    main()
