"""Probe: tiles of the tap GEMM (``_launch_tap_gemm``: a transposed convolution whose kernel
equals its stride as one TMA GEMM scattered by tap), against cuDNN, per layer (issue 12).

Each layer's forward (bf16 channels-last) under every tile configuration in ``CONFIGS`` (the
rule's first), kernel time by CUDA-graph replay (``bench.kernel_ms``), cuDNN's beside it; and
the same GEMM with a plain TMA store (a 1x1 convolution of the same rows, K and columns) as the
ceiling the scattered epilogue is held against.

    PYTHONPATH=src python benchmarks/probe_tap_gemm.py [--json out.json]
"""

from __future__ import annotations

import argparse
import json

import torch
import torch.nn.functional as F

from tritonconv import functional
from tritonconv.bench import Options, kernel_ms, overridden
from tritonconv.ops import implicit_gemm
from tritonconv.ops.implicit_gemm import TmaConfig

# name: (input shape, C_out, kernel = stride)
LAYERS = {
    "convT3d_2x2x2": ((2, 128, 16, 32, 32), 64, (2, 2, 2)),
    "unet_up_2x2": ((8, 128, 64, 64), 64, (2, 2)),
    "unet_up_2x2_256": ((8, 256, 32, 32), 128, (2, 2)),
    "convT1d_k4s4": ((8, 256, 2048), 128, (4,)),
}

CONFIGS = [
    None,  # the rule's
    TmaConfig(256, 128, 64, 8, 3, True),
    TmaConfig(128, 128, 64, 8, 3, True),
    TmaConfig(128, 128, 64, 4, 3, False),
    TmaConfig(128, 64, 64, 4, 3, False),
    TmaConfig(64, 128, 64, 4, 4, False),
    TmaConfig(256, 64, 64, 8, 3, True),
]

TRANSPOSED = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}
OURS = {
    1: functional.conv_transpose1d,
    2: functional.conv_transpose2d,
    3: functional.conv_transpose3d,
}


def _last(t: torch.Tensor) -> torch.Tensor:
    """``t`` with channels innermost (channels-last of any rank)."""
    return t.movedim(1, -1).contiguous().movedim(-1, 1)


def _layer(name, shape, c_out, kernel, opts) -> dict:
    """One layer's row: cuDNN, the plain-store ceiling and every configuration, kernel ms."""
    dims = len(kernel)
    x = _last(torch.randn(shape, device="cuda", dtype=torch.bfloat16))
    w = _last(torch.randn((shape[1], c_out, *kernel), device="cuda", dtype=torch.bfloat16))
    ref, ours = TRANSPOSED[dims], OURS[dims]
    # the same GEMM with a plain TMA store: a 1x1 convolution of x's rows (4-D, channels-last)
    flat = _last(torch.randn((shape[0], shape[1], x[0, 0].numel(), 1), device="cuda",
                             dtype=torch.bfloat16))  # fmt: skip
    w1 = torch.randn((c_out * w[0, 0].numel(), shape[1], 1, 1), device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        cudnn = kernel_ms(lambda i: ref(x, w, stride=kernel), 1, opts)
        want = ref(x, w, stride=kernel).float()
        plain = kernel_ms(lambda i: functional.conv2d(flat, w1, algo="implicit_gemm"), 1, opts)
        times = {}
        for config in CONFIGS:
            for boxes in (True, False):
                with overridden(implicit_gemm, TAP_GEMM_TILES=config, TAP_BOX=boxes):
                    got = ours(x, w, stride=kernel, algo="implicit_gemm").float()
                    err = ((got - want).abs().max() / want.abs().max()).item()
                    ms = kernel_ms(
                        lambda i: ours(x, w, stride=kernel, algo="implicit_gemm"), 1, opts
                    )
                label = f"{config if config else 'rule'} {'TMA' if boxes else 'pointer'} stores"
                times[label] = (ms, err)
    print(f"\n{name} {shape} -> {c_out}, kernel = stride {kernel}: cuDNN {1000 * cudnn:.1f} µs,"
          f" the same GEMM with a TMA store {1000 * plain:.1f} µs")  # fmt: skip
    for label, (ms, err) in times.items():
        print(f"  {label:48} {1000 * ms:8.1f} µs  ({cudnn / ms:.2f}x cuDNN)  err {err:.1e}")
    return dict(layer=name, cudnn_ms=cudnn, plain_ms=plain, ours=times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    torch.backends.cudnn.benchmark = True
    opts = Options(reps=30)
    rows = [_layer(name, *layer, opts) for name, layer in LAYERS.items()]
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
