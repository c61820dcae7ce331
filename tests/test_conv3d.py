"""conv3d and conv_transpose3d (issue 12): the implicit-GEMM kernels over three spatial axes.

Against float64 PyTorch (forward and every gradient) and bitwise against PyTorch's CPU integer
convolution; channels_last_3d, unbatched inputs, empty batches, modules and ``convert``, and
the errors of bad arguments.
"""

import pytest
import torch
import torch.nn.functional as F

import tritonconv as tc
from tritonconv import TritonConvError
from tritonconv.testing import assert_close, exact_fp32, random_tensor

# (input shape, weight shape, kwargs)
CONV3D = [
    ((2, 6, 5, 7, 6), (4, 3, 3, 2, 3), dict(stride=(2, 1, 2), padding=(1, 0, 1),
                                          dilation=(1, 2, 1), groups=2)),
    ((1, 16, 4, 6, 5), (16, 16, 1, 3, 3), dict(padding=(0, 1, 1))),  # (2+1)D spatial part
    ((3, 4, 6, 3, 3), (8, 4, 3, 1, 1), dict(padding="same")),  # (2+1)D temporal part
    ((2, 3, 5, 5, 5), (2, 3, 2, 2, 2), dict(stride=2, padding="valid")),
]  # fmt: skip
TRANSPOSED3D = [
    ((2, 4, 3, 4, 3), (4, 3, 2, 3, 2), dict(stride=2, padding=(0, 1, 0),
                                          output_padding=(1, 0, 1), dilation=(1, 1, 2))),
    ((1, 6, 3, 3, 3), (6, 2, 2, 2, 2), dict(stride=2, groups=3)),  # 3-D UNet up
]  # fmt: skip


def _check(ours, theirs, x, w, b, kwargs, reduction):
    leaves = [t.to(x.device).requires_grad_() if t is not None else None for t in (x, w, b)]
    refs = [t.detach().cpu().double().requires_grad_() if t is not None else None
            for t in (x, w, b)]  # fmt: skip
    y = ours(*leaves, **kwargs)
    ref = theirs(*refs, **kwargs)
    assert_close(y, ref, reduction=reduction)
    dy = random_tensor(ref.shape, x.dtype, x.device)
    got = torch.autograd.grad(y, [t for t in leaves if t is not None], dy)
    want = torch.autograd.grad(ref, [t for t in refs if t is not None], dy.cpu().double())
    for g, r in zip(got, want, strict=True):
        assert_close(g, r, reduction=max(reduction, ref[0, 0].numel() * ref.shape[0]))
    return y


@pytest.mark.parametrize("case", range(len(CONV3D)))
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_conv3d_matches_float64(case, dtype, device):
    x_shape, w_shape, kwargs = CONV3D[case]
    x = random_tensor(x_shape, dtype, device)
    w = random_tensor(w_shape, dtype, device)
    b = random_tensor((w_shape[0],), dtype, device)
    with exact_fp32():
        _check(tc.conv3d, F.conv3d, x, w, b, kwargs, reduction=w[0].numel())
        if dtype == torch.float32:
            x = x.to(memory_format=torch.channels_last_3d)
            y = _check(tc.conv3d, F.conv3d, x, w, None, kwargs, reduction=w[0].numel())
            assert y.is_contiguous(memory_format=torch.channels_last_3d)


@pytest.mark.parametrize("case", range(len(TRANSPOSED3D)))
def test_conv_transpose3d_matches_float64(case, device):
    x_shape, w_shape, kwargs = TRANSPOSED3D[case]
    x = random_tensor(x_shape, torch.float64, device)
    w = random_tensor(w_shape, torch.float64, device)
    b = random_tensor((w_shape[1] * kwargs.get("groups", 1),), torch.float64, device)
    _check(tc.conv_transpose3d, F.conv_transpose3d, x, w, b, kwargs, reduction=w.numel())


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int8, torch.uint8])
def test_integer_conv3d_is_exact(dtype, device):
    x = random_tensor((2, 4, 5, 4, 6), dtype, "cpu")
    w = random_tensor((3, 4, 3, 2, 3), dtype, "cpu")
    b = random_tensor((3,), dtype, "cpu")
    kw = dict(stride=(1, 2, 1), padding=1)
    wide = [t.to(torch.int64) for t in (x, w, b)]
    expected = F.conv3d(*wide, **kw).to(dtype)  # int64 wraps mod 2**64 like ours, then cast
    got = tc.conv3d(x.to(device), w.to(device), b.to(device), **kw)
    assert got.dtype == dtype and torch.equal(got.cpu(), expected)
    wt = random_tensor((4, 3, 2, 2, 2), dtype, "cpu")
    expected_t = F.conv_transpose3d(x.long(), wt.long(), stride=2, output_padding=1).to(dtype)
    got_t = tc.conv_transpose3d(x.to(device), wt.to(device), stride=2, output_padding=1)
    assert torch.equal(got_t.cpu(), expected_t)


def test_unbatched_and_empty_batch(device):
    x = random_tensor((4, 5, 5, 5), torch.float64, device)
    w = random_tensor((6, 4, 3, 3, 3), torch.float64, device)
    assert_close(tc.conv3d(x, w, padding=1), F.conv3d(x.cpu(), w.cpu(), padding=1))
    empty = random_tensor((0, 4, 5, 5, 5), torch.float64, device).requires_grad_()
    y = tc.conv3d(empty, w, padding=1)
    assert y.shape == (0, 6, 5, 5, 5)
    (gx,) = torch.autograd.grad(y.sum(), empty)
    assert gx.shape == empty.shape


def test_modules_and_convert(device):
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv3d(3, 4, (1, 3, 3), padding=(0, 1, 1)),
        torch.nn.ReLU(),
        torch.nn.Conv3d(4, 4, (3, 1, 1), padding=(1, 0, 0), padding_mode="replicate"),
        torch.nn.ConvTranspose3d(4, 2, 2, stride=2),
    ).double()
    x = torch.randn(1, 3, 4, 5, 5, dtype=torch.float64)
    expected = model(x)
    converted = tc.nn.convert(model).to(device)
    assert sum(isinstance(m, (tc.nn.Conv3d, tc.nn.ConvTranspose3d)) for m in converted) == 3
    assert_close(converted(x.to(device)), expected, reduction=64)
    module = tc.nn.ConvTranspose3d(4, 2, 3, stride=2).double().to(device)
    out = module(torch.randn(1, 4, 3, 3, 3, dtype=torch.float64, device=device),
                 output_size=(8, 8, 8))  # fmt: skip
    assert out.shape == (1, 2, 8, 8, 8)


def test_errors_before_any_kernel(device):
    x = random_tensor((1, 4, 5, 5, 5), torch.float32, device)
    w = random_tensor((4, 4, 3, 3, 3), torch.float32, device)
    with pytest.raises(TritonConvError, match="has no 3-D kernel"):
        tc.conv3d(x, w, algo="direct")
    with pytest.raises(RuntimeError, match=r"Expected 4D .unbatched. or 5D .batched. input"):
        tc.conv3d(x[0, 0], w)
    with pytest.raises(RuntimeError, match="output padding must be smaller than"):
        tc.conv_transpose3d(x, w, stride=2, output_padding=2)
    with pytest.raises(RuntimeError, match=r"expected input.* to have 8 channels"):
        tc.conv3d(x, random_tensor((4, 8, 3, 3, 3), torch.float32, device))
