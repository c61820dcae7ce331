"""crop (Caffe's Crop layer) against PyTorch slicing: N-D, every dtype, any layout, gradients,
and every bad argument."""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import tritonconv as tc
from tritonconv.geometry import FLOAT_DTYPES, INT_DTYPES
from tritonconv.ops import crop as crop_ops
from tritonconv.testing import DEVICE, poison_, random_tensor

ALL_DTYPES = (*FLOAT_DTYPES, *INT_DTYPES, torch.bool)


def window(offsets, sizes):
    """The slices that PyTorch indexing uses for the same crop."""
    return tuple(slice(o, o + s) for o, s in zip(offsets, sizes))


def expected_grad(input_like: torch.Tensor, grad_output: torch.Tensor, offsets) -> torch.Tensor:
    """The input gradient by PyTorch: zeros, the output gradient assigned into the window."""
    grad = torch.zeros(input_like.shape, dtype=grad_output.dtype, device=grad_output.device)
    grad[window(offsets, grad_output.shape)] = grad_output
    return grad


def assert_equal(actual: torch.Tensor, expected: torch.Tensor, name: str):
    """A crop copies: the result must match PyTorch bit for bit (NaN poison never matches)."""
    assert actual.shape == expected.shape, f"{name}: {tuple(actual.shape)} != {expected.shape}"
    assert actual.dtype == expected.dtype, f"{name}: {actual.dtype} != {expected.dtype}"
    differ = actual.cpu() != expected.cpu()
    if differ.any():
        where = differ.nonzero()[0].tolist()
        raise AssertionError(
            f"{name}: {int(differ.sum())} of {actual.numel()} elements differ, first at {where}"
        )


@st.composite
def crops(draw):
    """(input shape, reference shape, axis as passed, offset as passed, full offsets)."""
    ndim = draw(st.integers(1, 5))
    shape = draw(st.lists(st.integers(1, 7), min_size=ndim, max_size=ndim))
    axis = draw(st.integers(-ndim, ndim - 1))
    first = axis % ndim
    ref = list(shape)
    offsets = [0] * ndim
    for d in range(first, ndim):
        ref[d] = draw(st.integers(0, shape[d]))
        offsets[d] = draw(st.integers(0, shape[d] - ref[d]))
    # dimensions before axis: the reference's sizes there are ignored
    for d in range(first):
        ref[d] = draw(st.integers(0, 9))
    style = draw(st.sampled_from(["list", "int", "none"]))
    cropped = range(first, ndim)
    if style == "int":
        offset = draw(st.integers(0, min(shape[d] - ref[d] for d in cropped)))
        offsets[first:] = [offset] * len(cropped)
    elif style == "none":
        offset = None
        offsets[first:] = [(shape[d] - ref[d]) // 2 for d in cropped]
    else:
        offset = offsets[first:]
    return shape, ref, axis, offset, offsets


LAYOUTS = ["contiguous", "reversed", "every-other-inner", "every-other-outer"]


def make_input(shape, dtype, layout):
    """Random data of ``shape``: contiguous, in reversed dimension order, or every other
    element along the innermost or the outermost dimension of a tensor twice as large."""
    if layout == "every-other-inner":
        return random_tensor((*shape[:-1], 2 * shape[-1]), dtype, DEVICE)[..., ::2]
    if layout == "every-other-outer":
        return random_tensor((2 * shape[0], *shape[1:]), dtype, DEVICE)[::2]
    if layout == "reversed":
        reverse = tuple(reversed(range(len(shape))))
        return random_tensor([shape[d] for d in reverse], dtype, DEVICE).permute(reverse)
    return random_tensor(shape, dtype, DEVICE)


@given(
    problem=crops(),
    dtype=st.sampled_from(ALL_DTYPES),
    layout=st.sampled_from(LAYOUTS),
    grad_layout=st.sampled_from(LAYOUTS),
)
def test_crop_matches_slicing(problem, dtype, layout, grad_layout):
    shape, ref, axis, offset, offsets = problem
    x = make_input(shape, dtype, layout)
    sizes = [*shape[: axis % len(shape)], *ref[axis % len(shape) :]]
    assert_equal(tc.crop(x, ref, axis, offset), x[window(offsets, sizes)], "crop")
    grad_output = make_input(sizes, dtype, grad_layout)
    grad_input = crop_ops.crop_backward(grad_output, shape, offsets, crop_ops.dim_order(x))
    assert_equal(grad_input, expected_grad(x, grad_output, offsets), "crop_backward")


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_every_dtype(dtype, device):
    x = random_tensor((2, 5, 6, 7), dtype, device)
    out = tc.crop(x, (2, 5, 3, 4), axis=2, offset=(2, 1))
    assert_equal(out, x[:, :, 2:5, 1:5], "crop")
    grad_output = random_tensor(out.shape, dtype, device)
    grad_input = crop_ops.crop_backward(grad_output, list(x.shape), [0, 0, 2, 1], [0, 1, 2, 3])
    assert_equal(grad_input, expected_grad(x, grad_output, [0, 0, 2, 1]), "crop_backward")


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda x: x[:, :, ::2, 1::3], id="strided-slice"),
        pytest.param(lambda x: x.permute(3, 1, 0, 2), id="permuted"),
        pytest.param(lambda x: x[:, :1].expand(-1, 4, -1, -1), id="expanded"),
        pytest.param(lambda x: x.to(memory_format=torch.channels_last), id="channels-last"),
    ],
)
def test_layouts(make, device):
    x = make(random_tensor((3, 4, 10, 11), torch.float64, device))
    sizes = [x.shape[0], *(max(1, s - 2) for s in x.shape[1:])]
    offsets = [0, 1, 2, 1]
    out = tc.crop(x, sizes, axis=1, offset=offsets[1:])
    assert_equal(out, x[window(offsets, sizes)], "crop")


