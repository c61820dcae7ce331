"""conv2d by im2col + GEMM: forward and every gradient against PyTorch in float64."""

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st

import tritonconv as tc
from tritonconv.testing import DEVICE, assert_close, exact_fp32

# (input shape, weight shape, conv kwargs)
CASES = [
    ((2, 4, 9, 11), (6, 4, 3, 3), dict(padding=1)),
    ((2, 4, 9, 11), (6, 2, 3, 2), dict(stride=(2, 1), padding=(1, 0), dilation=(1, 2), groups=2)),
    ((3, 4, 7, 7), (8, 4, 1, 1), dict()),  # pointwise: im2col skipped
    ((2, 6, 8, 8), (12, 1, 3, 3), dict(padding="same", groups=6)),  # depthwise, multiplier 2
    ((2, 4, 6, 7), (5, 4, 2, 2), dict(padding="same")),  # even kernel: extra pad after
    ((1, 3, 13, 5), (2, 3, 5, 3), dict(stride=3, padding="valid")),  # primes, stride 3
    ((1, 2, 5, 6), (3, 2, 7, 8), dict(padding=1)),  # kernel = padded input
    ((2, 3, 5, 5), (4, 3, 1, 1), dict(stride=2)),  # 1x1 strided: not pointwise
]
IDS = [f"c{i}" for i in range(len(CASES))]


def conv(*args, **kwargs):
    """tc.conv2d on the algorithm this file tests (``"auto"`` would pick ``direct`` for the
    small channel counts used here)."""
    kwargs.setdefault("algo", "im2col_gemm")
    return tc.conv2d(*args, **kwargs)


def check_conv(x, w, b, kwargs, **call):
    """Forward and all gradients of tc.conv2d vs F.conv2d in float64 on CPU."""
    x = x.detach().requires_grad_()
    w = w.detach().requires_grad_()
    b = None if b is None else b.detach().requires_grad_()
    y = conv(x, w, b, **kwargs, **call)
    x64 = x.detach().cpu().double().requires_grad_()
    w64 = w.detach().cpu().double().requires_grad_()
    b64 = None if b is None else b.detach().cpu().double().requires_grad_()
    ref = F.conv2d(x64, w64, b64, **kwargs)
    reduction = w.shape[1] * w.shape[2] * w.shape[3]
    assert_close(y, ref, reduction=reduction, name="forward")
    grad = torch.randn(ref.shape, dtype=torch.float64)
    inputs = [t for t in (x, w, b) if t is not None]
    refs = [t for t in (x64, w64, b64) if t is not None]
    grads = torch.autograd.grad(y, inputs, grad.to(y.dtype).to(y.device))
    ref_grads = torch.autograd.grad(ref, refs, grad)
    batch_positions = ref.numel() // max(1, ref.shape[-3]) if ref.dim() >= 3 else ref.numel()
    for name, g, r, red in zip(
        ("dX", "dW", "dB"), grads, ref_grads, (reduction * 4, batch_positions, batch_positions)
    ):
        assert_close(g, r, reduction=red, name=name)
    return y


@pytest.mark.parametrize("case", CASES, ids=IDS)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_forward_and_gradients(case, dtype, device):
    xs, ws, kwargs = case
    x = torch.randn(xs, dtype=dtype, device=device)
    w = torch.randn(ws, dtype=dtype, device=device)
    b = torch.randn(ws[0], dtype=dtype, device=device)
    check_conv(x, w, b, kwargs, algo="im2col_gemm")
    check_conv(x, w, None, kwargs)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_forward(dtype, device):
    x = torch.randn(2, 8, 9, 9, device=device).to(dtype)
    w = torch.randn(5, 8, 3, 3, device=device).to(dtype)
    b = torch.randn(5, device=device).to(dtype)
    ref = F.conv2d(x.cpu().double(), w.cpu().double(), b.cpu().double(), padding=1)
    y = conv(x, w, b, padding=1)
    assert y.dtype == dtype
    assert_close(y, ref.to(dtype), reduction=72, name="half forward")


