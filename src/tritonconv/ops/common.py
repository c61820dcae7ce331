"""Helpers every launcher shares: grid arithmetic, index width, accumulator dtypes.

Plain integer Python on purpose: ``triton.cdiv`` and ``triton.next_power_of_2`` are JIT functions
in recent Triton and cost about 4 µs per call from Python, several times per launch.
"""

from __future__ import annotations

import functools
import math

import torch
import triton.language as tl

from .._runtime import INTERPRETER
from ..geometry import INT_DTYPES
from ..kernels.reduce import channel_sum_partials_kernel, sum_partials_kernel
from ..launch import allocate, launch

# Index arithmetic switches to int64 when an address can reach this many elements.
INDEX32_LIMIT = 2**31 - 1


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def next_power_of_2(n: int) -> int:
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def clamped_power_of_2(value: int, low: int, high: int) -> int:
    """The power of two at or above ``value``, clamped to ``[low, high]`` (a tile size)."""
    return max(low, min(high, next_power_of_2(max(1, value))))


def channels_last_format(rank: int) -> torch.memory_format | None:
    """PyTorch's channels-last memory format for tensors of ``rank`` dimensions
    (``channels_last`` for 4-D, ``channels_last_3d`` for 5-D; None for other ranks)."""
    return {4: torch.channels_last, 5: torch.channels_last_3d}.get(rank)


def is_channels_last(t: torch.Tensor) -> bool:
    """Whether PyTorch treats ``t`` (4-D or 5-D) as channels-last (``channels_last_3d`` for
    5-D): channels-last contiguous and not laid out with the default format's own strides,
    which settles the ties one channel or a 1x1 plane create."""
    fmt = channels_last_format(t.dim())
    if fmt is None or not t.is_contiguous(memory_format=fmt):
        return False
    return not t.is_contiguous() or t.stride() != dense_strides(t.shape, range(t.dim()))


def dense_strides(shape, order) -> tuple:
    """Strides of a dense tensor of ``shape`` whose dimensions, from the largest stride to the
    smallest, are ``order`` (sizes 0 and 1 count as 1, as PyTorch's own layouts do)."""
    strides = [0] * len(shape)
    step = 1
    for d in reversed(order):
        strides[d] = step
        step *= max(shape[d], 1)
    return tuple(strides)


def same_layout(shape, strides, other) -> bool:
    """Whether ``strides`` and ``other`` lay a tensor of ``shape`` out alike: equal on every
    dimension longer than 1 (a size-1 dimension's stride never moves an address). A
    convolution of one channel has its channels-first and channels-last layouts alike, so it
    needs no relayout copy between them."""
    return all(n == 1 or a == b for n, a, b in zip(shape, strides, other, strict=True))


def laid_out(t: torch.Tensor, order) -> bool:
    """Whether ``t`` is dense with its dimensions, outermost first, in ``order``
    (:func:`same_layout`: strides of size-1 dimensions aside)."""
    return same_layout(t.shape, t.stride(), dense_strides(t.shape, order))


def empty_like_format(shape, like: torch.Tensor, *, zero: bool = False) -> torch.Tensor:
    """An output of ``shape`` in ``like``'s dtype and device, channels-last when ``like`` is
    (as PyTorch's convolutions do), contiguous otherwise; zero-filled if ``zero``."""
    rank = len(shape)
    order = (0, *range(2, rank), 1) if is_channels_last(like) else range(rank)
    return allocate(shape, like.dtype, like.device, dense_strides(shape, order), zero=zero)


def sum_partials(
    partial: torch.Tensor,
    out: torch.Tensor,
    out2: torch.Tensor | None = None,
    channels_to_taps: tuple[int, int] | None = None,
) -> None:
    """``out = partial.sum(0)`` for a ``(splits, *out.shape)`` partial whose splits are each
    laid out as ``out`` (dense, any order of dimensions) one after the other, summed in a
    fixed order (bitwise reproducible) and cast to out's dtype in one pass. With ``out2`` each
    partial row holds ``out``'s elements then ``out2``'s (a weight gradient and its bias
    gradient, reduced by one launch). ``channels_to_taps=(taps, channels)``: each split laid
    out ``[..., taps, channels]`` while ``out`` is ``[..., channels, taps]`` (a channels-last
    weight gradient summed into a contiguous weight's layout, the copy between them saved)."""
    if channels_to_taps is not None and out2 is not None:
        raise ValueError("sum_partials: channels_to_taps takes one output")
    taps, channels = channels_to_taps or (1, 1)
    split_at = out.numel()
    numel = split_at + (0 if out2 is None else out2.numel())
    if numel == 0:
        return
    splits = partial.shape[0]
    programs = 128 if INTERPRETER else 4 * multiprocessor_count(partial.device)
    block, split_block, num_warps = sum_partials_tiles(numel, splits, programs)
    # The last step's masked rows reach past ``splits``: their offsets must fit too.
    reach = cdiv(splits, split_block) * split_block * numel + cdiv(numel, block) * block
    launch(
        sum_partials_kernel,
        (cdiv(numel, block),),
        partial,
        out,
        out if out2 is None else out2,
        splits,
        numel,
        split_at,
        taps,
        channels,
        BLOCK=block,
        SPLIT_BLOCK=split_block,
        TWO_OUTPUTS=out2 is not None,
        CHANNELS_TO_TAPS=channels_to_taps is not None,
        INDEX_64=needs_int64(partial, out) or reach > INDEX32_LIMIT,
        num_warps=num_warps,
    )


