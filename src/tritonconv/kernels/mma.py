"""One reduction step of the kernels' dots: ``acc + a @ b`` at a ``DOT_PRECISION``.

Every precision but one is ``tl.dot``'s own (``ieee``, ``tf32``, ``tf32x3``). The exception is
``tf32x3_rn``, fp32 products at fp32 accuracy (TF32 off) on tensor cores, without the bias
that plain ``tf32x3`` leaves. The weight gradient, whose operand tiles TF32 products do not
take (their reduction axis is not innermost), builds the same accuracy from bfloat16 pieces
with :func:`split_bf16` and :func:`bf16x6_step` (its ``bf16x6``).

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

**The correction.** Truncating toward zero loses about half an ulp of each step's sum.
``tf32x3_rn`` lifts every step before adding it to the accumulator: ``fma(step, 0.75 *
2**-24, step)`` rounded to nearest is the step plus 0 ulp or 1 (1 where its significand
exceeds 4/3), about 0.585 ulp on average over steps whose leading digits follow Benford's
law, which also covers part of the truncations inside the step. Modelled
(``emulate_tc_rounding.py --variants``, the model's 4096 x 256 x 4608 GEMM at 16-deep steps):
bias -4.9e-9 of the RMS result and RMS 3.20e-7, against -5.9e-9 and 3.25e-7 for the half-ulp
form used until session 28 (each step's sum plus half its ulp, away from zero, rounded to
even; measured on an H200: -5.3e-9, from ``tf32x3``'s -3.9e-8), which took resnet50's fp32
logits from 1.5-1.7x to 1.03-1.13x cuDNN's distance from float64.

**The step** (:func:`tf32x3_step`) is built here rather than by ``tl.dot``'s ``tf32x3``: the
same three products (operands split by :func:`split_tf32` or :func:`split_tf32_finite`), with
the big one summed on top of the small ones by the tensor cores instead of by one more add
per output element. With the lift's one ``FFMA`` in place of the half ulp's three
instructions, ResNet-50's 3x3 forward loop at 14² went from 388 to 322 SASS instructions per
16-deep step, the 1x1 layers' from 564 to 434 (``ptx_loop.py --tf32-off tf32x3_rn``, offline;
session 28). Session 30 moved the clean-up of infinities and NaNs to the operands on wide
tiles (:func:`tf32x3_step`): 128 x 128 tiles 443 -> 369.

``bf16x6`` sums each step the same way, six bfloat16 products instead of three TF32 ones,
and is lifted the same. Its steps are 32 positions deep (two 16-deep tensor-core
instructions per product, as a 16-deep TF32 step has) or, in the weight gradient's wide
tiles, 64 (four). Modelled (``emulate_tc_rounding.py --bf16x6``, a 96 x 4608 x 96 GEMM):
bias +3.8e-9 lifted at 32-deep steps, -8.8e-9 at 64-deep (unlifted -3.0e-8 / -4.2e-8).

Under the interpreter a dot rounds to nearest, so the launchers ask for plain ``tf32x3``
there (:func:`tritonconv.precision.dot_precision`); the pieces run in the tests directly.
``bf16x6`` runs there as it is: its lift is then a bias of about half an ulp of each step,
far inside the tests' bounds.
"""

from __future__ import annotations

import triton
import triton.language as tl

# TF32 rounding of an fp32's bits: add half of the 13 dropped bits' range, keep the rest
_TF32_HALF = tl.constexpr(0x1000)
_TF32_KEEP = tl.constexpr(-8192)  # 0xFFFFE000 as a signed 32-bit integer
#: ``lift``'s factor (module doc): 3/8 of an ulp of a step whose significand is 1
STEP_LIFT = 0.75 * 2.0**-24
_STEP_LIFT = tl.constexpr(STEP_LIFT)
#: :func:`tf32x3_step` cleans its operands, not its small sum, from ``b`` this many times as
#: wide as the step is deep (``BLOCK_N >= 4 * BLOCK_K``: 64 columns at 16-deep steps)
OPERAND_CLEANUP_WIDTH = tl.constexpr(4)


@triton.jit
def mma(a, b, acc, PRECISION: tl.constexpr):
    """``acc + a @ b`` with ``PRECISION`` products (see the module doc for ``tf32x3_rn``)."""
    if PRECISION == "tf32x3_rn":
        return acc + lift(tf32x3_step(a, b))
    else:
        return tl.dot(a, b, acc, input_precision=PRECISION)


