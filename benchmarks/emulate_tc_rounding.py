"""Emulation (CPU, NumPy): a model of the tensor cores' fp32 accumulation, checked against
``probe_tc_rounding.py``'s GPU measurements, for predicting a precision change's error
before spending device time on it (session 27, benchmarks/NOTES.md).

The model of one TF32 ``HGMMA`` k8 step (one output element): the accumulator and the eight
exact products are aligned to the largest of them, each truncated toward zero to ``--bits``
bits below that one's leading bit, summed exactly, and the sum truncated toward zero to fp32.
TF32 operands are fp32 values whose 13 low bits the hardware ignores (truncation).
``tf32x3`` as Triton 3.6 (the GPU machine's) builds it: ``big = rna(a)``, ``small = a - big`` (the hardware
truncates it), each K-deep step summed from a zeroed accumulator (small x big, big x small,
big x big, chained) and added to the fp32 accumulator rounded to nearest. ``rn``: each
step's sum plus half an ulp of it away from zero (``tritonconv.kernels.mma``'s ``tf32x3_rn``).

With 25 bits it reproduces the H100/H200 probe to about two digits (RMS and bias of a
4096 x 256 x 4608 GEMM at 16-, 32- and 64-deep steps). Errors are relative to the RMS of the
exact result; bias is the mean error along the exact result's sign (negative: toward zero).

``--bf16x6`` models the weight gradient's ``bf16x6`` (three bfloat16 pieces an operand, six
products in k16 instructions; session 29: bias -3.0e-8 unlifted, +3.8e-9 lifted at 32-deep
steps, -8.8e-9 at 64-deep, on a 96 x 4608 x 96 GEMM; not yet checked against the GPU).

    python benchmarks/emulate_tc_rounding.py [--bits 25] [--k 4608] [--size 128]
        [--steps 16 32 64] [--variants] [--bf16x6 [--fma-scale 0.75]]
"""

from __future__ import annotations

import argparse

import numpy as np


def tf32_nearest(x: np.ndarray) -> np.ndarray:
    """fp32 ``x`` rounded to TF32's 10 fraction bits, nearest, ties away (``cvt.rna``)."""
    bits = x.view(np.uint32).astype(np.uint64)
    return ((bits + 0x1000) & 0xFFFFE000).astype(np.uint32).view(np.float32)


def tf32_truncated(x: np.ndarray) -> np.ndarray:
    """fp32 ``x`` as the tensor core reads it for TF32: its 13 low bits dropped."""
    return (x.view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32)


def to_fp32_toward_zero(x: np.ndarray) -> np.ndarray:
    rounded = x.astype(np.float32)
    over = np.abs(rounded.astype(np.float64)) > np.abs(x)
    rounded[over] = np.nextafter(rounded[over], np.float32(0))
    return rounded


def bf16_nearest(x: np.ndarray) -> np.ndarray:
    """fp32 ``x`` rounded to bfloat16's 7 fraction bits, nearest, ties to even."""
    bits = x.view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return bits.astype(np.uint32).view(np.float32)


def hgmma_k8(acc: np.ndarray, a: np.ndarray, b: np.ndarray, bits: int) -> np.ndarray:
    """One instruction: ``acc [M, N] + a [M, k] @ b [k, N]`` as the model above (k = 8 for
    TF32, 16 for bfloat16)."""
    terms = a.astype(np.float64)[:, None, :] * b.astype(np.float64).T[None, :, :]
    terms = np.concatenate([acc.astype(np.float64)[:, :, None], terms], axis=2)
    largest = np.abs(terms).max(axis=2, keepdims=True)
    quantum = np.exp2(np.floor(np.log2(np.where(largest > 0, largest, 1.0))) - bits)
    return to_fp32_toward_zero((np.trunc(terms / quantum) * quantum).sum(axis=2))


def half_ulp_away(x: np.ndarray) -> np.ndarray:
    sign_exponent = (x.view(np.int32) & np.int32(-8388608)).view(np.float32)
    return sign_exponent * np.float32(2.0**-24)


