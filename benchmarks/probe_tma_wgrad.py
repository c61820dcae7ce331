"""A stride-1 window's weight gradient with every tile moved by TMA: row boxes of dy and x.

Session 36 put the forward and input gradient of 16-bit stride-1 windows on TMA boxes
(``window_tma_kernel``), which left the weight gradient as the slowest pass of those layers
(UNet's 3x3 layers at batch 8 on an H200: forward and input gradient at 0.97-1.18x cuDNN, the
three passes together at 0.76-0.96x). Here ``dW[co, tap, ci] = sum over positions p of dy[p,
co] * x[p shifted by the tap, ci]`` is a GEMM per (co tile, ci tile, tap) reducing over the
positions, one *row box* of ``TW`` positions of one image row a step: ``dy``'s box ``[1, 1, 1,
TW, BLOCK_M]`` at the row, ``x``'s ``[1, 1, 1, TW, BLOCK_N]`` at the row shifted by the tap,
zero-filled outside the image (the padding, and the row's overhang past the width, which
``dy``'s own zero fill also cancels). A box one row high views as ``[TW, channels]`` without
moving (compiled for sm_90 here: neither operand leaves shared memory; a box two rows high as
wgmma's A operand goes through registers every step), so both operands feed the tensor cores
from shared memory. The positions split into fixed parts whose fp32 partials are summed in
split order (deterministic), as the library's weight gradient does.

    TRITON_INTERPRET=1 PYTHONPATH=src python benchmarks/probe_tma_wgrad.py --check  # CPU
    PYTHONPATH=src python benchmarks/probe_tma_wgrad.py [--json F]                 # GPU
    LAYERS=@14,@32 PYTHONPATH=src python benchmarks/probe_tma_wgrad.py  # names with these
    PYTHONPATH=src python benchmarks/probe_tma_wgrad.py --library [--json F]  # the library alone
    PYTHONPATH=src python benchmarks/probe_tma_wgrad.py --sass       # offline sm_90 loops

Session 37 put this kernel in the library (``wgrad_tma_kernel``, which the sweep now
launches with each configuration and split count); ``--library`` times the
library's weight gradient against cuDNN's on the same layers (no configuration sweep) and
checks it against float64.
"""

from __future__ import annotations

import json
import math
import os
import sys
from functools import partial

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from tritonconv.kernels.implicit_gemm import wgrad_tma_kernel
from tritonconv.ops.direct import dot_dtype


def wgrad(x, dy, kernel, pad, dil, cfg, splits):
    """dW (fp32, ``[C_out, C_in, *kernel]`` values in a channels-last layout) of a stride-1
    convolution of channels-last ``x`` (N, C, H, W) giving ``dy``, by the library's
    ``wgrad_tma_kernel`` (session 36's probe kernel, merged in session 37) with the given
    configuration and split count; ``cfg``: (TW, BLOCK_M, BLOCK_N, warps, stages[, rows])."""
    tw, bm, bn, warps, stages, rows = (*cfg, 1)[:6]
    n, c_in = x.shape[:2]
    c_out = dy.shape[1]
    oh, ow = dy.shape[2:]
    taps = kernel[0] * kernel[1]
    x5 = x.permute(0, 2, 3, 1).unsqueeze(1)
    dy5 = dy.permute(0, 2, 3, 1).unsqueeze(1)
    xd = TensorDescriptor(x5, list(x5.shape), list(x5.stride()), [1, 1, 1, tw, bn])
    dyd = TensorDescriptor(dy5, list(dy5.shape), list(dy5.stride()), [1, 1, 1, tw, bm])
    partial_sums = torch.empty(splits, c_out, taps, c_in, device=x.device, dtype=torch.float32)
    od = TensorDescriptor(partial_sums, list(partial_sums.shape), list(partial_sums.stride()),
                          [1, bm, 1, bn])  # fmt: skip
    steps = n * triton.cdiv(oh, rows) * triton.cdiv(ow, tw)
    per_split = triton.cdiv(steps, splits)
    grid = (triton.cdiv(c_out, bm) * triton.cdiv(c_in, bn) * taps, splits)
    wgrad_tma_kernel[grid](
        xd, dyd, od, n, 1, oh, ow, c_in, c_out, kernel[0], kernel[1], 0, pad, pad, 1, dil, dil,
        per_split, DOT_DTYPE=dot_dtype(x.dtype), TW=tw, ROWS=rows, BLOCK_M=bm, BLOCK_N=bn,
        FLAT_DY=False, MASK_X=False, num_warps=warps, num_stages=stages,
    )  # fmt: skip
    dw = partial_sums.view(splits, c_out, *kernel, c_in).sum(0)  # (in split order)
    return dw.permute(0, 3, 1, 2)


