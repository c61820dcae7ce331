"""Probe: one tritonconv knob's settings, A/B, over the dense suite's cases in one process.

Each setting of ``--knob`` (a module constant, e.g. ``implicit_gemm.TAP_BITS``) runs every
chosen dense case (channels-last, as the suite's rows) forward and backward with
``algo="implicit_gemm"``, against cuDNN measured beside it, in rounds that alternate the
settings (the machine drifts); the table gives kernel µs (CUDA-graph replay) per setting, the
best of the rounds, and each setting's geomean speed over cuDNN. The outputs of every setting
are compared with the first's (max relative difference): a knob that changes the arithmetic
says so.

    PYTHONPATH=src python benchmarks/probe_knob.py --knob TAP_BITS --values False True \\
        [--module tritonconv.ops.implicit_gemm] [--dtype bfloat16] [--rounds 2] [--tf32-off]
        [case ...]
"""

from __future__ import annotations

import argparse
import ast
import importlib
import json
import os
import sys

import torch

from tritonconv import functional
from tritonconv.bench import Options, overridden
from tritonconv.bench.dense import CASES, _inputs, _times, precision

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare_bench import _geomean


def _outputs(case, dtype) -> torch.Tensor:
    """Forward output and both gradients of one seeded input set, flattened (fp32)."""
    torch.manual_seed(0)
    x, w = _inputs(case, dtype)[0]
    y = functional.conv2d(x, w, algo="implicit_gemm", **case.kwargs)
    dx, dw = torch.autograd.grad(y, (x, w), torch.ones_like(y))
    return torch.cat([t.detach().float().flatten() for t in (y, dx, dw)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cases", nargs="*")
    parser.add_argument("--module", default="tritonconv.ops.implicit_gemm")
    parser.add_argument("--knob", required=True)
    parser.add_argument("--values", nargs="+", required=True, help="Python literals")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json", default=None)
    parser.add_argument("--tf32-off", action="store_true", help="fp32 without TF32 (both sides)")
    args = parser.parse_args()
    module = importlib.import_module(args.module)
    values = [ast.literal_eval(v) for v in args.values]
    dtype = getattr(torch, args.dtype)
    opts = Options(reps=30, dtypes=(args.dtype,))
    cases = [c for c in CASES if not args.cases or c.name in args.cases]
    best: dict = {}  # (case, value index) -> [fwd, bwd, ref fwd, ref bwd] kernel ms, minima
    first: dict = {}  # case -> the first setting's outputs
    diffs: dict = {}  # case -> the largest difference of a setting's outputs from the first's
    for _ in range(args.rounds):
        for i, value in enumerate(values):
            with overridden(module, **{args.knob: value}), precision(not args.tf32_off):
                for case in cases:
                    times = _times(case, dtype, opts)
                    got = [times["ours"][2], times["ours"][3], times["ref"][2], times["ref"][3]]
                    if None in got:  # no CUDA graphs (the CPU): per-call times instead
                        got = [times["ours"][0], times["ours"][1], times["ref"][0], times["ref"][1]]
                    old = best.get((case.name, i))
                    best[case.name, i] = got if old is None else list(map(min, old, got))
                    if old is None:  # each setting's results (first round), against the first's
                        out = _outputs(case, dtype)
                        ref = first.setdefault(case.name, out)
                        diff = ((out - ref).abs().max() / ref.abs().max().clamp_min(1e-30)).item()
                        diffs[case.name] = max(diffs.get(case.name, 0.0), diff)
    print(f"{args.knob} = {' | '.join(map(repr, values))}: kernel µs, (× cuDNN)")
    header = f"{'case':16} {'cuDNN fwd':>9} " + " ".join(f"{'fwd ' + repr(v):>16}" for v in values)
    header += f" {'cuDNN bwd':>9} " + " ".join(f"{'bwd ' + repr(v):>16}" for v in values)
    print(header + "  max diff")
    speed = {i: ([], []) for i in range(len(values))}
    rows = []
    for case in cases:
        ref_f = min(best[case.name, i][2] for i in range(len(values)))
        ref_b = min(best[case.name, i][3] for i in range(len(values)))
        line = f"{case.name:16} {1000 * ref_f:9.1f} "
        cells_f, cells_b = [], []
        for i in range(len(values)):
            f, b = best[case.name, i][:2]
            speed[i][0].append(ref_f / f)
            speed[i][1].append(ref_b / b)
            cells_f.append(f"{1000 * f:8.1f} ({ref_f / f:.2f})")
            cells_b.append(f"{1000 * b:8.1f} ({ref_b / b:.2f})")
        diff = diffs[case.name]
        print(line + " ".join(cells_f) + f" {1000 * ref_b:9.1f} " + " ".join(cells_b)
              + f"  {diff:.1e}")  # fmt: skip
        ours = {repr(v): best[case.name, i][:2] for i, v in enumerate(values)}
        rows.append(dict(case=case.name, cudnn=[ref_f, ref_b], diff=diff, ours=ours))
    for i, value in enumerate(values):
        print(f"geomean × cuDNN, {args.knob}={value!r}: forward {_geomean(speed[i][0]):.3f}, "
              f"backward {_geomean(speed[i][1]):.3f}")  # fmt: skip
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(knob=args.knob, values=args.values, rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
