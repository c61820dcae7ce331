"""Probe (issue 14): are a converted model's fp32 parameter gradients right on the first call,
on repeated calls (launch-plan replays) and on half batches?

The 2-GPU check (`scripts/distributed_check.py`) found DDP's and FSDP2's step-0 gradients of a
converted resnet50 5-10 % away from one process's (the same model on the combined batch), where
PyTorch's convolutions stay within 2e-5; ``probe_fp32_layers.py`` found every layer alone
(each signature called once) as close to float64 as cuDNN. This takes the check's model (frozen
BatchNorm, 10 classes, fp32 with TF32 off) and, per tritonconv algorithm, computes the loss's
parameter gradients three times on the same batch of 8 and once as the mean of its two halves,
and prints each one's distance to a float64 run of the same model (the distributed check's
measure: max |g - g64| / max(max |g64|, 1e-3 G) over parameters), beside cuDNN's, and whether
repeated calls gave bitwise the same gradients.

    PYTHONPATH=src python benchmarks/probe_model_grads.py [--model small] [--algos auto,...]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from pathlib import Path

if not __import__("torch").cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import torch
import torch.nn.functional as F

import tritonconv

ROOT = Path(__file__).resolve().parent.parent


def _check_module():
    spec = importlib.util.spec_from_file_location("dcheck", ROOT / "scripts/distributed_check.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["dcheck"] = module
    spec.loader.exec_module(module)
    return module


def grads(model, x, y) -> dict[str, torch.Tensor]:
    model.zero_grad(set_to_none=True)
    F.cross_entropy(model(x), y).backward()
    return {n: p.grad.detach().double().clone() for n, p in model.named_parameters()}


def mean(a: dict, b: dict) -> dict:
    return {n: (a[n] + b[n]) / 2 for n in a}


def main() -> None:
    dc = _check_module()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, choices=("resnet50", "small"))
    parser.add_argument("--algos", default="auto,implicit_gemm,im2col_gemm")
    parser.add_argument("--norm", default="frozen_bn", choices=("frozen_bn", "groupnorm"))
    parser.add_argument("--zero-residual", action="store_true", help="zero_init_residual")
    parser.add_argument("--batch", type=int, default=None)
    parser.add_argument("--size", type=int, default=None)
    args = parser.parse_args()
    cuda = torch.cuda.is_available() and not tritonconv.INTERPRETER
    device = torch.device("cuda" if cuda else "cpu")
    name = args.model or ("resnet50" if cuda else "small")
    batch = args.batch or (8 if cuda else 4)
    size = args.size or (224 if name == "resnet50" else 16)
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False

    torch.manual_seed(0)
    base, origin = dc.build_model(name, args.norm)
    if args.zero_residual:
        dc.zero_init_residual(base)
    base.to(device)
    if args.norm == "frozen_bn":
        g = torch.Generator().manual_seed(999)
        dc.calibrate(base, torch.randn(batch, 3, size, size, generator=g).to(device))
    state = {k: v.detach().clone() for k, v in base.state_dict().items()}
    g = torch.Generator().manual_seed(1000)
    x = torch.randn(batch, 3, size, size, generator=g).to(device)
    y = torch.randint(0, dc.NUM_CLASSES, (batch,), generator=g).to(device)
    half = batch // 2

    def fresh(algo):
        model, _ = dc.build_model(name, args.norm)
        if algo is not None:
            tritonconv.nn.convert(model, algo)
        model.load_state_dict(state)
        model.to(device)
        dc.set_train_mode(model, args.norm)
        return model

    exact = fresh(None).double()
    g64 = grads(exact, x.double(), y)
    floor = dc.FLOOR * max(t.abs().max().item() for t in g64.values())

    def err(found):
        errors = {n: dc.rel_error(found[n], g64[n], floor) for n in g64}
        worst = max(errors, key=errors.get)
        return f"{errors[worst]:.2e} ({worst})"

    print(f"{origin}, {args.norm}, batch {batch}x3x{size}x{size}, {device}, fp32 (TF32 off)")
    print(f"{'convolutions':16} {'call 1':42} {'call 2':42} {'halves':42} repeat bitwise")
    for algo in [None, *args.algos.split(",")]:
        tritonconv.clear_caches()
        model = fresh(algo)
        first, second, third = (grads(model, x, y) for _ in range(3))
        halves = mean(grads(model, x[:half], y[:half]), grads(model, x[half:], y[half:]))
        same = all(
            torch.equal(first[n], second[n]) and torch.equal(second[n], third[n]) for n in first
        )
        label = algo or "PyTorch (cuDNN)"
        print(f"{label:16} {err(first):42} {err(second):42} {err(halves):42} {same}", flush=True)


if __name__ == "__main__":
    main()
