"""Probe (issue 13): the flat channels-last rows kernel against the window kernel it replaces.

``depthwise_rows_kernel`` takes channels-last depthwise forwards and stride-1 input gradients
of at most ``ROWS_MAX_TAPS`` taps, width stride 1 and multiplier 1, before the sliding-window
kernels. Per layer and dtype this times, by CUDA-graph replay over input sets that together
overflow the L2 cache (kernel time, inputs from DRAM), in one process: cuDNN forward and
forward + backward; ours with the rows kernel off (the window kernels, the library before);
ours with the rows kernel over a few ``ROWS_CONFIG`` tiles, forward and forward + backward,
each first checked against float64. It prints forward bandwidth (input read + output written
once, over the kernel time) beside a device-to-device copy of the input.

    PYTHONPATH=src python benchmarks/probe_depthwise_rows.py [--json out.json]
        [--layers mobilenet_3x3,...] [--variants bf16_cl,fp32_cl]
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).parent))
from probe_depthwise_window import LAYERS, VARIANTS, _step, check, graph_ms

from tritonconv.bench import input_sets
from tritonconv.caches import clear_caches
from tritonconv.ops import depthwise as ops

RUNS = ["mobilenet_3x3", "dw3x3_56_c256", "mobilenet_5x5"]
# (block_f, rows, num_warps); the library's default first
CONFIGS = [
    (1024, 16, 4),
    (1024, 8, 4),
    (512, 16, 4),
    (2048, 16, 8),
]


def configure(rows_on: bool, tiles=None) -> None:
    ops.ROWS_MAX_TAPS = 25 if rows_on else 0
    if tiles is not None:
        ops.ROWS_CONFIG = dict(zip(("block_f", "rows", "num_warps"), tiles))
    clear_caches()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default=None)
    ap.add_argument("--layers", default=",".join(RUNS))
    ap.add_argument("--variants", default="bf16_cl,fp32_cl")
    args = ap.parse_args()
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = False
    default = dict(ops.ROWS_CONFIG)
    rows, bad = [], 0
    for variant in args.variants.split(","):
        dtype, channels_last = VARIANTS[variant]
        assert channels_last, "the rows kernel is channels-last only"
        for name in args.layers.split(","):
            N, C, H, W, k, s = LAYERS[name]
            kw = dict(stride=s, padding=k // 2, groups=C)

            def make(N=N, C=C, H=H, W=W, k=k, dtype=dtype, kw=kw):
                x = torch.randn(N, C, H, W, device="cuda", dtype=dtype)
                x = x.to(memory_format=torch.channels_last)
                w = torch.randn(C, 1, k, k, device="cuda", dtype=dtype) / k
                dy = torch.randn_like(F.conv2d(x, w, **kw))
                leaves = [t.detach().requires_grad_() for t in (x, w)]
                return x, w, None, dy, leaves

            nbytes = N * C * H * W * torch.finfo(dtype).bits // 8
            sets = input_sets(make, 2 * nbytes)
            count = len(sets)
            x, w, b, dy, _ = sets[0]
            scratch = [torch.empty_like(t[0]) for t in sets]

            def fwd(i, module=None, sets=sets, kw=kw):
                x, w = sets[i][:2]
                if module is F:
                    F.conv2d(x, w, **kw)
                else:
                    ops.depthwise_forward(x, w, None, _geometry(x, w, kw))

            def step(i, module=None, sets=sets, kw=kw):
                import tritonconv as tc

                extra = {} if module is F else dict(algo="depthwise")
                _step(sets[i][4], sets[i][3], dict(kw, **extra), F if module is F else tc)

            row = dict(layer=name, variant=variant, shape=[N, C, H, W, k, s])
            row["copy_ms"] = graph_ms(lambda i, d=scratch, s=sets: d[i].copy_(s[i][0]), count)
            row["cudnn_fwd_ms"] = graph_ms(functools.partial(fwd, module=F), count)
            row["cudnn_fwd_bwd_ms"] = graph_ms(functools.partial(step, module=F), count)
            configure(False)
            row["window_fwd_ms"] = graph_ms(fwd, count)
            row["window_fwd_bwd_ms"] = graph_ms(step, count)
            tol = 2e-2 if dtype == torch.bfloat16 else 1e-4
            for tiles in CONFIGS:
                configure(True, tiles)
                err = check(x, w, b, dy, kw)
                bad += not err < tol
                entry = dict(tiles=tiles, error=err, fwd_ms=graph_ms(fwd, count))
                entry["fwd_bwd_ms"] = graph_ms(step, count)
                row.setdefault("rows", []).append(entry)
            configure(True, tuple(default.values()))
            best = min(row["rows"], key=lambda e: e["fwd_ms"])
            row["rows_fwd_ms"], row["rows_tiles"] = best["fwd_ms"], best["tiles"]
            row["rows_fwd_bwd_ms"] = min(e["fwd_bwd_ms"] for e in row["rows"])
            row["default_fwd_ms"] = row["rows"][0]["fwd_ms"]
            row["default_fwd_bwd_ms"] = row["rows"][0]["fwd_bwd_ms"]
            row["bytes"] = 2 * nbytes
            rows.append(row)
            print(json.dumps(row), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    print(
        "\nlayer          variant | fwd µs cuDNN / window / rows default / rows best tiles"
        " | TB/s copy / rows default | fwd+bwd µs cuDNN / window / rows default / best"
    )
    for r in rows:
        us = {k: 1000 * v for k, v in r.items() if k.endswith("_ms")}
        print(
            f"{r['layer']:14} {r['variant']:7} | {us['cudnn_fwd_ms']:.1f} / "
            f"{us['window_fwd_ms']:.1f} / {us['default_fwd_ms']:.1f} / {us['rows_fwd_ms']:.1f}"
            f" {tuple(r['rows_tiles'])} | {r['bytes'] / us['copy_ms'] / 1e6:.2f} / "
            f"{r['bytes'] / us['default_fwd_ms'] / 1e6:.2f} | {us['cudnn_fwd_bwd_ms']:.1f} / "
            f"{us['window_fwd_bwd_ms']:.1f} / {us['default_fwd_bwd_ms']:.1f} / "
            f"{us['rows_fwd_bwd_ms']:.1f}"
        )
    print(f"configurations off tolerance: {bad}")
    return 1 if bad else 0


def _geometry(x, w, kw):
    from tritonconv.geometry import make_geometry

    k, s, p = w.shape[-1], kw["stride"], kw["padding"]
    H, W = x.shape[2:]
    return make_geometry((H, W), (k, k), (s, s), (p, p), (p, p), (1, 1))


if __name__ == "__main__":
    sys.exit(main())