def tf32x3(a, b, step: int, bits: int, rn: bool, split=None, fma: float = 0.0) -> np.ndarray:
    """``split``: how ``big`` is made (default :func:`tf32_nearest`); ``fma``: instead of
    ``rn``'s half ulp, the step made ``fma(step, fma, step)`` (rounded to nearest: 0 or 1 ulp
    more, by the step's leading digits) before it is added."""
    split = split or tf32_nearest
    big_a, big_b = split(a), split(b)
    small_a, small_b = tf32_truncated(a - big_a), tf32_truncated(b - big_b)
    acc = np.zeros((a.shape[0], b.shape[1]), np.float32)
    for k0 in range(0, a.shape[1], step):
        part = np.zeros_like(acc)
        for x, y in ((small_a, big_b), (big_a, small_b), (big_a, big_b)):
            for k in range(k0, k0 + step, 8):
                part = hgmma_k8(part, x[:, k : k + 8], y[k : k + 8], bits)
        if fma:
            part = (part.astype(np.float64) * (1.0 + fma)).astype(np.float32)
        if rn:
            part = part + half_ulp_away(part)
        acc = acc + part
    return acc


def bf16x6(a, b, step: int, bits: int, fma: float = 0.0) -> np.ndarray:
    """``tritonconv.kernels.mma``'s ``bf16x6`` (the weight gradient's with TF32 off): three
    bfloat16 pieces an operand, six products chained from zero each ``step``-deep step
    (the five small ones first, smallest first, then ``hi x hi``) in k16 instructions, the
    step lifted by ``fma`` as :func:`tf32x3`'s and added rounded to nearest."""
    pieces = []
    for x in (a, b):
        hi = bf16_nearest(x)
        mid = bf16_nearest(x - hi)
        pieces.append((hi, mid, bf16_nearest(x - hi - mid)))
    (a_hi, a_mid, a_lo), (b_hi, b_mid, b_lo) = pieces
    order = ((a_lo, b_hi), (a_mid, b_mid), (a_hi, b_lo), (a_mid, b_hi), (a_hi, b_mid), (a_hi, b_hi))
    acc = np.zeros((a.shape[0], b.shape[1]), np.float32)
    for k0 in range(0, a.shape[1], step):
        part = np.zeros_like(acc)
        for x, y in order:
            for k in range(k0, k0 + step, 16):
                part = hgmma_k8(part, x[:, k : k + 16], y[k : k + 16], bits)
        if fma:
            part = (part.astype(np.float64) * (1.0 + fma)).astype(np.float32)
        acc = acc + part
    return acc


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bits", type=int, default=25, help="bits kept below the largest term")
    ap.add_argument("--k", type=int, default=4608, help="reduction length")
    ap.add_argument("--size", type=int, default=128, help="rows = columns of the result")
    ap.add_argument("--steps", type=int, nargs="+", default=[16, 32, 64])
    ap.add_argument("--variants", action="store_true",
                    help="also big truncated, and the fma correction (scale x 2**-24)")  # fmt: skip
    ap.add_argument("--fma-scale", type=float, nargs="+", default=[0.7071, 0.7213])
    ap.add_argument("--bf16x6", action="store_true",
                    help="the weight gradient's bf16x6 instead (a: dy^T, Gaussian; b: x, "
                         "post-ReLU), unlifted and lifted by each --fma-scale")  # fmt: skip
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    a = np.maximum(rng.standard_normal((args.size, args.k)).astype(np.float32), 0)  # post-ReLU
    b = (rng.standard_normal((args.k, args.size)) / args.k**0.5).astype(np.float32)
    if args.bf16x6:
        a, b = b.T.copy(), a.T.copy()
    exact = a.astype(np.float64) @ b.astype(np.float64)
    scale = np.sqrt((exact**2).mean())
    for step in args.steps:
        if args.bf16x6:
            for scale_ in (0.0, *args.fma_scale):
                err = bf16x6(a, b, step, args.bits, scale_ * 2.0**-24).astype(np.float64) - exact
                _report(f"bf16x6, lift {scale_}", step, err, exact, scale)
            continue
        variants = {"tf32x3": dict(rn=False), "tf32x3_rn": dict(rn=True)}
        if args.variants:
            variants["rn, big truncated"] = dict(rn=True, split=tf32_truncated)
            for scale_ in args.fma_scale:
                variants[f"fma {scale_}"] = dict(rn=False, fma=scale_ * 2.0**-24)
                variants[f"fma {scale_}, big truncated"] = dict(
                    rn=False, fma=scale_ * 2.0**-24, split=tf32_truncated
                )
        for name, kw in variants.items():
            err = tf32x3(a, b, step, args.bits, **kw).astype(np.float64) - exact
            _report(name, step, err, exact, scale)


def _report(name: str, step: int, err, exact, scale) -> None:
    print(
        f"{name:28} {step:3}-deep steps: max "
        f"{np.abs(err).max() / scale:.2e} rms {np.sqrt((err**2).mean()) / scale:.2e} "
        f"bias {(err * np.sign(exact)).mean() / scale:+.2e}",
        flush=True,
    )


if __name__ == "__main__":
    main()
