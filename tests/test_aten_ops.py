"""The CPU default of the ops without ``algo=`` (issue 14, item 5): unfold, fold, crop and the
causal convolutions run PyTorch's own CPU operations (``aten.py``) on CPU tensors.

Each case runs twice: with ``TRITONCONV_CPU_KERNELS`` unset (the default: ATen, with every
kernel op made to fail, so nothing interpreted can run) and set (the interpreted Triton
kernels). The two must agree: same shape, dtype and strides, integers bitwise, floats (float64)
within tolerance, forward and gradients."""

import time

import pytest
import torch
import torch.nn.functional as F

import tritonconv as tc
from tritonconv import library
from tritonconv.geometry import INT_DTYPES
from tritonconv.testing import assert_close, random_tensor

pytestmark = pytest.mark.skipif(
    not tc.INTERPRETER,
    reason="compares with the Triton kernels interpreted on CPU tensors; this process compiles "
    "them for CUDA (CPU tensors then always run ATen)",
)

#: The kernel ops these functions reach (backward ones included); the ATen path calls none.
KERNEL_OPS = ("unfold", "fold", "crop", "crop_backward", "conv2d_direct", "conv2d_direct_backward")

# (input shape, window): 1-D, 2-D and 3-D windows with stride, dilation and padding;
# unbatched and empty-batch inputs.
WINDOWS = [
    ((2, 3, 11), dict(kernel_size=(3,), dilation=2, padding=1, stride=2)),
    ((3, 10), dict(kernel_size=(4,), padding=2, stride=3)),  # unbatched 1-D
    ((2, 3, 7, 6), dict(kernel_size=(3, 2), dilation=(1, 2), padding=(1, 0), stride=(2, 1))),
    ((2, 5, 4), dict(kernel_size=2, padding=1)),  # unbatched 2-D, int kernel_size
    ((0, 3, 5, 5), dict(kernel_size=(2, 2))),  # empty batch
    (
        (2, 2, 5, 4, 6),
        dict(kernel_size=(2, 3, 2), dilation=(2, 1, 1), padding=(1, 0, 1), stride=(1, 2, 2)),
    ),
    ((2, 4, 5, 3), dict(kernel_size=(3, 1, 2), padding=(1, 0, 0), stride=(2, 1, 1))),  # unbatched
]
WINDOW_IDS = ["1d", "1d_unbatched", "2d", "2d_unbatched", "2d_empty", "3d", "3d_unbatched"]


@pytest.fixture
def both(monkeypatch):
    """``both(fn)``: ``(ours, kernels)``, ``fn()`` on the default ATen path and then on the
    interpreted kernels."""

    def refuse(name):
        def body(*args):
            raise AssertionError(f"the kernel op {name} ran on the ATen path")

        return body

    def run(fn):
        with monkeypatch.context() as patch:
            patch.delenv("TRITONCONV_CPU_KERNELS", raising=False)
            for name in KERNEL_OPS:
                patch.setattr(getattr(library, name), "impl", refuse(name))
            tc.clear_caches()
            try:
                ours = fn()
            finally:
                tc.clear_caches()
        with monkeypatch.context() as patch:
            patch.setenv("TRITONCONV_CPU_KERNELS", "1")
            try:
                kernels = fn()
            finally:
                tc.clear_caches()
        return ours, kernels

    return run


def assert_same(ours, kernels, name=""):
    """Same shape, dtype and strides; integers bitwise, floats within float64 tolerance."""
    assert ours.shape == kernels.shape, f"{name}: {ours.shape} != {kernels.shape}"
    assert ours.dtype == kernels.dtype, f"{name}: {ours.dtype} != {kernels.dtype}"
    if ours.numel() > 1:
        assert ours.stride() == kernels.stride(), f"{name}: {ours.stride()} != {kernels.stride()}"
    if ours.dtype.is_floating_point:
        assert_close(ours, kernels.double(), name=name)
    else:
        assert torch.equal(ours, kernels), name


def _output_size(shape, window):
    """The spatial size a window of ``window["kernel_size"]``'s rank slides over."""
    kernel = window["kernel_size"]
    return shape[-(2 if isinstance(kernel, int) else len(kernel)) :]


def _layout(x, layout):
    if layout == "channels_last":  # 1-D: channels innermost too
        fmt = {4: torch.channels_last, 5: torch.channels_last_3d}.get(x.dim())
        return x.contiguous(memory_format=fmt) if fmt else x.transpose(1, 2).contiguous().mT
    if layout == "strided":  # every other element of a twice-as-wide tensor
        wide = torch.cat([x, x], dim=-1)
        return wide[..., ::2]
    return x


def _grads(fn, leaves):
    """(output, gradients of the leaves) for one random output gradient (fixed seed)."""
    out = fn(*leaves)
    torch.manual_seed(1)
    grad = torch.randn_like(out)
    return out.detach(), torch.autograd.grad(out, leaves, grad) if out.numel() else ()


