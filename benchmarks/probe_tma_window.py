"""Stride-1 same-size windows (3x3 pad 1, dilated 3x3 pad = dilation) as TMA GEMMs over flat rows.

Session 36's probe for issue 11's big 3x3 layers (batch 128 on an H200: our pointer-load
implicit GEMM at ~470 TFLOP/s against cuDNN's ~670). A convolution whose output has the
input's size reads, for tap ``(kh, kw)``, the input row ``p + (kh*dil - pad)*W + (kw*dil -
pad)`` of the dense channels-last ``[N*H*W, C]`` matrix for output row ``p``: one constant
shift per tap. So each reduction step is a plain 2-D TMA box ``[BLOCK_M, BLOCK_K]`` at a
shifted row (no reshaped boxes: session 3's loss), and only the rows whose shifted pixel lies
outside the image (left/right edges, which the flat shift would wrap into the neighbouring
row, and top/bottom) are zeroed, in registers, before the product (wgmma takes its A operand
from registers). Per step the warps then issue a few selects and the shared-memory reads of
A, against ~240 address and mask instructions per step in the pointer-load kernel (session
10). The input gradient of such a layer is the same loop with the opposite shifts and the
weight read as ``[taps, C_out, C_in]``.

    PYTHONPATH=src python benchmarks/probe_tma_window.py --check      # interpreter, CPU
    PYTHONPATH=src python benchmarks/probe_tma_window.py --sass       # offline sm_90 loop
    PYTHONPATH=src python benchmarks/probe_tma_window.py [--json F]   # GPU: times vs cuDNN
    PYTHONPATH=src python benchmarks/probe_tma_window.py --strided [--json F]  # ResNet's
                                            # strided 1x1 shortcuts, TMA forms on and off
    PYTHONPATH=src python benchmarks/probe_tma_window.py --per-sm [--json F]  # two programs
                                            # a multiprocessor, and fp32's narrower tiles
    PYTHONPATH=src python benchmarks/probe_tma_window.py --library [--json F]  # the rule's
"""

from __future__ import annotations

import itertools
import json
import math
import os
import sys
from functools import partial

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor


