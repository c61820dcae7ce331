"""Forward and input-gradient tiles for layers under one wave of 128-row tiles (issue 11).

``forward_config`` gives layers whose 128x128 tiles fill less than one wave of the H100's
multiprocessors 64x64 tiles with 128-channel reduction steps (3 stages) when they reduce at
least 128 channels per tap. Session 12's dense suite: benchmark mode found 64x64x64 tiles of 4
stages 1.32x faster on ResNet-50's 3x3 layer at 14x14 (22.4 against 29.6 µs), and kept the
heuristic on the 7x7 one. This probe times every 16-bit tuning configuration on the forward and
the input gradient of ResNet-50's layer-3/4 convolutions (bf16 channels-last, batch 32), by
CUDA-graph replay (kernel time; 20 launches a replay), the heuristic's marked.

    PYTHONPATH=src python benchmarks/probe_small_wave.py [--odd]

``--odd`` times layers whose channel counts are not multiples of the tiles instead (r2plus1d's
144-channel (2+1)D convolution), with a few narrower tiles added. ``--unet`` times the models
suite's UNet layers at batch 8 instead (session 35, H200: its 1024-channel 3x3 at 16x16, one
wave of 128x128 tiles with a 9216-long reduction, ran at 0.61x cuDNN), with wider tiles added;
every layer prints cuDNN's forward and input gradient beside ours. ``--tall`` times the layers
where 256 x 128 tiles fill less than a wave (session 35: UNet's 3x3 256 -> 128 input gradient
at 64x64 took 69.7 µs in them against 36.4 in 128 x 128 tiles; the H100 sweep of
2026-11-23 had them 6 % ahead on ResNet-50's 3x3 at 28x28).
"""

from __future__ import annotations

import functools
import json
import math
import sys

import torch

from tritonconv.geometry import make_geometry
from tritonconv.ops import implicit_gemm as ig

# name: (batch, in channels, spatial size, out channels, kernel, stride, padding)
LAYERS = {
    "3x3 256@14": (32, 256, (14, 14), 256, (3, 3), 1, 1),
    "1x1 1024->256@14": (32, 1024, (14, 14), 256, (1, 1), 1, 0),
    "1x1 256->1024@14": (32, 256, (14, 14), 1024, (1, 1), 1, 0),
    "3x3 512@7": (32, 512, (7, 7), 512, (3, 3), 1, 1),
    "1x1 2048->512@7": (32, 2048, (7, 7), 512, (1, 1), 1, 0),
    "1x1 512->2048@7": (32, 512, (7, 7), 2048, (1, 1), 1, 0),
    "3x3 128@28 (over a wave)": (32, 128, (28, 28), 128, (3, 3), 1, 1),
    "3x3 256@14, batch 8": (8, 256, (14, 14), 256, (3, 3), 1, 1),
}
# ``--odd``: channel counts that are not multiples of the 128-wide tiles: r2plus1d's (2+1)D
# 1x3x3 64 -> 144 (issue 12's target layer, batch 8) and its 144 -> 64 input gradient
ODD_LAYERS = {
    "1x3x3 64->144 16x56x56": (8, 64, (16, 56, 56), 144, (1, 3, 3), 1, (0, 1, 1)),
    "3x1x1 144->64 16x56x56": (8, 144, (16, 56, 56), 64, (3, 1, 1), 1, (1, 0, 0)),
}
# ``--unet``: the models suite's UNet (batch 8, bf16 channels-last), its layers below 0.85x
# cuDNN by kernel time on an H200 (session 35)
UNET_LAYERS = {
    "3x3 1024@16": (8, 1024, (16, 16), 1024, (3, 3), 1, 1),
    "3x3 512->1024@16": (8, 512, (16, 16), 1024, (3, 3), 1, 1),
    "3x3 512@32": (8, 512, (32, 32), 512, (3, 3), 1, 1),
    "3x3 256->512@32": (8, 256, (32, 32), 512, (3, 3), 1, 1),
    "3x3 1024->512@32": (8, 1024, (32, 32), 512, (3, 3), 1, 1),
    "3x3 128->256@64": (8, 128, (64, 64), 256, (3, 3), 1, 1),
}
# ``--tall``: layers of the models whose 256 x 128 tiles number under a wave (132 SMs)
TALL_LAYERS = {
    "3x3 128@28 (r50 layer2)": (32, 128, (28, 28), 128, (3, 3), 1, 1),
    "3x3 s2 128@56 (r50 layer2.0)": (32, 128, (56, 56), 128, (3, 3), 2, 1),
    "1x1 512->128@28 (r50 layer2)": (32, 512, (28, 28), 128, (1, 1), 1, 0),
    "3x3 128->256@64 (UNet, batch 8)": (8, 128, (64, 64), 256, (3, 3), 1, 1),
    "2x2 s2 96->192@56 (ConvNeXt)": (32, 96, (56, 56), 192, (2, 2), 2, 0),
}
UNET_CONFIGS = [
    ig.Config(128, 256, 64, 8, 3),
    ig.Config(128, 128, 64, 8, 4),
    ig.Config(128, 128, 128, 8, 2),
]
# extra tiles tried on ``--odd`` layers besides the tuning configurations
ODD_CONFIGS = [
    ig.Config(128, 64, 64, 4, 4),
    ig.Config(256, 64, 64, 8, 3),
    ig.Config(128, 64, 32, 4, 4),
]


