"""conv1d, conv_transpose1d and conv_transpose2d (issue 12, the part built on the 2-D kernels):
every algorithm against PyTorch in float64, forward and gradients; exact integers; layouts;
modules and convert(); one graph under torch.compile; PyTorch's errors."""

import pytest
import torch
import torch.nn.functional as F
from torch._dynamo.testing import CompileCounterWithBackend

import tritonconv as tc
from tritonconv.testing import assert_close, random_tensor

BACKEND = "aot_eager" if tc.INTERPRETER else "inductor"

# (input, weight, kwargs): groups, stride, padding, output_padding < stride or < dilation
TRANSPOSED_CASES = [
    ((2, 4, 5, 6), (4, 3, 3, 3), dict(stride=2, padding=1, output_padding=1, groups=2)),
    ((1, 3, 4, 5), (3, 2, 2, 3), dict(stride=(1, 2), padding=(0, 1), dilation=(2, 1))),
    ((2, 3, 4, 4), (3, 2, 3, 3), dict(stride=1, padding=2, output_padding=1, dilation=2)),
    ((2, 6, 5, 5), (6, 1, 3, 3), dict(stride=1, padding=1, groups=6)),  # depthwise
    ((2, 4, 5, 5), (4, 2, 3, 3), dict(stride=2, padding=1, groups=4)),  # 2 outputs per group
    ((2, 4, 5, 5), (4, 1, 3, 3), dict(stride=2, padding=1, output_padding=1, groups=4)),
    ((0, 4, 5, 5), (4, 2, 1, 1), dict()),  # empty batch
]


def _algos(weight_shape):
    """Every algorithm; ``depthwise`` when each group has one output channel."""
    return ["auto", "im2col_gemm", "direct"] + (["depthwise"] if weight_shape[1] == 1 else [])


def _grads(out, leaves, grad):
    return torch.autograd.grad(out, leaves, grad, allow_unused=True)


@pytest.mark.parametrize("case", range(len(TRANSPOSED_CASES)))
@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "nhwc"])
def test_conv_transpose2d_every_algorithm(case, channels_last, device):
    x_shape, w_shape, kwargs = TRANSPOSED_CASES[case]
    groups = kwargs.get("groups", 1)
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    x = torch.randn(x_shape, dtype=torch.float64).contiguous(memory_format=fmt)
    w = torch.randn(w_shape, dtype=torch.float64)
    b = torch.randn(w_shape[1] * groups, dtype=torch.float64)
    leaves = [t.requires_grad_() for t in (x, w, b)]
    ref = F.conv_transpose2d(x, w, b, **kwargs)
    grad = torch.randn_like(ref)
    want = _grads(ref, leaves, grad)
    for algo in _algos(w_shape):
        mine = [t.detach().to(device).requires_grad_() for t in (x, w, b)]
        out = tc.conv_transpose2d(*mine, **kwargs, algo=algo)
        assert_close(out, ref, name=algo)
        assert out.is_contiguous(memory_format=fmt) or out.numel() == 0
        for got, exp in zip(_grads(out, mine, grad.to(device)), want, strict=True):
            assert_close(got, exp, reduction=64, name=f"{algo} grad")


@pytest.mark.parametrize("dtype", [torch.int64, torch.int8])
def test_conv_transpose2d_integers_are_exact(dtype, device):
    """Integer transposed convolution, bitwise: int64 sums wrap like PyTorch; int8 wraps."""
    x = random_tensor((2, 4, 5, 5), torch.int64, "cpu", low=-100, high=100)
    w = random_tensor((4, 3, 3, 3), torch.int64, "cpu", low=-100, high=100)
    b = random_tensor((3,), torch.int64, "cpu", low=-100, high=100)
    kwargs = dict(stride=2, padding=1, output_padding=1)
    exact = F.conv_transpose2d(x.double(), w.double(), b.double(), **kwargs).to(torch.int64)
    got = tc.conv_transpose2d(*(t.to(dtype).to(device) for t in (x, w, b)), **kwargs)
    assert got.dtype == dtype
    expected = exact.to(dtype) if dtype != torch.int64 else exact
    if dtype != torch.int64:  # the inputs wrapped too: recompute from the wrapped values
        wrapped = [t.to(dtype).to(torch.int64).double() for t in (x, w, b)]
        expected = F.conv_transpose2d(*wrapped, **kwargs).to(torch.int64).to(dtype)
    assert torch.equal(got.cpu(), expected)


