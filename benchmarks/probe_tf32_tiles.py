"""Probe (issue 11): the implicit GEMM's forward tiles for fp32 with TF32 allowed (or off).

The fp32 forward rule (``forward_config``) was fitted before the loop changes of sessions 18-22
and the dense suite has no benchmark-mode rows for fp32, so nothing re-checks it. This probe
times the forward of the dense suite's channels-last layers (TF32 on, PyTorch's default) with
the heuristic's tiles and with each of ``CONFIGS`` (kernel time, CUDA-graph replay), cuDNN's
TF32 beside it, each result checked against the heuristic's (TF32 rounding). ``--tf32-off``:
TF32 off on both sides (ours ``tf32x3_rn``, whose steps are capped at 16 channels, so the 32-
and 64-deep candidates run 16-deep). Layers with few input channels (stems) are timed folded,
as the rule runs them (``implicit_gemm.foldable``: an explicit configuration does not fold).
``--grad-input``: the input gradient instead (cuDNN's beside it), with narrow candidates too
for layers of few input channels.

    PYTHONPATH=src python benchmarks/probe_tf32_tiles.py [--json FILE] [--tf32-off]
        [--grad-input] [case ...]
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch
import torch.nn.functional as F

from tritonconv.bench.dense import CASES
from tritonconv.geometry import make_geometry
from tritonconv.ops import implicit_gemm as ig

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from probe_small_wave import ranked, time_or_run

C = ig.Config
CONFIGS = [C(64, 64, 64, 4, 3), C(64, 64, 32, 4, 4), C(64, 64, 32, 4, 3), C(128, 64, 32, 4, 4),
           C(64, 128, 32, 4, 4), C(128, 128, 32, 8, 3), C(128, 128, 32, 8, 4),
           C(128, 64, 32, 4, 3), C(64, 64, 16, 4, 5), C(128, 128, 16, 8, 4),
           C(128, 64, 16, 8, 4), C(64, 32, 16, 4, 4), C(128, 32, 16, 4, 4), C(256, 64, 16, 8, 3),
           C(64, 128, 16, 4, 3), C(128, 64, 16, 8, 3), C(128, 128, 16, 8, 3), C(64, 64, 16, 4, 4),
           C(64, 64, 16, 8, 4)]  # fmt: skip
# input gradients into at most 16 channels (stems): the destination side is the tile's width
NARROW = [C(64, 16, 16, 4, 4), C(128, 16, 16, 4, 3), C(256, 16, 16, 8, 3), C(128, 16, 32, 4, 4),
          C(64, 16, 32, 4, 4), C(256, 16, 32, 8, 3)]  # fmt: skip
DEFAULT = ("r50_3x3_56", "r50_3x3_28", "r50_3x3_14", "r50_3x3_7", "dil2_3x3_64",
           "grp32_3x3_28", "unet_3x3_128", "unet_3x3_256")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cases", nargs="*")
    ap.add_argument("--json")
    ap.add_argument("--tf32-off", action="store_true", help="fp32 without TF32 (both sides)")
    ap.add_argument("--grad-input", action="store_true", help="the input gradient's tiles")
    args = ap.parse_args()
    torch.backends.cudnn.allow_tf32 = not args.tf32_off
    torch.backends.cudnn.benchmark = True
    gpu = torch.cuda.is_available()
    device = "cuda" if gpu else "cpu"
    rows = []
    for case in CASES:
        if case.name not in (args.cases or DEFAULT):
            continue
        case = case if gpu else case.quick()
        cl = torch.channels_last
        x = torch.randn(case.input, device=device).to(memory_format=cl)
        w = (torch.randn(case.weight, device=device) / (case.weight[1] * 9) ** 0.5).to(
            memory_format=cl
        )
        s, p, d = (case.stride,) * 2, (case.padding,) * 2, (case.dilation,) * 2
        geometry = make_geometry(case.input[2:], case.weight[2:], s, p, p, d)
        kw = dict(stride=case.stride, padding=case.padding, dilation=case.dilation)
        kw["groups"] = case.groups
        if args.grad_input:
            dy = torch.randn((case.input[0], case.weight[0], *geometry.output), device=device)
            dy = dy.to(memory_format=cl)

            def cudnn_run(x=x, w=w, dy=dy, s=s, p=p, d=d, groups=case.groups):
                mask = [True, False, False]
                return torch.ops.aten.convolution_backward(
                    dy, x, w, None, s, p, d, False, [0, 0], groups, mask
                )[0]

            def run(config, x=x, w=w, dy=dy, geometry=geometry, groups=case.groups):
                return ig.conv_grad_input(dy, w, x, geometry, groups, config=config)

            candidates = CONFIGS + (NARROW if case.input[1] <= 16 else [])
        else:

            def cudnn_run(x=x, w=w, kw=kw):
                return F.conv2d(x, w, **kw)

            # explicit configurations run on the folded input the rule folds for itself
            folded = (x, w, geometry)
            if ig.foldable(x.dtype, x.shape[1], geometry, case.groups):
                folded_x, folded_geometry = ig._fold_input(x, geometry)
                folded = (
                    folded_x,
                    ig._folded(ig._channels_last(w), w.shape[-1], 1),
                    folded_geometry,
                )

            def run(config, plain=(x, w, geometry), folded=folded, groups=case.groups):
                x, w, geometry = plain if config is None else folded
                return ig.conv_forward(x, w, None, geometry, groups, config)

            candidates = CONFIGS
        cudnn = time_or_run(cudnn_run)
        reference = run(None).float()
        scale = reference.abs().max().item()
        timed = []
        if args.tf32_off:  # (steps capped at 16 channels: candidates that then coincide run once)
            candidates = list(dict.fromkeys(ig.tf32x3_step(c, torch.float32) for c in candidates))
        for config in [None, *candidates]:
            try:
                err = (run(config).float() - reference).abs().max().item() / scale
                us = time_or_run(lambda config=config: run(config))
            except Exception as error:  # a configuration that does not fit
                print(f"  {case.name} {config}: {type(error).__name__}", flush=True)
                continue
            if err > 1e-2:
                raise AssertionError(f"{case.name} {config}: error {err}")
            timed.append((us, "rule" if config is None else str(config)))
        table, cells = ranked(timed, cudnn, 5)
        rule_us = table["rule"]
        print(f"{case.name:14} cuDNN {cudnn:6.1f} | rule {rule_us:6.1f} ({cudnn / rule_us:.2f}x) | "
              f"{cells}", flush=True)  # fmt: skip
        rows.append(dict(case=case.name, cudnn=cudnn, runs=table))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