def test_channels_last_output_and_gradient(device):
    x = random_tensor((2, 6, 9, 8), torch.float32, device).to(memory_format=torch.channels_last)
    x.requires_grad_(True)
    out = tc.crop(x, (2, 6, 5, 4), offset=(3, 2))
    assert out.is_contiguous(memory_format=torch.channels_last)
    grad_output = random_tensor(out.shape, torch.float32, device)
    (grad,) = torch.autograd.grad(out, x, grad_output)
    assert grad.is_contiguous(memory_format=torch.channels_last)
    assert_equal(grad, expected_grad(x, grad_output, [0, 0, 3, 2]), "grad")


def test_channels_last_3d(device):
    x = random_tensor((2, 3, 4, 5, 6), torch.float16, device)
    x = x.to(memory_format=torch.channels_last_3d)
    out = tc.crop(x, (2, 3, 2, 3, 4), axis=-3, offset=1)
    assert out.is_contiguous(memory_format=torch.channels_last_3d)
    assert_equal(out, x[:, :, 1:3, 1:4, 1:5], "crop")


def test_contiguous_input_gives_contiguous_output(device):
    out = tc.crop(random_tensor((4, 1, 6, 5), torch.float32, device), (4, 1, 3, 3), offset=1)
    assert out.is_contiguous()


@pytest.mark.parametrize("index_64", [False, True], ids=["int32", "int64"])
@pytest.mark.parametrize("channels_last", [False, True])
def test_launcher_writes_every_element(channels_last, index_64, device, monkeypatch):
    """Called directly on poisoned buffers, forward and backward leave nothing unwritten, with
    int32 or int64 indices (the latter forced here: real cases need 2**31 elements)."""
    monkeypatch.setattr(crop_ops, "needs_int64", lambda *tensors: index_64)
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    x = random_tensor((3, 5, 7, 9), torch.float32, device).to(memory_format=fmt)
    offsets, sizes = [1, 2, 3, 4], [2, 3, 4, 5]
    out = poison_(torch.empty(sizes, device=device).to(memory_format=fmt))
    crop_ops.crop_into(x, out, offsets)
    assert_equal(out, x[window(offsets, sizes)], "crop_into forward")
    grad_output = random_tensor(sizes, torch.float32, device)
    grad_input = poison_(torch.empty_like(x))
    crop_ops.crop_into(grad_output, grad_input, [-o for o in offsets])
    assert_equal(grad_input, expected_grad(x, grad_output, offsets), "crop_into backward")