@pytest.mark.parametrize("algo", ["auto", "im2col_gemm", "direct"])
def test_conv1d_and_conv_transpose1d(algo, device):
    x = torch.randn(3, 4, 11, dtype=torch.float64, requires_grad=True)
    w = torch.randn(6, 2, 3, dtype=torch.float64, requires_grad=True)
    wt = torch.randn(4, 3, 3, dtype=torch.float64, requires_grad=True)
    cases = [
        (tc.conv1d, F.conv1d, (x, w), dict(stride=2, padding=1, dilation=2, groups=2)),
        (tc.conv1d, F.conv1d, (x, w), dict(padding="same", groups=2)),
        (tc.conv_transpose1d, F.conv_transpose1d, (x, wt), dict(stride=2, output_padding=1)),
    ]
    for ours, theirs, inputs, kwargs in cases:
        ref = theirs(*inputs, **kwargs)
        mine = [t.detach().to(device).requires_grad_() for t in inputs]
        out = ours(*mine, **kwargs, algo=algo)
        assert_close(out, ref)
        grad = torch.randn_like(ref)
        for got, exp in zip(_grads(out, mine, grad.to(device)), _grads(ref, inputs, grad)):
            assert_close(got, exp, reduction=32)


def test_modules_and_convert(device):
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv1d(3, 4, 3, padding=1, padding_mode="circular"),
        torch.nn.Unflatten(2, (1, 8)),
        torch.nn.ConvTranspose2d(4, 2, 3, stride=2, padding=1, output_padding=1),
    ).double()
    x = torch.randn(2, 3, 8, dtype=torch.float64)
    expected = model(x)
    tc.nn.convert(model)
    assert [type(m) for m in model] == [tc.nn.Conv1d, torch.nn.Unflatten, tc.nn.ConvTranspose2d]
    model.to(device)
    assert_close(model(x.to(device)), expected)
    up = tc.nn.ConvTranspose2d(4, 2, 3, stride=2, padding=1).double().to(device)
    ref = torch.nn.ConvTranspose2d(4, 2, 3, stride=2, padding=1).double()
    up.load_state_dict(ref.state_dict())
    y = torch.randn(1, 4, 5, 5, dtype=torch.float64)
    for size in ([9, 9], [10, 10]):
        assert_close(up(y.to(device), output_size=size), ref(y, output_size=size))
    with pytest.raises(ValueError, match="zeros"):
        tc.nn.ConvTranspose1d(2, 2, 3, padding_mode="reflect")(torch.randn(1, 2, 5))


def test_transposed_compiles_to_one_graph(device):
    x = torch.randn(2, 4, 5, 6, dtype=torch.float64, device=device, requires_grad=True)
    w = torch.randn(4, 3, 3, 3, dtype=torch.float64, device=device, requires_grad=True)

    def f(x, w):
        return tc.conv_transpose2d(x, w, stride=2, padding=1, groups=2).relu()

    torch._dynamo.reset()
    counter = CompileCounterWithBackend(BACKEND)
    out = torch.compile(f, backend=counter, fullgraph=True)(x, w)
    assert counter.frame_count == 1
    ref = F.conv_transpose2d(x.detach().cpu(), w.detach().cpu(), stride=2, padding=1, groups=2)
    assert_close(out, ref.relu())
    grads = torch.autograd.grad(out.sum(), (x, w))
    xr, wr = (t.detach().cpu().requires_grad_() for t in (x, w))
    want = torch.autograd.grad(
        F.conv_transpose2d(xr, wr, stride=2, padding=1, groups=2).relu().sum(), (xr, wr)
    )
    for g, e in zip(grads, want, strict=True):
        assert_close(g, e, reduction=32)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(output_padding=2, stride=2), "output padding must be smaller than either stride"),
        (dict(padding="same"), "padding must be an int or a tuple"),
        (dict(groups=3), "expected weight to be divisible by 3"),
        (dict(output_padding=-1), "negative output_padding"),
        (dict(stride=0), "non-positive stride"),
    ],
)
def test_transposed_errors(kwargs, message, device):
    x = torch.randn(1, 4, 5, 5, device=device)
    w = torch.randn(4, 2, 3, 3, device=device)
    with pytest.raises(tc.TritonConvError, match=message):
        tc.conv_transpose2d(x, w, **kwargs)
    with pytest.raises(tc.TritonConvError, match="expected input\\[1, 3, 5, 5\\] to have 4"):
        tc.conv_transpose2d(torch.randn(1, 3, 5, 5, device=device), w)


