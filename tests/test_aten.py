"""algo="aten": PyTorch's own CPU convolution, what ``auto`` runs on CPU tensors (issue 14, item 5).

Same semantics as the kernels: float64 references for floats, forward and gradients; integers
bitwise equal to the Triton direct kernel's (an independent implementation); every dimension,
transposed too; layouts, unbatched and empty inputs; and the default itself."""

import pytest
import torch
import torch.nn.functional as F

import tritonconv as tc
from tritonconv.testing import assert_close, random_tensor

CPU = torch.device("cpu")

# (function, reference, input, weight, kwargs)
CASES = [
    (tc.conv1d, F.conv1d, (2, 4, 11), (6, 2, 3), dict(stride=2, padding=1, groups=2)),
    (tc.conv1d, F.conv1d, (3, 9), (4, 3, 4), dict(padding="same", dilation=2)),  # unbatched
    (tc.conv2d, F.conv2d, (2, 3, 7, 6), (5, 3, 3, 2), dict(stride=(2, 1), padding=(1, 0))),
    (tc.conv2d, F.conv2d, (1, 4, 6, 5), (4, 1, 4, 4), dict(padding="same", groups=4)),
    (tc.conv2d, F.conv2d, (0, 3, 5, 5), (2, 3, 3, 3), dict(padding=1)),  # empty batch
    (tc.conv3d, F.conv3d, (1, 2, 4, 5, 3), (3, 2, 2, 3, 1), dict(stride=(1, 2, 1), dilation=1)),
    (
        tc.conv_transpose1d,
        F.conv_transpose1d,
        (2, 4, 6),
        (4, 3, 3),
        dict(stride=2, padding=1, output_padding=1),
    ),
    (
        tc.conv_transpose2d,
        F.conv_transpose2d,
        (2, 4, 3, 5),
        (4, 1, 3, 2),
        dict(stride=(2, 3), padding=(1, 0), output_padding=(1, 2), groups=2),
    ),
    (
        tc.conv_transpose2d,
        F.conv_transpose2d,
        (2, 3, 4, 4),
        (3, 2, 3, 3),
        dict(stride=1, padding=2, output_padding=1, dilation=2),
    ),
    (
        tc.conv_transpose3d,
        F.conv_transpose3d,
        (1, 2, 3, 2, 3),
        (2, 3, 2, 2, 2),
        dict(stride=2, padding=(0, 1, 0), output_padding=(1, 0, 1)),
    ),
]


def _channels_last(t):
    if t.dim() == 4:
        return t.contiguous(memory_format=torch.channels_last)
    if t.dim() == 5:
        return t.contiguous(memory_format=torch.channels_last_3d)
    return t


@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
@pytest.mark.parametrize("case", range(len(CASES)), ids=lambda i: CASES[i][0].__name__ + str(i))
def test_matches_float64_forward_and_gradients(case, layout):
    fn, ref, x_shape, w_shape, kwargs = CASES[case]
    x = random_tensor(x_shape, torch.float32, CPU)
    w = random_tensor(w_shape, torch.float32, CPU)
    b = random_tensor((w_shape[1] * kwargs.get("groups", 1) if "transpose" in fn.__name__
                       else w_shape[0],), torch.float32, CPU)  # fmt: skip
    if layout == "channels_last":
        x, w = _channels_last(x), _channels_last(w)
    leaves = [t.requires_grad_() for t in (x, w, b)]
    out = fn(x, w, b, **kwargs, algo="aten")
    expected = ref(*(t.detach().double().requires_grad_() for t in (x, w, b)), **kwargs)
    assert out.shape == expected.shape and out.dtype == torch.float32
    assert_close(out, expected)
    if layout == "channels_last" and out.dim() >= 4 and x.shape[0]:
        assert not out.is_contiguous() or out.shape[1] == 1  # the input's memory format
    if out.numel():
        grad = torch.randn_like(expected)
        ours = torch.autograd.grad(out, leaves, grad.float())
        x64, w64, b64 = (t.detach().double().requires_grad_() for t in (x, w, b))
        exact = torch.autograd.grad(ref(x64, w64, b64, **kwargs), (x64, w64, b64), grad)
        for got, want in zip(ours, exact):
            assert_close(got, want, reduction=w[0].numel())