def channel_sum(t: torch.Tensor) -> torch.Tensor:
    """``t.sum((0, 2, ...))`` for an (N, C, *spatial) tensor of 1 to 3 spatial dimensions and
    any strides (the bias gradient of a convolution): per-split partials, then
    :func:`sum_partials`, so the order is fixed and the result bitwise reproducible (rows that
    fit one split: the sum stored directly, one launch)."""
    N, C, *spatial = t.shape
    rows = N * math.prod(spatial)
    out = allocate((C,), t.dtype, t.device, zero=rows == 0)
    if C == 0 or rows == 0:
        return out
    sizes = [1] * (3 - len(spatial)) + list(spatial)
    strides = [0] * (3 - len(spatial)) + list(t.stride()[2:])
    rows_fast = C == 1 or t.stride(1) != 1
    if rows_fast:
        block_c = clamped_power_of_2(C, 1, 4)
        block_r = 512
    else:
        block_c = clamped_power_of_2(C, 1, 64)
        block_r = 2048 // block_c
    # About two programs per multiprocessor; two splits under the interpreter, so the split
    # reduction is tested on CPU too.
    c_blocks = cdiv(C, block_c)
    target = 2 if INTERPRETER else cdiv(2 * multiprocessor_count(t.device), c_blocks)
    rows_per_split = max(block_r, cdiv(cdiv(rows, target), block_r) * block_r)
    splits = cdiv(rows, rows_per_split)
    # one split is the sum: stored straight into ``out`` (cast on store), no second launch
    partial = out if splits == 1 else allocate((splits, C), partial_dtype(t.dtype), t.device)
    launch(
        channel_sum_partials_kernel,
        (c_blocks, splits),
        t,
        partial,
        C,
        *sizes,
        rows,
        rows_per_split,
        t.stride(0),
        t.stride(1),
        *strides,
        ACC_DTYPE=accumulator_dtype(t.dtype),
        ROWS_FAST=rows_fast,
        BLOCK_C=block_c,
        BLOCK_R=block_r,
        INDEX_64=needs_int64(t, partial) or rows + block_r > INDEX32_LIMIT,
        num_warps=4,
    )
    if splits > 1:
        sum_partials(partial, out)
    return out


def sum_partials_tiles(numel: int, splits: int, programs: int) -> tuple[int, int, int]:
    """(elements, partials, warps) per program step of :func:`sum_partials`: about ``programs``
    programs over the elements (32 to 1024 each, 1 to 4 warps), each step a tile of up
    to 64 values per lane (more partials a step where the elements are few).

    The partials are usually still in L2 and the reduction is latency-bound: enough programs
    to keep every multiprocessor busy, and few dependent steps each (session 9, H100: 2.5-3.2
    µs for the partials of ResNet-50-sized weight gradients, against 2.8-5.0 µs with the
    first version's ~128 programs of up to 8 steps)."""
    block = min(1024, max(32, next_power_of_2(cdiv(numel, programs))))
    warps = min(4, max(1, block // 128))
    per_lane = block // (32 * warps)
    split_block = min(next_power_of_2(splits), max(1, 64 // per_lane))
    return block, split_block, warps


@functools.cache
def multiprocessor_count(device: torch.device) -> int:
    """Streaming multiprocessors of a CUDA device (grids are sized from it)."""
    return torch.cuda.get_device_properties(device).multi_processor_count


def batch_splits(batch: int, splits: int) -> tuple[int, int]:
    """(splits, samples per split) cutting ``batch`` samples into about ``splits`` even parts."""
    per_split = cdiv(batch, max(1, min(batch, splits)))
    return cdiv(batch, per_split), per_split


def needs_int64(*tensors: torch.Tensor | None) -> bool:
    """True when an element offset into some tensor may not fit in int32. Kernels address a
    tensor from its first element, so what bounds an offset is its shape and strides (with one
    element of margin in every dimension for the indices of masked-out lanes), not the storage
    it views; shapes and strides alone also keep this valid for symbolic and fake tensors."""
    for t in tensors:
        if t is None:
            continue
        shape, strides = t.shape, t.stride()
        try:  # (the limit in the key: tests and compile_check --index64 lower it)
            exceeds = _cached_exceeds_int32(shape, strides, INDEX32_LIMIT)
        except TypeError:  # symbolic sizes (torch.compile): not hashable, decided while tracing
            exceeds = _exceeds_int32(shape, strides, INDEX32_LIMIT)
        if exceeds:
            return True
    return False


def _exceeds_int32(shape, strides, limit: int) -> bool:
    reach = sum(size * stride for size, stride in zip(shape, strides, strict=True))
    return math.prod(shape) > limit or reach > limit


_cached_exceeds_int32 = functools.lru_cache(maxsize=4096)(_exceeds_int32)


def partial_dtype(dtype: torch.dtype) -> torch.dtype:
    """torch dtype partial sums are kept in between kernels (split reductions): int64 for
    integers (exact, wraps like the dtype on the final cast), float64 for float64, float32 for
    the other floats."""
    if dtype in INT_DTYPES or dtype == torch.bool:
        return torch.int64
    if dtype == torch.float64:
        return torch.float64
    return torch.float32


_TRITON_DTYPES = {torch.int64: tl.int64, torch.float64: tl.float64, torch.float32: tl.float32}


def accumulator_dtype(dtype: torch.dtype):
    """Triton dtype sums are kept in inside a kernel: that of :func:`partial_dtype`."""
    return _TRITON_DTYPES[partial_dtype(dtype)]