# --------------------------------------------------------------------------------------------
# unfold and fold
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [*INT_DTYPES, torch.float64, torch.float32, torch.bool])
@pytest.mark.parametrize("case", range(len(WINDOWS)), ids=WINDOW_IDS)
def test_unfold_fold_forward(both, case, dtype):
    """Every dtype: unfold is a copy (bitwise), fold sums overlaps (integers wrap alike)."""
    shape, window = WINDOWS[case]
    x = random_tensor(shape, dtype)
    ours, kernels = both(lambda: tc.unfold(x, **window))
    assert_same(ours, kernels, "unfold")
    assert torch.equal(ours, kernels)  # a copy: bitwise for floats too
    if dtype == torch.bool:  # fold sums: no bool
        return
    cols = random_tensor(ours.shape, dtype)
    ours, kernels = both(lambda: tc.fold(cols, _output_size(shape, window), **window))
    assert_same(ours, kernels, "fold")


@pytest.mark.parametrize("layout", ["channels_last", "strided"])
@pytest.mark.parametrize("dtype", [torch.int8, torch.float64])
@pytest.mark.parametrize("case", [0, 2, 5], ids=["1d", "2d", "3d"])
def test_unfold_fold_layouts(both, case, dtype, layout):
    """Channels-last and non-contiguous inputs: the same (contiguous) outputs."""
    shape, window = WINDOWS[case]
    x = _layout(random_tensor(shape, dtype), layout)
    ours, kernels = both(lambda: tc.unfold(x, **window))
    assert_same(ours, kernels, "unfold")
    cols = _layout(random_tensor(ours.shape, dtype), "strided" if layout == "strided" else "")
    if layout == "channels_last":  # a transposed (N, L, rows) buffer viewed as (N, rows, L)
        cols = cols.transpose(1, 2).contiguous().transpose(1, 2)
    ours, kernels = both(lambda: tc.fold(cols, shape[2:], **window))
    assert_same(ours, kernels, "fold")


@pytest.mark.parametrize(
    "case, dtype",
    [*((case, torch.float64) for case in range(len(WINDOWS))), (2, torch.float32),
     (5, torch.float32), (2, torch.bfloat16), (5, torch.bfloat16)],
    ids=[*WINDOW_IDS, "2d-float32", "3d-float32", "2d-bfloat16", "3d-bfloat16"],
)  # fmt: skip
def test_unfold_fold_gradients(both, case, dtype):
    """Each op's gradient is the other op (float16/bfloat16: summed in float32 either way)."""
    shape, window = WINDOWS[case]
    out_size = _output_size(shape, window)
    x = random_tensor(shape, dtype).requires_grad_()
    (ours, ours_grads), (kernels, kernel_grads) = both(
        lambda: _grads(lambda t: tc.unfold(t, **window), [x])
    )
    assert_same(ours, kernels, "unfold")
    for got, want in zip(ours_grads, kernel_grads, strict=True):
        assert_same(got, want, name="unfold grad")
    cols = random_tensor(ours.shape, dtype).requires_grad_()
    (ours, ours_grads), (kernels, kernel_grads) = both(
        lambda: _grads(lambda t: tc.fold(t, out_size, **window), [cols])
    )
    assert_same(ours, kernels, "fold")
    for got, want in zip(ours_grads, kernel_grads, strict=True):
        assert_same(got, want, name="fold grad")


def test_fold_in_reduced_precision_sums_in_float32(both):
    """float16/bfloat16 blocks are summed in float32 and rounded once, as by the kernels."""
    cols = random_tensor((2, 3 * 9, 36), torch.bfloat16) * 100
    ours, kernels = both(lambda: tc.fold(cols, (6, 6), 3, padding=1, stride=(1, 1)))
    assert_same(ours, kernels, "fold")
    cols = random_tensor((1, 2 * 8, 27), torch.float16)
    ours, kernels = both(lambda: tc.fold(cols, (4, 4, 4), (2, 2, 2), padding=1, stride=2))
    assert torch.equal(ours, kernels)


BAD_CALLS = {
    "unfold_too_large": lambda: tc.unfold(torch.randn(1, 2, 4, 4), 5),
    "unfold_rank": lambda: tc.unfold(torch.randn(2, 4), (2, 2, 2)),
    "fold_rows": lambda: tc.fold(torch.randn(1, 7, 9), (4, 4), 2),
    "fold_bool": lambda: tc.fold(torch.ones(1, 4, 9, dtype=torch.bool), (4, 4), 2),
    "crop_reference": lambda: tc.crop(torch.randn(1, 2, 4, 4), (1, 2, 5, 4)),
    "causal_channels": lambda: tc.causal_conv1d(torch.randn(2, 3, 5), torch.randn(4, 2)),
}


