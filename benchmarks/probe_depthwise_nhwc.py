"""Probe (issue 13): a channels-last depthwise convolution built to move each byte once.

Today's depthwise kernels tile one channel's plane at a time, which suits NCHW; in channels-last
bf16 (what ConvNeXt/MobileNet/EfficientNet run in under AMP) they reach 0.11-0.19x cuDNN. This
kernel is laid out for NHWC instead: a program owns ``BLOCK_W`` output pixels of one output row
and ``BLOCK_C`` channels, and for each tap loads the ``[BLOCK_W, BLOCK_C]`` input tile, which is
contiguous along channels (16-byte vector loads), times that tap's ``[BLOCK_C]`` weights, into
an fp32 accumulator. Neighbouring taps and rows re-read the same lines from L1/L2, so DRAM sees
each input byte about once when a row band fits in cache; no shared-memory staging, no atomics.
The input gradient of a stride-1 depthwise convolution is the same kernel on dy with the taps
flipped and padding ``dil*(k-1) - pad``; of any stride, a gather kernel over input rows whose
taps off the stride grid are masked lanes (``dw_nhwc_dgrad``).

    PYTHONPATH=src python benchmarks/probe_depthwise_nhwc.py             # GPU: check + time
    PYTHONPATH=src python benchmarks/probe_depthwise_nhwc.py --check-only  # CPU (interpreter)

Timing is by CUDA-graph replay (kernel time; benchmarks/NOTES.md explains why), bandwidth =
(input + output + weight bytes) / time, against cuDNN (``cudnn.benchmark``) and our current
``algo="depthwise"`` on the same channels-last tensors.
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
def dw_nhwc_kernel(
    x_ptr,
    w_ptr,
    b_ptr,
    y_ptr,
    H,
    W,
    C,
    OH,
    OW,
    KH: tl.constexpr,
    KW: tl.constexpr,
    stride,
    pad_h,
    pad_w,
    dil,
    x_sn,
    x_sh,
    x_sw,
    y_sn,
    y_sh,
    y_sw,
    FLIP: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    BLOCK_W: tl.constexpr,
    BLOCK_C: tl.constexpr,
):
    """y[n, oh, ow, c] = sum over taps of x[n, oh*s - p + kh*d, ow*s - p + kw*d, c] *
    w[c, kh, kw] (+ b[c]); channels are the stride-1 axis of x and y; w is [C, KH, KW]."""
    pid_row = tl.program_id(0)  # n * OH + oh
    pid_w = tl.program_id(1)
    pid_c = tl.program_id(2)
    n = pid_row // OH
    oh = pid_row % OH
    ow = pid_w * BLOCK_W + tl.arange(0, BLOCK_W)
    c = pid_c * BLOCK_C + tl.arange(0, BLOCK_C)
    c_ok = c < C
    ow_ok = ow < OW
    x_row = x_ptr + n.to(tl.int64) * x_sn
    acc = tl.zeros([BLOCK_W, BLOCK_C], dtype=tl.float32)
    for kh in tl.static_range(KH):
        ih = oh * stride - pad_h + kh * dil
        # the row test as a vector: Triton 3.9's interpreter rejects a mask mixing a scalar
        # and a vector comparison (the compiler folds the zero)
        ih_v = ih + ow * 0
        for kw in tl.static_range(KW):
            iw = ow * stride - pad_w + kw * dil
            ok = ow_ok & (iw >= 0) & (iw < W) & (ih_v >= 0) & (ih_v < H)
            xs = tl.load(
                x_row + ih * x_sh + iw[:, None] * x_sw + c[None, :],
                mask=ok[:, None] & c_ok[None, :],
                other=0,
            )
            tap = (KH - 1 - kh) * KW + (KW - 1 - kw) if FLIP else kh * KW + kw
            wv = tl.load(w_ptr + c * (KH * KW) + tap, mask=c_ok, other=0)
            acc += xs.to(tl.float32) * wv.to(tl.float32)[None, :]
    if HAS_BIAS:
        acc += tl.load(b_ptr + c, mask=c_ok, other=0).to(tl.float32)[None, :]
    y = y_ptr + n.to(tl.int64) * y_sn + oh * y_sh + ow[:, None] * y_sw + c[None, :]
    tl.store(y, acc.to(y_ptr.dtype.element_ty), mask=ow_ok[:, None] & c_ok[None, :])


def dw_nhwc(x, w, b, stride, padding, dilation, config, *, flip=False):
    """Depthwise conv2d of channels-last ``x`` (``w``: [C, 1, KH, KW]); ``flip``: the input
    gradient of a stride-1 convolution (``x`` is dy, ``padding`` already the transposed one)."""
    block_w, block_c, warps = config
    N, C, H, W = x.shape
    KH, KW = w.shape[2], w.shape[3]
    OH = (H + 2 * padding - dilation * (KH - 1) - 1) // stride + 1
    OW = (W + 2 * padding - dilation * (KW - 1) - 1) // stride + 1
    y = torch.empty((N, C, OH, OW), device=x.device, dtype=x.dtype).to(
        memory_format=torch.channels_last
    )
    assert x.stride(1) == 1 and y.stride(1) == 1
    wc = w.reshape(C, KH * KW).contiguous()
    grid = (N * OH, triton.cdiv(OW, block_w), triton.cdiv(C, block_c))
    dw_nhwc_kernel[grid](
        x, wc, b if b is not None else wc, y,
        H, W, C, OH, OW, KH, KW, stride, padding, padding, dilation,
        x.stride(0), x.stride(2), x.stride(3), y.stride(0), y.stride(2), y.stride(3),
        FLIP=flip, HAS_BIAS=b is not None, BLOCK_W=block_w, BLOCK_C=block_c, num_warps=warps,
    )  # fmt: skip
    return y


@triton.jit
def dw_nhwc_dgrad_kernel(
    dy_ptr,
    w_ptr,
    dx_ptr,
    H,
    W,
    C,
    OH,
    OW,
    KH: tl.constexpr,
    KW: tl.constexpr,
    stride,
    pad_h,
    pad_w,
    dil,
    dy_sn,
    dy_sh,
    dy_sw,
    dx_sn,
    dx_sh,
    dx_sw,
    BLOCK_W: tl.constexpr,
    BLOCK_C: tl.constexpr,
):
    """dx[n, ih, iw, c] = sum over taps with ``ih + p - kh*d`` and ``iw + p - kw*d`` multiples
    of the stride (and inside dy) of dy[n, those / stride, c] * w[c, kh, kw]: the input
    gradient of any stride as a gather (no atomics), one input row and ``BLOCK_W`` columns
    x ``BLOCK_C`` channels per program; taps that miss the stride grid are masked lanes."""
    pid_row = tl.program_id(0)  # n * H + ih
    pid_w = tl.program_id(1)
    pid_c = tl.program_id(2)
    n = pid_row // H
    ih = pid_row % H
    iw = pid_w * BLOCK_W + tl.arange(0, BLOCK_W)
    c = pid_c * BLOCK_C + tl.arange(0, BLOCK_C)
    c_ok = c < C
    iw_ok = iw < W
    dy_img = dy_ptr + n.to(tl.int64) * dy_sn
    acc = tl.zeros([BLOCK_W, BLOCK_C], dtype=tl.float32)
    for kh in tl.static_range(KH):
        num_h = ih + pad_h - kh * dil + iw * 0  # as a vector: see dw_nhwc_kernel
        oh = num_h // stride
        h_ok = (num_h >= 0) & (num_h % stride == 0) & (oh < OH)
        for kw in tl.static_range(KW):
            num_w = iw + pad_w - kw * dil
            ow = num_w // stride
            ok = iw_ok & h_ok & (num_w >= 0) & (num_w % stride == 0) & (ow < OW)
            g = tl.load(
                dy_img + oh[:, None] * dy_sh + ow[:, None] * dy_sw + c[None, :],
                mask=ok[:, None] & c_ok[None, :],
                other=0,
            )
            wv = tl.load(w_ptr + c * (KH * KW) + kh * KW + kw, mask=c_ok, other=0)
            acc += g.to(tl.float32) * wv.to(tl.float32)[None, :]
    dx = dx_ptr + n.to(tl.int64) * dx_sn + ih * dx_sh + iw[:, None] * dx_sw + c[None, :]
    tl.store(dx, acc.to(dx_ptr.dtype.element_ty), mask=iw_ok[:, None] & c_ok[None, :])


def dw_nhwc_dgrad(dy, w, input_hw, stride, padding, dilation, config):
    """dX of a depthwise convolution of any stride, channels-last dy (``w``: [C, 1, KH, KW]);
    ``input_hw``: the input's (H, W)."""
    block_w, block_c, warps = config
    N, C, OH, OW = dy.shape
    H, W = input_hw
    KH, KW = w.shape[2], w.shape[3]
    dx = torch.empty((N, C, H, W), device=dy.device, dtype=dy.dtype).to(
        memory_format=torch.channels_last
    )
    assert dy.stride(1) == 1 and dx.stride(1) == 1
    wc = w.reshape(C, KH * KW).contiguous()
    grid = (N * H, triton.cdiv(W, block_w), triton.cdiv(C, block_c))
    dw_nhwc_dgrad_kernel[grid](
        dy, wc, dx, H, W, C, OH, OW, KH, KW, stride, padding, padding, dilation,
        dy.stride(0), dy.stride(2), dy.stride(3), dx.stride(0), dx.stride(2), dx.stride(3),
        BLOCK_W=block_w, BLOCK_C=block_c, num_warps=warps,
    )  # fmt: skip
    return dx


