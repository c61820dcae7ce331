"""The SASS instruction mix of each kernel's main loop, compiled for Hopper without a GPU.

A convolution's training step (forward, input and weight gradients) runs on CPU tensors with
the launchers making their H100 choices (tiles, warps, stages, splits; no kernel executed);
each launched kernel is compiled for ``GPUTarget("cuda", 90, 128)`` specialised as Triton's
JIT specialises it on the GPU (integers equal to 1 as constants, integers that are multiples
of 16 and every pointer marked 16-divisible), disassembled with Triton's ``nvdisasm``, and the
SASS of each loop is counted by opcode: the work the warps issue per reduction step beside the
``HGMMA`` the tensor cores run. A way to predict an issue-bound kernel's change before spending device time on it
(benchmarks/NOTES.md).

    .venv/bin/python benchmarks/ptx_loop.py [--layer r50_3x3_14] [--kernel wgrad]
        [--dtype float32] [--set WGRAD_TF32_PRECISION='"tf32"']
"""

from __future__ import annotations

import argparse
import collections
import importlib
import json
import os
import re
import subprocess
import sys
import tempfile

# (input shape, weight shape, stride, padding[, dilation[, groups]]): bf16 channels-last, as in
# the models suite
LAYERS = {
    "r50_3x3_56": ((32, 64, 56, 56), (64, 64, 3, 3), 1, 1),
    "r50_stem": ((32, 3, 224, 224), (64, 3, 7, 7), 2, 3),
    "r50_3x3_28": ((32, 128, 28, 28), (128, 128, 3, 3), 1, 1),
    "r50_3x3_14": ((32, 256, 14, 14), (256, 256, 3, 3), 1, 1),
    "r50_3x3_7": ((32, 512, 7, 7), (512, 512, 3, 3), 1, 1),
    "r50_1x1_14": ((32, 1024, 14, 14), (256, 1024, 1, 1), 1, 0),
    # few rows, a long reduction: the forward and input gradient split it (split_k)
    "r50_3x3_7_n2": ((2, 512, 7, 7), (512, 512, 3, 3), 1, 1),
    "dil2_3x3_64": ((16, 256, 64, 64), (256, 256, 3, 3), 1, 2, 2),
    # (2+1)D's 1x3x3 64 -> 144 at 16x56x56, batch 8, as the 2-D layer it is (session 25)
    "r2p1d_144": ((128, 64, 56, 56), (144, 64, 3, 3), 1, 1),
    # suite more's conv3d 3x3x3 64 -> 64 at 16x56x56, batch 8 (issue 12's miss, session 26)
    "conv3d_64": ((8, 64, 16, 56, 56), (64, 64, 3, 3, 3), 1, 1),
    # the dense suite's grouped layer and VGG's first (3 input channels), session 30
    "grp32_3x3_28": ((32, 256, 28, 28), (256, 8, 3, 3), 1, 1, 1, 32),
    "vgg_first": ((16, 3, 224, 224), (64, 3, 3, 3), 1, 1),
    "r50_1x1_56": ((32, 64, 56, 56), (256, 64, 1, 1), 1, 0),
    "unet_3x3_128": ((8, 128, 128, 128), (64, 128, 3, 3), 1, 1),
    "unet_3x3_256": ((8, 64, 256, 256), (64, 64, 3, 3), 1, 1),
    "pw_96_384_56": ((32, 96, 56, 56), (384, 96, 1, 1), 1, 0),
    "pw_40_120_28": ((32, 40, 28, 28), (120, 40, 1, 1), 1, 0),
    "aspp_dil12": ((8, 512, 64, 64), (256, 512, 3, 3), 1, 12, 12),
}


