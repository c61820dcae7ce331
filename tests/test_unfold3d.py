"""3-D unfold / fold (a three-element kernel_size) against float64 references built from PyTorch.

PyTorch has no 3-D F.unfold / F.fold. The references: unfold by ``F.pad`` and ``Tensor.unfold``
on the three spatial dimensions (checked against F.unfold in 2-D and against F.conv3d); fold as
the autograd adjoint of that unfold in float64, and exactly by slice additions in int64.
Shapes stay tiny: the CPU tests run every kernel through Triton's interpreter.
"""

import pytest
import torch
import torch.nn.functional as F
from hypothesis import example, given
from hypothesis import strategies as st

import tritonconv as tc
from tritonconv.geometry import INT_DTYPES, TritonConvError, expand_param, window_geometry
from tritonconv.ops import common
from tritonconv.ops import im2col as im2col_ops
from tritonconv.testing import DEVICE, assert_close, poison_, random_tensor

# (N, C, D, H, W, kernel_size, dilation, padding, stride)
GEOMETRIES = [
    (2, 3, 5, 6, 7, (2, 3, 2), (2, 1, 1), (1, 0, 2), (1, 2, 3)),  # asymmetric everything
    (1, 1, 3, 3, 3, (3, 3, 3), 1, 0, 1),  # kernel = input
    (1, 2, 2, 3, 1, (4, 5, 3), 1, 1, 1),  # kernel = padded input
    (2, 2, 7, 5, 3, (3, 1, 2), (2, 1, 1), (2, 0, 1), (3, 1, 2)),  # primes, depth dil/pad/stride
    (1, 3, 2, 3, 2, (1, 1, 1), 1, 0, 1),  # pointwise
    (3, 1, 1, 1, 1, (1, 1, 1), 1, 1, 2),  # a single voxel, all padding
    (1, 2, 6, 1, 5, (2, 1, 3), 1, (0, 0, 1), (2, 1, 1)),  # depth stride, no depth padding
    (1, 2, 3, 4, 5, (3, 2, 2), 1, (2, 0, 0), 1),  # padding in depth only
    (2, 2, 1, 4, 5, (1, 2, 2), 1, (0, 1, 0), (3, 1, 2)),  # depth 1 throughout: runs as 2-D
]
IDS = [f"g{i}" for i in range(len(GEOMETRIES))]


def _window(g):
    return dict(kernel_size=g[5], dilation=g[6], padding=g[7], stride=g[8])


def _triples(kernel_size, dilation, padding, stride):
    return tuple(expand_param(v, 3, "") for v in (kernel_size, dilation, padding, stride))


def reference_unfold(x: torch.Tensor, kernel_size, dilation=1, padding=0, stride=1):
    """3-D unfold of a batched float tensor: (N, C*KD*KH*KW, OD*OH*OW), row
    ((c*KD + kd)*KH + kh)*KW + kw, column (od*OH + oh)*OW + ow."""
    k, d, p, s = _triples(kernel_size, dilation, padding, stride)
    N, C = x.shape[:2]
    x = F.pad(x, (p[2], p[2], p[1], p[1], p[0], p[0]))
    for axis in range(3):  # windows of the dilated extent, then every dil-th tap
        x = x.unfold(2 + axis, d[axis] * (k[axis] - 1) + 1, s[axis])
    blocks = x[..., :: d[0], :: d[1], :: d[2]]  # (N, C, OD, OH, OW, KD, KH, KW)
    L = blocks.shape[2] * blocks.shape[3] * blocks.shape[4]
    return blocks.permute(0, 1, 5, 6, 7, 2, 3, 4).reshape(N, C * k[0] * k[1] * k[2], L)


def reference_fold(cols: torch.Tensor, output_size, kernel_size, dilation=1, padding=0, stride=1):
    """3-D fold in float64 as the adjoint of :func:`reference_unfold` (a vector-Jacobian
    product)."""
    k = expand_param(kernel_size, 3, "")
    N, C = cols.shape[0], cols.shape[1] // (k[0] * k[1] * k[2])
    image = torch.zeros(N, C, *output_size, dtype=torch.float64, requires_grad=True)
    blocks = reference_unfold(image, kernel_size, dilation, padding, stride)
    (grad,) = torch.autograd.grad(blocks, image, cols.double())
    return grad


