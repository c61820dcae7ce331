"""Probe: one tritonconv knob's settings, A/B, on whole models' eager steps (bf16 channels-last).

``probe_knob.py`` measures a knob on the dense layers' kernels; a knob that adds host work
(session 26's ``CONCURRENT_GRADIENTS``, a stream fork and join per backward, reverted:
NOTES.md) has to be measured where the host paces the step too. For each model of the
models suite, the converted model with each setting and the torch model (cuDNN) are timed
in alternation, the order flipped every round, the plans re-recorded for each (they keep
what a setting decided); median ms per step, the best round of each: inference and a
training step.

    PYTHONPATH=src:<torchvision> python benchmarks/probe_models_knob.py \\
        --knob TAP_BITS --values True False [--models resnet50 unet] [--batch 32] \\
        [--rounds 3] [--reps 10]
"""

from __future__ import annotations

import argparse
import ast
import copy
import importlib
import json

import torch

from tritonconv.bench import overridden
from tritonconv.bench.models import MODELS, STEPS, _inputs, build, converted
from tritonconv.timing import median_ms


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--knob", required=True)
    ap.add_argument("--values", nargs="+", required=True, type=ast.literal_eval)
    ap.add_argument("--module", default="tritonconv.ops.implicit_gemm")
    ap.add_argument("--models", nargs="+", default=["resnet50", "unet", "r2plus1d_18"])
    ap.add_argument("--batch", type=int, default=None)
    ap.add_argument("--reps", type=int, default=10, help="timed steps per round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json")
    args = ap.parse_args()
    module = importlib.import_module(args.module)
    torch.backends.cudnn.benchmark = True
    quick = not torch.cuda.is_available()
    rows = []
    for name in args.models:
        spec = MODELS[name]
        shape = spec.quick_input if quick else spec.input
        if args.batch and not quick:
            shape = (args.batch, *shape[1:])
        reference = build(spec, quick).to("cuda" if not quick else "cpu", torch.bfloat16)
        fmt = torch.channels_last_3d if len(shape) == 5 else torch.channels_last
        reference = reference.to(memory_format=fmt)
        ours, swapped = converted(copy.deepcopy(reference))
        xs = _inputs(shape, torch.bfloat16)
        for mode in ("infer", "train"):
            for m in (reference, ours):
                m.train(mode == "train")
            steps = {"cudnn": (STEPS[mode](reference, xs), None)}
            for value in args.values:
                steps[repr(value)] = (STEPS[mode](ours, xs), value)
            times = {label: [] for label in steps}
            for round_ in range(args.rounds):
                labels = list(steps) if round_ % 2 == 0 else list(reversed(steps))
                for label in labels:
                    step, value = steps[label]
                    # (overridden clears the plans recorded under the other setting)
                    with overridden(module, **({args.knob: value} if label != "cudnn" else {})):
                        times[label].append(median_ms(step, args.reps, warmup=3, inputs=len(xs)))
            best = {label: min(t) for label, t in times.items()}
            rows.append({"model": name, "mode": mode, "batch": shape[0], "swapped": swapped,
                         "ms": times})  # fmt: skip
            cells = "  ".join(f"{k} {v:.2f} ms ({best['cudnn'] / v:.2f}x)" for k, v in best.items())
            print(f"{name:14} {mode:5} batch {shape[0]:3}  {cells}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"knob": args.knob, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