def test_wide_rows_and_many_rows(device):
    """An innermost axis wider than a block, and more rows than one program holds."""
    x = random_tensor((3, 20000), torch.float32, device)
    assert_equal(tc.crop(x, (3, 19000), axis=1, offset=500), x[:, 500:19500], "wide")
    x = random_tensor((70000, 3), torch.int16, device)
    assert_equal(tc.crop(x, (69000, 2), axis=0, offset=(7, 1)), x[7:69007, 1:3], "tall")


def test_gradients_match_slicing(device):
    x = random_tensor((2, 3, 6, 7), torch.float32, device).requires_grad_(True)
    ref = torch.empty(9, 9, 4, 3)  # sizes before axis are ignored
    out = tc.crop(x, ref, axis=-2, offset=None)
    expected = x[:, :, 1:5, 2:5]
    assert_equal(out, expected, "crop")
    grad_output = random_tensor(out.shape, torch.float32, device)
    (ours,) = torch.autograd.grad(out, x, grad_output)
    (theirs,) = torch.autograd.grad(expected, x, grad_output)
    assert_equal(ours, theirs, "grad")


def test_gradient_of_a_broadcast_grad_output(device):
    """``out.sum()`` hands backward a stride-0 gradient."""
    x = random_tensor((3, 4, 5), torch.float64, device).requires_grad_(True)
    tc.crop(x, (3, 2, 2), axis=1, offset=(1, 2)).sum().backward()
    assert_equal(x.grad, expected_grad(x, torch.ones(3, 2, 2, dtype=x.dtype), [0, 1, 2]), "grad")


def test_gradcheck(device):
    x = random_tensor((2, 4, 3), torch.float64, device).requires_grad_(True)
    assert torch.autograd.gradcheck(
        lambda t: tc.crop(t, (2, 2, 2), axis=1, offset=(1, 0)), (x,), fast_mode=True
    )


def test_reference_is_not_differentiated(device):
    x = random_tensor((2, 5), torch.float32, device).requires_grad_(True)
    ref = torch.zeros(2, 3, requires_grad=True)
    tc.crop(x, ref, axis=1, offset=1).sum().backward()
    assert ref.grad is None


def test_centred_offset_rounds_down(device):
    x = random_tensor((1, 9, 8), torch.float32, device)
    # margins 9-4=5 and 8-5=3: offsets 2 and 1, the odd element goes after the window
    assert_equal(tc.crop(x, (1, 4, 5), axis=1, offset=None), x[:, 2:6, 1:6], "centred")


def test_reference_forms(device):
    x = random_tensor((2, 3, 8, 8), torch.int32, device)
    expected = x[:, :, 1:7, 1:5]
    for ref in ((2, 3, 6, 4), [0, 0, 6, 4], torch.Size([2, 3, 6, 4]), torch.empty(7, 7, 6, 4)):
        assert_equal(tc.crop(x, ref, offset=1), expected, f"reference {type(ref).__name__}")
    assert_equal(tc.crop(x, (2, 3, 6, 4), offset=[1]), expected, "one offset in a list")


def test_one_and_six_dimensions(device):
    x = random_tensor((11,), torch.uint8, device)
    assert_equal(tc.crop(x, (4,), axis=0, offset=3), x[3:7], "1-D")
    x = random_tensor((2, 3, 2, 3, 4, 5), torch.float32, device)
    out = tc.crop(x, (1, 2, 1, 2, 3, 4), axis=0, offset=1)
    assert_equal(out, x[1:, 1:, 1:, 1:, 1:4, 1:5], "6-D")


def test_empty(device):
    x = random_tensor((0, 3, 5), torch.float32, device).requires_grad_(True)
    out = tc.crop(x, (0, 2, 2), axis=1, offset=1)
    assert out.shape == (0, 2, 2)
    out.sum().backward()
    assert x.grad.shape == x.shape
    x = random_tensor((2, 3, 5), torch.float32, device).requires_grad_(True)
    out = tc.crop(x, (2, 3, 0), axis=2, offset=5)
    assert out.shape == (2, 3, 0)
    out.sum().backward()
    assert_equal(x.grad, torch.zeros_like(x), "grad of an empty crop")