@triton.jit
def dw_nhwc_wgrad_kernel(
    x_ptr,
    dy_ptr,
    part_ptr,
    N,
    H,
    W,
    C,
    OH,
    OW,
    KW,
    stride,
    pad_h,
    pad_w,
    dil,
    rows_per_band,
    x_sn,
    x_sh,
    x_sw,
    dy_sn,
    dy_sh,
    dy_sw,
    BLOCK_W: tl.constexpr,
    BLOCK_C: tl.constexpr,
):
    """part[band, tap, c] = sum over the band's output rows (of all N * OH) and columns of
    dy[n, oh, ow, c] * x[n, oh*s - p + kh*d, ow*s - p + kw*d, c]. The tap is the fastest grid
    axis, so a band's taps run together and re-read its dy and x from L2, not DRAM."""
    tap = tl.program_id(0)
    band = tl.program_id(1)
    pid_c = tl.program_id(2)
    kh = tap // KW
    kw = tap % KW
    c = pid_c * BLOCK_C + tl.arange(0, BLOCK_C)
    c_ok = c < C
    acc = tl.zeros([BLOCK_W, BLOCK_C], dtype=tl.float32)
    first = band * rows_per_band
    last = tl.minimum(first + rows_per_band, N * OH)
    for row in range(first, last):
        n = row // OH
        oh = row % OH
        ih = oh * stride - pad_h + kh * dil
        for w0 in range(0, OW, BLOCK_W):
            ow = w0 + tl.arange(0, BLOCK_W)
            iw = ow * stride - pad_w + kw * dil
            ih_v = ih + ow * 0  # as a vector: see dw_nhwc_kernel
            ok = (ow < OW) & (iw >= 0) & (iw < W) & (ih_v >= 0) & (ih_v < H)
            mask = ok[:, None] & c_ok[None, :]
            g = tl.load(
                dy_ptr + n.to(tl.int64) * dy_sn + oh * dy_sh + ow[:, None] * dy_sw + c[None, :],
                mask=mask,
                other=0,
            )
            xs = tl.load(
                x_ptr + n.to(tl.int64) * x_sn + ih * x_sh + iw[:, None] * x_sw + c[None, :],
                mask=mask,
                other=0,
            )
            acc += g.to(tl.float32) * xs.to(tl.float32)
    taps = tl.num_programs(0)
    dst = part_ptr + (band.to(tl.int64) * taps + tap) * C + c
    tl.store(dst, tl.sum(acc, 0), mask=c_ok)


