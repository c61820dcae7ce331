"""Probe (issue 12): the causal depthwise conv1d kernels' tiles, against the reference formula.

The kernels are the library's (``tritonconv/kernels/causal.py``, since 2026-11-24; before, the
library ran the depthwise kernels on a height-1 plane at about the reference formula's speed,
``F.conv1d(padding=width-1)[..., :L]`` + SiLU: 0.70 ms on an H100 at batch 8, dim 2048, seqlen
4096, width 4, against ~0.09 ms to read and write the tensors once). Issue 12 asks for >= 3x
that and >= 70 % of HBM bandwidth. A program owns a ``[BLOCK_D, BLOCK_L]`` tile of one
sequence; this probe checks the kernels at its tile configurations against float64, then times
each configuration, the library's own launch (``tritonconv now``) and the reference, forward
and forward + backward, by kernel time. Both layouts: channel-first x ``(B, D, L)`` with L
contiguous, and channel-last (D contiguous).

    PYTHONPATH=src python benchmarks/probe_causal_conv1d.py               # GPU: check + time
    PYTHONPATH=src python benchmarks/probe_causal_conv1d.py --check-only  # CPU (interpreter)
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys

if not __import__("torch").cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from tritonconv.kernels.causal import causal_conv1d_backward_kernel, causal_conv1d_kernel


def causal_conv1d_backward(x, w, b, dy, silu, config):
    """(dx, dw, db) by the library's backward kernel with the tiles of ``config``: one kernel
    pass, then a fixed-order sum of the per-tile partials."""
    block_d, block_l, warps = config
    B, D, L = x.shape
    width = w.shape[1]
    dx = torch.empty_like(x)
    tiles = B * triton.cdiv(L, block_l)
    dw_part = torch.empty((tiles, D, width), device=x.device, dtype=torch.float32)
    db_part = torch.empty((tiles, D), device=x.device, dtype=torch.float32)
    grid = (tiles, triton.cdiv(D, block_d))
    causal_conv1d_backward_kernel[grid](
        x, w, b if b is not None else w, dy, dx, dw_part, db_part, D, L, L,
        *x.stride(), *w.stride(), *dy.stride(), *dx.stride(),
        PAD=width - 1, WIDTH=width, HAS_BIAS=b is not None, SILU=silu, GRAD_INPUT=True,
        GRAD_PARAMS=True, ACC_DTYPE=tl.float32, BLOCK_D=block_d, BLOCK_L=block_l,
        INDEX_64=False, num_warps=warps,
    )  # fmt: skip
    return dx, dw_part.sum(0).to(w.dtype), db_part.sum(0).to(w.dtype)


def causal_conv1d(x, w, b, silu, config):
    """The library's forward kernel with the tiles of ``config``; x (B, D, L) in either layout
    (channel-last: ``x.stride(1) == 1``), y in x's layout."""
    block_d, block_l, warps = config
    B, D, L = x.shape
    width = w.shape[1]
    y = torch.empty_like(x)  # keeps x's strides (dense)
    grid = (B * triton.cdiv(L, block_l), triton.cdiv(D, block_d))
    causal_conv1d_kernel[grid](
        x, w, b if b is not None else w, y, D, L, L,
        *x.stride(), *w.stride(), *y.stride(),
        PAD=width - 1, WIDTH=width, HAS_BIAS=b is not None, SILU=silu,
        ACC_DTYPE=tl.float32, BLOCK_D=block_d, BLOCK_L=block_l, INDEX_64=False,
        num_warps=warps,
    )  # fmt: skip
    return y


def _rel(got, exact) -> float:
    return ((got.double() - exact).abs().max() / exact.abs().max()).item()


def reference(x, w, b, silu):
    y = F.conv1d(x, w.unsqueeze(1), b, padding=w.shape[1] - 1, groups=w.shape[0])
    y = y[..., : x.shape[-1]]
    return F.silu(y) if silu else y


# (layout, config) candidates: channel-first wants long L tiles, channel-last wide D tiles
CONFIGS = {
    "channel_first": [(16, 256, 4), (32, 128, 4), (8, 512, 4), (64, 64, 4)],
    "channel_last": [(128, 16, 4), (64, 32, 4), (256, 8, 4), (128, 32, 8)],
}


def make(layout, device, dtype, small=False):
    B, D, L, W = (2, 24, 37, 4) if small else (8, 2048, 4096, 4)
    if layout == "channel_last":
        x = torch.randn(B, L, D, device=device, dtype=dtype).transpose(1, 2)
    else:
        x = torch.randn(B, D, L, device=device, dtype=dtype)
    w = torch.randn(D, W, device=device, dtype=dtype) / 2
    b = torch.randn(D, device=device, dtype=dtype)
    return x, w, b


