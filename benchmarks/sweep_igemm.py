"""Sweep the implicit-GEMM tile configurations over the dense layers (a GPU diagnostic).

For every case of the ``dense`` bench suite, in bf16 and fp32 (TF32) channels-last, times the
forward, input-gradient and weight-gradient kernels with each candidate configuration, next to
cuDNN's own forward / dgrad / wgrad and to the configuration the heuristic picks. Prints the
best per (case, dtype, pass) and writes everything to ``$OUT/sweep.json``: the data the
heuristic in ``ops/implicit_gemm.py`` is fitted to (benchmarks/NOTES.md).

    PYTHONPATH=src python benchmarks/sweep_igemm.py [case ...]
"""

from __future__ import annotations

import json
import os
import sys

import torch
from triton.testing import do_bench

from tritonconv.bench.dense import CASES
from tritonconv.geometry import make_geometry
from tritonconv.ops import implicit_gemm as ig
from tritonconv.ops.common import next_power_of_2

C = ig.Config
CANDIDATES = {
    torch.bfloat16: [
        C(128, 128, 64, 8, 3), C(128, 128, 64, 8, 4), C(128, 64, 64, 4, 4), C(64, 128, 64, 4, 4),
        C(128, 256, 64, 8, 3), C(256, 128, 64, 8, 3), C(64, 64, 64, 4, 4), C(128, 128, 32, 8, 4),
        C(128, 64, 32, 4, 5), C(64, 32, 64, 4, 4), C(128, 32, 64, 4, 4), C(128, 16, 64, 4, 4),
        C(128, 64, 16, 4, 4), C(128, 128, 16, 8, 4), C(64, 64, 128, 4, 3), C(64, 64, 32, 4, 4),
        C(32, 64, 64, 4, 4),
    ],
    torch.float32: [
        C(128, 128, 32, 8, 3), C(128, 64, 32, 4, 4), C(64, 128, 32, 4, 4), C(64, 64, 32, 4, 4),
        C(128, 32, 32, 4, 4), C(64, 64, 64, 4, 3),
    ],
}  # fmt: skip


def bench(fn) -> float:
    return do_bench(fn, warmup=5, rep=25)


def _passes(case, dtype):
    """{pass: (ours(config), cudnn(), (reduction channels, output channels))} for one case."""
    x = torch.randn(case.input, device="cuda", dtype=dtype).to(memory_format=torch.channels_last)
    w = torch.randn(case.weight, device="cuda", dtype=dtype) * 0.05
    w = w.to(memory_format=torch.channels_last)
    kw = case.kwargs
    dy = torch.randn_like(torch.nn.functional.conv2d(x, w, **kw))
    s, p, d, g = case.stride, case.padding, case.dilation, case.groups
    geometry = make_geometry(case.input[2:], case.weight[2:], (s, s), (p, p), (p, p), (d, d))
    cin, cout = case.input[1] // g, case.weight[0] // g

    def cudnn(mask):
        return torch.ops.aten.convolution_backward(
            dy, x, w, None, (s, s), (p, p), (d, d), False, (0, 0), g, mask
        )

    return {
        "fwd": (
            lambda c: ig.conv_forward(x, w, None, geometry, g, c),
            lambda: torch.nn.functional.conv2d(x, w, **kw),
            (cin, cout),
        ),
        "dgrad": (
            lambda c: ig.conv_grad_input(dy, w, x, geometry, g, None, None, c),
            lambda: cudnn([True, False, False]),
            (cout, cin),
        ),
        "wgrad": (
            lambda c: ig.conv_grad_weight(dy, x, list(w.shape), geometry, g, c),
            lambda: cudnn([False, True, False]),
            (cin, cout),
        ),
    }


def _wanted(config: ig.Config, name: str, channels) -> bool:
    """Skip tiles far wider than the problem (pure masking)."""
    m_channels, n_channels = channels
    if name == "wgrad":  # a [C_out, C_in] tile
        return config.block_m <= max(16, next_power_of_2(n_channels)) and config.block_n <= max(
            16, next_power_of_2(m_channels)
        )
    return config.block_n <= max(16, next_power_of_2(n_channels)) and config.block_k <= max(
        16, next_power_of_2(m_channels)
    )


def main(names: list[str]) -> None:
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = True
    results = []
    dtypes = os.environ.get("SWEEP_DTYPES", "bfloat16 float32").split()
    for dtype in (getattr(torch, name) for name in dtypes):
        for case in CASES:
            if names and case.name not in names:
                continue
            for name, (ours, ref, channels) in _passes(case, dtype).items():
                ref_ms = bench(ref)
                heuristic_ms = bench(lambda ours=ours: ours(None))
                timings = {}
                for config in CANDIDATES[dtype]:
                    if not _wanted(config, name, channels):
                        continue
                    try:
                        timings[str(config)] = bench(lambda ours=ours, c=config: ours(c))
                    except Exception as e:  # out of shared memory and the like
                        timings[str(config)] = float("inf")
                        print("  skip", config, type(e).__name__, str(e)[:80])
                timings = timings or {"heuristic": heuristic_ms}
                best = min(timings, key=timings.get)
                row = dict(
                    case=case.name, dtype=str(dtype).split(".")[1], op=name, cudnn_ms=ref_ms,
                    heuristic_ms=heuristic_ms, best=best, best_ms=timings[best], timings=timings,
                )  # fmt: skip
                results.append(row)
                print(
                    f"{case.name:16} {row['dtype']:9} {name:6} cudnn {ref_ms:8.4f}  "
                    f"heur {heuristic_ms:8.4f} ({ref_ms / heuristic_ms:5.2f}x)  best "
                    f"{timings[best]:8.4f} ({ref_ms / timings[best]:5.2f}x) {best}",
                    flush=True,
                )
                print("   ", "  ".join(f"{k}: {v:.4f}" for k, v in sorted(timings.items())))
    out = os.environ.get("OUT", ".")
    with open(os.path.join(out, "sweep.json"), "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1:])
