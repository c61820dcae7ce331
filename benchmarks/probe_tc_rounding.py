"""Probe (session 26): how the tensor cores round their fp32 accumulation, and what that does
to an fp32 GEMM's error against float64.

Session 10 found that ``tf32x3`` convolutions, each within cuDNN's fp32 error, left resnet50's
output 2.17x further from float64 than cuDNN's: a bias that adds up over 50 layers. Its likely
source (not measured) is the tensor core's own accumulation rounding toward zero. Part 1 asks
the hardware: one ``tl.dot`` whose exact result lies 0.75 ulp past 1.0 (or -1.0), the extra
term in the accumulator or among the products; round-to-nearest gives 1 + ulp, truncation 1.0.
Part 2 measures, on a GEMM shaped like a 3x3 convolution over 512 channels (K = 4608,
activations after a ReLU), each variant's error against float64: max, RMS and bias (the mean
of the error along the sign of the exact result, over the RMS of the result; negative:
results pulled toward zero):

- ``cublas``: torch.mm in fp32 with TF32 off (the fp32 FMA reference, like cuDNN's);
- ``ieee``: tl.dot with fp32 products (what tritonconv computes with TF32 off);
- ``tf32x3``: Triton's three-TF32 dot, chained through the accumulator as the kernels do;
- ``tf32x3_rn``: the same, each step's sum corrected by half an ulp away from zero
  (``tritonconv.kernels.mma``, session 27);
- ``split3_kK``: the same three products by hand, each K-deep step's sum from a zeroed
  tensor-core accumulator added to the fp32 one in the FMA units (round to nearest);
- ``split3chain_kK``: the same, the big product accumulated in the tensor core;
- ``tf32``: one TF32 product (the error scale TF32 allows).

    PYTHONPATH=src python benchmarks/probe_tc_rounding.py [--json FILE]
"""

from __future__ import annotations

import argparse
import os
import sys

import torch
import triton
import triton.language as tl

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from probe_small_wave import write_rows

from tritonconv.kernels.mma import mma

ULP = 2.0**-23


@triton.jit
def _one_dot(a_ptr, b_ptr, c_ptr, ACC0: tl.constexpr, PRECISION: tl.constexpr,
             M: tl.constexpr, N: tl.constexpr, K: tl.constexpr):  # fmt: skip
    rm, rn, rk = tl.arange(0, M), tl.arange(0, N), tl.arange(0, K)
    a = tl.load(a_ptr + rm[:, None] * K + rk[None, :])
    b = tl.load(b_ptr + rk[:, None] * N + rn[None, :])
    acc = tl.full((M, N), ACC0, tl.float32)
    acc = tl.dot(a, b, acc, input_precision=PRECISION)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc)


def rounding(dtype, precision: str) -> dict:
    """Part 1: which way one tensor-core dot rounds, for ``dtype`` operands."""
    m = n = 64
    k = 16
    out = {}
    tiny = 0.75 * ULP  # 0.75 ulp of 1.0: exact in bf16 and TF32 (two significant bits)
    for case, acc0, terms in (
        ("acc + product", 1.0, [tiny]),
        ("products", 0.0, [1.0, tiny]),
        ("acc + product, negative", -1.0, [-tiny]),
        ("products, negative", 0.0, [-1.0, -tiny]),
    ):
        a = torch.zeros(m, k, dtype=dtype, device="cuda")
        b = torch.zeros(k, n, dtype=dtype, device="cuda")
        for i, t in enumerate(terms):
            a[:, i] = t
            b[i, :] = 1.0
        c = torch.empty(m, n, dtype=torch.float32, device="cuda")
        _one_dot[(1,)](a, b, c, acc0, precision, m, n, k, num_warps=4)
        got = c[0, 0].item()
        exact = acc0 + sum(terms)
        nearest = torch.tensor(exact, dtype=torch.float64).float().item()
        rounds = "toward zero" if abs(got) < abs(nearest) else "other"
        out[case] = {
            "got": got,
            "nearest": nearest,
            "rounds": "nearest" if got == nearest else rounds,
        }
    return out


@triton.jit
def _tf32_hi(x):
    """``x`` rounded to TF32's 10 fraction bits, nearest (ties away), as fp32."""
    bits = x.to(tl.uint32, bitcast=True)
    return ((bits + 0x1000) & 0xFFFFE000).to(tl.float32, bitcast=True)