def reference(x, dy, kernel, pad, dil):
    shape = (dy.shape[1], x.shape[1], *kernel)
    return torch.nn.grad.conv2d_weight(x.double(), shape, dy.double(), padding=pad, dilation=dil)


def check() -> None:
    os.environ.setdefault("TRITON_INTERPRET", "1")
    torch.manual_seed(0)
    cl = torch.channels_last
    for n, c_in, c_out, h, w, k, pad, dil, splits in [
        (2, 32, 16, 5, 13, 3, 1, 1, 3), (1, 16, 32, 7, 6, 3, 2, 2, 2), (2, 16, 16, 4, 9, 5, 2, 1, 1)
    ]:  # fmt: skip
        x = torch.randn(n, c_in, h, w, dtype=torch.float16).to(memory_format=cl)
        oh, ow = h + 2 * pad - dil * (k - 1), w + 2 * pad - dil * (k - 1)
        dy = torch.randn(n, c_out, oh, ow, dtype=torch.float16).to(memory_format=cl)
        got = wgrad(x, dy, (k, k), pad, dil, (8, 16, 16, 4, 1, 1 + splits % 2), splits)
        want = reference(x, dy, (k, k), pad, dil)
        err = ((got.double() - want).norm() / want.norm()).item()
        print(f"n{n} {c_in}->{c_out} {h}x{w} k{k} pad{pad} dil{dil} splits {splits}: rel {err:.1e}")
        assert err < 1e-3


def sass_loops() -> None:
    """``wgrad_tma_kernel``'s loop compiled for sm_90 here (Triton's own toolchain, no GPU),
    one to four row boxes a step and the flat form: whether both operands stay in shared
    memory (no LDS, STS or LDSM in the loop) and how many instructions a step takes."""
    from triton.runtime.jit import mangle_type

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from ptx_loop import mma_loop

    for tw, rows, bm, bn, warps, stages, flat, mask in [
        (64, 1, 128, 128, 8, 3, False, False), (32, 1, 128, 128, 8, 3, False, False),
        (32, 2, 128, 128, 8, 3, False, False), (16, 4, 128, 128, 8, 3, False, False),
        (16, 2, 64, 64, 4, 4, False, False), (32, 2, 128, 128, 8, 3, True, False),
        (64, 1, 64, 64, 4, 4, False, False), (64, 1, 64, 64, 4, 4, False, True),
        (32, 2, 128, 128, 8, 3, False, True),
    ]:  # fmt: skip
        t = torch.empty(2, 1, 16, 16, 128, dtype=torch.bfloat16)
        shape, strides = list(t.shape), list(t.stride())
        xd = TensorDescriptor(t, shape, strides, [1, 1, rows if flat else 1, tw, bn])
        dyd = TensorDescriptor(t, shape, strides, [1, 1, 1, tw * (rows if flat else 1), bm])
        o = torch.empty(2, 128, 9, 128, dtype=torch.float32)
        od = TensorDescriptor(o, list(o.shape), list(o.stride()), [1, bm, 1, bn])
        signature = {"x": mangle_type(xd), "dy": mangle_type(dyd), "out": mangle_type(od)}
        for name in ["N", "D", "H", "W", "C_in", "C_out", "KH", "KW", "pad_d", "pad_h", "pad_w",
                     "dil_d", "dil_h", "dil_w", "per_split"]:  # fmt: skip
            signature[name] = "i32"
        constexprs = {"DOT_DTYPE": tl.bfloat16, "TW": tw, "ROWS": rows, "BLOCK_M": bm,
                      "BLOCK_N": bn, "FLAT_DY": flat, "MASK_X": mask}  # fmt: skip
        keys = ("HGMMA", "UTMALDG", "LDS", "STS", "LDSM", "BAR", "SYNCS", "WARPGROUP")
        print(f"TW {tw} x {rows} rows{' flat dy' if flat else ''}{' MASK_X' if mask else ''}, "
              f"{bm}x{bn} w{warps} "
              f"s{stages} " + mma_loop(wgrad_tma_kernel, signature, constexprs, warps, stages,
                                       keys))  # fmt: skip


