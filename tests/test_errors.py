"""Every validation error: raised before any kernel runs, clear, and catchable as PyTorch's."""

import pytest
import torch

import tritonconv as tc
from tritonconv import TritonConvError
from tritonconv.testing import DEVICE

X = torch.randn(2, 4, 8, 8, device=DEVICE)
W = torch.randn(6, 4, 3, 3, device=DEVICE)

CONV_ERRORS = [
    (
        dict(input=torch.randn(4, 8, device=DEVICE)),
        r"Expected 3D \(unbatched\) or 4D \(batched\) input to conv2d, but got input of size: \[4, 8\]",
    ),
    (dict(weight=torch.randn(6, 4, 3, device=DEVICE)), r"conv2d takes a 4-dimensional weight"),
    (
        dict(groups=3, weight=torch.randn(6, 1, 3, 3, device=DEVICE)),
        r"expected input\[2, 4, 8, 8\] to have 3 channels, but got 4",
    ),
    (
        dict(groups=4, weight=torch.randn(6, 1, 3, 3, device=DEVICE)),
        r"expected weight to be divisible by 4 at dimension 0",
    ),
    (dict(groups=0), r"non-positive groups is not supported"),
    (dict(groups=1.0), r"groups must be an integer, got groups=1.0"),
    (dict(groups=True), r"groups must be an integer, got groups=True"),
    (dict(stride=1.5), r"stride must be an int or a sequence of 2 ints, got 1.5"),
    (dict(dilation=(1, 2.0)), r"dilation to be a single integer value .*dilation=\[1, 2.0\]"),
    (dict(input=None), r"conv2d: input must be a Tensor, got NoneType"),
    (dict(weight=None), r"conv2d: weight must be a Tensor, got NoneType"),
    (dict(stride=0), r"non-positive stride is not supported"),
    (dict(stride=(1, -1)), r"non-positive stride"),
    (dict(padding=-1), r"negative padding is not supported"),
    (dict(dilation=0), r"dilation should be greater than zero"),
    (
        dict(weight=torch.randn(6, 4, 11, 3, device=DEVICE)),
        r"padded input size per channel: \(8 x 8\).*\(11 x 3\).*can't be greater",
    ),
    (dict(padding="same", stride=2), r"padding='same' is not supported for strided convolutions"),
    (dict(padding="full"), r"Invalid padding string 'full'"),
    (
        dict(stride=(1, 2, 3)),
        r"stride to be a single integer value or a list of 2 values.*stride=\[1, 2, 3\]",
    ),
    (
        dict(weight=W.double()),
        r"Input type \(float32\) and weight type \(float64\) should be the same",
    ),
    (
        dict(bias=torch.randn(5, device=DEVICE)),
        r"expected bias to be 1-dimensional with 6 elements, but got bias of size \[5\]",
    ),
    (dict(bias=torch.randn(6, device="meta")), r"same device.*input is on .* bias is on meta"),
    (dict(input=X.bool(), weight=W.bool()), r"dtype bool"),
    (dict(input=X.to(torch.complex64), weight=W.to(torch.complex64)), r"dtype complex64"),
    (dict(algo="winograd"), r"algo must be one of .*'winograd'"),
    (dict(workspace_limit=0), r"workspace_limit must be a positive int \(bytes\), got 0"),
    (dict(workspace_limit=1.5), r"workspace_limit must be a positive int \(bytes\), got 1.5"),
]


@pytest.mark.parametrize("override, message", CONV_ERRORS, ids=[m[:30] for _, m in CONV_ERRORS])
def test_conv2d_errors(override, message):
    call = dict(input=X, weight=W, bias=None)
    call.update(override)
    with pytest.raises(TritonConvError, match=message):
        tc.conv2d(**call)


@pytest.mark.parametrize("bad", [True, 1.0, (1.0, True), (1, 2.0)])
def test_validation_is_not_skipped_after_a_good_call(bad):
    """A cached good geometry must not let equal-but-wrong-typed arguments through."""
    tc.conv2d(X, W, stride=1)
    with pytest.raises(TritonConvError, match="stride"):
        tc.conv2d(X, W, stride=bad)


def test_errors_are_both_value_and_runtime_errors():
    for kind in (ValueError, RuntimeError):
        with pytest.raises(kind):
            tc.conv2d(X, W, stride=0)


def test_im2col_gemm_rejects_integers():
    with pytest.raises(TritonConvError, match=r"im2col_gemm.*int32"):
        tc.conv2d(X.int(), W.int(), algo="im2col_gemm")


