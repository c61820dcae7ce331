"""The fixed-order reductions (``ops/common.py``): the bias gradient's per-channel sum and the
split partials' sum with two outputs, against float64 or exact integer references."""

import pytest
import torch

import tritonconv
from tritonconv import library
from tritonconv.ops import common
from tritonconv.testing import assert_close, poison_, random_tensor


def _layouts(t):
    """``t`` as NCHW, channels-last, every other column of a wider tensor, and a stride-0
    expansion (the output gradient of ``y.sum().backward()``)."""
    yield "contiguous", t
    if t.dim() in (4, 5):
        fmt = torch.channels_last if t.dim() == 4 else torch.channels_last_3d
        yield "channels_last", t.contiguous(memory_format=fmt)
    wide = torch.zeros((*t.shape[:-1], 2 * t.shape[-1]), dtype=t.dtype, device=t.device)
    wide[..., ::2] = t
    yield "strided", wide[..., ::2]
    yield "expanded", t[:1, :, :1].expand(t.shape)


@pytest.mark.parametrize(
    "shape",
    [(3, 5, 7, 11), (1, 70, 6, 6), (2, 1, 9, 4), (2, 3, 37), (2, 3, 2, 3, 5), (1, 2, 1, 1)],
    ids=("4d", "wide-c", "one-c", "3d", "5d", "one-pixel"),
)
def test_channel_sum_matches_float64(shape, device):
    for name, t in _layouts(random_tensor(shape, torch.float64, device)):
        expected = t.cpu().sum(dim=(0, *range(2, t.dim())))
        assert_close(common.channel_sum(t), expected, reduction=t.numel(), name=name)


@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16))
def test_channel_sum_low_precision(dtype, device):
    t = random_tensor((2, 40, 9, 13), dtype, device).to(memory_format=torch.channels_last)
    got = common.channel_sum(t)
    assert got.dtype == dtype
    assert_close(got, t.cpu().double().sum((0, 2, 3)), reduction=2 * 9 * 13)


@pytest.mark.parametrize("dtype", (torch.int8, torch.int32, torch.int64))
def test_channel_sum_integers_wrap_like_the_dtype(dtype, device):
    t = random_tensor((3, 4, 9, 7), dtype, device)
    expected = t.cpu().long().sum((0, 2, 3)).to(dtype)  # exact, then wrapped
    assert torch.equal(common.channel_sum(t).cpu(), expected)


def test_channel_sum_of_nothing(device):
    empty_batch = torch.randn(0, 3, 4, 4, device=device)
    assert torch.equal(common.channel_sum(empty_batch).cpu(), torch.zeros(3))
    assert common.channel_sum(torch.randn(2, 0, 4, 4, device=device)).shape == (0,)


def test_channel_sum_writes_everything_and_is_reproducible(device, monkeypatch):
    """Partials and output start as NaN; two runs agree bitwise."""
    from tritonconv import launch

    real = launch.torch.empty

    def poisoned(*args, **kwargs):
        return poison_(real(*args, **kwargs))

    monkeypatch.setattr(launch.torch, "empty", poisoned)
    t = random_tensor((4, 6, 33, 17), torch.float32, device)
    first, second = common.channel_sum(t), common.channel_sum(t)
    assert torch.equal(first, second)
    assert_close(first, t.cpu().double().sum((0, 2, 3)), reduction=4 * 33 * 17)