def graph_ms(fn) -> float:
    """Kernel time per call: ten calls captured in a CUDA graph and replayed (bench.kernel_ms)."""
    from tritonconv.bench import Options, kernel_ms

    ms = kernel_ms(lambda _: fn(), 10, Options())
    return float("inf") if ms is None else ms  # not capturable: never the best


def _reference_step(leaves, dy):
    torch.autograd.grad(reference(*leaves, True), leaves, dy)


def _tritonconv_step(leaves, dy):
    import tritonconv as tc

    torch.autograd.grad(tc.causal_conv1d(*leaves, activation="silu"), leaves, dy)


def _probe_step(x, w, b, dy, config):
    causal_conv1d(x, w, b, True, config)
    causal_conv1d_backward(x, w, b, dy, True, config)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--check-only", action="store_true")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    bad = 0
    for dtype in (torch.bfloat16, torch.float32) if cuda else (torch.float32,):
        for layout, configs in CONFIGS.items():
            for silu in (False, True):
                x, w, b = make(layout, device, dtype, small=not cuda)
                config = configs[0] if cuda else (8, 16, 4)
                y = causal_conv1d(x, w, b, silu, config)
                ref = reference(x.double(), w.double(), b.double(), silu)
                err = ((y.double() - ref).abs().max() / ref.abs().max()).item()
                ok = err < (2e-2 if dtype == torch.bfloat16 else 1e-5) and y.stride() == x.stride()
                # the backward against float64 autograd through the reference
                leaves = [t.detach().double().requires_grad_() for t in (x, w, b)]
                dy = torch.randn_like(y)
                exact = torch.autograd.grad(reference(*leaves, silu), leaves, dy.double())
                got = causal_conv1d_backward(x, w, b, dy, silu, config)
                errs = [_rel(g, e) for g, e in zip(got, exact)]
                ok = ok and max(errs) < (3e-2 if dtype == torch.bfloat16 else 1e-5)
                bad += not ok
                print(
                    f"check {layout:13} silu={silu!s:5} {dtype!s:15} fwd {err:.1e} "
                    f"dx/dw/db {' '.join(f'{e:.1e}' for e in errs)} {'ok' if ok else 'BAD'}"
                )
    if args.check_only or not cuda:
        sys.exit(1 if bad else 0)

    import tritonconv as tc

    torch.backends.cudnn.benchmark = True
    rows = []
    for dtype in (torch.bfloat16, torch.float32):
        for layout, configs in CONFIGS.items():
            x, w, b = make(layout, device, dtype)
            nbytes = 2 * x.numel() * x.element_size()
            ref_ms = graph_ms(functools.partial(reference, x, w, b, True))
            now_ms = graph_ms(functools.partial(tc.causal_conv1d, x, w, b, activation="silu"))
            best = min(
                (graph_ms(functools.partial(causal_conv1d, x, w, b, True, c)), c) for c in configs
            )
            config = best[1]
            leaves = [t.detach().requires_grad_() for t in (x, w, b)]
            dy = torch.randn_like(x)
            ref_both = graph_ms(functools.partial(_reference_step, leaves, dy))
            now_both = graph_ms(functools.partial(_tritonconv_step, leaves, dy))
            probe_both = graph_ms(functools.partial(_probe_step, x, w, b, dy, config))
            row = dict(
                layout=layout, dtype=str(dtype), reference_ms=ref_ms, tritonconv_now_ms=now_ms,
                probe_ms=best[0], probe_config=config, probe_gbs=nbytes / best[0] / 1e6,
                reference_fwd_bwd_ms=ref_both, tritonconv_now_fwd_bwd_ms=now_both,
                probe_fwd_bwd_ms=probe_both,
            )  # fmt: skip
            rows.append(row)
            print(
                f"{layout:13} {dtype!s:15} reference {ref_ms:.4f} ms  tritonconv now {now_ms:.4f} "
                f"({ref_ms / now_ms:.2f}x)  probe {best[0]:.4f} ({ref_ms / best[0]:.2f}x, "
                f"{row['probe_gbs']:.0f} GB/s) {best[1]} | fwd+bwd reference {ref_both:.4f} "
                f"now {now_both:.4f} ({ref_both / now_both:.2f}x) probe {probe_both:.4f} "
                f"({ref_both / probe_both:.2f}x)",
                flush=True,
            )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
