"""Probe (issue 12): a dedicated causal depthwise conv1d forward, fused SiLU, at HBM speed.

Today ``tritonconv.causal_conv1d`` runs the depthwise kernels on a height-1 plane and reaches
about the reference formula's speed (``F.conv1d(padding=width-1)[..., :L]`` + SiLU: 0.70 ms on an
H100 at batch 8, dim 2048, seqlen 4096, width 4, against ~0.09 ms to read and write the tensors
once). Issue 12 asks for >= 3x that and >= 70 % of HBM bandwidth. This kernel gives a program a
``[BLOCK_D, BLOCK_L]`` tile of one sequence: per tap ``k`` one load of x shifted by
``width - 1 - k`` positions (the shifted loads hit L1/L2: DRAM reads each byte about once), the
tap's ``[BLOCK_D]`` weights, fp32 accumulation, bias and SiLU fused, one store. Both layouts:
channel-first x ``(B, D, L)`` with L contiguous, and channel-last (D contiguous), by strides.

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


@triton.jit
def causal_conv1d_kernel(
    x_ptr,
    w_ptr,
    b_ptr,
    y_ptr,
    D,
    L,
    x_sb,
    x_sd,
    x_sl,
    y_sb,
    y_sd,
    y_sl,
    WIDTH: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    SILU: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_L: tl.constexpr,
):
    """y[b, d, l] = act(sum_k w[d, k] * x[b, d, l - (WIDTH - 1) + k] + bias[d]), x = 0 before
    the sequence starts; w is ``(D, WIDTH)`` contiguous."""
    pid_b = tl.program_id(0)
    pid_l = tl.program_id(1)
    pid_d = tl.program_id(2)
    d = pid_d * BLOCK_D + tl.arange(0, BLOCK_D)
    pos = pid_l * BLOCK_L + tl.arange(0, BLOCK_L)
    d_ok = d < D
    x_base = x_ptr + pid_b.to(tl.int64) * x_sb + d[:, None] * x_sd
    acc = tl.zeros([BLOCK_D, BLOCK_L], dtype=tl.float32)
    for k in tl.static_range(WIDTH):
        src = pos - (WIDTH - 1) + k
        ok = d_ok[:, None] & ((src >= 0) & (src < L))[None, :]
        xs = tl.load(x_base + src[None, :] * x_sl, mask=ok, other=0)
        wk = tl.load(w_ptr + d * WIDTH + k, mask=d_ok, other=0)
        acc += xs.to(tl.float32) * wk.to(tl.float32)[:, None]
    if HAS_BIAS:
        acc += tl.load(b_ptr + d, mask=d_ok, other=0).to(tl.float32)[:, None]
    if SILU:
        acc = acc / (1.0 + tl.exp(-acc))
    y = y_ptr + pid_b.to(tl.int64) * y_sb + d[:, None] * y_sd + pos[None, :] * y_sl
    tl.store(y, acc.to(y_ptr.dtype.element_ty), mask=d_ok[:, None] & (pos < L)[None, :])


@triton.jit
def causal_conv1d_bwd_kernel(
    x_ptr,
    w_ptr,
    b_ptr,
    dy_ptr,
    dx_ptr,
    dw_part_ptr,
    db_part_ptr,
    D,
    L,
    x_sb,
    x_sd,
    x_sl,
    dy_sb,
    dy_sd,
    dy_sl,
    dx_sb,
    dx_sd,
    dx_sl,
    WIDTH: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    SILU: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_L: tl.constexpr,
):
    """One pass of the backward: g = dy * act'(z) (z recomputed from x), then
    dx[l] = sum_k w[k] g[l + WIDTH-1-k] (g at WIDTH shifted position sets, each recomputed from
    cached loads) and this tile's partial sums of dw[d, k] = sum_l g[l] x[l - (WIDTH-1) + k] and
    db[d] = sum_l g[l], written per (batch, position block) for a fixed-order reduction."""
    pid_b = tl.program_id(0)
    pid_l = tl.program_id(1)
    pid_d = tl.program_id(2)
    d = pid_d * BLOCK_D + tl.arange(0, BLOCK_D)
    pos = pid_l * BLOCK_L + tl.arange(0, BLOCK_L)
    d_ok = d < D
    x_base = x_ptr + pid_b.to(tl.int64) * x_sb + d[:, None] * x_sd
    dy_base = dy_ptr + pid_b.to(tl.int64) * dy_sb + d[:, None] * dy_sd
    bias = tl.zeros([BLOCK_D], dtype=tl.float32)
    if HAS_BIAS:
        bias = tl.load(b_ptr + d, mask=d_ok, other=0).to(tl.float32)
    dx = tl.zeros([BLOCK_D, BLOCK_L], dtype=tl.float32)
    for j in tl.static_range(WIDTH):  # g at positions pos + j, which dx[pos] needs with w[W-1-j]
        at = pos + j
        at_ok = d_ok[:, None] & (at < L)[None, :]
        g = tl.load(dy_base + at[None, :] * dy_sl, mask=at_ok, other=0).to(tl.float32)
        if SILU:
            z = tl.zeros([BLOCK_D, BLOCK_L], dtype=tl.float32) + bias[:, None]
            for k in tl.static_range(WIDTH):
                src = at - (WIDTH - 1) + k
                ok = d_ok[:, None] & ((src >= 0) & (src < L))[None, :]
                xs = tl.load(x_base + src[None, :] * x_sl, mask=ok, other=0).to(tl.float32)
                wk = tl.load(w_ptr + d * WIDTH + k, mask=d_ok, other=0).to(tl.float32)
                z += xs * wk[:, None]
            s = 1.0 / (1.0 + tl.exp(-z))
            g = g * s * (1.0 + z * (1.0 - s))
        wj = tl.load(w_ptr + d * WIDTH + (WIDTH - 1 - j), mask=d_ok, other=0).to(tl.float32)
        dx += g * wj[:, None]
        if j == 0:  # g at the tile's own positions: the weight and bias gradients' partials
            part = (pid_b * tl.num_programs(1) + pid_l).to(tl.int64)
            for k in tl.static_range(WIDTH):
                src = pos - (WIDTH - 1) + k
                ok = d_ok[:, None] & ((src >= 0) & (src < L))[None, :]
                xs = tl.load(x_base + src[None, :] * x_sl, mask=ok, other=0).to(tl.float32)
                tl.store(dw_part_ptr + (part * D + d) * WIDTH + k, tl.sum(g * xs, 1), mask=d_ok)
            tl.store(db_part_ptr + part * D + d, tl.sum(g, 1), mask=d_ok)
    out = dx_ptr + pid_b.to(tl.int64) * dx_sb + d[:, None] * dx_sd + pos[None, :] * dx_sl
    tl.store(out, dx.to(dx_ptr.dtype.element_ty), mask=d_ok[:, None] & (pos < L)[None, :])


def causal_conv1d_backward(x, w, b, dy, silu, config):
    """(dx, dw, db): one kernel pass, then a fixed-order sum of the per-tile partials."""
    block_d, block_l, warps = config
    B, D, L = x.shape
    dx = torch.empty_like(x)
    tiles = B * triton.cdiv(L, block_l)
    dw_part = torch.empty((tiles, D, w.shape[1]), device=x.device, dtype=torch.float32)
    db_part = torch.empty((tiles, D), device=x.device, dtype=torch.float32)
    grid = (B, triton.cdiv(L, block_l), triton.cdiv(D, block_d))
    causal_conv1d_bwd_kernel[grid](
        x, w.contiguous(), b if b is not None else w, dy, dx, dw_part, db_part, D, L,
        *x.stride(), *dy.stride(), *dx.stride(),
        WIDTH=w.shape[1], HAS_BIAS=b is not None, SILU=silu,
        BLOCK_D=block_d, BLOCK_L=block_l, num_warps=warps,
    )  # fmt: skip
    return dx, dw_part.sum(0).to(w.dtype), db_part.sum(0).to(w.dtype)


def causal_conv1d(x, w, b, silu, config):
    """x (B, D, L) in either layout (channel-last: ``x.stride(1) == 1``); y in x's layout."""
    block_d, block_l, warps = config
    B, D, L = x.shape
    y = torch.empty_like(x)  # keeps x's strides (dense)
    grid = (B, triton.cdiv(L, block_l), triton.cdiv(D, block_d))
    causal_conv1d_kernel[grid](
        x, w.contiguous(), b if b is not None else w, y, D, L,
        *x.stride(), *y.stride(),
        WIDTH=w.shape[1], HAS_BIAS=b is not None, SILU=silu,
        BLOCK_D=block_d, BLOCK_L=block_l, num_warps=warps,
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