def test_errors_come_before_any_kernel(monkeypatch):
    """Bad input never reaches a launcher."""
    from tritonconv.ops import conv_gemm, im2col

    def boom(*args, **kwargs):
        raise AssertionError("a kernel was launched")

    for module, name in ((im2col, "im2col"), (im2col, "col2im"), (conv_gemm, "conv2d_forward")):
        monkeypatch.setattr(module, name, boom)
    with pytest.raises(TritonConvError):
        tc.conv2d(X, W, padding=-1)
    with pytest.raises(TritonConvError):
        tc.unfold(X, 0)
    with pytest.raises(TritonConvError):
        tc.fold(torch.randn(2, 36, 10, device=DEVICE), (8, 8), 3)


UNFOLD_ERRORS = [
    (dict(input=torch.randn(8, 8, device=DEVICE)), r"Expected 3D or 4D .* but got: \[8, 8\]"),
    (dict(input=torch.randn(2, 0, 8, 8, device=DEVICE)), r"non-zero dimensions"),
    (dict(kernel_size=0), r"kernel size should be greater than zero"),
    (dict(stride=0), r"stride should be greater than zero"),
    (dict(dilation=(1, 0)), r"dilation should be greater than zero"),
    (dict(padding=-2), r"padding should be non-negative"),
    (dict(kernel_size=9), r"calculated shape of the array of sliding blocks as \(0, 0\)"),
    (dict(input=X.to(torch.complex64)), r"complex input is not supported"),
]


@pytest.mark.parametrize("override, message", UNFOLD_ERRORS, ids=[m[:30] for _, m in UNFOLD_ERRORS])
def test_unfold_errors(override, message):
    call = dict(input=X, kernel_size=3)
    call.update(override)
    with pytest.raises(TritonConvError, match=message):
        tc.unfold(**call)


COLS = torch.randn(2, 36, 36, device=DEVICE)
FOLD_ERRORS = [
    (dict(input=torch.randn(2, 3, 36, 36, device=DEVICE)), r"Expected 2D or 3D"),
    (
        dict(input=torch.randn(2, 35, 36, device=DEVICE)),
        r"divisible by the product of kernel_size, but got input.size\(1\)=35",
    ),
    (
        dict(input=torch.randn(2, 36, 30, device=DEVICE)),
        r"number of sliding blocks 6 \* 6 = 36, but got input.size\(2\)=30",
    ),
    (dict(output_size=(8, 8, 8)), r"output_size to be a single integer value or a list of 2"),
    (dict(output_size=0), r"output_size should be greater than zero"),
    (dict(input=COLS.bool()), r"fold: input has dtype bool"),
]


@pytest.mark.parametrize("override, message", FOLD_ERRORS, ids=[m[:30] for _, m in FOLD_ERRORS])
def test_fold_errors(override, message):
    call = dict(input=COLS, output_size=(8, 8), kernel_size=3)
    call.update(override)
    with pytest.raises(TritonConvError, match=message):
        tc.fold(**call)


def test_workspace_setter_rejects_nonsense():
    with pytest.raises(TritonConvError, match="positive int"):
        tc.set_workspace_limit(-5)


def test_workspace_plan_rejects_integer_dtypes():
    with pytest.raises(TritonConvError, match=r"im2col_gemm.*int64"):
        tc.conv2d_workspace((1, 3, 8, 8), (4, 3, 3, 3), dtype=torch.int64)


@pytest.mark.skipif(tc.INTERPRETER, reason="the interpreter takes CPU tensors: no other device")
def test_wrong_device_for_kernels():
    """A kernel asked for by name on tensors this process's kernels cannot read (CPU tensors
    in a CUDA process): a clear error, not a launch on them. (Meta tensors run the ATen form:
    ``test_nn.test_meta_tensors_give_shapes``.)"""
    x, w = torch.randn(1, 2, 4, 4), torch.randn(3, 2, 3, 3)
    with pytest.raises(TritonConvError, match="compiled kernels need CUDA tensors"):
        tc.conv2d(x, w, algo="direct")
    assert tc.conv2d(x, w).device.type == "cpu"  # auto on CPU tensors: PyTorch's CPU ops


def test_integer_like_arguments_are_integers():
    """NumPy integers and integer 0-dim tensors are integers, as PyTorch takes them (they were
    refused, groups as "non-positive"), in functions and in converted modules."""
    np = pytest.importorskip("numpy")
    x = torch.randn(1, 4, 7, 6, device=DEVICE)
    w = torch.randn(6, 2, 3, 3, device=DEVICE)
    want = tc.conv2d(x, w, None, 2, 1, 1, 2)
    for two, one in ((np.int64(2), np.int32(1)), (torch.tensor(2), torch.tensor(1))):
        got = tc.conv2d(x, w, None, two, [one, one], one, two)
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    conv = torch.nn.Conv2d(4, 6, 3, np.int64(2), np.int64(1), groups=np.int64(2)).to(DEVICE)
    torch.testing.assert_close(tc.nn.convert(conv)(x), conv(x))