def dw_nhwc_wgrad(x, dy, kernel, stride, padding, dilation, config, bands=None):
    """dW ``[C, 1, KH, KW]`` of a depthwise convolution, channels-last x and dy: per band of
    output rows and tap a partial, summed over the bands in a fixed order."""
    block_w, block_c, warps = config
    N, C, H, W = x.shape
    OH, OW = dy.shape[2], dy.shape[3]
    KH, KW = kernel
    rows = N * OH
    if bands is None:  # enough programs to fill an H100 twice over, at least 4 rows a band
        wanted = max(1, 2 * 132 // (KH * KW * triton.cdiv(C, block_c)))
        bands = max(1, min(wanted, rows // 4))
    per_band = triton.cdiv(rows, bands)
    bands = triton.cdiv(rows, per_band)
    part = torch.empty((bands, KH * KW, C), device=x.device, dtype=torch.float32)
    grid = (KH * KW, bands, triton.cdiv(C, block_c))
    dw_nhwc_wgrad_kernel[grid](
        x, dy, part, N, H, W, C, OH, OW, KW, stride, padding, padding, dilation, per_band,
        x.stride(0), x.stride(2), x.stride(3), dy.stride(0), dy.stride(2), dy.stride(3),
        BLOCK_W=block_w, BLOCK_C=block_c, num_warps=warps,
    )  # fmt: skip
    return part.sum(0).t().reshape(C, 1, KH, KW).to(x.dtype)


# name: N, C, H, W, kernel, stride (issue 13's families, ImageNet stage sizes)
LAYERS = {
    "convnext_7x7_early": (32, 96, 56, 56, 7, 1),
    "convnext_7x7_late": (32, 768, 7, 7, 7, 1),
    "mobilenet_5x5_s2": (32, 240, 28, 28, 5, 2),
    "mobilenet_3x3": (32, 144, 56, 56, 3, 1),
    "efficientnet_3x3_s2": (32, 96, 112, 112, 3, 2),
    "dw3x3_56_c256": (32, 256, 56, 56, 3, 1),
}
CONFIGS = [(8, 64, 4), (16, 64, 4), (32, 32, 4), (8, 128, 4), (16, 128, 8), (4, 256, 8)]


def make(name, device, dtype, small=False):
    N, C, H, W, k, s = LAYERS[name]
    if small:
        N, C, H, W = 2, min(C, 40), min(H, 13), min(W, 11)
    x = torch.randn(N, C, H, W, device=device, dtype=dtype).to(memory_format=torch.channels_last)
    w = torch.randn(C, 1, k, k, device=device, dtype=dtype) / k
    b = torch.randn(C, device=device, dtype=dtype)
    return x, w, b, s, k // 2


def check(name, config, device, dtype, small) -> tuple[float, float | None]:
    """(max error of the forward and the weight gradient, error of the input gradient or None
    for strided layers), relative, against float64."""
    x, w, b, s, p = make(name, device, dtype, small)
    y = dw_nhwc(x, w, b, s, p, 1, config)
    ref = F.conv2d(x.double(), w.double(), b.double(), stride=s, padding=p, groups=x.shape[1])
    err = ((y.double() - ref).abs().max() / ref.abs().max()).item()
    dy = torch.randn_like(ref).to(dtype).contiguous(memory_format=torch.channels_last)
    k = w.shape[2]
    dw = dw_nhwc_wgrad(x, dy, (k, k), s, p, 1, config)
    ref_dw = torch.nn.grad.conv2d_weight(
        x.double(), w.shape, dy.double(), stride=s, padding=p, groups=x.shape[1]
    )
    err = max(err, ((dw.double() - ref_dw).abs().max() / ref_dw.abs().max()).item())
    ref_dx = torch.nn.grad.conv2d_input(
        x.shape, w.double(), dy.double(), stride=s, padding=p, groups=x.shape[1]
    )
    # stride 1: the forward kernel with flipped taps; any stride: the gather kernel
    dxs = [dw_nhwc_dgrad(dy, w, x.shape[2:], s, p, 1, config)]
    if s == 1:
        dxs.append(dw_nhwc(dy, w, None, 1, k - 1 - p, 1, config, flip=True))
    return err, max(((dx.double() - ref_dx).abs().max() / ref_dx.abs().max()).item() for dx in dxs)


def graph_ms(fn) -> float:
    """Kernel time per call: ten calls captured in a CUDA graph and replayed (bench.kernel_ms)."""
    from tritonconv.bench import Options, kernel_ms

    ms = kernel_ms(lambda _: fn(), 10, Options())
    return float("inf") if ms is None else ms  # not capturable: never the best


def _torch_step(leaves, dy, kw, module=F):
    """Forward and backward (every gradient) through ``module.conv2d`` (F or tritonconv)."""
    torch.autograd.grad(module.conv2d(*leaves, **kw), leaves, dy)


def _probe_step(x, w, b, dy, stride, padding, config):
    """The probe's forward, input gradient and weight gradient (the bias gradient, a channel
    sum, left out on this side); stride 1 takes its input gradient from the forward kernel with
    flipped taps, other strides from the gather kernel."""
    k = w.shape[2]
    dw_nhwc(x, w, b, stride, padding, 1, config)
    if stride == 1:
        dw_nhwc(dy, w, None, 1, k - 1 - padding, 1, config, flip=True)
    else:
        dw_nhwc_dgrad(dy, w, x.shape[2:], stride, padding, 1, config)
    dw_nhwc_wgrad(x, dy, (k, k), stride, padding, 1, config)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--check-only", action="store_true")
    ap.add_argument("--json", default=None)
    ap.add_argument("--layers", default="", help="comma-separated LAYERS names (default: all)")
    ap.add_argument("--dtypes", default="bfloat16,float32")
    args = ap.parse_args()
    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    bad = 0
    for dtype in (torch.bfloat16, torch.float32) if cuda else (torch.float32,):
        for name in LAYERS:
            config = CONFIGS[0] if cuda else (8, 16, 4)
            err, err_dx = check(name, config, device, dtype, small=not cuda)
            tol = 2e-2 if dtype == torch.bfloat16 else 1e-5
            ok = err < tol and (err_dx is None or err_dx < tol)
            bad += not ok
            dx = "-" if err_dx is None else f"{err_dx:.1e}"
            print(
                f"check {name:20} {dtype!s:15} fwd+wgrad {err:.1e} dgrad {dx} {'ok' if ok else 'BAD'}"
            )
    if args.check_only or not cuda:
        sys.exit(1 if bad else 0)

    import tritonconv as tc

    torch.backends.cudnn.benchmark = True
    rows = []
    for dtype in [getattr(torch, d) for d in args.dtypes.split(",")]:
        for name in [n for n in LAYERS if not args.layers or n in args.layers.split(",")]:
            x, w, b, s, p = make(name, device, dtype)
            C = x.shape[1]
            y = F.conv2d(x, w, b, stride=s, padding=p, groups=C)
            nbytes = (x.numel() + y.numel() + w.numel()) * x.element_size()
            tensors = (x, w, b)
            kw = dict(stride=s, padding=p, groups=C)
            cudnn = graph_ms(functools.partial(F.conv2d, *tensors, **kw))
            ours_now = graph_ms(functools.partial(tc.conv2d, *tensors, **kw, algo="depthwise"))
            best = (float("inf"), None)
            for config in CONFIGS:
                t = graph_ms(functools.partial(dw_nhwc, *tensors, s, p, 1, config))
                best = min(best, (t, config))
            row = dict(
                layer=name, dtype=str(dtype), cudnn_ms=cudnn, depthwise_now_ms=ours_now,
                probe_ms=best[0], probe_config=best[1], probe_gbs=nbytes / best[0] / 1e6,
                cudnn_gbs=nbytes / cudnn / 1e6,
            )  # fmt: skip
            # forward + backward, every layer (a strided dX by the gather kernel)
            dy = torch.randn_like(y)
            leaves = [t.detach().requires_grad_() for t in tensors]
            row["cudnn_fwd_bwd_ms"] = graph_ms(functools.partial(_torch_step, leaves, dy, kw))
            row["now_fwd_bwd_ms"] = graph_ms(
                functools.partial(_torch_step, leaves, dy, dict(kw, algo="depthwise"), tc)
            )
            row["probe_fwd_bwd_ms"] = graph_ms(
                functools.partial(_probe_step, *tensors, dy, s, p, best[1])
            )
            rows.append(row)
            print(
                f"{name:20} {dtype!s:15} cuDNN {cudnn:.4f} ms ({row['cudnn_gbs']:.0f} GB/s)  "
                f"depthwise now {ours_now:.4f} ({cudnn / ours_now:.2f}x)  probe {best[0]:.4f} "
                f"({cudnn / best[0]:.2f}x, {row['probe_gbs']:.0f} GB/s) {best[1]}"
                + f" | fwd+bwd cuDNN {row['cudnn_fwd_bwd_ms']:.4f} now "
                f"{row['now_fwd_bwd_ms']:.4f} probe {row['probe_fwd_bwd_ms']:.4f} "
                f"({row['cudnn_fwd_bwd_ms'] / row['probe_fwd_bwd_ms']:.2f}x)",
                flush=True,
            )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