# name: (batch, C_in, C_out, H=W, kernel, dilation)
LAYERS = {
    "r50 3x3 64@56 b128": (128, 64, 64, 56, 3, 1),
    "r50 3x3 128@28 b128": (128, 128, 128, 28, 3, 1),
    "r50 3x3 128@28 b32": (32, 128, 128, 28, 3, 1),
    "r50 3x3 256@14 b128": (128, 256, 256, 14, 3, 1),
    "r50 3x3 256@14 b32": (32, 256, 256, 14, 3, 1),
    "r50 3x3 512@7 b128": (128, 512, 512, 7, 3, 1),
    "unet 3x3 64@256 b8": (8, 64, 64, 256, 3, 1),
    "unet 3x3 128->64@256 b8": (8, 128, 64, 256, 3, 1),
    "unet 3x3 128->64@128 b8": (8, 128, 64, 128, 3, 1),
    "unet 3x3 256->128@64 b8": (8, 256, 128, 64, 3, 1),
    "unet 3x3 512->256@64 b8": (8, 512, 256, 64, 3, 1),
    "unet 3x3 512@32 b8": (8, 512, 512, 32, 3, 1),
    "unet 3x3 512->1024@16 b8": (8, 512, 1024, 16, 3, 1),
    "unet 3x3 1024@16 b8": (8, 1024, 1024, 16, 3, 1),
    "dil2 3x3 256@64 b16": (16, 256, 256, 64, 3, 2),
    # 1x1 layers (session 37, --library only: the positions as one flat row)
    "r50 1x1 64->256@56 b128": (128, 64, 256, 56, 1, 1),
    "r50 1x1 128->512@28 b128": (128, 128, 512, 28, 1, 1),
    "r50 1x1 256->1024@14 b128": (128, 256, 1024, 14, 1, 1),
    "r50 1x1 1024->256@14 b128": (128, 1024, 256, 14, 1, 1),
    "r50 1x1 512->2048@7 b128": (128, 512, 2048, 7, 1, 1),
    "r50 1x1 2048->512@7 b128": (128, 2048, 512, 7, 1, 1),
}


