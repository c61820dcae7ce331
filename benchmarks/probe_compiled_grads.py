"""Probe (issue 14, session 19): is a compiled model's flagged parameter gradient wrong, or
noise? Each variant's bf16 training-step gradients against the same step in float64.

The models suite flags a compiled training row when one parameter's gradient is far from the
same model's eager gradient (relative L2 over 10x PyTorch's own compiled-vs-eager distance
plus 0.1). Session 19's efficientnet_b0 row flagged ``features.2.0.block.2.fc1.bias`` at 4.1
against PyTorch's 0.39. This compares every variant with float64 instead (PyTorch's
convolutions, the same weights and input): torch eager and compiled, ours eager and compiled,
and ours compiled with the 1x1-as-cuBLAS rule off (``--without-rule`` of
``probe_pointwise_rule.py``). A wrong gradient sits at L2 ~1 or more from float64 where the
others sit far below; noise puts every variant's distance alike. In eval mode by default: with batch statistics
(``--train``) bf16 gradients are 1.16 (median) from float64 for PyTorch itself, and the biases
before a BatchNorm have an exact gradient of 0 (session 19's first run).

    python benchmarks/probe_compiled_grads.py [--model efficientnet_b0] [--batch 8]
"""

from __future__ import annotations

import argparse
import copy
import json
import os

import torch

import tritonconv as tc
from tritonconv import choice


def _step(model, x) -> dict:
    for p in model.parameters():
        p.grad = None
    model(x).float().square().mean().backward()
    return {
        n.removeprefix("_orig_mod."): p.grad.detach().double().clone()
        for n, p in model.named_parameters()
    }


def _distances(grads: dict, exact: dict) -> dict:
    return {
        n: ((g - exact[n]).norm() / exact[n].norm().clamp_min(1e-30)).item()
        for n, g in grads.items()
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="efficientnet_b0")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--watch", default="features.2.0.block.2.fc1.bias")
    ap.add_argument("--json", default=None)
    ap.add_argument(
        "--train", action="store_true", help="BatchNorm on batch statistics (default: eval)"
    )
    args = ap.parse_args()
    import torchvision

    torch.manual_seed(0)
    base = getattr(torchvision.models, args.model)().cuda()
    base.train(args.train)
    x = torch.randn(args.batch, 3, 224, 224, device="cuda")
    exact_model = copy.deepcopy(base).double()
    exact = _step(exact_model, x.double())
    del exact_model
    cl = torch.channels_last
    xb = x.to(torch.bfloat16).contiguous(memory_format=cl)
    rule = choice.heuristic
    results = {}
    for name in ("torch eager", "torch compiled", "ours eager", "ours compiled", "ours no-rule"):
        model = copy.deepcopy(base).to(torch.bfloat16).to(memory_format=cl)
        if name.startswith("ours"):
            model = tc.nn.convert(model)
        if name == "ours no-rule":  # (in the environment: AOTAutograd's cache keys see it)
            os.environ["TRITONCONV_PROBE_POINTWISE_RULE"] = "--without-rule"
            choice.heuristic = lambda d, a, c, channels_last=False, traced=False: rule(
                d, a, c, False, traced
            )
        if "eager" not in name:
            torch._dynamo.reset()
            model = torch.compile(model)
        _step(model, xb)  # (compiles; BatchNorm statistics move the same in every variant)
        distances = _distances(_step(model, xb), exact)
        choice.heuristic = rule
        worst = max(distances, key=distances.get)
        results[name] = distances
        print(
            f"{name:15s} {args.watch}: {distances[args.watch]:.3g}   worst: {worst} "
            f"{distances[worst]:.3g}   median {sorted(distances.values())[len(distances) // 2]:.3g}"
        )
    ref = results["torch eager"]
    for name, distances in results.items():
        ratios = {n: d / max(ref[n], 1e-6) for n, d in distances.items()}
        top = sorted(ratios, key=ratios.get)[-3:]
        print(f"{name:15s} vs torch eager, largest ratios: " + ", ".join(
            f"{n} {ratios[n]:.2f} ({distances[n]:.2g})" for n in reversed(top)
        ))  # fmt: skip
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