@pytest.mark.parametrize("name", BAD_CALLS)
def test_errors_are_unchanged(both, name):
    """Validation runs first, on either path, with the same messages."""
    errors = []

    def attempt():
        with pytest.raises(ValueError) as info:
            BAD_CALLS[name]()
        errors.append(str(info.value))
        return torch.zeros(())

    both(attempt)
    assert errors[0] == errors[1]


def test_a_3d_fold_of_moderate_size_is_fast(monkeypatch):
    """The ATen path really is the default: a 3-D fold, its gradient and an unfold in well under
    a second (about 0.07 s on a 2-core CPU; the interpreted kernels take about 6 s)."""
    monkeypatch.delenv("TRITONCONV_CPU_KERNELS", raising=False)
    tc.clear_caches()
    try:
        cols = torch.randn(2, 8 * 27, 12 * 12 * 12, requires_grad=True)
        start = time.perf_counter()
        image = tc.fold(cols, (12, 12, 12), (3, 3, 3), padding=1)
        image.sum().backward()
        again = tc.unfold(image.detach(), (3, 3, 3), padding=1)
        assert time.perf_counter() - start < 1.5
        assert again.shape == cols.shape
    finally:
        tc.clear_caches()


# --------------------------------------------------------------------------------------------
# crop
# --------------------------------------------------------------------------------------------

# (input shape, reference, axis, offset, layout)
CROPS = [
    ((2, 3, 7, 6), (2, 3, 4, 3), 2, (1, 2), "contiguous"),
    ((2, 3, 7, 6), (2, 3, 4, 3), 2, None, "channels_last"),
    ((2, 5, 4, 6, 3), (1, 3, 2, 5, 2), 1, 1, "channels_last"),
    ((9,), (4,), 0, 3, "contiguous"),
    ((2, 3, 2, 4, 3, 5), (2, 3, 1, 2, 3, 2), -3, None, "contiguous"),
    ((3, 8, 5), (3, 4, 2), 1, (2, 1), "strided"),
    ((0, 3, 5, 5), (0, 3, 2, 2), 2, 1, "contiguous"),
    ((2, 3, 4, 4), (2, 3, 0, 4), 2, 0, "contiguous"),  # an empty window
]


CROP_DTYPES = [*INT_DTYPES, torch.float64, torch.bfloat16, torch.bool]


@pytest.mark.parametrize(
    "case, dtype",
    [(case, dtype) for case in range(len(CROPS))
     for dtype in (CROP_DTYPES if case in (1, 4, 5) else (torch.int8, torch.float64))],
)  # fmt: skip
def test_crop_forward(both, case, dtype):
    """Every dtype on a channels-last, a 6-D and a strided input; two on the others."""
    shape, ref, axis, offset, layout = CROPS[case]
    x = _layout(random_tensor(shape, dtype), layout)
    ours, kernels = both(lambda: tc.crop(x, list(ref), axis, offset))
    assert_same(ours, kernels, "crop")
    assert torch.equal(ours, kernels)
    if ours.numel():
        assert ours.data_ptr() != x.data_ptr()  # a new tensor, never a view


@pytest.mark.parametrize("case", range(len(CROPS)))
def test_crop_gradients(both, case):
    shape, ref, axis, offset, layout = CROPS[case]
    x = _layout(random_tensor(shape, torch.float64), layout).requires_grad_()
    reference = torch.empty(ref)  # a tensor reference: only its shape is read
    (ours, ours_grads), (kernels, kernel_grads) = both(
        lambda: _grads(lambda t: tc.crop(t, reference, axis, offset), [x])
    )
    assert_same(ours, kernels, "crop")
    for got, want in zip(ours_grads, kernel_grads, strict=True):
        assert_same(got, want, "crop grad")  # the input's layout too
        assert torch.equal(got, want)


# --------------------------------------------------------------------------------------------
# causal_conv1d and causal_conv1d_update
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "activation, channel_last, with_state",
    [(None, False, False), ("silu", True, False), (None, True, True), ("silu", False, True)],
)
def test_causal_conv1d(both, activation, channel_last, with_state):
    batch, dim, width, seqlen = 2, 5, 4, 7
    if channel_last:  # (batch, seqlen, dim) memory, viewed as (batch, dim, seqlen)
        x = torch.randn(batch, seqlen, dim, dtype=torch.float64).transpose(1, 2)
    else:
        x = torch.randn(batch, dim, seqlen, dtype=torch.float64)
    w = torch.randn(dim, width, dtype=torch.float64)
    b = torch.randn(dim, dtype=torch.float64)
    init = torch.randn(batch, dim, width - 1, dtype=torch.float64) if with_state else None
    leaves = [t.requires_grad_() for t in (x, w, b)]

    def call():
        out, final = tc.causal_conv1d(
            *leaves, activation=activation, initial_states=init, return_final_states=True
        )
        torch.manual_seed(1)
        grads = torch.autograd.grad(out, leaves, torch.randn_like(out))
        return out.detach(), final, grads

    (out, final, grads), (k_out, k_final, k_grads) = both(call)
    assert_same(out, k_out, "out")
    assert_same(final, k_final, "final_states")
    for got, want in zip(grads, k_grads, strict=True):
        assert_close(got, want, reduction=width, name="grad")