@triton.jit
def window_tma_probe_kernel(
    src, w, bias_ptr, dst, rows, C_src, C_dst, H, W, KW, taps, pad_h, pad_w, dil_h, dil_w,
    TRANSPOSED: tl.constexpr, HAS_BIAS: tl.constexpr, BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, MASK: tl.constexpr,
    FLATTEN: tl.constexpr = True,
):  # fmt: skip
    m_tiles = tl.cdiv(rows, BLOCK_M)
    n_tiles = tl.cdiv(C_dst, BLOCK_N)
    c_steps = tl.cdiv(C_src, BLOCK_K)
    for tile in tl.range(tl.program_id(0), m_tiles * n_tiles, tl.num_programs(0), flatten=FLATTEN):
        width = GROUP_M * n_tiles
        first_m = (tile // width) * GROUP_M
        rows_here = tl.minimum(m_tiles - first_m, GROUP_M)
        m0 = (first_m + (tile % width) % rows_here) * BLOCK_M
        n0 = ((tile % width) // rows_here) * BLOCK_N
        p = m0 + tl.arange(0, BLOCK_M)
        ow = p % W
        oh = (p // W) % H
        acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        cb = 0  # the step's channel block and tap, counted from step to step (no division)
        kw = 0
        kh = 0
        for _ in range(taps * c_steps):
            dh = kh * dil_h - pad_h
            dw = kw * dil_w - pad_w
            if TRANSPOSED:
                dh = -dh
                dw = -dw
            a = src.load([m0 + dh * W + dw, cb * BLOCK_K])
            if MASK:
                ih = oh + dh
                iw = ow + dw
                ok = (ih.to(tl.uint32) < H) & (iw.to(tl.uint32) < W)
                a = tl.where(ok[:, None], a, 0)
            tap = kh * KW + kw
            if TRANSPOSED:
                b = w.load([tap, cb * BLOCK_K, n0]).reshape([BLOCK_K, BLOCK_N])
            else:
                b = w.load([n0, tap * C_src + cb * BLOCK_K]).T
            acc = tl.dot(a, b, acc)
            cb += 1
            wrap = cb == c_steps
            cb = tl.where(wrap, 0, cb)
            kw += wrap.to(tl.int32)
            wrap = kw == KW
            kw = tl.where(wrap, 0, kw)
            kh += wrap.to(tl.int32)
        if HAS_BIAS:
            d = n0 + tl.arange(0, BLOCK_N)
            acc += tl.load(bias_ptr + d, mask=d < C_dst, other=0).to(tl.float32)[None, :]
        dst.store([m0, n0], acc.to(dst.dtype))


@triton.jit
def box_tma_probe_kernel(
    src, w, bias_ptr, dst, N, C_src, C_dst, H, W, KW, taps, pad_h, pad_w, dil_h, dil_w,
    TRANSPOSED: tl.constexpr, HAS_BIAS: tl.constexpr, TH: tl.constexpr, TW: tl.constexpr,
    BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, SWAP: tl.constexpr,
    FLATTEN: tl.constexpr = True,
):  # fmt: skip
    """The same windows over a 4-D ``[N, H, W, C]`` descriptor: a tile is a ``TH x TW``
    rectangle of one image's positions, each tap's box ``[1, TH, TW, BLOCK_K]`` at the
    shifted corner, the padding the hardware's zero fill (no mask), the box viewed as
    ``[TH*TW, BLOCK_K]``; ``SWAP``: as wgmma's B operand (``acc^T = w . x^T``)."""
    BLOCK_M: tl.constexpr = TH * TW
    tw_tiles = tl.cdiv(W, TW)
    th_tiles = tl.cdiv(H, TH)
    m_tiles = N * th_tiles * tw_tiles
    n_tiles = tl.cdiv(C_dst, BLOCK_N)
    c_steps = tl.cdiv(C_src, BLOCK_K)
    for tile in tl.range(tl.program_id(0), m_tiles * n_tiles, tl.num_programs(0), flatten=FLATTEN):
        width = GROUP_M * n_tiles
        first_m = (tile // width) * GROUP_M
        rows_here = tl.minimum(m_tiles - first_m, GROUP_M)
        pid_m = first_m + (tile % width) % rows_here
        n0 = ((tile % width) // rows_here) * BLOCK_N
        w0 = (pid_m % tw_tiles) * TW
        t = pid_m // tw_tiles
        h0 = (t % th_tiles) * TH
        n = t // th_tiles
        if SWAP:
            acc = tl.zeros([BLOCK_N, BLOCK_M], dtype=tl.float32)
        else:
            acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        cb = 0
        kw = 0
        kh = 0
        for _ in range(taps * c_steps):
            dh = kh * dil_h - pad_h
            dw = kw * dil_w - pad_w
            if TRANSPOSED:
                dh = -dh
                dw = -dw
            a = src.load([n, h0 + dh, w0 + dw, cb * BLOCK_K]).reshape([BLOCK_M, BLOCK_K])
            tap = kh * KW + kw
            if TRANSPOSED:
                b = w.load([tap, cb * BLOCK_K, n0]).reshape([BLOCK_K, BLOCK_N])
                acc = tl.dot(b.T, a.T, acc) if SWAP else tl.dot(a, b, acc)
            else:
                b = w.load([n0, tap * C_src + cb * BLOCK_K])
                acc = tl.dot(b, a.T, acc) if SWAP else tl.dot(a, b.T, acc)
            cb += 1
            wrap = cb == c_steps
            cb = tl.where(wrap, 0, cb)
            kw += wrap.to(tl.int32)
            wrap = kw == KW
            kw = tl.where(wrap, 0, kw)
            kh += wrap.to(tl.int32)
        if SWAP:
            acc = acc.T
        if HAS_BIAS:
            d = n0 + tl.arange(0, BLOCK_N)
            acc += tl.load(bias_ptr + d, mask=d < C_dst, other=0).to(tl.float32)[None, :]
        dst.store([n, h0, w0, n0], acc.to(dst.dtype).reshape([1, TH, TW, BLOCK_N]))


def launch_box(x, weight, bias, dilation, transposed, cfg, programs=None, swap=True):
    """``box_tma_probe_kernel``; ``cfg``: (TH, TW, BLOCK_N, BLOCK_K, warps, stages)."""
    th, tw, bn, bk, warps, stages = cfg
    n, c_src, h, wd = x.shape
    c_out, c_in, kh, kw = weight.shape
    c_dst = c_in if transposed else c_out
    pad_h, pad_w = dilation * (kh - 1) // 2, dilation * (kw - 1) // 2
    out = torch.empty(n, c_dst, h, wd, device=x.device, dtype=x.dtype,
                      memory_format=torch.channels_last)  # fmt: skip
    xr = x.permute(0, 2, 3, 1)
    wl = weight.permute(0, 2, 3, 1).contiguous()  # [C_out, KH, KW, C_in]
    if transposed:  # [taps, C_out, C_in] over the same memory
        wdesc = TensorDescriptor(wl, [kh * kw, c_out, c_in], [c_in, kh * kw * c_in, 1], [1, bk, bn])
    else:
        wdesc = TensorDescriptor(wl, [c_out, kh * kw * c_in], [kh * kw * c_in, 1], [bn, bk])
    src = TensorDescriptor(xr, list(xr.shape), list(xr.stride()), [1, th, tw, bk])
    yr = out.permute(0, 2, 3, 1)
    dst = TensorDescriptor(yr, list(yr.shape), list(yr.stride()), [1, th, tw, bn])
    tiles = n * triton.cdiv(h, th) * triton.cdiv(wd, tw) * triton.cdiv(c_dst, bn)
    grid = (min(tiles, programs) if programs else tiles,)
    box_tma_probe_kernel[grid](
        src, wdesc, bias if bias is not None else x, dst, n, c_src, c_dst, h, wd, kw,
        kh * kw, pad_h, pad_w, dilation, dilation, TRANSPOSED=transposed,
        HAS_BIAS=bias is not None, TH=th, TW=tw, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8, SWAP=swap,
        num_warps=warps, num_stages=stages,
    )  # fmt: skip
    return out


def launch(x, weight, bias, dilation, transposed, cfg, programs=None, mask=True):
    """The probe kernel on channels-last ``x`` (``transposed``: ``x`` is the output gradient and
    the result the input gradient). ``cfg``: (BLOCK_M, BLOCK_N, BLOCK_K, warps, stages)."""
    bm, bn, bk, warps, stages = cfg
    n, c_src, h, wd = x.shape
    c_out, c_in, kh, kw = weight.shape
    c_dst = c_in if transposed else c_out
    pad_h, pad_w = dilation * (kh - 1) // 2, dilation * (kw - 1) // 2
    rows = n * h * wd
    out = torch.empty(n, c_dst, h, wd, device=x.device, dtype=x.dtype,
                      memory_format=torch.channels_last)  # fmt: skip
    xr = x.permute(0, 2, 3, 1).reshape(rows, c_src)
    wl = weight.permute(0, 2, 3, 1).contiguous()  # [C_out, KH, KW, C_in]
    if transposed:  # [taps, C_out, C_in] over the same memory
        wdesc = TensorDescriptor(wl, [kh * kw, c_out, c_in], [c_in, kh * kw * c_in, 1], [1, bk, bn])
    else:
        wdesc = TensorDescriptor(wl, [c_out, kh * kw * c_in], [kh * kw * c_in, 1], [bn, bk])
    src = TensorDescriptor(xr, [rows, c_src], [c_src, 1], [bm, bk])
    dst = TensorDescriptor(out.permute(0, 2, 3, 1).reshape(rows, c_dst), [rows, c_dst],
                           [c_dst, 1], [bm, bn])  # fmt: skip
    tiles = triton.cdiv(rows, bm) * triton.cdiv(c_dst, bn)
    grid = (min(tiles, programs) if programs else tiles,)
    window_tma_probe_kernel[grid](
        src, wdesc, bias if bias is not None else x, dst, rows, c_src, c_dst, h, wd, kw,
        kh * kw, pad_h, pad_w, dilation, dilation, TRANSPOSED=transposed,
        HAS_BIAS=bias is not None, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8, MASK=mask,
        num_warps=warps, num_stages=stages,
    )  # fmt: skip
    return out


def reference(x, weight, bias, dilation, transposed):
    kh = weight.shape[2]
    pad = dilation * (kh - 1) // 2
    xd, wd = x.double(), weight.double()
    if transposed:
        return torch.nn.grad.conv2d_input((*x.shape[:1], weight.shape[1], *x.shape[2:]), wd, xd,
                                          padding=pad, dilation=dilation)  # fmt: skip
    return torch.nn.functional.conv2d(xd, wd, None if bias is None else bias.double(),
                                      padding=pad, dilation=dilation)  # fmt: skip


def check() -> None:
    """Interpreter: results against float64 on small shapes, both directions."""
    os.environ.setdefault("TRITON_INTERPRET", "1")
    torch.manual_seed(0)
    dtype = torch.float16
    for (n, c_in, c_out, h, wd, k, dil), transposed, bias in itertools.product(
        [(2, 16, 32, 5, 7, 3, 1), (1, 32, 16, 6, 4, 3, 2), (3, 16, 16, 3, 9, 5, 1)],
        [False, True], [False, True],
    ):  # fmt: skip
        if transposed and bias:
            continue
        w = torch.randn(c_out, c_in, k, k, dtype=dtype).to(memory_format=torch.channels_last)
        b = torch.randn(c_out, dtype=dtype) if bias else None
        c_src = c_out if transposed else c_in
        x = torch.randn(n, c_src, h, wd, dtype=dtype).to(memory_format=torch.channels_last)
        want = reference(x, w, b, dil, transposed)
        got = launch(x, w, b, dil, transposed, (16, 16, 16, 4, 1), programs=3)
        for swap in (False, True):
            boxed = launch_box(x, w, b, dil, transposed, (2, 8, 16, 16, 4, 1), 3, swap)
            assert (boxed.double() - want).abs().max().item() < 0.05 * want.abs().max() + 1e-2
        err = (got.double() - want).abs().max().item()
        print(f"n{n} {c_in}->{c_out} {h}x{wd} k{k} dil{dil} transposed={transposed} bias={bias}: "
              f"max err {err:.3g}")  # fmt: skip
        assert err < 0.05 * want.abs().max().item() + 1e-2


def sass_counts() -> None:
    """The loop's SASS for sm_90, compiled here (Triton's own toolchain, no GPU)."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from triton.runtime.jit import mangle_type

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from ptx_loop import loops, opcode_counts, resources, sass

    fn = window_tma_probe_kernel
    for transposed, (bm, bn, bk, warps, stages) in [
        (False, (128, 128, 64, 8, 4)), (False, (256, 128, 64, 8, 3)), (True, (128, 128, 64, 8, 4)),
    ]:  # fmt: skip
        t = torch.empty(1024, 64, dtype=torch.bfloat16)
        src = TensorDescriptor(t, [1024, 64], [64, 1], [bm, bk])
        w3 = torch.empty(9 * 64 * 64, dtype=torch.bfloat16)
        wdesc = (TensorDescriptor(w3, [9, 64, 64], [64, 576, 1], [1, bk, bn]) if transposed
                 else TensorDescriptor(w3, [64, 576], [576, 1], [bn, bk]))  # fmt: skip
        dst = TensorDescriptor(t, [1024, 64], [64, 1], [bm, bn])
        signature = {"src": mangle_type(src), "w": mangle_type(wdesc), "bias_ptr": "*bf16",
                     "dst": mangle_type(dst)}  # fmt: skip
        for name in ["rows", "C_src", "C_dst", "H", "W", "KW", "taps", "pad_h", "pad_w",
                     "dil_h", "dil_w"]:  # fmt: skip
            signature[name] = "i32"
        constexprs = {"TRANSPOSED": transposed, "HAS_BIAS": not transposed, "BLOCK_M": bm,
                      "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8, "MASK": os.environ.get("MASK", "1") == "1",
                      "FLATTEN": False}  # fmt: skip
        for name in constexprs:
            signature[name] = "constexpr"
        compiled = triton.compile(ASTSource(fn, signature, constexprs, {}),
                                  target=GPUTarget("cuda", 90, 128),
                                  options={"num_warps": warps, "num_stages": stages})  # fmt: skip
        body = max(loops(sass(compiled.asm["cubin"])), key=len)
        counts = opcode_counts(body)
        print(f"transposed={transposed} {bm}x{bn}x{bk} w{warps} s{stages} "
              f"{resources(compiled.asm['cubin'])}: loop {len(body)} SASS, "
              f"{dict(counts.most_common(14))}")  # fmt: skip


def sass_box() -> None:
    """``box_tma_probe_kernel``'s loop for sm_90: whether the reshaped box stays in shared
    memory as a wgmma operand (no LDS/STS/LDSM in the loop) or goes through registers."""
    from triton.runtime.jit import mangle_type

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from ptx_loop import mma_loop

    for transposed, swap, (th, tw, bn, bk, warps, stages) in [
        (False, False, (2, 64, 128, 64, 8, 4)), (False, True, (2, 64, 128, 64, 8, 4)),
        (True, True, (2, 64, 128, 64, 8, 4)), (False, True, (4, 32, 256, 64, 8, 3)),
    ]:  # fmt: skip
        t = torch.empty(4, 64, 64, 64, dtype=torch.bfloat16)
        src = TensorDescriptor(t, [4, 64, 64, 64], [64**3, 64 * 64, 64, 1], [1, th, tw, bk])
        w3 = torch.empty(9 * 64 * 64, dtype=torch.bfloat16)
        wdesc = (TensorDescriptor(w3, [9, 64, 64], [64, 576, 1], [1, bk, bn]) if transposed
                 else TensorDescriptor(w3, [64, 576], [576, 1], [bn, bk]))  # fmt: skip
        dst = TensorDescriptor(t, [4, 64, 64, 64], [64**3, 64 * 64, 64, 1], [1, th, tw, bn])
        signature = {"src": mangle_type(src), "w": mangle_type(wdesc), "bias_ptr": "*bf16",
                     "dst": mangle_type(dst)}  # fmt: skip
        for name in ["N", "C_src", "C_dst", "H", "W", "KW", "taps", "pad_h", "pad_w", "dil_h",
                     "dil_w"]:  # fmt: skip
            signature[name] = "i32"
        constexprs = {"TRANSPOSED": transposed, "HAS_BIAS": not transposed, "TH": th, "TW": tw,
                      "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8, "SWAP": swap,
                      "FLATTEN": False}  # fmt: skip
        keys = ("HGMMA", "UTMALDG", "LDS", "STS", "LDSM", "BAR", "IMAD")
        print(
            f"transposed={transposed} swap={swap} {th}x{tw}x{bn}x{bk} w{warps} s{stages} "
            + mma_loop(box_tma_probe_kernel, signature, constexprs, warps, stages, keys)
        )


# name: (batch, C_in, C_out, H=W, kernel, dilation)
LAYERS = {
    "r50 3x3 64@56 b128": (128, 64, 64, 56, 3, 1),
    "r50 3x3 128@28 b128": (128, 128, 128, 28, 3, 1),
    "r50 3x3 256@14 b128": (128, 256, 256, 14, 3, 1),
    "r50 3x3 512@7 b128": (128, 512, 512, 7, 3, 1),
    "r50 3x3 128@28 b32": (32, 128, 128, 28, 3, 1),
    "r50 3x3 256@14 b32": (32, 256, 256, 14, 3, 1),
    "unet 3x3 64@256 b8": (8, 64, 64, 256, 3, 1),
    "unet 3x3 128->64@128 b8": (8, 128, 64, 128, 3, 1),
    "unet 3x3 256->128@64 b8": (8, 256, 128, 64, 3, 1),
    "unet 3x3 1024@16 b8": (8, 1024, 1024, 16, 3, 1),
    "dil2 3x3 256@64 b16": (16, 256, 256, 64, 3, 2),
    "aspp 3x3 dil12 512->256@64 b8": (8, 512, 256, 64, 3, 12),
}


def box_configs(size: int, c_dst: int) -> list:
    """(TH, TW, BLOCK_N, BLOCK_K, warps, stages), persistent, swap: for an image ``size``
    square with ``c_dst`` output channels; widths that waste least of a row first."""
    widths = [tw for tw in (8, 16, 32, 64, 128) if tw <= max(8, triton.next_power_of_2(size))]
    waste = {tw: triton.cdiv(size, tw) * tw / size for tw in widths}
    widths = sorted(widths, key=lambda tw: (round(waste[tw], 3), -tw))[:2]
    out = []
    for tw in widths:
        for positions, bn, warps, stages in [(128, 128, 8, 4), (256, 128, 8, 3), (128, 256, 8, 3),
                                             (128, 64, 4, 4), (64, 128, 4, 4)]:  # fmt: skip
            th = positions // tw
            if th < 1 or th > size * 2 or (bn == 256 and c_dst < 256):
                continue
            for persistent in (True, False):
                out.append(((th, tw, bn, 64, warps, stages), persistent, True))
    out.append((out[0][0], False, False))
    return out


def gpu(path: str | None) -> None:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from probe_small_wave import graph_us

    from tritonconv.geometry import make_geometry
    from tritonconv.ops import implicit_gemm as ig

    torch.backends.cudnn.benchmark = True
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    out_rows = []
    for name, (n, c_in, c_out, s, k, dil) in LAYERS.items():
        pad = dil * (k - 1) // 2
        cl = torch.channels_last
        x = torch.randn(n, c_in, s, s, device="cuda", dtype=torch.bfloat16).to(memory_format=cl)
        w = (torch.randn(c_out, c_in, k, k, device="cuda", dtype=torch.bfloat16)
             / math.sqrt(c_in * k * k)).to(memory_format=cl)  # fmt: skip
        dy = torch.randn(n, c_out, s, s, device="cuda", dtype=torch.bfloat16).to(memory_format=cl)
        geometry = make_geometry((s, s), (k, k), (1, 1), (pad, pad), (pad, pad), (dil, dil))
        flops = 2 * n * s * s * c_in * c_out * k * k
        row = {"layer": name, "dtype": str(dtype)}
        for pass_name, src, transposed in [("fwd", x, False), ("dX", dy, True)]:
            if transposed:
                cudnn = graph_us(partial(torch.ops.aten.convolution_backward,
                    dy, x, w, None, [1, 1], [pad, pad], [dil, dil], False, [0, 0], 1,
                    (True, False, False)))  # fmt: skip
                ours = graph_us(partial(ig.conv_grad_input, dy, w, x, geometry, 1))
                want = reference(dy, w, None, dil, True)
            else:
                cudnn = graph_us(partial(torch.nn.functional.conv2d, x, w, padding=pad,
                                         dilation=dil))  # fmt: skip
                ours = graph_us(partial(ig.conv_forward, x, w, None, geometry, 1))
                want = reference(x, w, None, dil, False)
            timed = []
            for cfg, persistent, swap in box_configs(s, c_in if transposed else c_out):
                programs = sms if persistent else None
                label = f"{cfg}{' p' if persistent else ''}{'' if swap else ' noswap'}"
                try:
                    got = launch_box(src, w, None, dil, transposed, cfg, programs, swap)
                    err = ((got.double() - want).norm() / want.norm()).item()
                    us = graph_us(partial(launch_box, src, w, None, dil, transposed, cfg,
                                          programs, swap))  # fmt: skip
                except Exception as error:  # a configuration that does not fit
                    print(f"  {name} {pass_name} {label}: {type(error).__name__} {error}"[:200])
                    continue
                timed.append((us, label, err))
            timed.sort()
            best = timed[0]
            row[pass_name] = {"cudnn_us": cudnn, "ours_us": ours,
                              "tma": {label: [us, err] for us, label, err in timed}}  # fmt: skip
            print(
                f"{name} {pass_name}: cuDNN {cudnn:.1f} ({flops / cudnn / 1e6:.0f} TFLOP/s), "
                f"igemm {ours:.1f} ({cudnn / ours:.2f}x), box best {best[1]} {best[0]:.1f} "
                f"({cudnn / best[0]:.2f}x, {flops / best[0] / 1e6:.0f} TFLOP/s, rel err "
                f"{max(e for _, _, e in timed):.1e} worst); next "
                + ", ".join(f"{lbl} {us:.1f}" for us, lbl, _ in timed[1:5]),
                flush=True,
            )
        out_rows.append(row)
    if path:
        with open(path, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                       "triton": triton.__version__, "rows": out_rows}, f, indent=1)  # fmt: skip


def layer_tensors(name: str, dtype: torch.dtype) -> tuple:
    """``(padding, x, w, dy, geometry)`` of a probe layer on the GPU, channels-last (a
    'same'-size window: padding ``dil * (k - 1) // 2``)."""
    from tritonconv.geometry import make_geometry

    n, c_in, c_out, s, k, dil = LAYERS[name]
    pad = dil * (k - 1) // 2
    cl = torch.channels_last
    x = torch.randn(n, c_in, s, s, device="cuda", dtype=dtype).to(memory_format=cl)
    w = (torch.randn(c_out, c_in, k, k, device="cuda", dtype=dtype)
         / math.sqrt(c_in * k * k)).to(memory_format=cl)  # fmt: skip
    dy = torch.randn(n, c_out, s, s, device="cuda", dtype=dtype).to(memory_format=cl)
    geometry = make_geometry((s, s), (k, k), (1, 1), (pad, pad), (pad, pad), (dil, dil))
    return pad, x, w, dy, geometry


def library(path: str | None, dtype: torch.dtype = torch.bfloat16) -> None:
    """The library's implicit GEMM on the probe's layers, with the window TMA kernel
    (``window_tma_config``'s rule) and without it (the pointer-load kernel), beside cuDNN:
    kernel µs by CUDA-graph replay, forward and input gradient, channels-last, bf16 or
    (``--dtype float32``) fp32 with TF32 allowed on both sides (PyTorch's default)."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from probe_small_wave import graph_us

    import tritonconv
    from tritonconv.ops import implicit_gemm as ig

    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = True
    rule = ig.window_tma_config
    rows = []
    for name, (n, c_in, c_out, _, _, dil) in LAYERS.items():
        pad, x, w, dy, geometry = layer_tensors(name, dtype)
        calls = {
            "fwd": (partial(torch.nn.functional.conv2d, x, w, padding=pad, dilation=dil),
                    partial(ig.conv_forward, x, w, None, geometry, 1)),
            "dX": (partial(torch.ops.aten.convolution_backward, dy, x, w, None, [1, 1],
                           [pad, pad], [dil, dil], False, [0, 0], 1, (True, False, False)),
                   partial(ig.conv_grad_input, dy, w, x, geometry, 1)),
        }  # fmt: skip
        row = {"layer": name, "dtype": str(dtype)}
        for pass_name, (cudnn_call, ours_call) in calls.items():
            transposed = pass_name == "dX"
            taken = rule(dtype, n, c_out if transposed else c_in,
                         c_in if transposed else c_out, geometry, 1, transposed, "cuda")  # fmt: skip
            cudnn = graph_us(cudnn_call)
            ours = graph_us(ours_call)
            # (launch plans cleared both ways: a recorded plan replays whatever rule is set;
            # before session 37 this column replayed the window kernel's plan)
            tritonconv.clear_caches()
            ig.window_tma_config = lambda *args: None
            try:
                pointer = graph_us(ours_call)
            finally:
                ig.window_tma_config = rule
                tritonconv.clear_caches()
            row[pass_name] = {"cudnn_us": cudnn, "ours_us": ours, "pointer_us": pointer,
                              "window": str(taken) if taken else None}  # fmt: skip
            print(f"{name} {pass_name}: cuDNN {cudnn:.1f}  ours {ours:.1f} ({cudnn / ours:.2f}x)"
                  f"  pointer kernel {pointer:.1f} ({cudnn / pointer:.2f}x)  "
                  f"[{taken or 'not taken'}]", flush=True)  # fmt: skip
        rows.append(row)
    for pass_name in ("fwd", "dX"):
        taken = [r[pass_name] for r in rows if r[pass_name]["window"]]
        for column in ("ours_us", "pointer_us"):
            speed = math.prod(r["cudnn_us"] / r[column] for r in taken) ** (1 / len(taken))
            print(f"{pass_name} geomean over the {len(taken)} layers taken, {column}: "
                  f"{speed:.2f}x cuDNN")  # fmt: skip
    if path:
        with open(path, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                       "triton": triton.__version__, "rows": rows}, f, indent=1)  # fmt: skip


def per_sm(path: str | None) -> None:
    """Two persistent programs a multiprocessor (``WindowTmaConfig.per_sm``, session 39):
    the rule's tiles with one and with two programs an SM, and for fp32 (TF32 allowed, as
    PyTorch's default) a few narrower tiles that let two share one, forward and input
    gradient, kernel µs by CUDA-graph replay against cuDNN; each forced configuration's
    output checked against float64 (relative norm error)."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from probe_small_wave import graph_us

    import tritonconv
    from tritonconv.ops import implicit_gemm as ig

    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = True
    rule = ig.window_tma_config
    names = ["r50 3x3 64@56 b128", "r50 3x3 128@28 b128", "r50 3x3 256@14 b128",
             "r50 3x3 128@28 b32", "unet 3x3 64@256 b8", "unet 3x3 128->64@128 b8"]  # fmt: skip
    rows = []
    for dtype, name in itertools.product((torch.bfloat16, torch.float32), names):
        n, c_in, c_out, s, _, dil = LAYERS[name]
        pad, x, w, dy, geometry = layer_tensors(name, dtype)
        passes = {
            "fwd": (partial(torch.nn.functional.conv2d, x, w, padding=pad, dilation=dil),
                    partial(ig.conv_forward, x, w, None, geometry, 1),
                    partial(torch.nn.functional.conv2d, x.double(), w.double(), padding=pad,
                            dilation=dil)),
            "dX": (partial(torch.ops.aten.convolution_backward, dy, x, w, None, [1, 1],
                           [pad, pad], [dil, dil], False, [0, 0], 1, (True, False, False)),
                   partial(ig.conv_grad_input, dy, w, x, geometry, 1),
                   partial(torch.nn.grad.conv2d_input, x.shape, w.double(), dy.double(),
                           padding=pad, dilation=dil)),
        }  # fmt: skip
        for pass_name, (cudnn_call, ours_call, exact_call) in passes.items():
            transposed = pass_name == "dX"
            src, dst = (c_out, c_in) if transposed else (c_in, c_out)
            taken = rule(dtype, n, src, dst, geometry, 1, transposed, "cuda")
            if taken is None:
                continue
            configs = [taken, taken._replace(per_sm=2)]
            if dtype == torch.float32:
                for th_tw, bn, warps, stages, two in [
                    (128, 64, 4, 3, 2),
                    (128, 128, 8, 4, 1),
                    (64, 128, 4, 3, 2),
                    (64, 64, 4, 4, 2),
                ]:
                    th, tw, _ = ig._rectangle(th_tw, s, s)
                    configs.append(ig.WindowTmaConfig(th, tw, bn, 32, warps, stages, two))
            elif taken.block_n == 64:
                configs.append(taken._replace(num_stages=3, per_sm=2))
            exact = exact_call()
            cudnn = graph_us(cudnn_call)
            timed = []
            for config in dict.fromkeys(configs):
                ig.window_tma_config = lambda *args, c=config: c
                tritonconv.clear_caches()
                try:
                    got = ours_call()
                    err = ((got.double() - exact).norm() / exact.norm()).item()
                    timed.append((str(config), graph_us(ours_call), err))
                except Exception as error:  # (a configuration out of resources, say)
                    timed.append((str(config), float("nan"), repr(error)[:120]))
                finally:
                    ig.window_tma_config = rule
                    tritonconv.clear_caches()
            rows.append({"layer": name, "dtype": str(dtype), "pass": pass_name,
                         "cudnn_us": cudnn, "configs": timed})  # fmt: skip
            line = "  ".join(f"[{c}] {us:.1f} ({cudnn / us:.2f}x, {e if isinstance(e, str) else f'{e:.0e}'})"
                             for c, us, e in timed)  # fmt: skip
            print(f"{name} {str(dtype)[6:]} {pass_name}: cuDNN {cudnn:.1f}  {line}", flush=True)
    if path:
        with open(path, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                       "triton": triton.__version__, "rows": rows}, f, indent=1)  # fmt: skip


# ResNet-50's downsampling shortcuts at batch 128: (batch, C_in, C_out, H=W, stride)
SHORTCUTS = {
    "r50 1x1 s2 256->512@56 b128": (128, 256, 512, 56, 2),
    "r50 1x1 s2 512->1024@28 b128": (128, 512, 1024, 28, 2),
    "r50 1x1 s2 1024->2048@14 b128": (128, 1024, 2048, 14, 2),
}


def strided(path: str | None) -> None:
    """Unpadded strided 1x1 layers (``implicit_gemm.strided_pointwise``, knob
    ``STRIDED_POINTWISE_TMA``): forward and weight gradient from x's strided view, against
    the same calls with the knob off (the pointer-load kernels) and cuDNN, bf16
    channels-last, kernel µs; each result checked against float64 first."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from probe_small_wave import graph_us

    import tritonconv
    from tritonconv.geometry import make_geometry
    from tritonconv.ops import implicit_gemm as ig

    torch.backends.cudnn.benchmark = True
    rows = []
    for name, (n, c_in, c_out, s, st) in SHORTCUTS.items():
        cl = torch.channels_last
        x = torch.randn(n, c_in, s, s, device="cuda", dtype=torch.bfloat16).to(memory_format=cl)
        w = (torch.randn(c_out, c_in, 1, 1, device="cuda", dtype=torch.bfloat16)
             / math.sqrt(c_in)).to(memory_format=cl)  # fmt: skip
        o = (s - 1) // st + 1
        dy = torch.randn(n, c_out, o, o, device="cuda", dtype=torch.bfloat16).to(memory_format=cl)
        geometry = make_geometry((s, s), (1, 1), (st, st), (0, 0), (0, 0), (1, 1))
        calls = {
            "fwd": (partial(torch.nn.functional.conv2d, x, w, stride=st),
                    partial(ig.conv_forward, x, w, None, geometry, 1)),
            "dW": (partial(torch.ops.aten.convolution_backward, dy, x, w, None, [st, st],
                           [0, 0], [1, 1], False, [0, 0], 1, (False, True, False)),
                   partial(ig.conv_grad_weight, dy, x, w.shape, geometry, 1,
                           weight_strides=w.stride())),
        }  # fmt: skip
        want = {"fwd": torch.nn.functional.conv2d(x.double(), w.double(), stride=st),
                "dW": torch.nn.grad.conv2d_weight(x.double(), w.shape, dy.double(),
                                                  stride=st)}  # fmt: skip
        row = {"layer": name}
        for pass_name, (cudnn_call, ours_call) in calls.items():
            timed, default = {}, ig.STRIDED_POINTWISE_TMA
            for knob in (True, False):
                ig.STRIDED_POINTWISE_TMA = knob
                tritonconv.clear_caches()
                got = ours_call()
                err = ((got.double() - want[pass_name]).norm() / want[pass_name].norm()).item()
                timed[knob] = (graph_us(ours_call), err)
            ig.STRIDED_POINTWISE_TMA = default
            tritonconv.clear_caches()
            cudnn = graph_us(cudnn_call)
            row[pass_name] = {"cudnn_us": cudnn, "tma_us": timed[True][0],
                              "pointer_us": timed[False][0], "tma_rel_err": timed[True][1],
                              "pointer_rel_err": timed[False][1]}  # fmt: skip
            print(f"{name} {pass_name}: cuDNN {cudnn:.1f}  TMA {timed[True][0]:.1f} "
                  f"({cudnn / timed[True][0]:.2f}x, rel err {timed[True][1]:.1e})  pointer "
                  f"{timed[False][0]:.1f} ({cudnn / timed[False][0]:.2f}x, rel err "
                  f"{timed[False][1]:.1e})", flush=True)  # fmt: skip
        rows.append(row)
    if path:
        with open(path, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                       "triton": triton.__version__, "rows": rows}, f, indent=1)  # fmt: skip


def ab(path: str | None) -> None:
    """Why the library's window kernel can be slower than the probe's box kernel on the same
    tiles (session 36: UNet's 1024-channel 3x3 at 16x16 forward 63.7 against 52.4 µs): the
    probe's kernel, the library's call, and the library's kernel launched as plain
    ``kernel[grid](...)`` with the launcher's arguments, forward, kernel µs; and the library's
    call on 5-D descriptors (``WINDOW_TMA_FOUR_D`` off: the rank before session 37)."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from probe_small_wave import graph_us

    import tritonconv
    from tritonconv.geometry import make_geometry
    from tritonconv.ops import implicit_gemm as ig

    sms = torch.cuda.get_device_properties(0).multi_processor_count
    rows = []
    for name in ("unet 3x3 1024@16 b8", "r50 3x3 256@14 b32", "r50 3x3 128@28 b128",
                 "unet 3x3 256->128@64 b8"):  # fmt: skip
        n, c_in, c_out, s, k, dil = LAYERS[name]
        pad = dil * (k - 1) // 2
        cl = torch.channels_last
        x = torch.randn(n, c_in, s, s, device="cuda", dtype=torch.bfloat16).to(memory_format=cl)
        w = (torch.randn(c_out, c_in, k, k, device="cuda", dtype=torch.bfloat16)
             / math.sqrt(c_in * k * k)).to(memory_format=cl)  # fmt: skip
        geometry = make_geometry((s, s), (k, k), (1, 1), (pad, pad), (pad, pad), (dil, dil))
        cfg = ig.window_tma_config(torch.bfloat16, n, c_in, c_out, geometry, 1, False, "cuda")
        th, tw, bn, bk, warps, stages, _ = cfg
        probe = graph_us(partial(launch_box, x, w, None, dil, False,
                                 (th, tw, bn, bk, warps, stages), sms, True))  # fmt: skip
        tritonconv.clear_caches()
        library = graph_us(partial(ig.conv_forward, x, w, None, geometry, 1))
        ig.WINDOW_TMA_FOUR_D = False  # the same call on 5-D descriptors (session 37's A/B)
        tritonconv.clear_caches()
        try:
            five_d = graph_us(partial(ig.conv_forward, x, w, None, geometry, 1))
        finally:
            ig.WINDOW_TMA_FOUR_D = True
            tritonconv.clear_caches()
        out = torch.empty(n, c_out, s, s, device="cuda", dtype=x.dtype, memory_format=cl)
        real = ig.launch
        ig.launch = lambda kernel, grid, *args, **meta: kernel[grid](*args, **meta)
        try:
            plain = graph_us(partial(ig._launch_window_tma, x, w, None, out, geometry, False, cfg))
        finally:
            ig.launch = real
        rows.append({"layer": name, "config": str(cfg), "probe_us": probe, "library_us": library,
                     "library_5d_us": five_d, "plain_launch_us": plain})  # fmt: skip
        print(f"{name} [{cfg}]: probe kernel {probe:.1f}  library {library:.1f} (5-D "
              f"descriptors {five_d:.1f})  library kernel plain launch {plain:.1f}",
              flush=True)  # fmt: skip
    if path:
        with open(path, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    args = sys.argv[1:]
    if "--check" in args:
        check()
    elif "--ab" in args:
        ab(args[args.index("--json") + 1] if "--json" in args else None)
    elif "--per-sm" in args:
        per_sm(args[args.index("--json") + 1] if "--json" in args else None)
    elif "--strided" in args:
        strided(args[args.index("--json") + 1] if "--json" in args else None)
    elif "--library" in args:
        dtype = getattr(torch, args[args.index("--dtype") + 1]) if "--dtype" in args else None
        library(args[args.index("--json") + 1] if "--json" in args else None,
                dtype or torch.bfloat16)  # fmt: skip
    elif "--sass-box" in args:
        sass_box()
    elif "--sass" in args:
        sass_counts()
    else:
        gpu(args[args.index("--json") + 1] if "--json" in args else None)