def configs(c_in: int, c_out: int, width: int, tiles: int, sms: int) -> list:
    """(TW, BLOCK_M, BLOCK_N, warps, stages, rows), splits: row widths that waste little of a
    row, one row a step or as many as make 64 positions (rows of 32 or fewer), 128- or
    64-wide channel tiles, splits filling one or two waves."""
    out = []
    widths = {max(16, min(128, triton.next_power_of_2(width)))} | ({64} if width > 32 else set())
    for tw in sorted(widths):
        for rows in sorted({1, max(1, 64 // tw)}):
            for bm, bn, warps in [(128, 128, 8), (64, 128, 4), (128, 64, 4), (64, 64, 4)]:
                if bm > max(64, c_out) or bn > max(64, c_in) or c_in % bn:
                    continue
                n_tiles = triton.cdiv(c_out, bm) * triton.cdiv(c_in, bn) * tiles
                for waves in (1, 2):
                    splits = max(1, waves * sms // n_tiles)
                    stages = 4 if warps == 4 else 3
                    out.append(((tw, bm, bn, warps, stages, rows), splits))
    return out


def gpu(path: str | None, library_only: bool = False) -> None:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from probe_small_wave import graph_us

    import tritonconv
    from tritonconv.geometry import make_geometry
    from tritonconv.ops import implicit_gemm as ig

    torch.backends.cudnn.benchmark = True
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    results = []
    only = os.environ.get("LAYERS")  # (substrings of the layers' names, comma-separated)
    for name, (n, c_in, c_out, s, k, dil) in LAYERS.items():
        if only and not any(part in name for part in only.split(",")):
            continue
        pad = dil * (k - 1) // 2
        cl = torch.channels_last
        x = torch.randn(n, c_in, s, s, device="cuda", dtype=torch.bfloat16).to(memory_format=cl)
        w = torch.randn(c_out, c_in, k, k, device="cuda", dtype=torch.bfloat16).to(memory_format=cl)
        dy = torch.randn(n, c_out, s, s, device="cuda", dtype=torch.bfloat16).to(memory_format=cl)
        geometry = make_geometry((s, s), (k, k), (1, 1), (pad, pad), (pad, pad), (dil, dil))
        flops = 2 * n * s * s * c_in * c_out * k * k
        cudnn = graph_us(partial(torch.ops.aten.convolution_backward, dy, x, w, None, [1, 1],
                                 [pad, pad], [dil, dil], False, [0, 0], 1, (False, True, False)))  # fmt: skip
        ours = graph_us(partial(ig.conv_grad_weight, dy, x, w.shape, geometry, 1,
                                weight_strides=w.stride()))  # fmt: skip
        want = reference(x, dy, (k, k), pad, dil)
        if library_only:
            got = ig.conv_grad_weight(dy, x, w.shape, geometry, 1, weight_strides=w.stride())
            err = ((got.double() - want).norm() / want.norm()).item()
            tiles = ig.wgrad_tma_config(x.dtype, n, c_in, c_out, geometry, 1, x.device)
            call = partial(ig.conv_grad_weight, dy, x, w.shape, geometry, 1,
                           weight_strides=w.stride())  # fmt: skip

            def with_knob(name, value, call=call, want=want):
                """The call's µs with ``ig.<name>`` at ``value`` (checked first)."""
                default = getattr(ig, name)
                setattr(ig, name, value)
                tritonconv.clear_caches()
                try:
                    got1 = call()
                    assert ((got1.double() - want).norm() / want.norm()).item() < 1e-2
                    return graph_us(call)
                finally:
                    setattr(ig, name, default)

            # the same tiles one row box a step; dy's rows as separate boxes (or none)
            multi = tiles is not None and tiles.rows > 1
            one_row = with_knob("WGRAD_TMA_STEP_POSITIONS", 1) if multi else None
            flat = tiles is not None and tiles.flat_dy
            no_flat = with_knob("WGRAD_TMA_FLAT_DY", False) if flat else None
            # x's positions past dy masked (session 39), where the rule's boxes overhang
            masked = with_knob("WGRAD_TMA_MASK_X", True) if tiles is not None else None
            rule = ig.wgrad_tma_config
            ig.wgrad_tma_config = lambda *args: None  # the pointer kernel, same call
            tritonconv.clear_caches()
            try:
                pointer = graph_us(call)
            finally:
                ig.wgrad_tma_config = rule
                tritonconv.clear_caches()
            results.append({"layer": name, "cudnn_us": cudnn, "ours_us": ours, "rel_err": err,
                            "pointer_us": pointer, "one_row_us": one_row,
                            "flat_dy_off_us": no_flat, "mask_x_us": masked,
                            "tiles": str(tiles)})  # fmt: skip
            shown = f", one row a step {one_row:.1f}" if one_row else ""
            shown += f", flat dy off {no_flat:.1f}" if no_flat else ""
            shown += f", MASK_X on {masked:.1f}" if masked else ""
            print(f"{name} dW: cuDNN {cudnn:.1f}, library {ours:.1f} ({cudnn / ours:.2f}x), "
                  f"pointer kernel {pointer:.1f} ({cudnn / pointer:.2f}x){shown}, rel err "
                  f"{err:.1e}, TMA tiles {tiles}", flush=True)  # fmt: skip
            continue
        if k == 1:  # 1x1 layers: the library's tiles at fixed split counts
            rule, timed = ig.wgrad_tma_splits, []
            try:
                for splits in (1, 2, 3, 4, 6, 8, 12, 16, 24, 32):
                    ig.wgrad_tma_splits = lambda *args, n=splits: n
                    tritonconv.clear_caches()
                    timed.append((graph_us(partial(ig.conv_grad_weight, dy, x, w.shape, geometry,
                                                   1, weight_strides=w.stride())), splits))  # fmt: skip
            finally:
                ig.wgrad_tma_splits = rule
                tritonconv.clear_caches()
            results.append({"layer": name, "cudnn_us": cudnn, "ours_us": ours,
                            "splits": {n: us for us, n in timed}})  # fmt: skip
            print(f"{name} dW: cuDNN {cudnn:.1f}, library {ours:.1f}; by splits: "
                  + ", ".join(f"{n}: {us:.1f}" for us, n in timed), flush=True)  # fmt: skip
            continue
        timed = []
        for cfg, splits in configs(c_in, c_out, s, k * k, sms):
            try:
                got = wgrad(x, dy, (k, k), pad, dil, cfg, splits)
                err = ((got.double() - want).norm() / want.norm()).item()
                us = graph_us(partial(wgrad, x, dy, (k, k), pad, dil, cfg, splits))
            except Exception as error:  # a configuration that does not fit
                print(f"  {name} {cfg} x{splits}: {type(error).__name__} {error}"[:200])
                continue
            timed.append((us, f"{cfg} x{splits}", err))
        timed.sort()
        best = timed[0]
        results.append({"layer": name, "cudnn_us": cudnn, "ours_us": ours,
                        "tma": {lbl: [us, err] for us, lbl, err in timed}})  # fmt: skip
        print(f"{name} dW: cuDNN {cudnn:.1f} ({flops / cudnn / 1e6:.0f} TFLOP/s), library "
              f"{ours:.1f} ({cudnn / ours:.2f}x), TMA rows best {best[1]} {best[0]:.1f} "
              f"({cudnn / best[0]:.2f}x, rel err {max(e for _, _, e in timed):.1e} worst); "
              + ", ".join(f"{lbl} {us:.1f}" for us, lbl, _ in timed[1:4]), flush=True)  # fmt: skip
    if library_only:
        ratios = [r["cudnn_us"] / r["ours_us"] for r in results]
        print(f"geomean library/cuDNN speed {math.prod(ratios) ** (1 / len(ratios)):.2f}x")
    if path:
        with open(path, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                       "triton": triton.__version__, "rows": results}, f, indent=1)  # fmt: skip


if __name__ == "__main__":
    args = sys.argv[1:]
    if "--check" in args:
        check()
    elif "--sass" in args:
        sass_loops()
    else:
        gpu(args[args.index("--json") + 1] if "--json" in args else None, "--library" in args)