@triton.jit
def tf32x3_step(a, b):
    """``a @ b`` (fp32) from three TF32 products summed on the tensor cores from zero: the
    two small ones first, then the big one on top. Triton's own ``tf32x3`` computes the same
    products but adds the big one to the small ones outside the tensor cores, one more add
    per output element.

    Infinities and NaNs must reach the result through the big product alone (an infinite
    operand's rest is NaN, or an infinity times a rest of 0 is). Two ways, chosen by the
    tile's shape when it compiles:

    - **Clean the operands** where ``b`` is at least ``OPERAND_CLEANUP_WIDTH`` times as wide
      as the step is deep: the small products take the rests and big parts with infinities
      and NaNs as 0 (:func:`split_tf32_finite`), a select per operand element.
    - **Clean the small sum** on narrower tiles: NaNs in it replaced by 0, a compare and a
      select per output element.

    A thread holds ``BLOCK_N / BLOCK_K`` times as many outputs as ``a`` elements, so that ratio
    says which is fewer instructions. Measured (H100, fp32 at TF32 off, session 30): the
    operand clean-up took ResNet-50's 3x3 at 28² (128 x 128 tiles) from 186 to 152 µs and
    dilation 2 from 1438 to 1167, was even on 128 x 64, and cost the grouped layer's 128 x 32
    tiles 23 % and the stem's backward (its input gradient's 128 x 16 tiles) 21 %."""
    if b.shape[1] >= OPERAND_CLEANUP_WIDTH * a.shape[1]:
        a_big, a_rest, a_big_finite = split_tf32_finite(a)
        b_big, b_rest, b_big_finite = split_tf32_finite(b)
        small = tl.dot(a_rest, b_big_finite, input_precision="tf32")
        small = tl.dot(a_big_finite, b_rest, small, input_precision="tf32")
    else:
        a_big, a_rest = split_tf32(a)
        b_big, b_rest = split_tf32(b)
        small = tl.dot(a_rest, b_big, input_precision="tf32")
        small = tl.dot(a_big, b_rest, small, input_precision="tf32")
        small = tl.where(small == small, small, 0.0)
    return tl.dot(a_big, b_big, small, input_precision="tf32")


@triton.jit
def round_tf32(x):
    """fp32 ``x`` rounded to TF32 by its bits: nearest, ties away from zero, as
    ``cvt.rna.tf32.f32``. Infinities stay, NaNs stay NaNs; values within 2**-12 of fp32's
    largest round to an infinity, as ``cvt.rna`` does (Triton's ``tf32x3`` shares that
    limit)."""
    bits = x.to(tl.int32, bitcast=True)
    return ((bits + _TF32_HALF) & _TF32_KEEP).to(tl.float32, bitcast=True)


@triton.jit
def split_tf32(x):
    """fp32 ``x`` as ``big + rest``: ``big`` rounded to TF32 (:func:`round_tf32`; infinities
    and NaNs kept), ``rest = x - big`` (exact; NaN for infinities and NaNs)."""
    big = tl.where(tl.abs(x) < float("inf"), round_tf32(x), x)
    return big, x - big


@triton.jit
def split_tf32_finite(x):
    """:func:`split_tf32`'s ``big`` and ``rest``, but the rest 0 where ``big`` is not finite,
    and a third piece for the small products: ``big`` with its infinities and NaNs as 0."""
    rounded = round_tf32(x)
    finite = tl.abs(rounded) < float("inf")
    big = tl.where(tl.abs(x) < float("inf"), rounded, x)
    return big, tl.where(finite, x - rounded, 0.0), tl.where(finite, rounded, 0.0)


@triton.jit
def lift(step):
    """A step's sum raised by the tensor cores' average truncation: ``fma(step, LIFT, step)``
    rounded to nearest is the step plus 0 or 1 ulp, 1 where its significand exceeds 4/3."""
    return tl.fma(step, _STEP_LIFT, step)


@triton.jit
def split_bf16(x, PIECE: tl.constexpr):
    """fp32 ``x`` as three bfloat16 values, ``hi + mid + lo``, each the rest of the ones
    before it rounded to nearest, held as ``PIECE`` (bfloat16; fp32 under the interpreter,
    whose dots take no bfloat16). Each rest has at most 16, then 8 significant bits, so the
    sum is ``x`` exactly (above 2**-110, where ``lo``'s last bits would be subnormal). For an
    infinity or a NaN, ``hi`` is it and the other two are NaN; finite values within 2**-9 of
    fp32's largest round to an infinity in ``hi``."""
    hi = x.to(tl.bfloat16)
    rest = x - hi.to(tl.float32)
    mid = rest.to(tl.bfloat16)
    lo = (rest - mid.to(tl.float32)).to(tl.bfloat16)
    return hi.to(PIECE), mid.to(PIECE), lo.to(PIECE)


@triton.jit
def bf16x6_step(a_hi, a_mid, a_lo, b_hi, b_mid, b_lo):
    """``a @ b`` (fp32) from :func:`split_bf16`'s pieces: the six products of order up to
    ``2**-16`` (the three dropped, ``mid * lo``, ``lo * mid`` and ``lo * lo``, are each at
    most ``2**-24 |a| |b|``, fp32's own rounding of a product), summed on the tensor cores
    from zero, smallest first; NaNs in the five small ones' sum replaced by 0 (as
    :func:`tf32x3_step` does on narrow tiles), then ``hi * hi`` on top.
    bfloat16 products take operand tiles in either order, where TF32 ones need the reduction
    axis innermost (the weight gradient's tiles have it outermost), and run twice as fast:
    six cost what :func:`tf32x3_step`'s three do."""
    small = tl.dot(a_lo, b_hi, input_precision="ieee", out_dtype=tl.float32)
    small = tl.dot(a_mid, b_mid, small, input_precision="ieee")
    small = tl.dot(a_hi, b_lo, small, input_precision="ieee")
    small = tl.dot(a_mid, b_hi, small, input_precision="ieee")
    small = tl.dot(a_hi, b_mid, small, input_precision="ieee")
    small = tl.where(small == small, small, 0.0)
    return tl.dot(a_hi, b_hi, small, input_precision="ieee")
