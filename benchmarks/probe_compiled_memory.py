"""Probe (issue 14): how much memory Inductor's graph of two ResNet-50 bottleneck blocks holds
with our convolutions and with ``F.conv2d``, without a GPU.

The compiled models hold more memory with our convolutions than with cuDNN's (session 18:
resnet50 training 1528 against 1312 MiB) while the eager peaks are equal. This compiles two
bottleneck blocks (batch 32, 256 channels at 56x56, eval BatchNorm as a scale and shift,
bf16 channels-last) with ``scripts/inductor_compile_check.py``'s fake-CUDA harness (torch
2.11: run it with ``.venv-gpu``), once per side in a process of its own, and walks the
generated wrapper: each ``empty_strided_cuda`` (or extern convolution's result) adds its
bytes, ``del`` and reuse lines move them; the peak of what is alive is printed (graph inputs
not counted). ``--layout flexible_layout`` sets Inductor's layout constraint for user Triton
kernels (a diagnosis only: our kernels' strides are constants of the trace).

    PYTHONPATH=src .venv-gpu/bin/python benchmarks/probe_compiled_memory.py [--layout ...]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def _compile(side: str, layout: str | None) -> None:
    """Compile the two blocks for ``side`` (output code on stderr through TORCH_LOGS)."""
    sys.path.insert(0, os.path.join(HERE, "..", "scripts"))
    import inductor_compile_check as harness

    harness._fake_cuda()
    import torch
    import torch.nn.functional as F

    import tritonconv

    if layout:
        torch._inductor.config.triton_kernel_default_layout_constraint = layout

    def conv(x, w, **kw):
        return tritonconv.conv2d(x, w, **kw) if side == "ours" else F.conv2d(x, w, **kw)

    def bn(y, scale, shift):
        return y * scale[None, :, None, None] + shift[None, :, None, None]

    def blocks(x, w1, w2, w3, s1, b1, s2, b2, s3, b3):
        for _ in range(2):
            y = torch.relu(bn(conv(x, w1), s1, b1))
            y = torch.relu(bn(conv(y, w2, padding=1), s2, b2))
            x = torch.relu(bn(conv(y, w3), s3, b3) + x)
        return (x,)

    shapes = [(32, 256, 56, 56), (64, 256, 1, 1), (64, 64, 3, 3), (256, 64, 1, 1),
              (64,), (64,), (64,), (64,), (256,), (256,)]  # fmt: skip
    error = harness._compile(blocks, shapes, torch.bfloat16)
    if error:
        raise SystemExit(error)


def _ints(text: str) -> list[int]:
    return [int(v) for v in text.split(",") if v.strip()]


def peak_bytes(log: str) -> tuple[int, int]:
    """(peak bytes alive, allocations) of the wrapper's ``call`` in Inductor's output code."""
    lines = [line.split("[__output_code]", 1)[-1] for line in log.splitlines()]
    code = "\n".join(lines)
    code = code[code.index("def call(self, args)") :]
    code = code[: code.index("return (")]
    live: dict[str, int] = {}
    peak = 0
    for line in code.splitlines():
        line = line.strip()
        alloc = re.match(
            r"(buf\d+) = empty_strided_cuda\(\(([^)]*)\), \(([^)]*)\), torch\.(\w+)\)", line
        )
        extern = re.match(r"assert_size_stride\((buf\d+), \(([^)]*)\), \(([^)]*)\)", line)
        found = alloc or (extern if extern and extern.group(1) not in live else None)
        if found:
            shape, stride = _ints(found.group(2)), _ints(found.group(3))
            size = 1 + sum((a - 1) * b for a, b in zip(shape, stride, strict=True))
            live[found.group(1)] = size * (4 if alloc and alloc.group(4) == "float32" else 2)
        reuse = re.match(r"(buf\d+) = (buf\d+); del (buf\d+)", line)
        if reuse:
            live[reuse.group(1)] = live.pop(reuse.group(2), 0)
            continue
        for name in re.findall(r"del (buf\d+)", line):
            live.pop(name, None)
        peak = max(peak, sum(live.values()))
    return peak, code.count("empty_strided_cuda(")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layout", default=None, help="triton_kernel_default_layout_constraint")
    ap.add_argument("--side", help=argparse.SUPPRESS)  # internal: compile one side
    args = ap.parse_args()
    if args.side:
        _compile(args.side, args.layout)
        return
    for side in ("ours", "torch"):
        cmd = [sys.executable, __file__, "--side", side]
        if args.layout:
            cmd += ["--layout", args.layout]
        env = dict(os.environ, TORCH_LOGS="output_code")
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
        peak, allocations = peak_bytes(done.stderr + done.stdout)
        print(f"{side:6s} peak {peak / 2**20:6.1f} MiB of graph buffers, {allocations} allocations")


if __name__ == "__main__":
    main()
