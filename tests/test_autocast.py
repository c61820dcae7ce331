"""``torch.autocast`` (PyTorch's mixed precision): tritonconv's convolutions run in the autocast
dtype as ``F.conv*`` do, their output in it, the gradients reaching float32 parameters in
float32 (they ran in float32 on the kernels and came out float32 on the CPU default, an
adversarial review found, session 13). Compared with the same call on the autocast dtype's
copies of the tensors, in float64."""

import pytest
import torch

import tritonconv as tc
from tritonconv.testing import DEVICE, assert_close

# (function, input shape, weight shape, reduction length of one output)
CALLS = [
    (tc.conv1d, (2, 3, 9), (4, 3, 3), 9),
    (tc.conv2d, (2, 3, 6, 5), (4, 3, 3, 3), 27),
    (tc.conv3d, (1, 2, 3, 4, 4), (3, 2, 2, 2, 2), 16),
    (tc.conv_transpose2d, (2, 4, 3, 3), (4, 3, 3, 3), 36),
]


@pytest.mark.parametrize(
    "fn, x_shape, w_shape, reduction", CALLS, ids=lambda v: getattr(v, "__name__", "")
)
def test_convolutions_run_in_the_autocast_dtype(fn, x_shape, w_shape, reduction):
    dtype = torch.bfloat16
    x = torch.randn(x_shape, device=DEVICE)
    w = torch.randn(w_shape, device=DEVICE, requires_grad=True)
    b = torch.randn(
        w_shape[1 if "transpose" in fn.__name__ else 0], device=DEVICE, requires_grad=True
    )
    with torch.autocast(torch.device(DEVICE).type, dtype=dtype):
        y = fn(x, w, b, padding=1)
    assert y.dtype == dtype
    exact = [t.detach().to(dtype).double().requires_grad_() for t in (x, w, b)]
    want = getattr(torch.nn.functional, fn.__name__)(*exact, padding=1)
    assert_close(y, want, reduction=reduction)
    gw, gb = torch.autograd.grad(y.float().sum(), (w, b))
    assert gw.dtype == gb.dtype == torch.float32
    want_w, want_b = torch.autograd.grad(want.sum(), exact[1:])
    assert_close(gw.to(dtype), want_w, reduction=y[0, 0].numel() * y.shape[0])
    assert_close(gb.to(dtype), want_b, reduction=y[0, 0].numel() * y.shape[0])


def test_float64_and_integers_are_left_as_they_are():
    x, w = torch.randn(1, 2, 5, 5, dtype=torch.float64, device=DEVICE), torch.randn(3, 2, 3, 3)
    xi = torch.randint(-5, 5, (1, 2, 5, 5), device=DEVICE)
    with torch.autocast(torch.device(DEVICE).type, dtype=torch.bfloat16):
        assert tc.conv2d(x, w.double().to(DEVICE)).dtype == torch.float64
        assert tc.conv2d(xi, xi[:, :, :3, :3].expand(3, 2, 3, 3).contiguous()).dtype == torch.int64
