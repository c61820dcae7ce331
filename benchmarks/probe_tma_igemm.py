"""Probe (issue 11): a TMA implicit-GEMM convolution for stride-1 channels-last layers.

The question this answers before any of it enters the library: does loading the input tile of
each tap with a 4-D TMA descriptor (out-of-bounds boxes zero-filled: the padding for free; no
per-element address or mask arithmetic in the MMA loop) beat ``kernels/implicit_gemm.py``'s
pointer loads, and by how much against cuDNN?

The output tile is a ``TH x TW`` rectangle of one image's output pixels times ``BN`` channels;
per reduction step one tap and ``BK`` input channels: the box ``[1, TH, TW, BK]`` of x at
``(n, oh0 - pad_h + kh*dil_h, ow0 - pad_w + kw*dil_w, c0)``, viewed as ``[TH*TW, BK]``. The
weight (channels-last ``[K, C, KH, KW]``: physically ``[K, taps, C]``) gives ``[BN, BK]``
boxes; the output is stored through a descriptor too (partial tiles clipped by the hardware).
The input gradient of a stride-1 convolution is the same kernel on dy with the taps flipped,
the weight read as ``[BK, BN]`` boxes, and padding ``dil*(k-1) - pad``.

    PYTHONPATH=src python benchmarks/probe_tma_igemm.py          # GPU: check + time
    TRITON_INTERPRET=1 PYTHONPATH=src python benchmarks/probe_tma_igemm.py --check-only  # CPU
"""

from __future__ import annotations

import argparse
import json
import sys

import torch
import torch.nn.functional as F
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor


