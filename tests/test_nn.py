"""tritonconv.nn.Conv2d: a drop-in torch.nn.Conv2d (checkpoints, padding modes, conversion)."""

import pytest
import torch

import tritonconv as tc
from tritonconv.testing import assert_close


def test_state_dict_compatible_with_torch(device):
    ours = tc.nn.Conv2d(4, 6, 3, stride=2, padding=1, bias=True).to(
        device=device, dtype=torch.float64
    )
    theirs = torch.nn.Conv2d(4, 6, 3, stride=2, padding=1, bias=True).double()
    assert ours.state_dict().keys() == theirs.state_dict().keys()
    ours.load_state_dict(theirs.state_dict())  # a torch checkpoint loads unchanged
    x = torch.randn(2, 4, 9, 9, dtype=torch.float64)
    assert_close(ours(x.to(device)), theirs(x), reduction=36)
    assert isinstance(ours, torch.nn.Conv2d)
    assert "algo='auto'" in repr(ours)


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
def test_padding_modes(mode, device):
    theirs = torch.nn.Conv2d(3, 4, (3, 2), padding=(1, 2), padding_mode=mode).double()
    ours = tc.nn.Conv2d(3, 4, (3, 2), padding=(1, 2), padding_mode=mode).double().to(device)
    ours.load_state_dict(theirs.state_dict())
    x = torch.randn(2, 3, 7, 8, dtype=torch.float64)
    assert_close(ours(x.to(device)), theirs(x), reduction=18)


def test_from_torch_shares_parameters_not_containers():
    theirs = torch.nn.Conv2d(3, 4, 3)
    ours = tc.nn.Conv2d.from_torch(theirs)
    assert ours.weight is theirs.weight
    ours.register_buffer("extra", torch.zeros(1))
    assert "extra" not in dict(theirs.named_buffers())


def test_convert_swaps_every_conv(device):
    torch.manual_seed(1)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1),
        torch.nn.Sequential(torch.nn.ReLU(), torch.nn.Conv2d(8, 4, 1, groups=2)),
    ).double()
    x = torch.randn(2, 3, 6, 6, dtype=torch.float64)
    expected = model(x)
    converted = tc.nn.convert(model).to(device)
    assert isinstance(converted[0], tc.nn.Conv2d) and isinstance(converted[1][1], tc.nn.Conv2d)
    assert_close(converted(x.to(device)), expected, reduction=72)


def test_convert_keeps_a_shared_convolution_one_module():
    """A convolution listed twice in one parent (``named_children`` yields it once) and one
    shared by two parents: every place gets the same converted module (an adversarial review
    found the second place left a torch module, and two parents with two copies)."""
    conv = torch.nn.Conv2d(3, 3, 3, padding=1)
    inner = torch.nn.Sequential(conv)
    model = tc.nn.convert(torch.nn.Sequential(conv, torch.nn.ReLU(), conv, inner))
    assert isinstance(model[0], tc.nn.Conv2d)
    assert model[0] is model[2] is model[3][0]
    assert model[0].weight is conv.weight
    assert len(list(model.modules())) == 4  # Sequential, Conv2d, ReLU, inner Sequential


def test_convert_a_convolution_itself():
    conv = torch.nn.Conv3d(2, 2, 1)
    converted = tc.nn.convert(conv, algo="implicit_gemm")
    assert type(converted) is tc.nn.Conv3d and converted.algo == "implicit_gemm"
    assert converted.weight is conv.weight


@pytest.mark.skipif(tc.INTERPRETER, reason="a whole video network: GPU machine (torchvision)")
def test_convert_r2plus1d_swaps_all_37_convolutions(device):
    """Issue 12's check: torchvision's (2+1)D video ResNet, every one of its 37 convolutions
    swapped (1x3x3 and 3x1x1 conv3d, 1x1x1 shortcuts); in eval mode and float64 (exact
    arithmetic on both sides) its output matches the same model run by PyTorch."""
    video = pytest.importorskip("torchvision.models.video")
    torch.manual_seed(0)
    model = video.r2plus1d_18(weights=None).double().eval().to(device)
    x = torch.randn(1, 3, 4, 32, 32, dtype=torch.float64, device=device)
    with torch.no_grad():
        expected = model(x)
        torch_convs = [m for m in model.modules() if isinstance(m, torch.nn.Conv3d)]
        converted = tc.nn.convert(model)
        ours = [m for m in converted.modules() if isinstance(m, tc.nn.Conv3d)]
        assert len(torch_convs) == len(ours) == 37
        actual = converted(x)
    assert_close(actual, expected, reduction=27 * 512)


def test_meta_tensors_give_shapes():
    """Modules on the meta device (shape inference, deferred initialisation) run as torch's
    do: the ATen form computes the output's shape, strides and dtype without data."""
    for ours, theirs, x in (
        (tc.nn.Conv2d(3, 4, 3, stride=2), torch.nn.Conv2d(3, 4, 3, stride=2), (2, 3, 9, 8)),
        (tc.nn.ConvTranspose3d(2, 3, 2), torch.nn.ConvTranspose3d(2, 3, 2), (1, 2, 3, 4, 4)),
    ):
        x = torch.empty(x, device="meta")
        got, want = ours.to("meta")(x), theirs.to("meta")(x)
        assert got.device.type == "meta" and got.shape == want.shape and got.dtype == want.dtype
    cols = tc.unfold(torch.empty(2, 3, 5, 5, device="meta"), 2)
    assert cols.shape == (2, 12, 16) and cols.device.type == "meta"


@pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning")
def test_jit_trace_records_pytorch_operations():
    """``torch.jit.trace`` (and ``torch.onnx.export``'s tracer) records each op's ATen form:
    the kernels' launchers took traced sizes for ints and failed ('Tensor' has no
    'bit_length'), found by an adversarial review (session 13)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        tc.nn.Conv2d(3, 4, 3, padding=1), torch.nn.ReLU(), tc.nn.ConvTranspose2d(4, 2, 2, stride=2)
    )
    traced = torch.jit.trace(model, torch.randn(1, 3, 6, 6))
    x = torch.randn(2, 3, 5, 7)
    torch.testing.assert_close(traced(x), model(x))
