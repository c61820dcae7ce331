"""Higher derivatives: a backward recorded with ``create_graph=True`` (a gradient penalty, a
Hessian-vector product, ``autograd.functional.jvp``) gives PyTorch's second derivatives, for
every algorithm of every op with gradients (the backward ops' tensors have no history, so a
recorded backward takes the ops' differentiable forms: ``autograd.py``). Once, the penalty
term was silently dropped (an adversarial review, session 13)."""

import pytest
import torch
import torch.nn.functional as F

import tritonconv as tc
from tritonconv.testing import DEVICE, assert_close


def _leaf(*shape):
    return torch.randn(*shape, dtype=torch.float64, device=DEVICE, requires_grad=True)


def _penalised(fn, x, w, b):
    """The gradients of ``sum(y) + |dsum(y^2)/dx|^2`` (WGAN-GP's penalty shape) for ``y =
    fn(x, w, b)``: first derivatives recorded, then differentiated again."""
    y = fn(x, w, b)
    (gx,) = torch.autograd.grad(y.pow(2).sum(), x, create_graph=True)
    inputs = [t for t in (x, w, b) if t is not None]
    return torch.autograd.grad(y.sum() + gx.pow(2).sum(), inputs)


def _check(ours, reference, x, w, b=None):
    got = _penalised(ours, x, w, b)
    want = _penalised(reference, x, w, b)
    for g, e in zip(got, want, strict=True):
        assert_close(g, e)


CONV2D_ALGOS = ["auto", "implicit_gemm", "im2col_gemm", "direct"]


@pytest.mark.parametrize("algo", CONV2D_ALGOS)
def test_conv2d(algo):
    x, w, b = _leaf(2, 3, 5, 6), _leaf(4, 3, 3, 3), _leaf(4)

    def ours(x, w, b):
        return tc.conv2d(x, w, b, 2, (1, 0), algo=algo)

    _check(ours, lambda x, w, b: F.conv2d(x, w, b, 2, (1, 0)), x, w, b)


@pytest.mark.parametrize("stride", [1, 2])
def test_depthwise(stride):
    x, w = _leaf(1, 4, 6, 5), _leaf(8, 1, 3, 3)

    def ours(x, w, b):
        return tc.conv2d(x, w, None, stride, 1, groups=4, algo="depthwise")

    _check(ours, lambda x, w, b: F.conv2d(x, w, None, stride, 1, groups=4), x, w)


def test_asymmetric_same_padding_conv1d_and_conv3d():
    x, w = _leaf(2, 3, 9), _leaf(2, 3, 4)
    _check(
        lambda x, w, b: tc.conv1d(x, w, padding="same", dilation=2),
        lambda x, w, b: F.conv1d(x, w, padding="same", dilation=2),
        x,
        w,
    )
    x, w, b = _leaf(1, 2, 3, 4, 4), _leaf(3, 2, 2, 2, 2), _leaf(3)
    _check(
        lambda x, w, b: tc.conv3d(x, w, b, 1, 1), lambda x, w, b: F.conv3d(x, w, b, 1, 1), x, w, b
    )


@pytest.mark.parametrize("algo", ["auto", "implicit_gemm", "im2col_gemm", "direct"])
def test_conv_transpose2d(algo):
    x, w, b = _leaf(2, 4, 3, 4), _leaf(4, 3, 3, 3), _leaf(3)

    def ours(x, w, b):
        return tc.conv_transpose2d(x, w, b, 2, 1, 1, algo=algo)

    _check(ours, lambda x, w, b: F.conv_transpose2d(x, w, b, 2, 1, 1), x, w, b)


def test_causal_conv1d():
    x, w, b = _leaf(2, 3, 7), _leaf(3, 4), _leaf(3)

    def reference(x, w, b):
        y = F.conv1d(x, w[:, None], b, padding=3, groups=3)[..., :7]
        return F.silu(y)

    _check(lambda x, w, b: tc.causal_conv1d(x, w, b, "silu"), reference, x, w, b)


def test_unfold_fold_and_crop_jvp():
    """Forward-mode products by double backward (``autograd.functional.jvp``)."""
    x, v = (
        torch.randn(1, 2, 5, 4, dtype=torch.float64),
        torch.randn(1, 2, 5, 4, dtype=torch.float64),
    )
    x, v = x.to(DEVICE), v.to(DEVICE)
    _, got = torch.autograd.functional.jvp(lambda t: tc.unfold(t, 2, padding=1), x, v)
    assert_close(got, F.unfold(v, 2, padding=1))
    cols = F.unfold(x, 2, padding=1)
    dcols = torch.randn_like(cols)
    _, got = torch.autograd.functional.jvp(lambda t: tc.fold(t, (5, 4), 2, padding=1), cols, dcols)
    assert_close(got, F.fold(dcols, (5, 4), 2, padding=1))
    _, got = torch.autograd.functional.jvp(lambda t: tc.crop(t, (1, 2, 3, 2), offset=1), x, v)
    assert_close(got, v[:, :, 1:4, 1:3])


def test_gradgradcheck_conv2d():
    x, w, b = _leaf(1, 2, 4, 3), _leaf(2, 2, 2, 2), _leaf(2)
    assert torch.autograd.gradgradcheck(lambda x, w, b: tc.conv2d(x, w, b, padding=1), (x, w, b))


def test_first_order_gradients_stay_the_kernels():
    """Without ``create_graph`` the backward is the kernels' own (no PyTorch convolution)."""
    x, w = _leaf(1, 2, 4, 3), _leaf(2, 2, 2, 2)
    y = tc.conv2d(x, w, padding=1, algo="direct")
    (gx,) = torch.autograd.grad(y.sum(), x)
    assert gx.grad_fn is None and not gx.requires_grad
    assert_close(gx, torch.autograd.grad(F.conv2d(x, w, padding=1).sum(), x)[0])