def reference_fold_exact(cols, output_size, kernel_size, dilation=1, padding=0, stride=1):
    """3-D fold summed exactly in int64 by slice additions, cast (wrapping) to cols' dtype."""
    k, d, p, s = _triples(kernel_size, dilation, padding, stride)
    geometry = window_geometry(output_size, k, d, p, s)
    (OD, OH, OW), N = geometry.output, cols.shape[0]
    blocks = cols.cpu().to(torch.int64).view(N, -1, *k, OD, OH, OW)
    padded = torch.zeros(
        N, blocks.shape[1], *(o + 2 * q for o, q in zip(output_size, p)), dtype=torch.int64
    )
    for i in range(k[0]):
        for j in range(k[1]):
            for m in range(k[2]):
                window = tuple(
                    slice(t * dil, t * dil + st * (o - 1) + 1, st)
                    for t, dil, st, o in zip((i, j, m), d, s, geometry.output)
                )
                padded[(slice(None), slice(None), *window)] += blocks[:, :, i, j, m]
    D, H, W = output_size
    return padded[:, :, p[0] : p[0] + D, p[1] : p[1] + H, p[2] : p[2] + W].to(cols.dtype)


def test_reference_unfold_is_f_unfold_and_conv3d():
    """The reference itself: F.unfold on a depth-1 volume, and the columns of F.conv3d."""
    x = torch.randn(2, 3, 1, 5, 7, dtype=torch.float64)
    window = dict(dilation=(1, 2, 1), padding=(0, 1, 2), stride=(1, 1, 3))
    expected = F.unfold(x[:, :, 0], (3, 2), dilation=(2, 1), padding=(1, 2), stride=(1, 3))
    assert torch.equal(reference_unfold(x, (1, 3, 2), **window), expected)
    x = torch.randn(2, 2, 4, 5, 3, dtype=torch.float64)
    weight = torch.randn(3, 2, 2, 3, 2, dtype=torch.float64)
    window = dict(dilation=(1, 1, 2), padding=(1, 0, 1), stride=(2, 1, 1))
    y = F.conv3d(x, weight, **window)
    cols = reference_unfold(x, (2, 3, 2), **window)
    assert torch.allclose((weight.flatten(1) @ cols).view(y.shape), y)


@pytest.mark.parametrize("g", GEOMETRIES, ids=IDS)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_unfold_matches_reference(g, dtype, device):
    x = random_tensor(g[:5], dtype, device)
    expected = reference_unfold(x.cpu().double(), **_window(g))
    assert_close(tc.unfold(x, **_window(g)), expected.to(dtype), name="unfold3d")


@pytest.mark.parametrize("g", GEOMETRIES, ids=IDS)
def test_fold_matches_reference(g, device):
    expected_shape = reference_unfold(torch.zeros(g[:5], dtype=torch.float64), **_window(g)).shape
    cols = torch.randn(expected_shape, dtype=torch.float64)
    expected = reference_fold(cols, g[2:5], **_window(g))
    taps = expand_param(g[5], 3, "")
    reduction = taps[0] * taps[1] * taps[2]
    actual = tc.fold(cols.to(device), g[2:5], **_window(g))
    assert_close(actual, expected, reduction=reduction, name="fold3d")
    actual = tc.fold(cols.float().to(device), g[2:5], **_window(g))
    assert_close(actual, expected, reduction=reduction, name="fold3d fp32")


@pytest.mark.parametrize("dtype", INT_DTYPES)
@pytest.mark.parametrize("g", [GEOMETRIES[0], GEOMETRIES[3]], ids=["g0", "g3"])
def test_integer_unfold_fold_exact(g, dtype, device):
    x = random_tensor(g[:5], dtype, device)
    cols = tc.unfold(x, **_window(g))
    assert cols.dtype == dtype
    expected = reference_unfold(x.cpu().double(), **_window(g)).to(torch.int64).to(dtype)
    assert_close(cols, expected, name="integer unfold3d")
    # Overlapping sums wrap exactly like the dtype (accumulated in int64, cast once).
    folded = tc.fold(cols, g[2:5], **_window(g))
    assert folded.dtype == dtype
    assert_close(folded, reference_fold_exact(cols, g[2:5], **_window(g)), name="fold3d")


def test_unbatched_empty_batch_and_determinism(device):
    window = dict(kernel_size=(2, 2, 3), padding=(1, 0, 1), stride=(1, 2, 1))
    x = torch.randn(2, 3, 4, 5, dtype=torch.float64, device=device)
    expected = reference_unfold(x.cpu().unsqueeze(0), **window)[0]
    cols = tc.unfold(x, **window)
    assert_close(cols, expected)
    expected_image = reference_fold(expected.unsqueeze(0), (3, 4, 5), **window)[0]
    assert_close(tc.fold(cols, (3, 4, 5), **window), expected_image, reduction=12)
    folded = tc.fold(cols, (3, 4, 5), **window)
    assert torch.equal(tc.fold(cols, (3, 4, 5), **window), folded)  # bitwise reproducible

    empty = torch.randn(0, 2, 3, 4, 5, device=device)
    assert tc.unfold(empty, **window).shape == (0, 24, expected.shape[1])
    empty_cols = torch.randn(0, 24, expected.shape[1], device=device)
    assert tc.fold(empty_cols, (3, 4, 5), **window).shape == (0, 2, 3, 4, 5)