@triton.jit
def conv_tma_kernel(
    x_desc,
    w_desc,
    y_desc,
    bias_ptr,
    OH,
    OW,
    C,
    K,
    KH,
    KW,
    pad_h,
    pad_w,
    dil_h,
    dil_w,
    FLIP: tl.constexpr,  # input gradient: taps flipped, weight boxes [BK, BN]
    SWAP: tl.constexpr,  # compute acc^T = w x^T: the image tile as wgmma's B (shared-memory) operand
    W2D: tl.constexpr,  # weight as a 2-D [Cout, taps*Cin] descriptor: its boxes need no reshape
    HAS_BIAS: tl.constexpr,
    OUT_DTYPE: tl.constexpr,
    TH: tl.constexpr,
    TW: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
    GROUP_M: tl.constexpr,
):
    BM: tl.constexpr = TH * TW
    pid = tl.program_id(0)
    n_tiles = tl.cdiv(K, BN)
    tw_tiles = tl.cdiv(OW, TW)
    th_tiles = tl.cdiv(OH, TH)
    m_tiles = tl.num_programs(0) // n_tiles
    # Grouped ordering: GROUP_M output tiles share each weight column block while in L2.
    width = GROUP_M * n_tiles
    first_m = (pid // width) * GROUP_M
    rows_here = tl.minimum(m_tiles - first_m, GROUP_M)
    pid_m = first_m + (pid % width) % rows_here
    pid_n = (pid % width) // rows_here
    tw_i = pid_m % tw_tiles
    t = pid_m // tw_tiles
    th_i = t % th_tiles
    n = t // th_tiles
    oh0 = th_i * TH - pad_h
    ow0 = tw_i * TW - pad_w
    co0 = pid_n * BN
    c_blocks = tl.cdiv(C, BK)
    taps = KH * KW
    if SWAP:
        acc_t = tl.zeros([BN, BM], dtype=tl.float32)
    else:
        acc = tl.zeros([BM, BN], dtype=tl.float32)
    for it in range(0, taps * c_blocks):
        tap = it // c_blocks
        c0 = (it - tap * c_blocks) * BK
        kh = tap // KW
        kw = tap - kh * KW
        a = x_desc.load([n, oh0 + kh * dil_h, ow0 + kw * dil_w, c0]).reshape(BM, BK)
        if FLIP:
            if W2D:  # rows: output channels (reduced); columns: (tap, input channel)
                b = w_desc.load([c0, (taps - 1 - tap) * K + co0])
            else:
                b = w_desc.load([c0, taps - 1 - tap, co0]).reshape(BK, BN)
            if SWAP:
                acc_t = tl.dot(b.T, a.T, acc_t)
            else:
                acc = tl.dot(a, b, acc)
        else:
            if W2D:
                b = w_desc.load([co0, tap * C + c0])
            else:
                b = w_desc.load([co0, tap, c0]).reshape(BN, BK)
            if SWAP:
                acc_t = tl.dot(b, a.T, acc_t)
            else:
                acc = tl.dot(a, b.T, acc)
    if SWAP:
        acc = acc_t.T
    if HAS_BIAS:
        co = co0 + tl.arange(0, BN)
        acc += tl.load(bias_ptr + co, mask=co < K, other=0).to(tl.float32)[None, :]
    y_desc.store([n, th_i * TH, tw_i * TW, co0], acc.to(OUT_DTYPE).reshape(1, TH, TW, BN))


@triton.jit
def wgrad_tma_kernel(
    dy_desc,
    x_desc,
    partial_ptr,
    OH,
    OW,
    C,
    K,
    KW,
    pad_h,
    pad_w,
    dil_h,
    dil_w,
    m_tiles,
    tiles_per_split,
    TH: tl.constexpr,
    TW: tl.constexpr,
    BM: tl.constexpr,
    BN: tl.constexpr,
):
    """partial[split, co, tap, ci] = sum over the split's output tiles of dy^T x(shifted by tap):
    the weight's channels-last layout per split."""
    pid_tile = tl.program_id(0)
    tap = tl.program_id(1)
    split = tl.program_id(2)
    taps = tl.num_programs(1)
    ci_tiles = tl.cdiv(C, BN)
    co0 = (pid_tile // ci_tiles) * BM
    ci0 = (pid_tile % ci_tiles) * BN
    kh = tap // KW
    kw = tap - kh * KW
    tw_tiles = tl.cdiv(OW, TW)
    th_tiles = tl.cdiv(OH, TH)
    acc = tl.zeros([BM, BN], dtype=tl.float32)
    first = split * tiles_per_split
    last = tl.minimum(first + tiles_per_split, m_tiles)
    for mt in range(first, last):
        tw_i = mt % tw_tiles
        t = mt // tw_tiles
        th_i = t % th_tiles
        n = t // th_tiles
        a = dy_desc.load([n, th_i * TH, tw_i * TW, co0]).reshape(TH * TW, BM)
        b = x_desc.load([n, th_i * TH - pad_h + kh * dil_h, tw_i * TW - pad_w + kw * dil_w, ci0])
        acc = tl.dot(a.T, b.reshape(TH * TW, BN), acc)
    co = co0 + tl.arange(0, BM)
    ci = ci0 + tl.arange(0, BN)
    dst = partial_ptr + split * (K * taps * C) + tap * C
    dst += (co * (taps * C))[:, None] + ci[None, :]
    tl.store(dst, acc, mask=(co < K)[:, None] & (ci < C)[None, :])


def wgrad_tma(x, dy, kernel, padding, dilation, config, sms=132):
    """The weight gradient ``[K, C, KH, KW]`` (channels-last) of a stride-1 convolution."""
    TH, TW, BM, BN, warps, stages = config
    N, C = x.shape[:2]
    K, OH, OW = dy.shape[1], dy.shape[2], dy.shape[3]
    KH, KW = kernel
    xp = x.permute(0, 2, 3, 1)
    dyp = dy.permute(0, 2, 3, 1)
    x_desc = TensorDescriptor(xp, list(xp.shape), list(xp.stride()), [1, TH, TW, BN])
    dy_desc = TensorDescriptor(dyp, list(dyp.shape), list(dyp.stride()), [1, TH, TW, BM])
    m_tiles = N * triton.cdiv(OH, TH) * triton.cdiv(OW, TW)
    tiles = triton.cdiv(K, BM) * triton.cdiv(C, BN) * KH * KW
    splits = max(1, min(m_tiles, triton.cdiv(2 * sms, tiles)))
    per_split = triton.cdiv(m_tiles, splits)
    splits = triton.cdiv(m_tiles, per_split)
    partial = torch.empty((splits, K, KH * KW, C), device=x.device, dtype=torch.float32)
    grid = (triton.cdiv(K, BM) * triton.cdiv(C, BN), KH * KW, splits)
    wgrad_tma_kernel[grid](
        dy_desc,
        x_desc,
        partial,
        OH,
        OW,
        C,
        K,
        KW,
        padding[0],
        padding[1],
        dilation[0],
        dilation[1],
        m_tiles,
        per_split,
        TH=TH,
        TW=TW,
        BM=BM,
        BN=BN,
        num_warps=warps,
        num_stages=stages,
    )
    dw = partial.sum(0).to(x.dtype).reshape(K, KH, KW, C).permute(0, 3, 1, 2)
    return dw


WGRAD_CONFIGS = [  # TH, TW, BM (out channels), BN (in channels), warps, stages
    (8, 8, 64, 64, 4, 4),
    (8, 16, 64, 64, 4, 4),
    (8, 16, 128, 64, 8, 4),
    (8, 16, 128, 128, 8, 3),
]


_OUT = {torch.bfloat16: tl.bfloat16, torch.float16: tl.float16, torch.float32: tl.float32}


def conv_tma(x, w, bias, padding, dilation, config, *, flip=False, swap=False, w2d=False):
    """Stride-1 2-D convolution of channels-last ``x`` by channels-last ``w`` (``flip``: the
    input gradient, ``x`` being dy and the padding already the transposed one)."""
    TH, TW, BN, BK, warps, stages = config
    N, C, H, W = x.shape
    if flip:  # w: [Cout, Cin, KH, KW] of the forward; here C = Cout, K = Cin
        K, KH, KW = w.shape[1], w.shape[2], w.shape[3]
    else:
        K, KH, KW = w.shape[0], w.shape[2], w.shape[3]
    ph, pw = padding
    dh, dw = dilation
    OH = H + 2 * ph - dh * (KH - 1)
    OW = W + 2 * pw - dw * (KW - 1)
    y = torch.empty((N, K, OH, OW), device=x.device, dtype=x.dtype).to(
        memory_format=torch.channels_last
    )
    xp = x.permute(0, 2, 3, 1)  # [N, H, W, C] view, C contiguous
    x_desc = TensorDescriptor(xp, list(xp.shape), list(xp.stride()), [1, TH, TW, BK])
    wp = w.permute(0, 2, 3, 1).reshape(w.shape[0], KH * KW, w.shape[1])  # [Cout, taps, Cin]
    block = [BK, 1, BN] if flip else [BN, 1, BK]
    if w2d:  # boxes must not straddle taps: the box's inner extent divides the channels
        inner = w.shape[1]
        assert inner % (BN if flip else BK) == 0, "w2d needs Cin % (BN or BK) == 0"
        wp = wp.reshape(w.shape[0], KH * KW * inner)
        block = [BK, BN] if flip else [BN, BK]
    w_desc = TensorDescriptor(wp, list(wp.shape), list(wp.stride()), block)
    yp = y.permute(0, 2, 3, 1)
    y_desc = TensorDescriptor(yp, list(yp.shape), list(yp.stride()), [1, TH, TW, BN])
    grid = (N * triton.cdiv(OH, TH) * triton.cdiv(OW, TW) * triton.cdiv(K, BN),)
    conv_tma_kernel[grid](
        x_desc,
        w_desc,
        y_desc,
        bias if bias is not None else y,
        OH,
        OW,
        C,
        K,
        KH,
        KW,
        ph,
        pw,
        dh,
        dw,
        FLIP=flip,
        SWAP=swap,
        W2D=w2d,
        HAS_BIAS=bias is not None,
        OUT_DTYPE=_OUT[x.dtype],
        TH=TH,
        TW=TW,
        BN=BN,
        BK=BK,
        GROUP_M=8,
        num_warps=warps,
        num_stages=stages,
    )
    return y


def dgrad_tma(dy, w, padding, dilation, config, **variant):
    KH, KW = w.shape[2], w.shape[3]
    pad = (dilation[0] * (KH - 1) - padding[0], dilation[1] * (KW - 1) - padding[1])
    return conv_tma(dy, w, None, pad, dilation, config, flip=True, **variant)


#: Operand arrangements. TTGIR (compiled locally for sm_90, Triton 3.9) shows why "base" lost:
#: a descriptor box that is reshaped before ``tl.dot`` is kept in shared memory only as wgmma's
#: B operand (``memdesc_reshape`` + ``memdesc_trans``); as the A operand it is loaded into
#: registers and reshuffled every step. "swap_w2d" computes ``acc^T = w . x^T`` (the image tile
#: is B) with a 2-D weight descriptor (A needs no reshape): both operands stay in shared memory.
VARIANTS = {"base": {}, "swap_w2d": {"swap": True, "w2d": True}}


def _fits(variant: dict, w, config, flip: bool) -> bool:
    """Whether a 2-D weight descriptor's boxes stay within one tap."""
    if not variant.get("w2d"):
        return True
    BN, BK = config[2], config[3]
    return (w.shape[0] % BK == 0 and w.shape[1] % BN == 0) if flip else w.shape[1] % BK == 0


# name: N, C, H, W, K, kernel, padding, dilation (stride 1 layers of the dense set)
LAYERS = {
    "r50_3x3_56": (32, 64, 56, 56, 64, 3, 1, 1),
    "r50_1x1_56": (32, 64, 56, 56, 256, 1, 0, 1),
    "r50_3x3_28": (32, 128, 28, 28, 128, 3, 1, 1),
    "r50_3x3_14": (32, 256, 14, 14, 256, 3, 1, 1),
    "r50_3x3_7": (32, 512, 7, 7, 512, 3, 1, 1),
    "dil2_3x3_64": (16, 256, 64, 64, 256, 3, 2, 2),
    "unet_3x3_128": (8, 128, 128, 128, 64, 3, 1, 1),
    "unet_3x3_256": (8, 64, 256, 256, 64, 3, 1, 1),
    "pw_96_384_56": (32, 96, 56, 56, 384, 1, 0, 1),
    "aspp_dil12": (8, 512, 64, 64, 256, 3, 12, 12),
}

CONFIGS = [  # TH, TW, BN, BK, warps, stages
    (8, 16, 64, 64, 4, 4),
    (16, 8, 64, 64, 4, 4),
    (8, 16, 128, 64, 8, 4),
    (16, 16, 64, 64, 8, 3),
    (16, 16, 128, 64, 8, 3),
    (8, 8, 64, 64, 4, 4),
    (8, 16, 128, 32, 4, 5),
    (16, 8, 256, 64, 8, 3),
]


def make(name, device, dtype, small=False):
    N, C, H, W, K, k, p, d = LAYERS[name]
    if small:
        N, H, W = 2, min(H, 11), min(W, 13)
        C, K = min(C, 32), min(K, 48)
        p, d = min(p, 2), min(d, 2)
    x = torch.randn(N, C, H, W, device=device, dtype=dtype).to(memory_format=torch.channels_last)
    w = (torch.randn(K, C, k, k, device=device, dtype=dtype) / (C * k * k) ** 0.5).to(
        memory_format=torch.channels_last
    )
    b = torch.randn(K, device=device, dtype=dtype)
    return x, w, b, (p, p), (d, d)


def check(name, config, device, dtype, small, variant=None):
    variant = variant or {}
    x, w, b, pad, dil = make(name, device, dtype, small)
    y = conv_tma(x, w, b, pad, dil, config, **variant)
    ref = F.conv2d(x.double(), w.double(), b.double(), padding=pad, dilation=dil)
    err_y = ((y.double() - ref).abs().max() / ref.abs().max()).item()
    dy = torch.randn_like(ref).to(dtype).contiguous(memory_format=torch.channels_last)
    dx = dgrad_tma(dy, w, pad, dil, config, **variant)
    ref_dx = torch.nn.grad.conv2d_input(x.shape, w.double(), dy.double(), padding=pad, dilation=dil)
    err_dx = ((dx.double() - ref_dx).abs().max() / ref_dx.abs().max()).item()
    wconfig = WGRAD_CONFIGS[0] if small else (*config[:2], 64, 64, *config[4:])
    dw = wgrad_tma(x, dy, w.shape[2:], pad, dil, wconfig)
    ref_dw = torch.nn.grad.conv2d_weight(
        x.double(), w.shape, dy.double(), padding=pad, dilation=dil
    )
    err_dw = ((dw.double() - ref_dw).abs().max() / ref_dw.abs().max()).item()
    return err_y, err_dx, err_dw


WARM_ONLY = False  # --warm: compile every config (run once), no timing


def time_ms(fn):
    """Kernel time per call: ten calls captured in a CUDA graph and replayed (host work, the
    descriptors' encoding included, happens once at capture): ``bench.kernel_ms``."""
    if WARM_ONLY:
        fn()
        return 1.0
    from tritonconv.bench import Options, kernel_ms

    ms = kernel_ms(lambda _: fn(), 10, Options())
    return float("inf") if ms is None else ms  # not capturable: never the best


def _time_layer(name, device, dtype):
    import tritonconv as tc

    x, w, b, pad, dil = make(name, device, dtype)
    flop = 2 * x.shape[0] * w.shape[0] * w[0].numel()
    flop *= (x.shape[2] + 2 * pad[0] - dil[0] * (w.shape[2] - 1)) ** 2
    cudnn = time_ms(lambda: F.conv2d(x, w, b, padding=pad, dilation=dil))
    ours = time_ms(lambda: tc.conv2d(x, w, b, padding=pad, dilation=dil, algo="implicit_gemm"))
    dy = torch.randn_like(F.conv2d(x, w, b, padding=pad, dilation=dil))
    cudnn_dx = time_ms(
        lambda: torch.nn.grad.conv2d_input(x.shape, w, dy, padding=pad, dilation=dil)
    )
    best = (float("inf"), None)
    best_dx = (float("inf"), None)
    for label, variant in VARIANTS.items():
        for config in CONFIGS:
            try:
                if _fits(variant, w, config, False):
                    t = time_ms(lambda c=config, v=variant: conv_tma(x, w, b, pad, dil, c, **v))
                    best = min(best, (t, (label, config)))
                if _fits(variant, w, config, True):
                    t_dx = time_ms(lambda c=config, v=variant: dgrad_tma(dy, w, pad, dil, c, **v))
                    best_dx = min(best_dx, (t_dx, (label, config)))
            except Exception as e:  # a config that does not compile
                print(f"  {name} {label} {config}: {type(e).__name__}: {str(e)[:120]}")
    cudnn_dw = time_ms(
        lambda: torch.nn.grad.conv2d_weight(x, w.shape, dy, padding=pad, dilation=dil)
    )
    best_dw = (float("inf"), None)
    for config in WGRAD_CONFIGS:
        try:
            t = time_ms(lambda c=config: wgrad_tma(x, dy, w.shape[2:], pad, dil, c))
        except Exception as e:  # a config that does not compile
            print(f"  {name} wgrad {config}: {type(e).__name__}: {str(e)[:120]}")
            continue
        best_dw = min(best_dw, (t, config))
    return dict(
        cudnn_dw_ms=cudnn_dw,
        tma_dw_ms=best_dw[0],
        tma_dw_config=best_dw[1],
        layer=name,
        cudnn_ms=cudnn,
        igemm_ms=ours,
        tma_ms=best[0],
        tma_config=best[1],
        cudnn_dx_ms=cudnn_dx,
        tma_dx_ms=best_dx[0],
        tma_dx_config=best_dx[1],
        tma_tflops=flop / best[0] / 1e9,
    )


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--check-only", action="store_true")
    ap.add_argument("--layers", nargs="*", default=list(LAYERS))
    ap.add_argument("--json", default=None)
    ap.add_argument("--variants", nargs="*", default=list(VARIANTS), help="operand arrangements")
    ap.add_argument("--no-wgrad", action="store_true", help="time forward and dgrad only")
    ap.add_argument("--warm", action="store_true", help="only compile (fill Triton's cache)")
    args = ap.parse_args()
    global WARM_ONLY
    WARM_ONLY = args.warm
    for name in set(VARIANTS) - set(args.variants):
        del VARIANTS[name]
    if args.no_wgrad:
        WGRAD_CONFIGS.clear()
    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    # The interpreter's descriptor loads garble bfloat16 (Triton 3.9); float16 checks the logic.
    dtype = torch.bfloat16 if cuda else torch.float16
    tol = 2e-2
    bad = 0
    small_config = (8, 16, 16, 16, 4, 2)  # divides the shrunken layers' channels
    for name in args.layers if not args.warm else []:
        for label, variant in VARIANTS.items():
            for config in [small_config] if not cuda else CONFIGS[:2]:
                w = make(name, device, dtype, not cuda)[1]
                if not (_fits(variant, w, config, False) and _fits(variant, w, config, True)):
                    continue
                ey, edx, edw = check(name, config, device, dtype, not cuda, variant)
                ok = ey < tol and edx < tol and edw < tol
                bad += not ok
                print(
                    f"check {name:14} {label:8} {config}: fwd {ey:.1e} dgrad {edx:.1e} "
                    f"wgrad {edw:.1e} {'ok' if ok else 'BAD'}"
                )
    if args.check_only or not cuda:
        sys.exit(1 if bad else 0)

    torch.backends.cudnn.benchmark = True
    rows = []
    for name in args.layers:
        row = _time_layer(name, device, dtype)
        cudnn, ours, cudnn_dx = row["cudnn_ms"], row["igemm_ms"], row["cudnn_dx_ms"]
        best, best_dx = (row["tma_ms"], row["tma_config"]), (row["tma_dx_ms"], None)
        rows.append(row)
        print(
            f"{name:14} cuDNN {cudnn:.3f}  igemm {ours:.3f} ({cudnn / ours:.2f})  "
            f"TMA {best[0]:.3f} ({cudnn / best[0]:.2f}) {best[1]}  "
            f"dgrad cuDNN {cudnn_dx:.3f} TMA {best_dx[0]:.3f} ({cudnn_dx / best_dx[0]:.2f})  "
            f"wgrad cuDNN {row['cudnn_dw_ms']:.3f} TMA {row['tma_dw_ms']:.3f} "
            f"({row['cudnn_dw_ms'] / row['tma_dw_ms']:.2f}) {row['tma_dw_config']}",
            flush=True,
        )

    def geomean(ref, ours):
        ratios = torch.tensor([r[ref] / r[ours] for r in rows])
        return ratios.log().mean().exp().item()

    print(
        f"geomean vs cuDNN: TMA fwd {geomean('cudnn_ms', 'tma_ms'):.2f}  "
        f"igemm fwd {geomean('cudnn_ms', 'igemm_ms'):.2f}  "
        f"TMA dgrad {geomean('cudnn_dx_ms', 'tma_dx_ms'):.2f}  "
        f"TMA wgrad {geomean('cudnn_dw_ms', 'tma_dw_ms'):.2f}"
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