def graph_us(fn, launches: int = 20) -> float:
    fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(launches):
            fn()
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(7):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1000 / launches)
    return sorted(times)[3]


def write_rows(path: str | None, rows: list, device: str) -> None:
    """A probe's rows as JSON at ``path`` (none: nothing), with the device and torch version."""
    if path:
        with open(path, "w") as f:
            json.dump({"device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
                       "torch": torch.__version__, "rows": rows}, f, indent=1)  # fmt: skip


def time_or_run(fn) -> float:
    """:func:`graph_us` on a GPU; on the CPU (the interpreter: a check of a probe's script, at
    toy sizes) one call and 1.0."""
    if torch.cuda.is_available():
        return graph_us(fn)
    fn()
    return 1.0


def ranked(timed: list, reference_us: float, shown: int) -> tuple[dict, str]:
    """``(µs, label)`` pairs as ``{label: µs}`` fastest first, and the fastest ``shown`` as
    ``label µs (reference / µs x)`` cells for a printed line."""
    timed = sorted(timed)
    cells = "  ".join(f"{label} {us:.1f} ({reference_us / us:.2f}x)" for us, label in timed[:shown])
    return {label: us for us, label in timed}, cells


def layer(name: str, n, c, spatial, k, kernel, stride, pad, extra=()) -> None:
    """Every 16-bit tuning configuration (and ``extra``) on one layer's forward and input
    gradient."""
    cl, dtype, rank = torch.channels_last, torch.bfloat16, len(spatial)
    if rank == 3:
        cl = torch.channels_last_3d
    pad = (pad,) * rank if isinstance(pad, int) else pad
    strides = (stride,) * rank
    geometry = make_geometry(spatial, kernel, strides, pad, pad, (1,) * rank)
    out = geometry.output
    x = torch.randn(n, c, *spatial, device="cuda", dtype=dtype).to(memory_format=cl)
    w = torch.randn(k, c, *kernel, device="cuda", dtype=dtype) / (c * math.prod(kernel)) ** 0.5
    w = w.to(memory_format=cl)
    dy = torch.randn(n, k, *out, device="cuda", dtype=dtype).to(memory_format=cl)
    heuristic = {
        "fwd": ig.launch_config(dtype, n, c, k, out, strides, kernel, 1, False, "cuda"),
        "dX": ig.launch_config(dtype, n, k, c, spatial, strides, kernel, 1, True, "cuda"),
    }
    configs = [heuristic["fwd"], heuristic["dX"], *ig.TUNING_CONFIGS["16-bit"], *extra]
    configs = list(dict.fromkeys(ig.Config(*c) for c in configs))
    cudnn = {
        "fwd": graph_us(lambda: torch.nn.functional.conv2d(x, w, padding=pad)) if rank == 2
        else None,
        "dX": graph_us(lambda: torch.ops.aten.convolution_backward(
            dy, x, w, None, list(strides), list(pad), [1] * rank, False, [0] * rank, 1,
            (True, False, False)))
        if rank == 2 else None,
    }  # fmt: skip
    print(f"{name}: heuristic fwd {heuristic['fwd']}, dX {heuristic['dX']}; cuDNN fwd "
          f"{cudnn['fwd']} dX {cudnn['dX']}", flush=True)  # fmt: skip
    runs = {
        "fwd": lambda cfg: ig.conv_forward(x, w, None, geometry, 1, cfg),
        "dX": lambda cfg: ig.conv_grad_input(dy, w, x, geometry, 1, config=cfg),
    }
    for pass_name, run in runs.items():
        timed = []
        for cfg in configs:
            try:
                timed.append((graph_us(functools.partial(run, cfg)), cfg))
            except Exception as error:  # a configuration that does not fit
                print(f"  {pass_name} {cfg}: {type(error).__name__}")
        timed.sort()
        row = "  ".join(
            f"{cfg}{'*' if cfg == heuristic[pass_name] else ''} {us:.1f}" for us, cfg in timed
        )
        print(f"  {pass_name}: {row}", flush=True)


def main() -> None:
    torch.backends.cudnn.benchmark = True  # (cuDNN's best algorithm per shape, as the suites)
    layers, extra = LAYERS, ()
    if "--odd" in sys.argv[1:]:
        layers, extra = ODD_LAYERS, ODD_CONFIGS
    elif "--unet" in sys.argv[1:]:
        layers, extra = UNET_LAYERS, UNET_CONFIGS
    elif "--tall" in sys.argv[1:]:
        layers = TALL_LAYERS
    for name, shape in layers.items():
        layer(name, *shape, extra=extra)


if __name__ == "__main__":
    main()