def test_module(device):
    crop = tc.nn.Crop(axis=2, offset=(1, 2))
    assert "axis=2" in repr(crop) and not list(crop.parameters())
    skip = random_tensor((2, 4, 10, 10), torch.float32, device)
    upsampled = torch.empty(2, 4, 7, 6, device=device)
    assert_equal(crop(skip, upsampled), skip[:, :, 1:8, 2:8], "nn.Crop")


def test_custom_ops_pass_opcheck(device):
    """Schema, fake (meta) implementation, strides included, and autograd registration."""
    x = random_tensor((2, 3, 5, 4), torch.float32, device)
    for t in (x, x.to(memory_format=torch.channels_last)):
        torch.library.opcheck(torch.ops.tritonconv.crop.default, (t, [0, 1, 1, 0], [2, 2, 3, 4]))
    grad_output = random_tensor((2, 2, 3, 4), torch.float32, device)
    torch.library.opcheck(
        torch.ops.tritonconv.crop_backward.default,
        (grad_output, [2, 3, 5, 4], [0, 1, 1, 0], [0, 2, 3, 1]),
    )


# --------------------------------------------------------------------------------------------
# bad arguments: each error names what is wrong
# --------------------------------------------------------------------------------------------

BAD = [
    ((2, 3, 5, 5), (2, 3, 4, 4), 2, 2, r"at dimension 2, offset 2 \+ size 4 = 6 reads past .* 5"),
    ((2, 3, 5, 5), (2, 3, 4, 4), 2, (0, 3), r"at dimension 3, offset 3 \+ size 4 = 7 reads past"),
    ((2, 3, 5, 5), (2, 3, 6, 4), 2, 0, r"dimension 2 the reference's size 6 is larger .* size 5"),
    ((2, 3, 5, 5), (2, 3, 6, 4), 2, None, r"dimension 2 the reference's size 6 is larger"),
    ((2, 3, 5, 5), (3, 4, 4), 2, 0, r"reference has 3 dimensions \(\[3, 4, 4\]\) but input has 4"),
    ((2, 3, 5, 5), (2, 3, 4, 4), 1, (0, 1), r"offset=\[0, 1\] has 2 values, but axis=1 crops 3"),
    ((2, 3, 5, 5), (2, 3, 4, 4), 2, (0, 1, 1), r"offset=\[0, 1, 1\] has 3 values"),
    ((2, 3, 5, 5), (2, 3, 4, 4), 2, (-1, 0), r"offset -1 at dimension 2 is negative"),
    ((2, 3, 5, 5), (2, 3, 4, 4), 2, -1, r"offset -1 at dimension 2 is negative"),
    ((2, 3, 5, 5), (2, 3, 4, 4), 4, 0, r"axis=4 is out of range for a 4-D input .*\[-4, 3\]"),
    ((2, 3, 5, 5), (2, 3, 4, 4), -5, 0, r"axis=-5 is out of range"),
    ((2, 3, 5, 5), (2, 3, 4, 4), 1.0, 0, r"axis=1.0 is out of range"),
    ((2, 3, 5, 5), (2, 3, 4, 4), 2, 1.5, r"offset must be None, an int or a sequence of ints"),
    ((2, 3, 5, 5), (2, 3, -4, 4), 2, 0, r"reference must be a Tensor or a sequence of non-neg"),
    ((2, 3, 5, 5), "2345", 2, 0, r"reference must be a Tensor or a sequence of ints, got str"),
    ((2, 3, 5, 5), 4, 2, 0, r"reference must be a Tensor or a sequence of ints, got int"),
    ((), (), 0, 0, r"input must have 1 to 6 dimensions"),
    ((1,) * 7, (1,) * 7, 0, 0, r"input must have 1 to 6 dimensions"),
]


@pytest.mark.parametrize("shape,reference,axis,offset,match", BAD, ids=range(len(BAD)))
def test_bad_arguments(shape, reference, axis, offset, match, device):
    x = torch.zeros(shape, device=device)
    with pytest.raises(tc.TritonConvError, match=match):
        tc.crop(x, reference, axis, offset)


def test_bad_input_type():
    with pytest.raises(tc.TritonConvError, match="input must be a Tensor, got list"):
        tc.crop([1, 2, 3], (2,), axis=0)