@pytest.mark.parametrize("with_state", [False, True])
def test_causal_conv1d_of_an_empty_sequence(both, with_state):
    """seqlen 0: no output, the final states the initial ones (or zeros), zero gradients; the
    CPU default once raised PyTorch's 'padded input size' error where the kernels ran."""
    x = torch.randn(2, 3, 0, dtype=torch.float64)
    w = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    init = torch.randn(2, 3, 3, dtype=torch.float64) if with_state else None

    def call():
        out, final = tc.causal_conv1d(x, w, None, "silu", init, return_final_states=True)
        (grad,) = torch.autograd.grad(out.sum(), w)
        return out.detach(), final, grad

    (out, final, grad), (k_out, k_final, k_grad) = both(call)
    assert out.shape == k_out.shape == (2, 3, 0)
    assert_same(final, k_final, "final_states")
    assert_same(grad, k_grad, "grad")
    assert not grad.any()


@pytest.mark.parametrize("dtype", [torch.int32, torch.int8])
def test_causal_conv1d_integers(both, dtype):
    x = random_tensor((2, 3, 6), dtype, low=-50, high=50)
    w = random_tensor((3, 4), dtype, low=-50, high=50)
    b = random_tensor((3,), dtype, low=-50, high=50)
    ours, kernels = both(lambda: tc.causal_conv1d(x, w, b))
    assert_same(ours, kernels, "out")


@pytest.mark.parametrize("steps", [1, 3])
def test_causal_conv1d_update(both, steps):
    batch, dim, width, state_len = 2, 3, 4, 5
    x = torch.randn(batch, dim, steps, dtype=torch.float64)
    if steps == 1:
        x = x[..., 0]
    w = torch.randn(dim, width, dtype=torch.float64)
    b = torch.randn(dim, dtype=torch.float64)
    start = torch.randn(batch, dim, state_len, dtype=torch.float64)

    def call():
        state = start.clone()
        return tc.causal_conv1d_update(x, state, w, b, "silu"), state

    (out, state), (k_out, k_state) = both(call)
    assert_same(out, k_out, "out")
    assert torch.equal(state, k_state)


# (function, input shape, weight shape, keyword arguments). PyTorch makes a convolution
# channels-last when its input or its weight is: cuDNN's rule for 2-D and 3-D (PyTorch's CPU
# backends follow it in 2-D; its CPU conv3d stays contiguous, so the expectation is the rule's).
WEIGHT_LAYOUT_CALLS = [
    (F.conv2d, (2, 4, 5, 5), (6, 4, 3, 3), {}),
    (F.conv2d, (4, 5, 5), (6, 4, 3, 3), {}),  # unbatched: its batch of one, squeezed
    (F.conv2d, (2, 1, 5, 5), (3, 1, 3, 3), {}),  # one channel: either layout's strides
    (F.conv2d, (2, 4, 6, 5), (4, 1, 3, 3), dict(groups=4, stride=2, padding=1)),
    (F.conv_transpose2d, (2, 4, 3, 3), (4, 6, 3, 3), dict(stride=2)),
    (F.conv3d, (1, 2, 3, 4, 4), (3, 2, 2, 2, 2), {}),
]


@pytest.mark.parametrize(
    "reference, x_shape, w_shape, kwargs",
    WEIGHT_LAYOUT_CALLS,
    ids=["conv2d", "unbatched", "one-channel", "depthwise", "transposed", "conv3d"],
)
def test_a_channels_last_weight_makes_a_channels_last_output(
    both, reference, x_shape, w_shape, kwargs
):
    """A contiguous input and a channels-last weight: a channels-last output (it used to
    follow the input alone), on the default path and the kernels."""
    fmt = torch.channels_last if len(w_shape) == 4 else torch.channels_last_3d
    x = torch.randn(x_shape, dtype=torch.float64)
    w = torch.empty(w_shape, dtype=torch.float64, memory_format=fmt).normal_()
    want = reference(x, w, **kwargs)
    batch_shape = want.shape if x.dim() == len(w_shape) else (1, *want.shape)
    strides = torch.empty(batch_shape, memory_format=fmt).stride()[len(batch_shape) - want.dim() :]
    got, kernels = both(lambda: getattr(tc, reference.__name__)(x, w, **kwargs))
    for out in (got, kernels):
        assert out.stride() == strides
        assert_close(out, want)