def record(layer: str, dtype: str = "bfloat16", tf32_off: str = "", knobs=()) -> list[dict]:
    """Each launch of one training step, as JSON: kernel module and name, runtime arguments
    (tensors by dtype), meta. Runs under the interpreter (a process of its own). ``tf32_off``:
    fp32 with TF32 off and ``precision.TF32_OFF_PRECISION`` set to it; ``knobs``: ``NAME=VALUE``
    settings of ``ops.implicit_gemm``'s constants (a Python literal each)."""
    import ast

    import torch

    import tritonconv as tc
    from tritonconv import launch, precision
    from tritonconv.ops import implicit_gemm

    for knob in knobs:
        name, value = knob.split("=", 1)
        assert hasattr(implicit_gemm, name), name
        setattr(implicit_gemm, name, ast.literal_eval(value))
    if tf32_off:
        torch.backends.cudnn.allow_tf32 = False
        precision.TF32_OFF_PRECISION = tf32_off

    sys_path_scripts()
    from compile_check import _gpu_launchers, _meta_value

    launches = []

    def recording(kernel, grid, args, meta):
        fn = getattr(kernel, "fn", kernel)
        values = [{"tensor": str(a.dtype)} if isinstance(a, torch.Tensor) else a for a in args]
        meta = {k: _meta_value(v) for k, v in meta.items()}
        launches.append({"module": fn.__module__, "name": fn.__name__, "args": values,
                         "meta": meta})  # fmt: skip

    xs, ws, stride, pad, *dilation_groups = LAYERS[layer]
    cl = torch.channels_last_3d if len(xs) == 5 else torch.channels_last
    conv = tc.conv3d if len(xs) == 5 else tc.conv2d
    dtype = getattr(torch, dtype)  # float32: TF32 (PyTorch's default for convolutions)
    x = torch.randn(xs, dtype=dtype).to(memory_format=cl).requires_grad_()
    w = torch.randn(ws, dtype=dtype).to(memory_format=cl).requires_grad_()
    real = launch._interpret
    launch._interpret = recording
    undo = _gpu_launchers()
    try:
        y = conv(x, w, None, stride, pad, *dilation_groups, algo="implicit_gemm")
        y.backward(torch.zeros_like(y))
    finally:
        launch._interpret = real
        for m, name, value in undo:
            setattr(m, name, value)
    return launches


def sys_path_scripts() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, os.path.join(here, "..", "scripts"))


def compile_cubin(launch: dict) -> tuple[str, bytes]:
    """(name and meta, cubin) of a recorded launch, compiled as the GPU's JIT would."""
    import torch
    import triton
    from compile_check import _meta, _ty
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    fn = getattr(importlib.import_module(launch["module"]), launch["name"])
    args, meta = launch["args"], _meta(launch)
    shown = {k: v for k, v in launch["meta"].items() if k.isupper() or k.startswith("num_")}
    names = fn.arg_names
    constexpr_params = {p.name for p in fn.params if p.is_constexpr}
    runtime = [n for n in names if n not in constexpr_params]
    options = {k: meta.pop(k) for k in ("num_warps", "num_stages") if k in meta}
    signature, constexprs, attrs = {}, {}, {}
    for i, (name, value) in enumerate(zip(runtime, args, strict=True)):
        index = names.index(name)
        if isinstance(value, dict):
            signature[name] = "*" + _ty(getattr(torch, value["tensor"].split(".")[1]))
            attrs[(index,)] = [["tt.divisibility", 16]]
        elif value is None:
            signature[name], constexprs[name] = "constexpr", None
        elif isinstance(value, bool):
            signature[name] = "i1"
        elif isinstance(value, int):
            if value == 1:
                signature[name], constexprs[name] = "constexpr", 1
            else:
                signature[name] = "i32" if -(2**31) <= value < 2**31 else "i64"
                if value % 16 == 0:
                    attrs[(index,)] = [["tt.divisibility", 16]]
        else:
            signature[name] = "fp32"
        del i
    for name in names:
        if name in constexpr_params:
            signature[name] = "constexpr"
            default = fn.params[names.index(name)].default
            constexprs[name] = meta.get(name, default)
    compiled = triton.compile(
        ASTSource(fn, signature, constexprs, attrs),
        target=GPUTarget("cuda", 90, 128),
        options=options,
    )
    return f"{fn.__name__} {shown} {resources(compiled.asm['cubin'])}", compiled.asm["cubin"]


def resources(cubin: bytes) -> str:
    """Registers per thread and shared memory of a cubin's kernel (``cuobjdump``), which
    decide how many programs share a multiprocessor."""
    from triton.backends.nvidia import compiler

    cuobjdump = os.path.join(os.path.dirname(compiler.__file__), "bin", "cuobjdump")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        text = subprocess.run([cuobjdump, "--dump-resource-usage", f.name],
                              capture_output=True, text=True, check=True).stdout  # fmt: skip
    found = re.search(r"REG:(\d+).*?SHARED:(\d+)", text)
    return f"(registers {found[1]}, static shared {found[2]} B)" if found else ""


def sass(cubin: bytes) -> list[str]:
    """The cubin's SASS, one instruction or label per line (Triton's own ``nvdisasm``)."""
    from triton.backends.nvidia import compiler

    nvdisasm = os.path.join(os.path.dirname(compiler.__file__), "bin", "nvdisasm")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        text = subprocess.run([nvdisasm, "-c", f.name], capture_output=True, text=True,
                              check=True).stdout  # fmt: skip
    lines = []
    for line in text.splitlines():
        line = re.sub(r"/\*[^*]*\*/", "", line).strip().rstrip(";").strip()
        if (line and not line.startswith((".", "//"))) or re.match(r"^\.L_x_\d+:", line):
            lines.append(line)
    return lines


