"""Probe (issues 11, 12): input gradients into few channels with a stride, phases folded
into the destination channels (``implicit_gemm.phases_foldable``) against the stride phases
run one by one, and cuDNN.

Cases: ResNet-50's stem's input gradient, DCGAN's last layer (a transposed 4x4 stride 2 into
3 channels), a transposed 3x3 stride 2 into 3 channels and a vocoder-like transposed conv1d
into 1 channel; each in ``--dtype`` (bfloat16 channels-last by default; float32 follows
``--tf32-off``). Kernel time by CUDA-graph replay (µs), results checked against the phases'.
The stem's 7x7 and the 3x3 at stride 2 are not whole numbers of strides, so they do not fold
(``phases_foldable``: a phase's missing taps would be zero weights, and an infinite gradient
times zero is NaN) and both columns run the same path; session 30 measured them folded with
such zero taps before that rule (benchmarks/RESULTS.md).

    PYTHONPATH=src python benchmarks/probe_phase_fold.py [--dtype float32] [--tf32-off]
        [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch

import tritonconv
from tritonconv.bench import overridden
from tritonconv.ops import implicit_gemm as ig

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from probe_small_wave import time_or_run

# name: (transposed op's input shape, weight shape, stride, padding, output_padding)
CASES = {
    "r50_stem_dx": ((32, 64, 112, 112), (64, 3, 7, 7), 2, 3, 1),
    "dcgan_last": ((64, 64, 32, 32), (64, 3, 4, 4), 2, 1, 0),
    "up_3x3_s2_rgb": ((16, 64, 128, 128), (64, 3, 3, 3), 2, 1, 1),
    "vocoder_1d": ((16, 32, 8000), (32, 1, 16), 8, 4, 0),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--tf32-off", action="store_true")
    ap.add_argument("--json")
    args = ap.parse_args()
    torch.backends.cudnn.allow_tf32 = not args.tf32_off
    torch.backends.cudnn.benchmark = True
    gpu = torch.cuda.is_available()
    device = "cuda" if gpu else "cpu"
    dtype = getattr(torch, args.dtype)
    rows = []
    for name, (xs, ws, stride, padding, output_padding) in CASES.items():
        if not gpu:  # (the interpreter: a check of the script at toy sizes)
            xs = (1, 4, *(min(s, 6) for s in xs[2:]))
            ws = (4, *ws[1:])
        conv_t = tritonconv.conv_transpose1d if len(xs) == 3 else tritonconv.conv_transpose2d
        reference = (
            torch.nn.functional.conv_transpose1d
            if len(xs) == 3
            else torch.nn.functional.conv_transpose2d
        )
        layout = torch.channels_last if len(xs) == 4 else torch.contiguous_format
        x = torch.randn(xs, device=device, dtype=dtype).contiguous(memory_format=layout)
        w = torch.randn(ws, device=device, dtype=dtype) / (ws[0] * ws[-1]) ** 0.5
        kw = dict(stride=stride, padding=padding, output_padding=output_padding)
        cudnn = time_or_run(lambda x=x, w=w, kw=kw, f=reference: f(x, w, **kw))
        times, outputs = {}, {}
        for label, gain in (("phases", float("inf")), ("folded", ig.PHASE_FOLD_MIN_GAIN)):
            with overridden(ig, PHASE_FOLD_MIN_GAIN=gain):
                outputs[label] = conv_t(x, w, algo="implicit_gemm", **kw).float()
                times[label] = time_or_run(
                    lambda x=x, w=w, kw=kw, f=conv_t: f(x, w, algo="implicit_gemm", **kw)
                )
        scale = outputs["phases"].abs().max().item()
        diff = (outputs["folded"] - outputs["phases"]).abs().max().item() / scale
        print(f"{name:14} cuDNN {cudnn:8.1f} | phases {times['phases']:8.1f} "
              f"({cudnn / times['phases']:.2f}x) | folded {times['folded']:8.1f} "
              f"({cudnn / times['folded']:.2f}x) | max diff {diff:.1e}", flush=True)  # fmt: skip
        rows.append(dict(case=name, cudnn=cudnn, diff=diff, **times))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
