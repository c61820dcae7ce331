"""Compile every kernel configuration a GPU would launch for a workload, for Hopper, without a GPU.

Device time is scarce; a kernel that fails to *compile* for sm_90 (a construct the interpreter
accepts and the compiler does not, a dtype mismatch the interpreter's NumPy casts hide) should
not cost a GPU call to find. This runs the random-geometry fuzz (GPU-sized draws) and a few
calls per op on CPU tensors with the launchers making their GPU choices (tiles, warps, stages;
an H100's 132 SMs) and no kernel executed, records each launch's kernel, argument types
(pointer dtypes, integers equal to 1 specialised as Triton's JIT does) and constexprs, adds the
implicit GEMM's benchmark-mode tile configurations, then compiles each distinct configuration
with ``triton.compile`` for ``GPUTarget("cuda", 90, 128)`` down to a cubin in a process with the
interpreter off. It does not prove a kernel right on the GPU (only the GPU
script's tests and fuzz do); it proves it compiles, with this machine's Triton.

With ``--index64`` the workload runs as if every tensor were past 2**31 elements (the limit
the launchers compare against lowered to 16), so each kernel's 64-bit index variant
(``INDEX_64``), which only tensors of that size reach on a GPU, compiles too.

With ``--tma`` the workload is a few 16-bit channels-last training steps on a GPU with TMA, and
only the TMA descriptor kernels' configurations compile: on CPU tensors the launchers never
reach them (session 36's first window kernel used a starred list, which the interpreter takes
and the compiler refuses).

With ``--access`` it compiles nothing and checks instead, for each configuration, that the
access analysis ``tritonconv.access_cache`` memoises for torch.compile is the one PyTorch's own
analysis gives for another call the memo key lumps with it (integers of one specialisation
class: 1000 and 1001, 1024 and 1040; other fake tensors of the same dtypes).

    .venv/bin/python scripts/compile_check.py [--draws 120] [--workers 2] [--access]
        [--precision tf32x3_rn bf16x6] [--index64] [--tma]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import io
import json
import os
import subprocess
import sys
import tempfile
import time

# Options of a launch that are not constexprs of the kernel.
LAUNCH_OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg")


def _describe(value):
    """The Triton signature type of one runtime argument (or ``("constexpr", v)``)."""
    import torch

    if isinstance(value, torch.Tensor):
        return "*" + _ty(value.dtype)
    if value is None:
        return ("constexpr", None)
    if isinstance(value, bool):
        return "i1"
    if isinstance(value, int):
        if value == 1:
            return ("one", 1)
        return "i32" if -(2**31) <= value < 2**31 else "i64"
    if isinstance(value, float):
        return "fp32"
    if type(value).__name__ == "TensorDescriptor":  # e.g. "tensordesc<bf16[128, 64]>"
        from triton.runtime.jit import mangle_type

        return mangle_type(value)
    raise TypeError(f"unexpected kernel argument {type(value).__name__}")


def _ty(dtype) -> str:
    import torch

    return {
        torch.float16: "fp16",
        torch.bfloat16: "bf16",
        torch.float32: "fp32",
        torch.float64: "fp64",
        torch.int8: "i8",
        torch.uint8: "u8",
        torch.int16: "i16",
        torch.int32: "i32",
        torch.int64: "i64",
        torch.bool: "i1",
    }[dtype]


def _meta_value(v):
    """A constexpr as JSON (Triton dtypes by name)."""
    import triton.language as tl

    if isinstance(v, tl.dtype):
        return {"dtype": str(v)}
    return v


# The launchers' GPU choices depend on the SM count: an H100's.
SMS = 132


def _gpu_launchers(index64: bool = False, tma: bool = False) -> list:
    """Make the launchers choose what they choose on a GPU (tiles, warps, stages, splits)
    while the kernels stay behind the interpreter's launch hook (with ``index64``, their
    64-bit index variants: the 2**31 limit lowered to 16; with ``tma``, on a GPU with TMA,
    whose descriptor kernels CPU tensors otherwise never reach); returns the undo list."""
    from tritonconv.ops import (
        causal,
        common,
        conv_gemm,
        crop,
        depthwise,
        direct,
        im2col,
        implicit_gemm,
    )

    changes = [
        (m, "INTERPRETER", False) for m in (causal, depthwise, direct, im2col, implicit_gemm)
    ]
    changes += [(crop, "TILE", 4096)]
    if index64:  # (im2col imports the limit by name)
        changes += [(common, "INDEX32_LIMIT", 16), (im2col, "INDEX32_LIMIT", 16)]
    if tma:
        changes += [(implicit_gemm, "_has_tma", lambda device: True)]
    changes += [(m, "multiprocessor_count", lambda device: SMS) for m in
                (common, causal, conv_gemm, depthwise, direct, implicit_gemm, im2col)
                if hasattr(m, "multiprocessor_count")]  # fmt: skip
    undo = [(m, name, getattr(m, name)) for m, name, _ in changes]
    for m, name, value in changes:
        setattr(m, name, value)
    return undo


def _with_tuning_tiles(entries: list[dict]) -> list[dict]:
    """Each tensor-core implicit-GEMM forward entry again with every tile configuration benchmark
    mode may time for its dtype (``implicit_gemm.TUNING_CONFIGS``), with the second
    accumulator and the transposed product as the launcher would set them for those tiles."""
    import torch

    from tritonconv.ops import implicit_gemm

    more = []
    for e in entries:
        if e["name"] != "conv_igemm_kernel" or not e["meta"].get("USE_DOT"):
            continue
        family = "fp32" if e["args"][0] == "*fp32" else "16-bit"
        dtype = torch.float32 if family == "fp32" else torch.bfloat16
        for c in implicit_gemm.TUNING_CONFIGS[family]:
            tiles = dict(BLOCK_M=c.block_m, BLOCK_N=c.block_n, BLOCK_K=c.block_k,
                         BLOCK_N2=c.block_n2, SWAP=implicit_gemm.swap_rule(dtype, c))  # fmt: skip
            more.append(dict(e, meta=dict(e["meta"], **tiles, num_warps=c.num_warps,
                                          num_stages=c.num_stages)))  # fmt: skip
    unique = {json.dumps(e, sort_keys=True): e for e in entries + more}
    return list(unique.values())


def record(draws: int, seed: int, index64: bool = False, tma: bool = False) -> list[dict]:
    """Run the workload with the launchers making their GPU choices and no kernel executed
    (the recording hook stands in for the interpreter: results are garbage, the launches are
    what a GPU would get); the distinct launch configurations (with ``index64``, those of
    the 64-bit index variants only; with ``tma``, those of the TMA kernels, from
    :func:`_tma_workload`)."""
    os.environ.setdefault("TRITONCONV_CPU_KERNELS", "1")
    import torch

    import tritonconv as tc
    from tritonconv import fuzz, launch, precision

    assert tc.INTERPRETER, "record runs on CPU tensors, with the interpreter's launch hook"
    seen: dict[str, dict] = {}
    real = launch._interpret

    def recording(kernel, grid, args, meta):
        fn = getattr(kernel, "fn", kernel)
        entry = {
            "module": fn.__module__,
            "name": fn.__name__,
            "args": [_describe(a) for a in args],
            "meta": {k: _meta_value(v) for k, v in meta.items()},
        }
        if entry["meta"].get("DOT_PRECISION") == "tf32x3":
            # the interpreter runs tf32x3_rn as tf32x3 (precision.dot_precision); the GPU not
            entry["meta"]["DOT_PRECISION"] = precision.TF32_OFF_PRECISION
        seen.setdefault(json.dumps(entry, sort_keys=True), entry)

    launch._interpret = recording
    undo = _gpu_launchers(index64, tma)
    try:
        if tma:
            _tma_workload()
            draws = 0
        with contextlib.redirect_stdout(io.StringIO()):  # the fuzz's mismatches: garbage in
            fuzz.run(draws=draws, seed=seed, max_elements=60_000, max_macs=3_000_000)
        x = torch.randn(2, 3, 5, 6, 7)
        for dtype in (torch.float32, torch.int32, torch.bfloat16):
            v = x.to(dtype)
            cols = tc.unfold(v, (2, 3, 2), padding=1)
            tc.fold(cols, (5, 6, 7), (2, 3, 2), padding=1)
            cols = tc.unfold(v[:, :, 0], 3, padding=1, stride=2)
            tc.fold(cols, (6, 7), 3, padding=1, stride=2)
            t = v.detach().requires_grad_(dtype.is_floating_point)
            out = tc.crop(t, v[:, :, 1:, 2:5], axis=2, offset=(1, 1, 0))
            if dtype.is_floating_point:
                out.sum().backward()
        for dtype in (torch.bfloat16, torch.float32):  # the depthwise band kernels (7+ wide)
            xb = torch.randn(1, 8, 12, 12, dtype=dtype, requires_grad=True)
            wb = torch.randn(8, 1, 7, 7, dtype=dtype, requires_grad=True)
            tc.conv2d(xb, wb, padding=3, groups=8).sum().backward()
            # and the FMA kernels of kernels under 9 taps, both layouts (a stride of 1 is
            # specialised into a constant: session 35's GPU-only compile error)
            for last in (False, True):
                xs = torch.randn(2, 8, 10, 9, dtype=dtype)
                if last:
                    xs = xs.to(memory_format=torch.channels_last)
                ws = torch.randn(8, 1, 3, 2, dtype=dtype, requires_grad=True)
                out = tc.conv2d(xs.requires_grad_(), ws, padding=(2, 1), dilation=(2, 3), groups=8)
                out.sum().backward()
        # a kernel wider than the window kernels take: the band kernels (floats, forward and
        # weight gradient) and the general FMA kernel (integers), so that every depthwise kernel
        # is reached (``--index64`` missed these three in session 35's review)
        for dtype in (torch.float32, torch.int32):
            xw = torch.randn(1, 4, 3, 40).to(dtype)
            ww = torch.randn(4, 1, 1, 33).to(dtype)
            if dtype.is_floating_point:
                xw.requires_grad_()
                ww.requires_grad_()
            out = tc.conv2d(xw, ww, padding=(0, 16), groups=4, algo="depthwise")
            if dtype.is_floating_point:
                out.sum().backward()
    finally:
        launch._interpret = real
        for m, name, value in undo:
            setattr(m, name, value)
        tc.clear_caches()
    entries = list(seen.values())
    if tma:
        return [e for e in entries if any(str(a).startswith("tensordesc") for a in e["args"])]
    if index64:
        return [e for e in entries if e["meta"].get("INDEX_64")]
    return _with_tuning_tiles(entries)


def _tma_workload() -> None:
    """Training steps of the layers the TMA kernels take (16-bit, channels-last): stride-1
    windows in 1-3 dimensions with and without bias (``window_tma_kernel``: its 64- and
    128-channel tiles, 128- and 256-position rectangles, a stride-1 transposed convolution's
    input-gradient form with bias), their weight gradients (``wgrad_tma_kernel``: 128 x 128
    and 64 x 64 channel tiles, rows of 16, 32 and 64 positions, two and four rows a step,
    dy as one flat box, 1-D), 1x1 layers (128 x 256 tiles too) and a kernel-equals-stride
    transposed convolution (``pointwise_tma_kernel``, plain and scattered); a strided 1x1
    layer (both kernels over x's strided view); the weight gradient with ``MASK_X``; fp32
    with TF32 allowed (the window kernel and the 1x1 GEMM)."""
    import torch

    import tritonconv as tc

    last = {3: torch.contiguous_format, 4: torch.channels_last, 5: torch.channels_last_3d}
    for dtype in (torch.bfloat16, torch.float16):
        for conv, shape, weight, kw in [
            (tc.conv2d, (2, 64, 16, 16), (64, 64, 3, 3), {"padding": 1}),
            (tc.conv2d, (4, 128, 28, 28), (128, 128, 3, 3), {"padding": 2, "dilation": 2}),
            (tc.conv1d, (2, 96, 256), (64, 96, 5), {"padding": 2}),
            (tc.conv3d, (1, 64, 4, 16, 16), (64, 64, 3, 3, 3), {"padding": 1}),
            (tc.conv2d, (32, 128, 28, 28), (128, 128, 3, 3), {"padding": 1}),  # 256 positions
            (tc.conv_transpose2d, (2, 64, 16, 16), (64, 64, 3, 3), {"padding": 1}),  # dx, bias
            (tc.conv2d, (2, 64, 16, 16), (256, 64, 1, 1), {}),
            (tc.conv_transpose2d, (2, 64, 8, 8), (64, 64, 2, 2), {"stride": 2}),
            (tc.conv2d, (2, 64, 32, 32), (64, 64, 3, 3), {"padding": 1}),  # 64x64 dW tiles
            (tc.conv2d, (2, 128, 14, 14), (128, 128, 3, 3), {"padding": 1}),  # 14-wide rows
            (tc.conv2d, (1, 256, 112, 112), (256, 256, 1, 1), {}),  # 128 x 256 1x1 tiles
            (tc.conv2d, (1, 64, 64, 64), (128, 64, 1, 1), {"stride": 2}),  # x[..., ::2, ::2]
        ]:  # fmt: skip
            x = torch.randn(shape, dtype=dtype)
            x = (x.transpose(1, 2).contiguous().transpose(1, 2) if x.dim() == 3
                 else x.contiguous(memory_format=last[x.dim()]))  # fmt: skip
            w = torch.randn(weight, dtype=dtype)
            if w.dim() > 3:
                w = w.contiguous(memory_format=last[w.dim()])
            b = torch.randn(w.shape[1] if conv is tc.conv_transpose2d else w.shape[0], dtype=dtype)
            y = conv(x.requires_grad_(), w.requires_grad_(), b, algo="implicit_gemm", **kw)
            y.backward(torch.zeros_like(y))
    from tritonconv.ops import implicit_gemm

    # a 3-tap window into 144 channels (r2plus1d's temporal 3x1x1 input gradient): 64-channel
    # tiles, the last a quarter full
    x = torch.randn(1, 64, 4, 16, 16, dtype=torch.bfloat16).contiguous(memory_format=last[5])
    w = torch.randn(64, 144, 3, 1, 1, dtype=torch.bfloat16).contiguous(memory_format=last[5])
    tc.conv_transpose3d(x, w, algo="implicit_gemm", padding=(1, 0, 0))
    # the weight gradient with x's overhanging positions masked (``WGRAD_TMA_MASK_X``, off
    # by default until measured): 32- and 64-wide row boxes over 28- and 56-wide rows

    implicit_gemm.WGRAD_TMA_MASK_X = True
    try:
        for shape, weight in [((2, 128, 28, 28), (128, 128, 3, 3)),
                              ((2, 64, 56, 56), (64, 64, 3, 3))]:  # fmt: skip
            x = torch.randn(shape, dtype=torch.bfloat16).contiguous(memory_format=last[4])
            w = torch.randn(weight, dtype=torch.bfloat16).contiguous(memory_format=last[4])
            y = tc.conv2d(x, w.requires_grad_(), algo="implicit_gemm", padding=1)
            y.backward(torch.zeros_like(y))
    finally:
        implicit_gemm.WGRAD_TMA_MASK_X = False
    # fp32 with TF32 allowed (PyTorch's default): the window kernel's 64- and 128-channel
    # tiles, forward and input gradient (from the [C_in, taps, C_out] weight copy), and the
    # 1x1 GEMM
    old = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = True
    try:
        for shape, weight, kw in [((2, 64, 16, 16), (64, 64, 3, 3), {"padding": 1}),
                                  ((2, 128, 16, 16), (128, 128, 3, 3), {"padding": 1}),
                                  ((2, 64, 16, 16), (128, 64, 1, 1), {})]:  # fmt: skip
            x = torch.randn(shape).contiguous(memory_format=torch.channels_last)
            w = torch.randn(weight).contiguous(memory_format=torch.channels_last)
            y = tc.conv2d(x.requires_grad_(), w, algo="implicit_gemm", **kw)
            y.backward(torch.zeros_like(y))
    finally:
        torch.backends.cudnn.allow_tf32 = old


def _meta(entry: dict) -> dict:
    """A recorded launch's constexprs and options, Triton dtypes back from their names."""
    import triton.language as tl

    dtypes = {str(getattr(tl, n)): getattr(tl, n) for n in ("float16", "bfloat16", "float32",
              "float64", "int8", "uint8", "int16", "int32", "int64", "int1")}  # fmt: skip
    return {k: (dtypes[v["dtype"]] if isinstance(v, dict) else v) for k, v in entry["meta"].items()}


def _source(entry: dict):
    """(kernel, signature, constexprs, options) of a recorded launch, as Triton's JIT would
    specialise it (integers equal to 1 become constexprs unless the kernel opts out)."""
    import importlib

    kernel = getattr(importlib.import_module(entry["module"]), entry["name"])
    names = kernel.arg_names
    constexpr_params = {p.name for p in kernel.params if p.is_constexpr}
    unspecialised = {p.name for p in kernel.params if p.do_not_specialize}
    meta = _meta(entry)
    options = {k: meta.pop(k) for k in LAUNCH_OPTIONS if k in meta}
    signature, constexprs = {}, {}
    runtime = [n for n in names if n not in constexpr_params]
    for name, kind in zip(runtime, entry["args"], strict=True):
        if isinstance(kind, list) and kind[0] == "constexpr":
            signature[name], constexprs[name] = "constexpr", kind[1]
        elif isinstance(kind, list) and kind[0] == "one":
            if name in unspecialised:
                signature[name] = "i32"
            else:
                signature[name], constexprs[name] = "constexpr", 1
        else:
            signature[name] = kind
    for name in names:
        if name in constexpr_params:
            signature[name] = "constexpr"
            constexprs[name] = meta.get(name, kernel.params[names.index(name)].default)
    return kernel, signature, constexprs, options


def _compile_one(entry: dict, arch: int) -> str | None:
    """None if ``entry`` compiles to a cubin for sm_``arch``, else the error."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    kernel, signature, constexprs, options = _source(entry)
    try:
        compiled = triton.compile(
            ASTSource(kernel, signature, constexprs),
            target=GPUTarget("cuda", arch, 128),
            options=options,
        )
        if "cubin" not in compiled.asm:
            return "no cubin produced"
    except Exception as e:  # the finding itself
        return f"{type(e).__name__}: {str(e).strip().splitlines()[-1][:400]}"
    shared = getattr(compiled.metadata, "shared", 0)
    if arch == 90 and shared > SM90_SHARED_LIMIT:  # (a launch would fail: out of resources)
        return f"needs {shared} bytes of shared memory, more than sm_90's {SM90_SHARED_LIMIT}"
    return None


# The most shared memory one program may take on sm_90 (227 KB).
SM90_SHARED_LIMIT = 232448


def _distinct(entries: list[dict]) -> list[dict]:
    """One entry per distinct compilation (recorded launches that specialise alike)."""
    unique = {}
    for e in entries:
        _, signature, constexprs, options = _source(e)
        key = repr((e["module"], e["name"], signature, sorted(constexprs.items(), key=str),
                    sorted(options.items())))  # fmt: skip
        unique.setdefault(key, e)
    return list(unique.values())


def _compile_worker(path: str, arch: int, index: int, workers: int) -> list[tuple[str, str | None]]:
    with open(path) as f:
        entries = _distinct(json.load(f))[index::workers]
    return [(f"{e['name']} {e['meta']}", _compile_one(e, arch)) for e in entries]


def _fake_args(entry: dict, integer: int) -> dict:
    """A recorded launch's arguments as torch.compile's tracing hands them to PyTorch's
    access analysis: fake tensors of the recorded dtypes, ``integer`` for every integer not
    recorded as 1, the constexprs and options as launched."""
    import importlib

    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    kernel = getattr(importlib.import_module(entry["module"]), entry["name"])
    dtypes = {"*" + _ty(d): d for d in (torch.float16, torch.bfloat16, torch.float32,
              torch.float64, torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64)}  # fmt: skip
    values = []
    with FakeTensorMode():
        for kind in entry["args"]:
            if isinstance(kind, list):  # ("constexpr", None) or ("one", 1)
                values.append(kind[1])
            elif kind.startswith("*"):
                values.append(torch.empty(4, dtype=dtypes[kind]))
            elif kind == "i1":
                values.append(True)
            else:
                values.append(integer if kind == "i32" else integer + 2**40)
    kwargs = dict(zip(kernel.arg_names, values, strict=False))
    return kernel, {**kwargs, **_meta(entry)}


def _access_worker(path: str, arch: int, index: int, workers: int) -> list[tuple[str, str | None]]:
    """For each recorded launch, and integers of two specialisation classes: the memoised
    access analysis (tritonconv.access_cache) of one call against PyTorch's own analysis of
    another call the memo key lumps with it; the difference, if any."""
    import triton
    from torch._higher_order_ops import triton_kernel_wrap as wrap
    from triton.backends.compiler import GPUTarget

    from tritonconv import access_cache

    class Target:
        def get_current_target(self):
            return GPUTarget("cuda", arch, 128)

    triton.runtime.driver.set_active(Target())
    uncached = wrap.identify_accessed_tensors
    assert access_cache.install()

    def names(result):
        rw = result.read_writes
        return sorted(d.name for d in rw.reads), sorted(d.name for d in rw.writes)

    with open(path) as f:
        entries = _distinct(json.load(f))[index::workers]
    results = []
    for e in entries:
        error = None
        for first, second in ((1000, 1001), (1024, 1040)):  # one class each
            kernel, kwargs = _fake_args(e, first)
            _, sibling = _fake_args(e, second)
            memo = access_cache.access_key(kernel, kwargs, {})
            if memo is None or memo != access_cache.access_key(kernel, sibling, {}):
                error = "no common memo key"
                break
            got = names(wrap.identify_accessed_tensors(kernel, kwargs, {}))
            want = names(uncached(kernel, sibling, {}))
            if got != want or not got[1]:
                error = f"memoised {got}, PyTorch's {want}"
                break
        results.append((f"{e['name']} {e['meta']}", error))
    return results


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--draws", type=int, default=120, help="fuzz draws in the workload")
    ap.add_argument("--seed", type=int, default=90)
    ap.add_argument("--arch", type=int, default=90)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--access", action="store_true",
                    help="check the memoised access analysis (tritonconv.access_cache) against "
                    "PyTorch's instead of compiling")  # fmt: skip
    ap.add_argument("--precision", nargs="+", default=None,
                    help="only the launches whose DOT_PRECISION is one of these (e.g. "
                    "tf32x3_rn bf16x6)")  # fmt: skip
    ap.add_argument("--index64", action="store_true",
                    help="the kernels' 64-bit index variants (every tensor as if past 2**31 "
                    "elements)")  # fmt: skip
    ap.add_argument("--tma", action="store_true",
                    help="the TMA kernels' configurations (on a GPU with TMA, 16-bit "
                    "channels-last layers), which CPU tensors otherwise never reach")  # fmt: skip
    ap.add_argument("--compile", help=argparse.SUPPRESS)  # internal: the compiling process
    args = ap.parse_args()
    if args.compile:
        workers = args.workers
        worker = _access_worker if args.access else _compile_worker
        with concurrent.futures.ProcessPoolExecutor(workers) as pool:
            parts = pool.map(worker, [args.compile] * workers, [args.arch] * workers,
                             range(workers), [workers] * workers)  # fmt: skip
            results = [r for part in parts for r in part]
        failures = [(what, err) for what, err in results if err]
        for what, err in failures:
            print(f"FAIL {what}\n     {err}")
        what = "with memoised access analyses equal to PyTorch's" if args.access else ""
        done = "checked" if args.access else "compiled"
        print(f"{done} {len(results) - len(failures)}/{len(results)} configurations "
              f"for sm_{args.arch}{what and ' ' + what}")  # fmt: skip
        return 1 if failures else 0
    start = time.perf_counter()
    entries = record(args.draws, args.seed, args.index64, args.tma)
    if args.precision:
        entries = [e for e in entries if e["meta"].get("DOT_PRECISION") in args.precision]
    kernels = sorted({e["name"] for e in entries})
    print(f"recorded {len(entries)} launch configurations of {len(kernels)} kernels "
          f"in {time.perf_counter() - start:.0f} s: {', '.join(kernels)}", flush=True)  # fmt: skip
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(entries, f)
    env = dict(os.environ, TRITON_INTERPRET="0", TRITON_DEFAULT_FP_FUSION="1")
    command = [sys.executable, __file__, "--compile", f.name, "--arch", str(args.arch)]
    command += ["--access"] if args.access else []
    code = subprocess.call([*command, "--workers", str(args.workers)], env=env)
    os.unlink(f.name)
    return code


if __name__ == "__main__":
    sys.exit(main())