def test_non_contiguous_and_channels_last_3d(device):
    base = torch.randn(2, 5, 6, 4, 7, dtype=torch.float64, device=device)
    views = {
        "sliced": base[:, 1:4, ::2, 1:, 1::3],
        "permuted": base.permute(0, 1, 4, 2, 3),
        "channels_last_3d": base.contiguous(memory_format=torch.channels_last_3d),
        "expanded": base[:1, :2, :3, :1, :4].expand(2, 2, 3, 3, 4),
    }
    window = dict(kernel_size=(2, 1, 2), dilation=(1, 1, 2), padding=(1, 1, 1))
    for name, x in views.items():
        assert_close(tc.unfold(x, **window), reference_unfold(x.cpu(), **window), name=name)
    cols = torch.randn(2, 24, 2 * 12, dtype=torch.float64, device=device)[:, :, ::2]  # (2, 24, 12)
    window = dict(kernel_size=(2, 2, 3), stride=(1, 2, 1))
    expected = reference_fold(cols.cpu(), (3, 5, 5), **window)
    assert_close(tc.fold(cols, (3, 5, 5), **window), expected, reduction=12, name="fold")
    transposed = cols.transpose(1, 2).contiguous().transpose(1, 2)
    assert_close(tc.fold(transposed, (3, 5, 5), **window), expected, reduction=12)


def test_gradients(device):
    """Each is the other's adjoint: gradcheck, and gradients equal the reference's."""
    window = dict(kernel_size=(2, 1, 2), dilation=(1, 1, 2), padding=(1, 0, 1), stride=(2, 1, 1))
    x = torch.randn(1, 2, 3, 2, 3, dtype=torch.float64, device=device, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: tc.unfold(t, **window), (x,), fast_mode=True)
    cols = tc.unfold(x.detach(), **window).requires_grad_()
    assert torch.autograd.gradcheck(
        lambda c: tc.fold(c, (3, 2, 3), **window), (cols,), fast_mode=True
    )

    x_ref = x.detach().cpu().requires_grad_()
    ref = reference_unfold(x_ref, **window)
    cotangent = torch.randn_like(ref)
    got = tc.unfold(x, **window)
    (grad,) = torch.autograd.grad(got, x, cotangent.to(device))
    (expected,) = torch.autograd.grad(ref, x_ref, cotangent)
    assert_close(grad, expected, reduction=4, name="unfold grad")
    image_grad = torch.randn(1, 2, 3, 2, 3, dtype=torch.float64)
    (grad,) = torch.autograd.grad(tc.fold(cols, (3, 2, 3), **window), cols, image_grad.to(device))
    assert_close(grad, reference_unfold(image_grad, **window), name="fold grad")


def test_launchers_write_every_element(device):
    """Poisoned outputs: im2col writes every column entry (padding taps included), col2im
    every image element; with ``accumulate`` it adds to what is there."""
    x = torch.randn(2, 3, 4, 5, 3, dtype=torch.float64, device=device)
    k, d, p, s = (2, 3, 2), (2, 1, 1), (1, 1, 0), (1, 2, 1)
    geometry = window_geometry((4, 5, 3), k, d, p, s)
    rows, L = 3 * 12, geometry.output_numel
    cols = poison_(torch.empty(2, rows, L, dtype=torch.float64, device=device))
    im2col_ops.im2col(x, cols, im2col_ops.unfold_layout(rows, L), geometry, rows, 0, 2 * L)
    assert_close(cols, reference_unfold(x.cpu(), k, d, p, s))
    layout = im2col_ops.ColumnLayout(0, rows * L, 1, 0, L)
    expected = reference_fold(cols.cpu(), (4, 5, 3), k, d, p, s)
    image = poison_(torch.empty_like(x))
    im2col_ops.col2im(cols, layout, image, geometry, rows, 0, 2 * L, accumulate=False)
    assert_close(image, expected, reduction=12)
    im2col_ops.col2im(cols, layout, image, geometry, rows, 0, 2 * L, accumulate=True)
    assert_close(image, 2 * expected, reduction=24)


