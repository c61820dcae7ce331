"""Probe (issue 13): tiles of the grouped 3x3 forward and input gradient, and whether loads
through L1 (``num_stages=1``: plain loads, no cp.async) help the short per-tap reductions.

ncu on RegNet-Y-800MF's 16 channels x 4 groups at 56² (session 33): the forward
(``conv_igemm_kernel``, 128x32x32 tiles of 2 packed groups, 4 stages) ran 35 µs with an L1 hit
rate of 0 % and 86 % in L2: every tap's source tile came from L2 again (cp.async bypasses L1),
115 MB of L2 reads for a 12.8 MB input; occupancy 28 %, DRAM 12 %. Each variant below is
(pack channels, Config); its forward and input gradient are timed by CUDA-graph replay beside
cuDNN's and checked against the heuristic's result.

    PYTHONPATH=src python benchmarks/probe_grouped_tiles.py [--json FILE] [layer ...]
"""

from __future__ import annotations

import argparse
import json

import torch
from probe_grouped import LAYERS, _diff  # (beside this script)

from tritonconv.bench import Options, kernel_ms, overridden
from tritonconv.geometry import make_geometry
from tritonconv.ops import implicit_gemm as ig

C = ig.Config
# (PACK_CHANNELS, config or None for the heuristic's)
VARIANTS = [
    (32, None),
    (64, None),
    (32, C(128, 32, 32, 4, 1)),
    (32, C(128, 32, 32, 8, 1)),
    (32, C(64, 32, 32, 4, 1)),
    (32, C(256, 32, 32, 8, 1)),
    (32, C(128, 32, 32, 4, 2)),
    (64, C(128, 64, 64, 4, 1)),
    (64, C(128, 64, 64, 8, 1)),
    (64, C(64, 64, 64, 4, 1)),
    (64, C(256, 64, 64, 8, 1)),
    (64, C(256, 64, 64, 8, 3)),
    (64, C(128, 64, 64, 4, 2)),
]


def measure(name: str, opts: Options) -> list[dict]:
    N, Cin, H, K, g = LAYERS[name]
    cl = torch.channels_last
    x = torch.randn(N, Cin, H, H, device="cuda", dtype=torch.bfloat16).to(memory_format=cl)
    w = torch.randn(K, Cin // g, 3, 3, device="cuda", dtype=torch.bfloat16) / 12
    w = w.to(memory_format=cl)
    dy = torch.randn(N, K, H, H, device="cuda", dtype=torch.bfloat16).to(memory_format=cl)
    geometry = make_geometry((H, H), (3, 3), (1, 1), (1, 1), (1, 1), (1, 1))
    mask = [True, False, False]
    fwd_ref = kernel_ms(lambda i: torch.conv2d(x, w, None, 1, 1, 1, g), 1, opts)
    dgrad_ref = kernel_ms(
        lambda i: torch.ops.aten.convolution_backward(
            dy, x, w, None, (1, 1), (1, 1), (1, 1), False, [0, 0], g, mask
        ),
        1,
        opts,
    )
    print(f"\n{name}: cuDNN fwd {1000 * fwd_ref:6.1f} dgrad {1000 * dgrad_ref:6.1f} µs")
    rows, ref = [], None
    for channels, config in VARIANTS:
        # (64 channels as PACK_CHANNELS itself: the wide rule, which would pack the narrow
        # variants wider, off)
        with overridden(ig, PACK_CHANNELS=channels, WIDE_PACK_CHANNELS=0):
            pack = ig.group_pack(x.dtype, Cin // g, K // g, g, N * H * H, x.device)

            def fwd(i, c=config):
                return ig.conv_forward(x, w, None, geometry, g, config=c)

            def dgrad(i, c=config):
                return ig.conv_grad_input(dy, w, x, geometry, g, config=c)

            try:
                out = (fwd(0), dgrad(0))
                times = (kernel_ms(fwd, 1, opts), kernel_ms(dgrad, 1, opts))
            except Exception as error:  # (a config that does not compile: say so)
                print(f"  pack {pack} {config}: {type(error).__name__}: {error}"[:160])
                continue
        ref = ref or out
        diff = max(_diff(a, b) for a, b in zip(out, ref, strict=True))
        rows.append(
            dict(layer=name, pack=pack, config=str(config), fwd=times[0], dgrad=times[1],
                 cudnn_fwd=fwd_ref, cudnn_dgrad=dgrad_ref, diff=diff)
        )  # fmt: skip
        print(
            f"  pack {pack} {config or 'heuristic'!s:>22}: fwd {1000 * times[0]:6.1f}"
            f" ({fwd_ref / times[0]:.2f}x) dgrad {1000 * times[1]:6.1f}"
            f" ({dgrad_ref / times[1]:.2f}x) diff {diff:.0e}",
            flush=True,
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("layers", nargs="*")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    opts = Options(reps=40)
    torch.backends.cudnn.benchmark = True
    rows = []
    for name in args.layers or ["regnet_16x4_56", "resnext_4x32_56", "grp32_3x3_28"]:
        rows += measure(name, opts)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