@pytest.mark.parametrize("case", [CASES[0], CASES[1], CASES[2]], ids=IDS[:3])
def test_channels_last_keeps_memory_format(case, device):
    xs, ws, kwargs = case
    x = torch.randn(xs, dtype=torch.float64, device=device).to(memory_format=torch.channels_last)
    w = torch.randn(ws, dtype=torch.float64, device=device)
    b = torch.randn(ws[0], dtype=torch.float64, device=device)
    y = check_conv(x, w, b, kwargs)
    assert y.is_contiguous(memory_format=torch.channels_last)
    y = conv(x.contiguous(), w, b, **kwargs)
    assert y.is_contiguous()


@pytest.mark.parametrize("shape", [(2, 1, 5, 5), (2, 3, 1, 1)], ids=["one-channel", "1x1-plane"])
def test_channels_last_ties_keep_torchs_format(shape, device):
    """One channel or a 1x1 plane makes a tensor contiguous in both formats; the output's
    strides must still be the ones F.conv2d gives."""
    x = torch.randn(shape, dtype=torch.float32).to(memory_format=torch.channels_last)
    w = torch.randn(4, shape[1], 1, 1, dtype=torch.float32)
    expected = F.conv2d(x.double(), w.double())
    for algo in tc.CONV_ALGOS[1:]:
        if algo == "depthwise" or (algo == "aten" and torch.device(device).type != "cpu"):
            continue
        with exact_fp32():
            y = tc.conv2d(x.to(device), w.to(device), algo=algo)
        assert y.stride() == expected.stride(), algo
        assert_close(y, expected)


@pytest.mark.parametrize("shape", [(3, 1, 5, 5), (3, 24, 1, 1), (24, 1, 1)], ids=str)
def test_a_tie_made_channels_last_by_its_weight_is_a_view(shape, device):
    """A contiguous input with one channel or a 1x1 plane (both layouts order its bytes
    alike) and a channels-last weight (a squeeze-excite block's second 1x1 convolution): each
    call takes the channels-last view the layout rule makes (no copy, no rule per call), by
    reshapes and a dimension move where autograd records it (no ``as_strided`` in the graph:
    its backward allocates and scatters); output values and strides as F.conv2d's, repeated
    calls (replayed) and gradients too."""
    from tritonconv import functional

    x = torch.randn(shape, dtype=torch.float64, device=device)
    w = torch.randn(4, shape[-3], 3, 3, dtype=torch.float64, device=device)
    w = w.to(memory_format=torch.channels_last)
    expected = F.conv2d(x.cpu(), w.cpu(), padding=1)
    for _ in range(3):
        y = tc.conv2d(x, w, padding=1)
        assert y.stride() == expected.stride()
        assert_close(y, expected)
    options = (1, 1, 1, 1, "auto", None)
    plan = functional._convolution_plan(2, x, w, None, options, False)
    relaid = functional._in_weights_layout(x, w, 2)
    view = functional._tie_view(x, x.dim() == 4)
    assert relaid.data_ptr() == view.data_ptr() == x.data_ptr()
    assert relaid.stride() == view.stride() != x.stride()
    assert plan.relayout == (tuple(x.shape), relaid.stride())
    xg, wg = x.clone().requires_grad_(), w.clone().requires_grad_()
    xr, wr = (t.detach().cpu().requires_grad_() for t in (x, w))
    F.conv2d(xr, wr, padding=1).square().sum().backward()
    for _ in range(2):
        xg.grad = wg.grad = None
        out = tc.conv2d(xg, wg, padding=1)
        graph, stack = [], [out.grad_fn]
        while stack:  # (the nodes between the output and x)
            node = stack.pop()
            graph.append(type(node).__name__)
            stack += [n for n, _ in node.next_functions if n is not None]
        assert not [n for n in graph if "AsStrided" in n], graph
        out.square().sum().backward()
        assert_close(xg.grad, xr.grad, reduction=36)
        assert_close(wg.grad, wr.grad, reduction=3 * 25)