def test_chunked_grouped_gemm_layout(device):
    """The GEMM's column layout in 3-D: (groups, rows_per_group, positions) chunks of positions,
    inside one sample or of whole samples; col2im accumulates a sample's chunks."""
    C, groups = 4, 2
    x = torch.randn(2, C, 3, 3, 4, dtype=torch.float64, device=device)
    k, d, p, s = (2, 2, 2), (1, 1, 1), (1, 0, 1), (2, 1, 1)
    geometry = window_geometry((3, 3, 4), k, d, p, s)
    L, rows = geometry.output_numel, C * 8
    per_group = rows // groups
    expected = reference_unfold(x.cpu(), k, d, p, s)  # (N, rows, L)
    flat = expected.permute(1, 0, 2).reshape(rows, 2 * L)
    image = poison_(torch.empty_like(x))
    for start, count in [(0, 5), (5, 7), (12, L - 12), (L, L)]:
        cols = poison_(torch.empty(groups, per_group, count, dtype=torch.float64, device=device))
        layout = im2col_ops.gemm_layout(per_group, start, count, L)
        im2col_ops.im2col(x, cols, layout, geometry, per_group, start, count)
        assert_close(cols.view(rows, count), flat[:, start : start + count], name=f"{start}")
        first = start % L == 0
        im2col_ops.col2im(cols, layout, image, geometry, per_group, start, count, not first)
    assert_close(image, reference_fold(expected, (3, 3, 4), k, d, p, s), reduction=8)


def test_int64_indexing_path(monkeypatch, device):
    """Force the 64-bit index arithmetic (used from 2**31 elements on) on a small tensor."""
    monkeypatch.setattr(common, "INDEX32_LIMIT", 16)
    window = dict(kernel_size=(2, 3, 2), padding=(1, 1, 0), stride=(2, 1, 2))
    x = torch.randn(2, 2, 3, 4, 5, dtype=torch.float64, device=device)
    cols = tc.unfold(x, **window)
    assert_close(cols, reference_unfold(x.cpu(), **window))
    expected = reference_fold(cols.cpu(), (3, 4, 5), **window)
    assert_close(tc.fold(cols, (3, 4, 5), **window), expected, reduction=12)


@given(
    n=st.integers(0, 2),
    c=st.integers(1, 2),
    size=st.tuples(st.integers(1, 5), st.integers(1, 5), st.integers(1, 5)),
    k=st.tuples(st.integers(1, 3), st.integers(1, 3), st.integers(1, 3)),
    d=st.tuples(st.integers(1, 2), st.integers(1, 2), st.integers(1, 2)),
    p=st.tuples(st.integers(0, 2), st.integers(0, 2), st.integers(0, 2)),
    s=st.tuples(st.integers(1, 3), st.integers(1, 3), st.integers(1, 3)),
)
# depth 1 padded by 1 with stride 3: one output depth whose one tap is padding (CI found it)
@example(n=1, c=1, size=(1, 1, 1), k=(1, 1, 1), d=(1, 1, 1), p=(1, 0, 0), s=(3, 1, 1))
def test_random_geometries(n, c, size, k, d, p, s):
    window = dict(kernel_size=k, dilation=d, padding=p, stride=s)
    x = torch.randn(n, c, *size, dtype=torch.float64)
    if any(i + 2 * q < di * (ki - 1) + 1 for i, q, ki, di in zip(size, p, k, d)):
        with pytest.raises(TritonConvError, match="sliding blocks"):
            tc.unfold(x.to(DEVICE), **window)
        return
    cols = reference_unfold(x, **window)
    assert_close(tc.unfold(x.to(DEVICE), **window), cols)
    expected = reference_fold(cols, size, **window)
    assert_close(tc.fold(cols.to(DEVICE), size, **window), expected, reduction=27)


X5 = torch.randn(1, 2, 4, 4, 4, device=DEVICE)
UNFOLD3D_ERRORS = [
    (
        dict(input=torch.randn(2, 3, 4, device=DEVICE)),
        r"3-D kernel_size expects a 4D \(C, D, H, W\)",
    ),
    (dict(input=torch.randn(1, 1, 1, 2, 2, 2, device=DEVICE)), r"or 5D \(N, C, D, H, W\)"),
    (dict(input=torch.randn(1, 0, 4, 4, 4, device=DEVICE)), r"non-zero dimensions.*\[1, 0, 4"),
    (dict(kernel_size=3), r"Expected 3D or 4D .*\[1, 2, 4, 4, 4\] \(a 3-D window takes a 3-elem"),
    (dict(kernel_size=(2, 2, 2, 2)), r"kernel_size must be an int or a sequence of 1, 2 or 3"),
    (dict(kernel_size=(2, 0, 2)), r"kernel size should be greater than zero"),
    (dict(stride=(1, 0, 1)), r"stride should be greater than zero"),
    (dict(dilation=-1), r"dilation should be greater than zero"),
    (dict(padding=(0, 0, -1)), r"padding should be non-negative"),
    (dict(dilation=(1, 2)), r"dilation to be a single integer value or a list of 3 values"),
    (dict(kernel_size=(5, 2, 2)), r"sliding blocks as \(0, 3, 3\)"),
]


