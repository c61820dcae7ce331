"""unfold (im2col) and fold (col2im) against torch.nn.functional, every dtype, odd geometries."""

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st

import tritonconv as tc
from tritonconv.geometry import INT_DTYPES, make_geometry
from tritonconv.ops import common
from tritonconv.ops import im2col as im2col_ops
from tritonconv.testing import assert_close, poison_, random_tensor

# (N, C, H, W, kernel_size, dilation, padding, stride)
GEOMETRIES = [
    (2, 3, 7, 11, (3, 2), (1, 2), (1, 0), (2, 1)),  # asymmetric everything
    (1, 1, 5, 5, 5, 1, 0, 1),  # kernel = input
    (1, 2, 3, 4, (5, 6), 1, (1, 1), 1),  # kernel = padded input
    (3, 4, 13, 9, 3, 2, 2, 3),  # primes, dilation, stride
    (2, 5, 6, 6, 1, 1, 0, 1),  # 1x1
    (1, 3, 17, 5, (1, 3), (3, 1), (2, 1), (1, 2)),
]
IDS = [f"g{i}" for i in range(len(GEOMETRIES))]


def _window(g):
    return dict(kernel_size=g[4], dilation=g[5], padding=g[6], stride=g[7])


def reference_fold_exact(cols: torch.Tensor, output_size, kernel_size, dilation, padding, stride):
    """F.fold computed exactly in int64 by slice additions (PyTorch's fold has no integers)."""
    geom = make_geometry(
        output_size,
        *[
            tc.geometry.expand_param(v, 2, "")
            for v in (kernel_size, stride, padding, padding, dilation)
        ],
    )
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = (
        geom.kernel,
        geom.stride,
        geom.pad_before,
        geom.dilation,
    )
    (H, W), (OH, OW) = geom.input, geom.output
    N = cols.shape[0]
    blocks = cols.to(torch.int64).view(N, -1, kh, kw, OH, OW)
    padded = torch.zeros(N, blocks.shape[1], H + 2 * ph, W + 2 * pw, dtype=torch.int64)
    for i in range(kh):
        for j in range(kw):
            rows = slice(i * dh, i * dh + sh * (OH - 1) + 1, sh)
            columns = slice(j * dw, j * dw + sw * (OW - 1) + 1, sw)
            padded[:, :, rows, columns] += blocks[:, :, i, j]
    return padded[:, :, ph : ph + H, pw : pw + W].to(cols.dtype)


@pytest.mark.parametrize("g", GEOMETRIES, ids=IDS)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
def test_unfold_matches_torch(g, dtype, device):
    x = random_tensor(g[:4], dtype, device)
    expected = F.unfold(x.cpu().double(), **_window(g))
    assert_close(tc.unfold(x, **_window(g)), expected.to(dtype), name="unfold")


@pytest.mark.parametrize("g", GEOMETRIES, ids=IDS)
def test_fold_matches_torch(g, device):
    cols = F.unfold(torch.randn(g[:4], dtype=torch.float64), **_window(g))
    cols = torch.randn_like(cols)
    expected = F.fold(cols, g[2:4], **_window(g))
    k = g[4] if isinstance(g[4], tuple) else (g[4], g[4])
    actual = tc.fold(cols.to(device), g[2:4], **_window(g))
    assert_close(actual, expected, reduction=k[0] * k[1], name="fold")
    assert_close(tc.fold(cols.float().to(device), g[2:4], **_window(g)), expected, reduction=9)


@pytest.mark.parametrize("dtype", INT_DTYPES)
@pytest.mark.parametrize("g", GEOMETRIES[:4], ids=IDS[:4])
def test_integer_unfold_fold_exact(g, dtype, device):
    x = random_tensor(g[:4], dtype, device)
    cols = tc.unfold(x, **_window(g))
    expected_cols = F.unfold(x.cpu().double(), **_window(g)).to(torch.int64).to(dtype)
    assert cols.dtype == dtype
    assert_close(cols, expected_cols, name="integer unfold")
    # Overlapping sums wrap exactly like the dtype (accumulated in int64, cast once).
    folded = tc.fold(cols, g[2:4], **_window(g))
    assert folded.dtype == dtype
    assert_close(folded, reference_fold_exact(cols.cpu(), g[2:4], **_window(g)), name="fold")