@pytest.mark.parametrize(
    "shape, dtype, launched",
    [
        ((1, 64, 4, 8), torch.bfloat16, ["channel_sum_partials_kernel"]),  # 32 rows: one split
        ((1, 64, 4, 8), torch.int8, ["channel_sum_partials_kernel"]),
        ((4, 6, 33, 17), torch.float32, ["channel_sum_partials_kernel", "sum_partials_kernel"]),
    ],
    ids=("one-split", "one-split-int8", "splits"),
)
def test_channel_sum_of_one_split_is_one_launch(shape, dtype, launched, device, common_kernels):
    """Rows that fit one split (a squeeze-excitation layer's bias gradient: one row an
    image) are summed and stored, cast, by one launch; more rows add the split sum's."""
    t = random_tensor(shape, dtype, device).to(memory_format=torch.channels_last)
    got = common.channel_sum(t)
    assert common_kernels == launched
    assert got.dtype == dtype
    if dtype.is_floating_point:
        expected = t.cpu().double().sum((0, 2, 3))
        assert_close(got, expected, reduction=t.numel() // shape[1])
    else:
        assert torch.equal(got.cpu(), t.cpu().long().sum((0, 2, 3)).to(dtype))


def test_sum_partials_into_two_outputs(device):
    partial = random_tensor((7, 3 * 9 + 3), torch.float32, device)
    weight = poison_(torch.empty(3, 1, 3, 3, dtype=torch.bfloat16, device=device))
    bias = poison_(torch.empty(3, dtype=torch.bfloat16, device=device))
    common.sum_partials(partial, weight, bias)
    total = partial.cpu().double().sum(0)
    assert_close(weight, total[:27].view(3, 1, 3, 3), reduction=7)
    assert_close(bias, total[27:], reduction=7)


@pytest.mark.parametrize(
    "shape, splits, dtype",
    [
        ((5, 3, 7), 4, torch.float32),  # (rows, taps, channels): primes
        ((3, 9, 16), 13, torch.bfloat16),  # 3x3 taps, several split steps
        ((2, 1, 5), 2, torch.float32),  # one tap: the layouts coincide
        ((4, 27, 3), 3, torch.int32),  # integers: exact int64 partials, wrapped on store
    ],
    ids=("primes", "3x3-bf16", "one-tap", "int32"),
)
def test_sum_partials_from_channels_last_into_contiguous(shape, splits, dtype, device):
    """``channels_to_taps``: splits laid out ``[rows, taps, channels]`` (a weight gradient's
    channels-last partials) summed into a poisoned ``[rows, channels, taps]`` output (the
    contiguous weight's layout), every element written, the same sums as the plain path."""
    rows, taps, channels = shape
    if dtype == torch.int32:
        partial = random_tensor((splits, *shape), torch.int64, device, low=-(2**40), high=2**40)
    else:
        partial = random_tensor((splits, *shape), torch.float32, device)
    out = poison_(torch.empty((rows, channels, taps), dtype=dtype, device=device))
    common.sum_partials(partial, out, channels_to_taps=(taps, channels))
    plain = poison_(torch.empty(shape, dtype=dtype, device=device))
    common.sum_partials(partial, plain)
    assert torch.equal(out.cpu(), plain.cpu().transpose(1, 2))  # (the same sums, moved)
    if dtype == torch.int32:
        assert torch.equal(out.cpu(), partial.cpu().sum(0).to(dtype).transpose(1, 2))
    else:
        want = partial.cpu().double().sum(0).transpose(1, 2)
        assert_close(out, want, reduction=splits)
    with pytest.raises(ValueError, match="one output"):
        common.sum_partials(partial, out, out[:, 0], channels_to_taps=(taps, channels))


def test_channel_sum_op_passes_opcheck(device):
    t = random_tensor((2, 3, 5, 4), torch.float64, device)
    torch.library.opcheck(torch.ops.tritonconv.channel_sum, (t,))


@pytest.mark.parametrize("kernel", (3, 5), ids=("fused", "separate"))
@pytest.mark.parametrize("wanted", ("x,w,b", "w,b", "b", "x,b", "x,w"))
def test_depthwise_bias_gradient_with_every_mask(kernel, wanted, device):
    """The kernels up to 3x3 sum the bias gradient beside dW (one partial buffer, one
    reduction); without dW, or for larger kernels, ``channel_sum`` does. Every mask of wanted
    gradients gives what PyTorch gives in float64."""
    C = 5
    x = random_tensor((3, C, 11, 9), torch.float64, device).to(memory_format=torch.channels_last)
    w = random_tensor((2 * C, 1, kernel, kernel), torch.float64, device)
    b = random_tensor((2 * C,), torch.float64, device)
    names = wanted.split(",")
    leaves = [t.detach().requires_grad_(n in names) for t, n in zip((x, w, b), "xwb")]
    ref_leaves = [t.detach().cpu().requires_grad_(n in names) for t, n in zip((x, w, b), "xwb")]
    kw = dict(padding=kernel // 2, groups=C)
    y = tritonconv.conv2d(*leaves, algo="depthwise", **kw)
    ref = torch.nn.functional.conv2d(*ref_leaves, **kw)
    dy = random_tensor(y.shape, torch.float64, device)
    got = torch.autograd.grad(y, [t for t in leaves if t.requires_grad], dy)
    want = torch.autograd.grad(ref, [t for t in ref_leaves if t.requires_grad], dy.cpu())
    for name, g, r in zip(names, got, want, strict=True):
        assert_close(g, r, reduction=3 * 11 * 9 * kernel * kernel, name=name)


def test_backward_ops_return_the_bias_gradient(device):
    """Each convolution backward op gives (dx, dW, db) with a mask of three; db is the
    output gradient's channel sum, empty when not asked for."""
    x = random_tensor((2, 4, 7, 6), torch.float64, device)
    w = random_tensor((6, 2, 3, 3), torch.float64, device)
    geometry = ([1, 1], [1, 1], [1, 1], [1, 1], 2)
    dy = random_tensor((2, 6, 7, 6), torch.float64, device)
    expected = dy.cpu().sum((0, 2, 3))
    calls = {
        "gemm": lambda mask: library.conv2d_gemm_backward(dy, x, w, *geometry, 1 << 30, mask),
        "direct": lambda mask: library.conv2d_direct_backward(dy, x, w, *geometry, False, mask),
        "implicit_gemm": lambda mask: library.conv_implicit_gemm_backward(
            dy, x, w, *geometry, [], mask
        ),
    }
    for name, call in calls.items():
        _, _, db = call([False, False, True])
        assert_close(db, expected, reduction=2 * 7 * 6, name=name)
        _, _, none = call([True, True, False])
        assert none.numel() == 0, name