def test_non_contiguous_input_and_weight(device):
    x = torch.randn(3, 10, 12, 9, dtype=torch.float64, device=device)[:, ::2].transpose(2, 3)
    w = torch.randn(4, 5, 3, 6, dtype=torch.float64, device=device)[..., ::2]
    check_conv(x, w, None, dict(padding=(1, 2), stride=(1, 2)))


def test_unbatched_and_empty_batch(device):
    w = torch.randn(4, 3, 3, 3, dtype=torch.float64, device=device)
    b = torch.randn(4, dtype=torch.float64, device=device)
    x = torch.randn(3, 8, 7, dtype=torch.float64, device=device)
    y = check_conv(x, w, b, dict(padding=1))
    assert y.shape == (4, 8, 7)
    empty = torch.zeros(0, 3, 8, 7, dtype=torch.float64, device=device, requires_grad=True)
    y = conv(empty, w, b, padding=1)
    assert y.shape == (0, 4, 8, 7)
    (gx,) = torch.autograd.grad(y.sum(), empty)
    assert gx.shape == empty.shape


def test_gradcheck(device):
    x = torch.randn(1, 2, 5, 4, dtype=torch.float64, device=device, requires_grad=True)
    w = torch.randn(4, 1, 2, 3, dtype=torch.float64, device=device, requires_grad=True)
    b = torch.randn(4, dtype=torch.float64, device=device, requires_grad=True)

    def grouped(x, w, b):
        return conv(x, w, b, stride=(2, 1), padding=1, dilation=(1, 2), groups=2)

    assert torch.autograd.gradcheck(grouped, (x, w, b), fast_mode=True)


def test_backward_is_bitwise_deterministic(device):
    x = torch.randn(4, 6, 12, 12, device=device, requires_grad=True)
    w = torch.randn(8, 3, 3, 3, device=device, requires_grad=True)
    g = torch.randn(4, 8, 12, 12, device=device)

    def grads():
        y = conv(x, w, padding=1, groups=2, workspace_limit=6 * 9 * 4 * 200)
        return torch.autograd.grad(y, (x, w), g)

    first = grads()
    for _ in range(2):
        for a, b in zip(grads(), first):
            assert torch.equal(a, b)


@pytest.mark.parametrize(
    "limit, whole, chunks",
    [
        (1 << 30, True, 1),  # everything at once
        (36 * 8 * 99, True, 3),  # one sample per chunk (the GEMM writes in place)
        (36 * 8 * 40, False, 9),  # rows of a sample (col2im accumulates)
    ],
)
def test_workspace_chunking_gives_same_answer(limit, whole, chunks, device):
    x = torch.randn(3, 4, 9, 11, dtype=torch.float64, device=device)
    w = torch.randn(6, 4, 3, 3, dtype=torch.float64, device=device)
    plan = tc.conv2d_workspace(
        x.shape, w.shape, padding=1, dtype=torch.float64, workspace_limit=limit
    )
    assert (plan.whole_samples, plan.chunks) == (whole, chunks)
    assert plan.bytes <= limit
    check_conv(
        x,
        w,
        torch.randn(6, dtype=torch.float64, device=device),
        dict(padding=1),
        workspace_limit=limit,
    )
    expected = F.conv2d(x.cpu(), w.cpu(), padding=1)
    assert_close(conv(x, w, padding=1, workspace_limit=limit), expected, reduction=36)


def test_large_forward_matches(device):
    """A larger batch (N*L = 8192) through forward, with and without bias."""
    x = torch.randn(8, 4, 32, 32, dtype=torch.float64, device=device)
    w = torch.randn(6, 4, 3, 3, dtype=torch.float64, device=device)
    b = torch.randn(6, dtype=torch.float64, device=device)
    expected = F.conv2d(x.cpu(), w.cpu(), b.cpu(), padding=1)
    assert_close(conv(x, w, b, padding=1), expected, reduction=36)
    assert_close(conv(x, w, padding=1), F.conv2d(x.cpu(), w.cpu(), padding=1), reduction=36)


