"""Why the fp32 backward with TF32 allowed runs as slowly as with TF32 off (issue 11).

The session-12 dense suite: the implicit GEMM's fp32 backward (dX + dW) takes the same kernel
time with TF32 allowed as with it off (unet_3x3_256 2.44 vs 2.45 ms; bf16 0.26), while its
forward is 7x faster with TF32. This probe times the forward, the input gradient and the
weight gradient launchers alone (CUDA events, median of 20) in bf16, fp32 with TF32 and fp32
without, and runs one autograd backward recording which dot precision each launch got and on
which thread it was decided.

    PYTHONPATH=src python benchmarks/probe_fp32_backward.py
"""

from __future__ import annotations

import threading

import torch

import tritonconv as tc
from tritonconv.geometry import make_geometry
from tritonconv.ops import implicit_gemm as ig

LAYERS = {
    "r50_3x3_56": ((32, 64, 56, 56), (64, 64, 3, 3)),
    "r50_3x3_14": ((32, 256, 14, 14), (256, 256, 3, 3)),
    "unet_3x3_256": ((8, 64, 256, 256), (64, 64, 3, 3)),
}


def median_ms(fn, reps: int = 20) -> float:
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[reps // 2]


def measure(name: str, xs, ws, mode: str, seen: list) -> None:
    """One layer in one mode: the launchers alone, then autograd (precisions recorded)."""
    cl = torch.channels_last
    geometry = make_geometry(xs[2:], ws[2:], (1, 1), (1, 1), (1, 1), (1, 1))
    dtype = torch.bfloat16 if mode == "bf16" else torch.float32
    torch.backends.cudnn.allow_tf32 = mode != "ieee"
    x = torch.randn(xs, device="cuda", dtype=dtype).to(memory_format=cl)
    w = torch.randn(ws, device="cuda", dtype=dtype).to(memory_format=cl) / 24
    dy = torch.randn(xs[0], ws[0], *xs[2:], device="cuda", dtype=dtype).to(memory_format=cl)
    fwd = median_ms(lambda: ig.conv_forward(x, w, None, geometry, 1))
    dx = median_ms(lambda: ig.conv_grad_input(dy, w, x, geometry, 1))
    dw = median_ms(lambda: ig.conv_grad_weight(dy, x, list(w.shape), geometry, 1, None, w.stride()))
    xg, wg = x.clone().requires_grad_(), w.clone().requires_grad_()
    seen.clear()
    both = median_ms(lambda: tc.conv2d(xg, wg, None, 1, 1, algo="implicit_gemm").backward(dy))
    print(
        f"{name:13s} {mode}: fwd {fwd:.3f}  dX {dx:.3f}  dW {dw:.3f}  "
        f"fwd+bwd (autograd) {both:.3f} ms; precision decided: {sorted(set(seen))}",
        flush=True,
    )


def main() -> None:
    seen = []
    precision = ig.dot_precision

    def recorded(dtype):
        value = precision(dtype)
        seen.append((threading.current_thread().name, str(dtype), value))
        return value

    ig.dot_precision = recorded
    try:
        for name, (xs, ws) in LAYERS.items():
            for mode in ("bf16", "tf32", "ieee"):
                measure(name, xs, ws, mode, seen)
    finally:
        torch.backends.cudnn.allow_tf32 = True
        ig.dot_precision = precision


if __name__ == "__main__":
    main()