@triton.jit
def _gemm(a_ptr, b_ptr, c_ptr, M, N, K, VARIANT: tl.constexpr,
          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):  # fmt: skip
    pid_m, pid_n = tl.program_id(0), tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    for k0 in range(0, K, BLOCK_K):
        a = tl.load(a_ptr + rm[:, None] * K + (k0 + rk)[None, :])
        b = tl.load(b_ptr + (k0 + rk)[:, None] * N + rn[None, :])
        if VARIANT == "ieee":
            acc = tl.dot(a, b, acc, input_precision="ieee")
        elif VARIANT == "tf32":
            acc = tl.dot(a, b, acc, input_precision="tf32")
        elif VARIANT == "tf32x3":
            acc = tl.dot(a, b, acc, input_precision="tf32x3")
        elif VARIANT == "tf32x3_rn":  # the kernels' corrected step (kernels/mma.py)
            acc = mma(a, b, acc, "tf32x3_rn")
        else:  # "split3": hi/lo by hand, each slice summed from zero, added in fp32
            a_hi = _tf32_hi(a)
            b_hi = _tf32_hi(b)
            a_lo = a - a_hi
            b_lo = b - b_hi
            part = tl.dot(a_lo, b_hi, input_precision="tf32")
            part = tl.dot(a_hi, b_lo, part, input_precision="tf32")
            if VARIANT == "split3":
                big = tl.dot(a_hi, b_hi, input_precision="tf32")
                acc = acc + (big + part)
            else:  # "split3chain": the big product accumulated in the tensor core
                acc = tl.dot(a_hi, b_hi, acc + part, input_precision="tf32")
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc)


def gemm_errors(seed: int) -> dict:
    """Part 2: each variant's error against float64 on a 3x3-over-512-channels GEMM."""
    torch.manual_seed(seed)
    m, n, k = 4096, 256, 4608
    a = torch.randn(m, k, device="cuda").relu_()  # activations after a ReLU
    b = torch.randn(k, n, device="cuda") / k**0.5
    exact = a.double() @ b.double()
    scale = exact.pow(2).mean().sqrt().item()
    sign = exact.sign()
    results = {}

    def record(label, c):
        err = c.double() - exact
        results[label] = {
            "max": err.abs().max().item() / scale,
            "rms": err.pow(2).mean().sqrt().item() / scale,
            "bias": (err * sign).mean().item() / scale,
        }

    torch.backends.cuda.matmul.allow_tf32 = False
    record("cublas", a @ b)
    for variant, block_k in (("ieee", 32), ("tf32", 32), ("tf32x3", 32), ("tf32x3", 16),
                             ("tf32x3_rn", 16), ("tf32x3_rn", 32),
                             ("split3", 32), ("split3", 16), ("split3", 64), ("split3chain", 32)):  # fmt: skip
        c = torch.empty(m, n, device="cuda")
        grid = (m // 128, n // 128)
        _gemm[grid](a, b, c, m, n, k, variant, 128, 128, block_k, num_warps=8, num_stages=3)
        record(variant if variant in ("ieee", "tf32") else f"{variant}_k{block_k}", c)
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("needs a CUDA GPU (the question is what its tensor cores do)")
        return
    row = {"rounding": {}}
    for label, dtype, precision in (("tf32", torch.float32, "tf32"),
                                    ("bf16", torch.bfloat16, "ieee"),
                                    ("fp32 ieee", torch.float32, "ieee")):  # fmt: skip
        row["rounding"][label] = rounding(dtype, precision)
        for case, r in row["rounding"][label].items():
            print(f"{label:9} {case:26} got {r['got']!r:22} nearest {r['nearest']!r:22} "
                  f"-> {r['rounds']}")  # fmt: skip
    row["gemm"] = {}
    for seed in (0, 1):
        for label, r in gemm_errors(seed).items():
            row["gemm"].setdefault(label, []).append(r)
            print(f"seed {seed} {label:18} max {r['max']:.2e} rms {r['rms']:.2e} "
                  f"bias {r['bias']:+.2e}", flush=True)  # fmt: skip
    write_rows(args.json, [row], "cuda")


if __name__ == "__main__":
    main()