def test_conv1d_and_causal_compile_to_one_graph(device):
    x = torch.randn(2, 4, 9, dtype=torch.float64, device=device)
    w = torch.randn(4, 2, 3, dtype=torch.float64, device=device)
    taps = torch.randn(4, 3, dtype=torch.float64, device=device)

    def f(x, w, taps):
        return tc.conv1d(x, w, padding=1, groups=2) + tc.causal_conv1d(x, taps, activation="silu")

    torch._dynamo.reset()
    counter = CompileCounterWithBackend(BACKEND)
    out = torch.compile(f, backend=counter, fullgraph=True)(x, w, taps)
    assert counter.frame_count == 1
    xc, wc, tc_ = x.cpu(), w.cpu(), taps.cpu()
    causal = F.silu(F.conv1d(xc, tc_[:, None], padding=2, groups=4)[..., :9])
    assert_close(out, F.conv1d(xc, wc, padding=1, groups=2) + causal)


def test_more_transposed_errors(device):
    x, w = torch.randn(1, 4, 5, 5, device=device), torch.randn(4, 2, 3, 3, device=device)
    with pytest.raises(tc.TritonConvError, match="expected bias to be 1-dimensional with 2"):
        tc.conv_transpose2d(x, w, torch.randn(3, device=device))
    with pytest.raises(tc.TritonConvError, match=r"calculated output size .* too small"):
        tc.conv_transpose2d(x[..., :1, :1], w[..., :1, :1], padding=1)
    with pytest.raises(tc.TritonConvError, match="conv_transpose2d takes a 4-dimensional"):
        tc.conv_transpose2d(x, w[..., 0])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_pointwise_transposed_with_output_padding(dtype, device):
    """A 1x1 transposed convolution whose output is larger than its input (dilation 2 allows
    ``output_padding=1`` at stride 1): the weight gradient's x (the output gradient) has a
    row and column more than dy (the input). The implicit GEMM's weight gradient read them
    as the same positions (its ``POINTWISE`` loop) and gave a dW 1.5 off in relative norm
    (session 37's review)."""
    x = random_tensor((2, 32, 5, 6), dtype, device).contiguous(memory_format=torch.channels_last)
    w = random_tensor((32, 32, 1, 1), dtype, device).contiguous(memory_format=torch.channels_last)
    kw = dict(dilation=2, output_padding=1)
    leaf = w.detach().requires_grad_()
    y = tc.conv_transpose2d(x, leaf, **kw, algo="implicit_gemm")
    dy = random_tensor(y.shape, dtype, device)
    (got,) = torch.autograd.grad(y, leaf, dy)
    ref = w.double().requires_grad_()
    (want,) = torch.autograd.grad(F.conv_transpose2d(x.double(), ref, **kw), ref, dy.double())
    assert_close(got, want, reduction=60, name="dW")


@pytest.mark.parametrize("bias", [False, True])
def test_implicit_gemm_transposed_backward_relays_dy_once(bias, device, monkeypatch):
    """The implicit GEMM's transposed convolution computes its gradients in one backward op
    (``conv_transpose_implicit_gemm_backward``): an NCL output gradient is relaid channels-last
    once for both the input gradient (a convolution of it) and the weight gradient (which
    reads it as its input), the input gradient comes back in the input's layout, and a
    repeated backward replays that op's launch plan with the same results."""
    from tritonconv.ops import implicit_gemm

    copies = []
    relaid = implicit_gemm._relaid
    monkeypatch.setattr(
        implicit_gemm, "_relaid", lambda t, order: copies.append(tuple(t.shape)) or relaid(t, order)
    )
    x = random_tensor((2, 32, 9), torch.float32, device).requires_grad_()
    w = random_tensor((32, 16, 4), torch.float32, device).requires_grad_()
    b = random_tensor((16,), torch.float32, device).requires_grad_() if bias else None
    leaves = [t for t in (x, w, b) if t is not None]
    y = tc.conv_transpose1d(x, w, b, stride=2, padding=1, algo="implicit_gemm")
    dy = random_tensor(y.shape, torch.float32, device)
    copies.clear()
    first = torch.autograd.grad(y, leaves, dy, retain_graph=True)
    # (1-D tensors go to the kernels as (N, C, 1, L))
    assert [tuple(n for n in c if n != 1) for c in copies].count(tuple(dy.shape)) == 1, copies
    again = torch.autograd.grad(y, leaves, dy)
    assert first[0].stride() == x.stride()
    refs = [t.detach().double().requires_grad_() for t in leaves]
    want = torch.autograd.grad(
        F.conv_transpose1d(refs[0], refs[1], refs[2] if bias else None, stride=2, padding=1),
        refs,
        dy.double(),
    )
    for name, g, h, r in zip(("dx", "dW", "db"), first, again, want):
        assert torch.equal(g, h), name
        assert_close(g, r, reduction=32 * 4, name=name)