def test_unfold_bool_is_a_copy(device):
    x = random_tensor((2, 3, 6, 5), torch.bool, device)
    expected = F.unfold(x.cpu().double(), 3, padding=1).bool()
    assert torch.equal(tc.unfold(x, 3, padding=1).cpu(), expected)


def test_unbatched_and_empty_batch(device):
    x = torch.randn(3, 8, 9, dtype=torch.float64, device=device)
    assert_close(tc.unfold(x, 3, padding=1), F.unfold(x.cpu(), 3, padding=1))
    cols = torch.randn(27, 72, dtype=torch.float64, device=device)
    assert_close(tc.fold(cols, (8, 9), 3, padding=1), F.fold(cols.cpu(), (8, 9), 3, padding=1))
    empty = torch.randn(0, 3, 8, 9, device=device)
    assert tc.unfold(empty, 3).shape == F.unfold(empty.cpu(), 3).shape
    empty_cols = torch.randn(0, 27, 42, device=device)
    assert tc.fold(empty_cols, (8, 9), 3).shape == (0, 3, 8, 9)


def test_non_contiguous_and_channels_last_inputs(device):
    base = torch.randn(2, 6, 11, 14, dtype=torch.float64, device=device)
    views = {
        "sliced": base[:, 1:5, ::2, 1::3],
        "transposed": base.transpose(2, 3),
        "channels_last": base.to(memory_format=torch.channels_last),
    }
    for name, x in views.items():
        assert_close(
            tc.unfold(x, (2, 3), padding=1), F.unfold(x.cpu(), (2, 3), padding=1), name=name
        )
    cols = torch.randn(2, 40, 30, dtype=torch.float64, device=device)[:, ::2, :]  # (2, 20, 30)
    expected = F.fold(cols.cpu(), (6, 14), (2, 5), stride=(2, 1))
    assert_close(tc.fold(cols, (6, 14), (2, 5), stride=(2, 1)), expected, reduction=10)


def test_gradcheck(device):
    x = torch.randn(1, 2, 4, 5, dtype=torch.float64, device=device, requires_grad=True)
    kw = dict(kernel_size=(2, 3), dilation=(2, 1), padding=1, stride=(1, 2))
    assert torch.autograd.gradcheck(lambda t: tc.unfold(t, **kw), (x,), fast_mode=True)
    cols = tc.unfold(x.detach(), **kw).requires_grad_()
    assert torch.autograd.gradcheck(lambda c: tc.fold(c, (4, 5), **kw), (cols,), fast_mode=True)


def test_launchers_write_every_element(device):
    """Poison the outputs first: every element must be written (padding taps included)."""
    x = torch.randn(2, 3, 7, 6, dtype=torch.float64, device=device)
    geometry = make_geometry((7, 6), (3, 3), (2, 1), (2, 1), (2, 1), (1, 2))
    rows, L = 27, geometry.output_numel
    cols = poison_(torch.empty(2, rows, L, dtype=torch.float64, device=device))
    im2col_ops.im2col(x, cols, im2col_ops.unfold_layout(rows, L), geometry, rows, 0, 2 * L)
    assert_close(cols, F.unfold(x.cpu(), 3, dilation=(1, 2), padding=(2, 1), stride=(2, 1)))
    image = poison_(torch.empty_like(x))
    layout = im2col_ops.ColumnLayout(0, rows * L, 1, 0, L)
    im2col_ops.col2im(cols, layout, image, geometry, rows, 0, 2 * L, accumulate=False)
    expected = F.fold(cols.cpu(), (7, 6), 3, dilation=(1, 2), padding=(2, 1), stride=(2, 1))
    assert_close(image, expected, reduction=9)


def test_fold_is_bitwise_deterministic(device):
    cols = torch.randn(4, 8 * 9, 144, device=device)
    first = tc.fold(cols, (12, 12), 3, padding=2, dilation=2, stride=1)
    for _ in range(3):
        assert torch.equal(tc.fold(cols, (12, 12), 3, padding=2, dilation=2, stride=1), first)


def test_int64_indexing_path(monkeypatch, device):
    """Force the 64-bit index arithmetic (used from 2**31 elements on) on a small tensor."""
    monkeypatch.setattr(common, "INDEX32_LIMIT", 16)
    x = torch.randn(2, 3, 9, 8, dtype=torch.float64, device=device)
    cols = tc.unfold(x, 3, padding=1, stride=2)
    assert_close(cols, F.unfold(x.cpu(), 3, padding=1, stride=2))
    assert_close(
        tc.fold(cols, (9, 8), 3, padding=1, stride=2),
        F.fold(cols.cpu(), (9, 8), 3, padding=1, stride=2),
        reduction=9,
    )


