"""One reduction step of the kernels' dots: ``acc + a @ b`` at a ``DOT_PRECISION``.

Every precision but one is ``tl.dot``'s own (``ieee``, ``tf32``, ``tf32x3``). The exception is
``tf32x3_rn``, fp32 products at fp32 accuracy (TF32 off) on tensor cores, without the bias
that plain ``tf32x3`` leaves.

**Why ``tf32x3`` is biased.** The tensor cores truncate: each instruction aligns its
products and its accumulator to the largest of them, keeps about 25 bits, and truncates its
fp32 result toward zero (``benchmarks/probe_tc_rounding.py``, H100 and H200;
``benchmarks/emulate_tc_rounding.py`` emulates that model and reproduces the probe's errors at
16-, 32- and 64-deep steps: benchmarks/NOTES.md, session 27).
``tf32x3`` sums each reduction step on the tensor cores from zero and adds the step to the
fp32 accumulator rounded to nearest, so every step's sum comes out up to one ulp short of its
magnitude: on a 4608-deep GEMM, -3.9e-8 of the RMS result at 16-deep steps. That is smaller
than fp32 round-off per element but systematic, and over the 50 layers of resnet50 it put
the logits 1.5-1.7x further from float64 than cuDNN's fp32 (2.2x with 32- and 64-deep steps).

**The correction.** Truncating toward zero loses half an ulp on average. ``tf32x3_rn`` adds
half an ulp of each step's sum, away from zero (the sum's sign and exponent, scaled by
2**-24), before adding the step to the accumulator: an unbiased estimate of the step, as
rounding to nearest is. (The sum plus half its ulp is a midpoint, which fp32 rounds to even:
the step gains 0 or 1 ulp, half an ulp on average.) Measured (H200): it takes the 16-deep bias from -3.9e-8 to -5.3e-9
(what is left comes from the truncations inside the step; the emulation predicted -5.9e-9);
the RMS error is unchanged. resnet50's fp32 logits went from 1.5-1.7x to 1.03-1.13x cuDNN's
distance from float64 (``ieee``: 0.93-1.05x; three inputs).
Under the interpreter a dot rounds to nearest, so the launchers ask for plain ``tf32x3``
there (:func:`tritonconv.precision.dot_precision`).
"""

from __future__ import annotations

import triton
import triton.language as tl

# sign and exponent bits of an fp32 (0xFF800000 as a signed 32-bit integer)
_SIGN_EXPONENT = tl.constexpr(-8388608)
_HALF_ULP = tl.constexpr(2.0**-24)  # half an ulp of a number whose exponent is 0


@triton.jit
def mma(a, b, acc, PRECISION: tl.constexpr):
    """``acc + a @ b`` with ``PRECISION`` products (see the module doc for ``tf32x3_rn``)."""
    if PRECISION == "tf32x3_rn":
        step = tl.dot(a, b, input_precision="tf32x3")
        return acc + (step + half_ulp_away(step))
    else:
        return tl.dot(a, b, acc, input_precision=PRECISION)


@triton.jit
def half_ulp_away(x):
    """Half an ulp of fp32 ``x``, with ``x``'s sign (0 for 0 and subnormals)."""
    sign_exponent = (x.to(tl.int32, bitcast=True) & _SIGN_EXPONENT).to(tl.float32, bitcast=True)
    return sign_exponent * _HALF_ULP