def loops(lines: list[str]) -> list[list[str]]:
    """The bodies of the SASS's loops: from a label to the branch back to it."""
    labels = {}
    for i, line in enumerate(lines):
        m = re.match(r"^(\.L_x_\d+):", line)
        if m:
            labels[m.group(1)] = i
    bodies = []
    for i, line in enumerate(lines):
        m = re.search(r"\bBRA\b.*?(\.L_x_\d+)", line)
        if m and m.group(1) in labels and labels[m.group(1)] < i:
            bodies.append(lines[labels[m.group(1)] + 1 : i + 1])
    return bodies


def mma_loop(fn, signature: dict, constexprs: dict, warps: int, stages: int,
             keys=("HGMMA", "UTMALDG", "LDS", "STS", "LDSM", "BAR")) -> str:  # fmt: skip
    """``fn`` compiled for sm_90 here (``signature`` names every parameter's type,
    ``"constexpr"`` for those in ``constexprs``): its resources and its first loop holding
    wgmma (HGMMA) instructions, its length and the count of each opcode of ``keys``."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    signature = {**signature, **dict.fromkeys(constexprs, "constexpr")}
    compiled = triton.compile(ASTSource(fn, signature, constexprs, {}),
                              target=GPUTarget("cuda", 90, 128),
                              options={"num_warps": warps, "num_stages": stages})  # fmt: skip
    cubin = compiled.asm["cubin"]
    for body in loops(sass(cubin)):
        counts = opcode_counts(body)
        if counts["HGMMA"]:
            return (f"{resources(cubin)}: loop {len(body)} SASS "
                    + str({k: counts[k] for k in keys}))  # fmt: skip
    return f"{resources(cubin)}: no loop with HGMMA"


def opcode_counts(body: list[str]) -> collections.Counter:
    counts = collections.Counter()
    for line in body:
        if line.startswith(".L_x_"):
            continue
        words = line.split()
        op = words[1] if words[0].startswith("@") and len(words) > 1 else words[0]
        counts[op.split(".")[0]] += 1
    return counts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layer", default="r50_3x3_14", choices=sorted(LAYERS))
    ap.add_argument("--kernel", default="", help="only kernels whose name contains this")
    ap.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16", "float32"))
    ap.add_argument("--tf32-off", default="", choices=("", "ieee", "tf32x3", "tf32x3_rn"),
                    help="fp32 at TF32-off with this precision")  # fmt: skip
    ap.add_argument("--dump", action="store_true", help="print each loop's SASS too")
    ap.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                    help="an ops.implicit_gemm constant for the step (a Python literal)")  # fmt: skip
    ap.add_argument("--record", action="store_true", help=argparse.SUPPRESS)  # internal
    args = ap.parse_args()
    if args.record:
        print(json.dumps(record(args.layer, args.dtype, args.tf32_off, args.set)))
        return
    env = dict(os.environ, TRITON_INTERPRET="1", TRITONCONV_CPU_KERNELS="1")
    knobs = [a for knob in args.set for a in ("--set", knob)]
    out = subprocess.run([sys.executable, __file__, "--record", "--layer", args.layer,
                          "--dtype", args.dtype, "--tf32-off", args.tf32_off, *knobs],
                         env=env, capture_output=True, text=True, check=True)  # fmt: skip
    os.environ["TRITON_INTERPRET"] = "0"
    sys_path_scripts()
    for launch in json.loads(out.stdout.splitlines()[-1]):
        if args.kernel not in launch["name"]:
            continue
        if launch["meta"].get("DOT_PRECISION") == "tf32x3" and args.tf32_off == "tf32x3_rn":
            launch["meta"]["DOT_PRECISION"] = "tf32x3_rn"  # (what the interpreter runs instead)
        title, cubin = compile_cubin(launch)
        print(title)
        for body in loops(sass(cubin)):
            counts = opcode_counts(body)
            total = sum(counts.values())
            wgmma = counts.get("HGMMA", 0)
            top = ", ".join(f"{op} {n}" for op, n in counts.most_common(12))
            print(f"  loop of {total} SASS instructions, {wgmma} HGMMA, {counts.get('HMMA', 0)}"
                  f" HMMA, {counts.get('FFMA', 0)} FFMA: {top}")  # fmt: skip
            if args.dump:
                print("\n".join(f"    {line}" for line in body))


if __name__ == "__main__":
    main()