@given(
    n=st.integers(0, 2),
    c=st.integers(1, 3),
    h=st.integers(1, 9),
    w=st.integers(1, 9),
    k=st.tuples(st.integers(1, 4), st.integers(1, 4)),
    d=st.tuples(st.integers(1, 3), st.integers(1, 3)),
    p=st.tuples(st.integers(0, 3), st.integers(0, 3)),
    s=st.tuples(st.integers(1, 3), st.integers(1, 3)),
)
def test_random_geometries(n, c, h, w, k, d, p, s):
    window = dict(kernel_size=k, dilation=d, padding=p, stride=s)
    extent = [di * (ki - 1) + 1 for ki, di in zip(k, d)]
    if h + 2 * p[0] < extent[0] or w + 2 * p[1] < extent[1]:
        with pytest.raises(tc.TritonConvError, match="sliding blocks"):
            tc.unfold(torch.randn(n, c, h, w), **window)
        return
    from tritonconv.testing import DEVICE

    x = torch.randn(n, c, h, w, dtype=torch.float64)
    cols = F.unfold(x, **window)
    assert_close(tc.unfold(x.to(DEVICE), **window), cols)
    assert_close(
        tc.fold(cols.to(DEVICE), (h, w), **window), F.fold(cols, (h, w), **window), reduction=16
    )


@pytest.mark.parametrize("batched", [True, False])
def test_one_d_unfold_and_fold(batched, device):
    """A one-element kernel_size makes the window 1-D: (N, C, L) in, F.unfold of the height-1
    plane out; fold inverts the layout; gradients flow."""
    x = torch.randn(2, 3, 11, dtype=torch.float64, requires_grad=True)
    window = dict(dilation=2, padding=1, stride=2)
    plane = dict(dilation=(1, 2), padding=(0, 1), stride=(1, 2))
    ref = F.unfold(x.unsqueeze(2), (1, 3), **plane)
    mine = x.detach().to(device).requires_grad_()
    got = tc.unfold(mine if batched else mine[0], (3,), **window)
    assert_close(got, ref if batched else ref[0])
    (g,) = torch.autograd.grad(got.sum(), mine)
    (e,) = torch.autograd.grad(ref.sum() if batched else ref[0].sum(), x)
    assert_close(g, e)
    folded = tc.fold(got.detach(), (11,), (3,), **window)
    expected = F.fold(ref.detach(), (1, 11), (1, 3), **plane).squeeze(2)
    assert_close(folded, expected if batched else expected[0], reduction=3)
    with pytest.raises(tc.TritonConvError, match="1-D kernel_size expects"):
        tc.unfold(torch.randn(1, 2, 3, 4, device=device), (3,))


@pytest.mark.parametrize("start", [0, 2**31 - 18, 2**31 + 63])
def test_positions_past_int32_take_64_bit_indices(start, device, monkeypatch):
    """im2col+GEMM's chunks count positions over the whole batch (N * L of them): a chunk
    reaching 2**31 needs 64-bit indices even when x, dx and the chunk's columns are small (a
    one-channel input whose padded output plane outgrows it). They were chosen from the
    tensors alone: every column past 2**31 wrong, the input gradient there zero (an
    adversarial review, session 13). Launches recorded, not run (the batch is 239 million)."""
    from tritonconv import launch

    flags = []
    monkeypatch.setattr(launch, "INTERPRETER", True)  # recorded on either device
    monkeypatch.setattr(launch, "_interpret", lambda k, g, a, meta: flags.append(meta["INDEX_64"]))
    g = make_geometry((1, 1), (3, 3), (1, 1), (2, 2), (2, 2), (1, 1))  # L = 9 per sample
    n = (2**31 + 10 * 9) // 9 + 1
    image = torch.zeros(1, 1, 1, 1, device=device).expand(n, 1, 1, 1)
    count = 36
    cols = torch.zeros(1, 9, count, device=device)
    layout = im2col_ops.gemm_layout(9, start, count, 9)
    tc.clear_caches()
    im2col_ops.im2col(image, cols, layout, g, 9, start, count)
    im2col_ops.col2im(
        cols,
        layout,
        torch.zeros(1, 1, 1, 1, device=device).expand(n, 1, 1, 1),
        g,
        9,
        start,
        count,
        False,
    )
    assert flags == [start > 0] * 2