#: Tests that run the Triton kernels on CPU tensors: only where this process interprets them
needs_interpreter = pytest.mark.skipif(
    not tc.INTERPRETER, reason="this process compiles the kernels for CUDA: CPU tensors run ATen"
)


@needs_interpreter
@pytest.mark.parametrize("dtype", [torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64])
@pytest.mark.parametrize("transposed", [False, True], ids=["conv", "transposed"])
def test_integers_bitwise_equal_to_the_direct_kernel(dtype, transposed):
    """Values large enough to wrap in the narrow dtypes: both paths wrap like the dtype."""
    high = 100 if dtype in (torch.int8, torch.uint8) else 1000
    low = 0 if dtype == torch.uint8 else -high
    x = torch.randint(low, high, (2, 4, 6, 5)).to(dtype)
    kwargs = dict(stride=2, padding=1, groups=2)
    if transposed:
        w = torch.randint(low, high, (4, 3, 3, 2)).to(dtype)
        b = torch.randint(low, high, (6,)).to(dtype)
        fn = tc.conv_transpose2d
        kwargs["output_padding"] = 1
    else:
        w = torch.randint(low, high, (6, 2, 3, 2)).to(dtype)
        b = torch.randint(low, high, (6,)).to(dtype)
        fn = tc.conv2d
    ours = fn(x, w, b, **kwargs, algo="aten")
    kernel = fn(x, w, b, **kwargs, algo="direct")
    assert ours.dtype == dtype
    assert torch.equal(ours, kernel)


def test_auto_runs_aten_on_cpu_by_default(monkeypatch):
    if not tc.INTERPRETER:  # CPU tensors in a CUDA process: always ATen, whatever the variable
        x, w = torch.randn(1, 8, 9, 9), torch.randn(16, 8, 3, 3)
        monkeypatch.setenv("TRITONCONV_CPU_KERNELS", "1")
        tc.clear_caches()
        assert tc.explain(x, w, padding=1).algo == "aten"
        assert_close(tc.conv2d(x, w, padding=1), F.conv2d(x.double(), w.double(), padding=1))
        tc.clear_caches()
        return
    """The default for CPU tensors (the suite itself keeps ``auto`` on the kernels)."""
    x = random_tensor((1, 8, 9, 9), torch.float32, CPU)
    w = random_tensor((16, 8, 3, 3), torch.float32, CPU)
    monkeypatch.delenv("TRITONCONV_CPU_KERNELS", raising=False)
    tc.clear_caches()
    try:
        assert tc.explain(x, w, padding=1).algo == "aten"
        assert "CPU" in tc.explain(x, w, padding=1).reason
        assert_close(tc.conv2d(x, w, padding=1), F.conv2d(x.double(), w.double(), padding=1))
        monkeypatch.setenv("TRITONCONV_CPU_KERNELS", "1")
        tc.clear_caches()
        assert tc.explain(x, w, padding=1).algo != "aten"
    finally:
        tc.clear_caches()


def test_aten_takes_cpu_tensors_only():
    x = torch.empty(1, 2, 5, 5, device="meta")
    w = torch.empty(3, 2, 3, 3, device="meta")
    with pytest.raises(ValueError, match="algo='aten' runs PyTorch's CPU convolution"):
        tc.conv2d(x, w, algo="aten")


def test_aten_errors_are_tritonconvs():
    """Bad arguments are rejected by the same validation, before PyTorch sees them."""
    x = torch.randn(1, 4, 5, 5)
    with pytest.raises(ValueError, match="groups"):
        tc.conv2d(x, torch.randn(3, 4, 3, 3), groups=3, algo="aten")