@pytest.mark.parametrize(
    "override, message", UNFOLD3D_ERRORS, ids=[m[:30] for _, m in UNFOLD3D_ERRORS]
)
def test_unfold3d_errors(override, message):
    call = dict(input=X5, kernel_size=(2, 2, 2))
    call.update(override)
    with pytest.raises(TritonConvError, match=message):
        tc.unfold(**call)


COLS3 = torch.randn(2, 16, 27, device=DEVICE)  # 2 channels, 2x2x2 taps, 3x3x3 blocks of 4^3
FOLD3D_ERRORS = [
    (dict(input=torch.randn(2, 16, 3, 9, device=DEVICE)), r"Expected 2D or 3D"),
    (dict(output_size=(4, 4)), r"output_size to be a single integer value or a list of 3"),
    (dict(output_size=(4, 0, 4)), r"output_size should be greater than zero"),
    (dict(kernel_size=(2, 2, 3)), r"divisible by the product of kernel_size.*=16 and kern"),
    (dict(output_size=(4, 5, 4)), r"sliding blocks 3 \* 4 \* 3 = 36, but got input.size\(2\)=27"),
    (dict(output_size=1), r"sliding blocks 0 \* 0 \* 0 = 0"),
    (dict(stride=(1, 1, 0)), r"stride should be greater than zero"),
    (dict(input=COLS3.to(torch.complex64)), r"fold: input has dtype complex64"),
]


@pytest.mark.parametrize("override, message", FOLD3D_ERRORS, ids=[m[:30] for _, m in FOLD3D_ERRORS])
def test_fold3d_errors(override, message):
    call = dict(input=COLS3, output_size=(4, 4, 4), kernel_size=(2, 2, 2))
    call.update(override)
    with pytest.raises(TritonConvError, match=message):
        tc.fold(**call)


def test_errors_come_before_any_kernel(monkeypatch):
    """Bad 3-D calls never reach a launcher (and a good one does)."""

    def boom(*args, **kwargs):
        raise AssertionError("a kernel was launched")

    monkeypatch.setattr(im2col_ops, "im2col", boom)
    monkeypatch.setattr(im2col_ops, "col2im", boom)
    for call in (
        lambda: tc.unfold(X5, (2, 2, 9)),
        lambda: tc.unfold(X5[0, 0], (2, 2, 2)),
        lambda: tc.fold(COLS3, (4, 4, 5), (2, 2, 2)),
        lambda: tc.fold(COLS3, (4, 4, 4), (2, 2, 2), padding=(0, 0, -1)),
    ):
        with pytest.raises(TritonConvError):
            call()
    with pytest.raises(AssertionError, match="a kernel was launched"):
        tc.unfold(X5, (2, 2, 2), stride=(1, 1, 3))


def test_compiles_in_one_graph(device):
    """torch.compile captures 3-D unfold and fold in one graph (fakes, autograd), forward and
    backward (aot_eager under the interpreter; Inductor, tracing into the kernels, on CUDA)."""
    from torch._dynamo.testing import CompileCounterWithBackend

    window = dict(kernel_size=(2, 2, 3), padding=(1, 0, 1), stride=(2, 1, 1))

    def f(x):
        return tc.fold(tc.unfold(x, **window) * 2, x.shape[2:], **window)

    def reference(x):
        cols = reference_unfold(x, **window) * 2
        return reference_fold(cols, x.shape[2:], **window)

    torch._dynamo.reset()
    counter = CompileCounterWithBackend("aot_eager" if tc.INTERPRETER else "inductor")
    compiled = torch.compile(f, backend=counter, fullgraph=True)
    x = torch.randn(2, 2, 3, 4, 5, dtype=torch.float64, device=device, requires_grad=True)
    out = compiled(x)
    assert counter.frame_count == 1
    assert_close(out, reference(x.detach().cpu()), reduction=12)
    # fold(unfold(.)) is self-adjoint: its gradient is the same map applied to the cotangent
    cotangent = torch.randn_like(out)
    (grad,) = torch.autograd.grad(out, x, cotangent)
    assert_close(grad, reference(cotangent.cpu()), reduction=12)