def test_global_workspace_limit():
    assert tc.get_workspace_limit() == tc.DEFAULT_WORKSPACE_LIMIT
    try:
        tc.set_workspace_limit(1000)
        plan = tc.conv2d_workspace((2, 4, 9, 11), (6, 4, 3, 3), padding=1)
        assert plan.bytes <= 1000 and not plan.whole_samples
    finally:
        tc.set_workspace_limit(tc.DEFAULT_WORKSPACE_LIMIT)
    assert tc.conv2d_workspace((2, 4, 9, 11), (6, 4, 1, 1)).skips_im2col


def test_custom_ops_pass_opcheck(device):
    """Fake implementations agree with the real ops (shapes, strides, dtypes), also under
    dynamic shapes, and the ops are registered correctly (torch.library.opcheck)."""
    x = torch.randn(2, 4, 6, 5, dtype=torch.float64, device=device)
    w = torch.randn(6, 2, 3, 3, dtype=torch.float64, device=device)
    geometry = ([1, 2], [1, 0], [1, 0], [1, 1], 2)
    ops = torch.ops.tritonconv
    y = ops.conv2d_gemm(x, w, None, *geometry, 1 << 30)
    dy = torch.randn_like(y)
    cases = [
        (ops.conv2d_gemm, (x, w, None, *geometry, 1 << 30)),
        (ops.conv2d_gemm_backward, (dy, x, w, *geometry, 1 << 30, [True, True, True])),
        (ops.conv2d_direct, (x, w, None, *geometry, False)),
        (ops.conv2d_direct_backward, (dy, x, w, *geometry, False, [True, False, True])),
        (ops.unfold, (x, [2, 3], [1, 1], [1, 0], [1, 2])),
    ]
    cols = ops.unfold(x, [2, 3], [1, 1], [1, 0], [1, 2])
    cases.append((ops.fold, (cols, [6, 5], [2, 3], [1, 1], [1, 0], [1, 2])))
    for op, args in cases:
        torch.library.opcheck(op, args)


def test_torch_compile_fullgraph(device):
    """The custom ops trace without graph breaks (inductor on CUDA, aot_eager on CPU)."""
    model = torch.nn.Sequential(
        tc.nn.Conv2d(3, 4, 3, padding=1, algo="im2col_gemm"),
        torch.nn.ReLU(),
        tc.nn.Conv2d(4, 2, 1, algo="im2col_gemm"),
    )
    model = model.to(device=device, dtype=torch.float64)
    x = torch.randn(2, 3, 6, 6, dtype=torch.float64, device=device, requires_grad=True)
    backend = "inductor" if device == "cuda" else "aot_eager"
    compiled = torch.compile(model, backend=backend, fullgraph=True)
    y = compiled(x)
    y_ref = model(x)
    assert_close(y, y_ref.detach().cpu())
    (gx,) = torch.autograd.grad(y.sum(), x)
    (gx_ref,) = torch.autograd.grad(y_ref.sum(), x)
    assert_close(gx, gx_ref.cpu())


@given(
    n=st.integers(1, 2),
    groups=st.integers(1, 2),
    c_per=st.integers(1, 2),
    k_per=st.integers(1, 2),
    h=st.integers(1, 8),
    w=st.integers(1, 8),
    kernel=st.tuples(st.integers(1, 3), st.integers(1, 3)),
    stride=st.tuples(st.integers(1, 2), st.integers(1, 2)),
    padding=st.tuples(st.integers(0, 2), st.integers(0, 2)),
    dilation=st.tuples(st.integers(1, 2), st.integers(1, 2)),
    bias=st.booleans(),
)
def test_random_geometries(n, groups, c_per, k_per, h, w, kernel, stride, padding, dilation, bias):
    for size, p, k, d in zip((h, w), padding, kernel, dilation):
        if size + 2 * p < d * (k - 1) + 1:
            return
    x = torch.randn(n, groups * c_per, h, w, dtype=torch.float64, device=DEVICE)
    wt = torch.randn(groups * k_per, c_per, *kernel, dtype=torch.float64, device=DEVICE)
    b = torch.randn(groups * k_per, dtype=torch.float64, device=DEVICE) if bias else None
    check_conv(x, wt, b, dict(stride=stride, padding=padding, dilation=dilation, groups=groups))
