"""Test helpers shared by the test suite, the CLI's ``verify``/``demo`` and the benchmarks.

References are computed in float64 (or exactly, for integers) by PyTorch. Tolerances live here
and only here: ``rtol`` per dtype, ``atol`` scaled by the length of the reduction behind each
output element.
"""

from __future__ import annotations

import contextlib
import math

import torch

from ._runtime import kernel_device_type
from .ops.common import channels_last_format

#: The device tritonconv's kernels take in this process ("cpu" under the interpreter).
DEVICE = kernel_device_type()

# rtol per dtype; atol = ATOL_PER_TERM[dtype] * sqrt(reduction length) (random-walk growth)
RTOL = {
    torch.float16: 2e-3,
    torch.bfloat16: 1.6e-2,
    torch.float32: 1.3e-5,
    torch.float64: 1e-10,
}
ATOL_PER_TERM = {
    torch.float16: 2e-3,
    torch.bfloat16: 1.6e-2,
    torch.float32: 2e-5,
    torch.float64: 1e-11,
}


def tolerance(dtype: torch.dtype, reduction: int = 1) -> tuple[float, float]:
    """(atol, rtol) for a result of ``dtype`` summing ``reduction`` products per element.

    fp32 reductions on the GPU may use TF32 when the user allows it; tests turn it off.
    """
    scale = math.sqrt(max(1, reduction))
    return ATOL_PER_TERM[dtype] * scale, RTOL[dtype]


@contextlib.contextmanager
def exact_fp32():
    """fp32 means fp32 inside: no TF32 in cuBLAS GEMMs, cuDNN references or our ``tl.dot``."""
    old = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = old


def assert_close(actual: torch.Tensor, expected: torch.Tensor, *, reduction: int = 1, name=""):
    """Compare ``actual`` against a float64 (or exact integer) ``expected``.

    Integers and bool must match exactly. Floats must be within :func:`tolerance`; the message
    says how many elements mismatch, the worst one and where it is.
    """
    assert actual.shape == expected.shape, (
        f"{name} shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    )
    actual = actual.detach().cpu()
    expected = expected.detach().cpu()
    if not actual.dtype.is_floating_point:
        mismatch = actual.to(torch.int64) != expected.to(torch.int64)  # no wrapping first
        if mismatch.any():
            where = mismatch.nonzero()[0].tolist()
            raise AssertionError(
                f"{name}: {int(mismatch.sum())} of {actual.numel()} elements differ "
                f"(first at {where}: {actual[tuple(where)].item()} != "
                f"{expected[tuple(where)].item()})"
            )
        return
    atol, rtol = tolerance(actual.dtype, reduction)
    a = actual.double()
    e = expected.double()
    bad = ~((a - e).abs() <= atol + rtol * e.abs())
    if bad.any():
        err = (a - e).abs()
        where = tuple(
            int(i) for i in torch.unravel_index(err.nan_to_num(float("inf")).argmax(), err.shape)
        )
        raise AssertionError(
            f"{name}: {int(bad.sum())} of {a.numel()} elements outside atol={atol:.2e} "
            f"rtol={rtol:.1e}; worst at {list(where)}: {a[where].item()!r} vs {e[where].item()!r}"
        )


def random_tensor(shape, dtype: torch.dtype, device=DEVICE, *, generator=None, low=None, high=None):
    """Fresh random data: normal floats, or integers spread over ``[low, high)`` (default: the
    dtype's full range for 8-bit types, ±1000 for wider ones)."""
    if dtype.is_floating_point:
        return torch.randn(shape, generator=generator).to(dtype=dtype, device=device)
    if dtype == torch.bool:
        return (torch.rand(shape, generator=generator) < 0.5).to(device)
    info = torch.iinfo(dtype)
    if low is None:
        low, high = (info.min, info.max + 1) if info.bits == 8 else (-1000, 1000)
        if info.min == 0:
            low = 0
    return torch.randint(low, high, shape, generator=generator, dtype=torch.int64).to(
        dtype=dtype, device=device
    )


def rows_layout(t: torch.Tensor) -> torch.Tensor:
    """``t`` dense channels-last: channels innermost (for 1-D ``(N, C, L)``: ``L`` outermost
    after the batch), the layout the TMA paths read as rows of channels."""
    if t.dim() == 3:
        return t.transpose(1, 2).contiguous().transpose(1, 2)
    return t.contiguous(memory_format=channels_last_format(t.dim()))


def poison_(tensor: torch.Tensor) -> torch.Tensor:
    """Fill an output buffer with a value no kernel produces by accident (NaN, or the dtype's
    extreme), so that elements a kernel forgot to write stand out."""
    if tensor.dtype.is_floating_point:
        return tensor.fill_(float("nan"))
    if tensor.dtype == torch.bool:
        return tensor.fill_(True)
    return tensor.fill_(torch.iinfo(tensor.dtype).min)


def is_leading_part(t: torch.Tensor) -> bool:
    """Whether ``t`` (not empty) covers a leading run of its buffer: no storage offset, no gaps
    (the whole buffer, or its first ``t.numel()`` elements in some order)."""
    from .launch import _extent

    start, last = _extent(t)
    return start == 0 and last + 1 == t.numel()


def check_no_view_written(graph: torch.fx.Graph) -> None:
    """Raise where a kernel traced into ``graph`` writes a view with a storage offset or gaps
    (a leading part of a buffer is fine: our kernels write inside their arguments). For
    ``torch._inductor.config.post_grad_custom_pre_pass``: it runs before re-inplacing, while
    each kernel call still names the tensors it writes.

    Inductor clones such a view into a buffer sized to the view, and torch 2.11 then reads and
    writes past that buffer: compiled MobileNetV3's training step faulted this way on the GPU
    (the strided depthwise input gradient's phases each wrote a strided view of dx; session 17).
    """
    from torch._higher_order_ops.triton_kernel_wrap import kernel_side_table

    wrapper = torch.ops.higher_order.triton_kernel_wrapper_functional
    for node in graph.nodes:
        if node.target is not wrapper:
            continue
        for name in node.kwargs["tensors_to_clone"]:
            val = node.kwargs["kwargs"][name].meta["val"]
            if val.numel() and not is_leading_part(val):
                kernel = kernel_side_table.get_kernel(node.kwargs["kernel_idx"])
                kernel = getattr(kernel, "fn", kernel)  # (an Autotuner wraps the JITFunction)
                raise AssertionError(
                    f"{kernel.__name__} writes {name} through a strided or offset view (size "
                    f"{tuple(val.shape)}, strides {val.stride()}, offset {val.storage_offset()})"
                )


def without_plan_memos(model: torch.nn.Module) -> torch.nn.Module:
    """``model`` (in place) with every tritonconv convolution module's plan memo replaced by
    one that never holds a plan: each call looks its plan up, as before the memo
    (``functional.memoized_convolution``); for tests and A/B timings."""
    from . import functional
    from . import nn as tnn

    class NoMemo(functional.PlanMemo):
        __slots__ = ()
        entry = property(lambda self: None, lambda self, value: None)

    for module in model.modules():
        if isinstance(module, tnn._Converted):
            module.__dict__["_plan_memo"] = NoMemo()
    return model
