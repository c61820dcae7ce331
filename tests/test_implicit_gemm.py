"""Implicit-GEMM convolution (algo="implicit_gemm") against float64 PyTorch.

Forward and every gradient in one call, over geometries that exercise what is particular to this
kernel: the per-phase tap walk of the input gradient (strides 2-3 with dilations that share or
do not share a factor with them, so some phases have no taps), channel counts that are not a
multiple of the reduction block, groups, channels-last and strided views, weights in either
layout (the reduction-major copy and its skip), and the deterministic split-K weight gradient.
"""

import math
import os

import pytest
import torch
import torch.nn.functional as F
import triton
import triton.language as tl
from torch._dynamo.testing import CompileCounterWithBackend

import tritonconv
from tritonconv import precision
from tritonconv.bench import overridden
from tritonconv.kernels.mma import (
    bf16x6_step,
    lift,
    mma,
    split_bf16,
    split_tf32,
    split_tf32_finite,
)
from tritonconv.ops import direct, implicit_gemm
from tritonconv.testing import DEVICE, assert_close, exact_fp32, poison_, random_tensor

# (N, C, H, W, K, kernel, stride, padding, dilation, groups)
GEOMETRIES = [
    (2, 16, 9, 7, 16, (3, 3), 1, 1, 1, 1),
    (2, 16, 9, 8, 32, (3, 3), 2, 1, 1, 1),
    (1, 32, 11, 10, 16, (3, 2), (2, 3), (2, 1), (2, 1), 2),
    (3, 5, 8, 8, 7, (3, 3), 3, 0, 1, 1),
    (2, 18, 10, 9, 20, (5, 4), 2, 2, (3, 2), 2),
    (1, 24, 7, 7, 40, (1, 1), 1, 0, 1, 1),
    (2, 3, 12, 12, 16, (7, 7), 2, 3, 1, 1),
    (1, 4, 6, 6, 4, (1, 1), 1, 0, 1, 4),
]


def _check(x, w, b, *, transposed=False, output_padding=0, **kw):
    """Output and dx, dW, db against float64 PyTorch (fp32 at fp32 accuracy); 2-D, or 3-D
    (not transposed) for a 5-D ``x``."""
    leaves = [t.detach().requires_grad_() if t is not None else None for t in (x, w, b)]
    refs = [t.detach().double().requires_grad_() if t is not None else None for t in (x, w, b)]
    if transposed:
        y = tritonconv.conv_transpose2d(
            *leaves, output_padding=output_padding, algo="implicit_gemm", **kw
        )
        ref = F.conv_transpose2d(*refs, output_padding=output_padding, **kw)
    else:
        ours, theirs = (
            (tritonconv.conv3d, F.conv3d) if x.dim() == 5 else (tritonconv.conv2d, F.conv2d)
        )
        y = ours(*leaves, algo="implicit_gemm", **kw)
        ref = theirs(*refs, **kw)
    assert y.dtype == x.dtype
    reduction = w.shape[0] * math.prod(w.shape[2:])
    assert_close(y, ref, reduction=reduction, name="output")
    if x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous():
        assert y.is_contiguous(memory_format=torch.channels_last), "output lost channels-last"
    dy = random_tensor(y.shape, x.dtype, x.device)
    wanted = [t for t in refs if t is not None]
    got = torch.autograd.grad(y, [t for t in leaves if t is not None], dy)
    want = torch.autograd.grad(ref, wanted, dy.double())
    positions = y.numel() // y.shape[1] if y.numel() else 1
    for name, g, r in zip(("dx", "dW", "db"), got, want):
        assert_close(g, r, reduction=max(reduction, positions), name=name)


@pytest.mark.parametrize("geometry", GEOMETRIES, ids=str)
def test_forward_and_gradients_match_float64(geometry, device):
    N, C, H, W, K, kernel, stride, padding, dilation, groups = geometry
    with exact_fp32():
        x = random_tensor((N, C, H, W), torch.float32, device)
        w = random_tensor((K, C // groups, *kernel), torch.float32, device)
        b = random_tensor((K,), torch.float32, device)
        kw = dict(stride=stride, padding=padding, dilation=dilation, groups=groups)
        _check(x, w, b, **kw)
        _check(x.to(memory_format=torch.channels_last), w.to(memory_format=torch.channels_last),
               None, **kw)  # fmt: skip


def test_outer_product_forward_over_several_row_tiles(device):
    """float64 (outer products, no tensor cores) with more output rows than a program takes
    (1024 under the interpreter, 64 compiled): several row tiles, the last partial."""
    x = random_tensor((1, 3, 45, 50), torch.float64, device)  # 2250 output rows
    w = random_tensor((5, 3, 3, 3), torch.float64, device)
    b = random_tensor((5,), torch.float64, device)
    _check(x, w, b, padding=1)


@pytest.mark.parametrize("geometry", GEOMETRIES[:5], ids=str)
def test_transposed_matches_float64(geometry, device):
    """conv_transpose2d is the input-gradient kernel (phases), bias fused; its gradients are
    the forward and weight-gradient kernels."""
    N, C, H, W, K, kernel, stride, padding, dilation, groups = geometry
    with exact_fp32():
        x = random_tensor((N, K, H, W), torch.float32, device)
        w = random_tensor((K, C // groups, *kernel), torch.float32, device)
        b = random_tensor((C,), torch.float32, device)
        output_padding = tuple(s - 1 for s in torch.nn.modules.utils._pair(stride))
        for weight in (w, w.to(memory_format=torch.channels_last)):  # copied, read in place
            _check(
                x, weight, b, transposed=True, output_padding=output_padding, stride=stride,
                padding=padding, dilation=dilation, groups=groups,
            )  # fmt: skip


def test_phases_foldable_rule(device):
    """Input gradients fold their stride phases into the destination channels where that at
    least doubles the share of useful products and every phase has every tap (each kernel
    axis a whole number of strides): DCGAN's last layer (4x4 stride 2 into 3), not ResNet-50's
    7x7 stride-2 stem (phases of 3 and 4 taps: an infinite gradient times a padded tap's zero
    would be NaN), nor 16 channels, stride 1, dilation, groups, 3-D, or a kernel equal to its
    stride (the tap GEMM's)."""
    from tritonconv.geometry import make_geometry

    def geometry(kernel, stride, dilation=None):
        rank = len(kernel)
        return make_geometry((32,) * rank, kernel, stride, (1,) * rank, (1,) * rank,
                             dilation or (1,) * rank)  # fmt: skip

    foldable, f32 = implicit_gemm.phases_foldable, torch.float32
    assert foldable(torch.bfloat16, 3, geometry((4, 4), (2, 2)), 1)
    assert foldable(f32, 3, geometry((4, 6), (2, 3)), 1)
    assert foldable(f32, 1, geometry((16,), (8,)), 1)
    assert foldable(f32, 3, geometry((3, 4), (1, 2)), 1)  # (stride 1: every tap)
    assert not foldable(f32, 3, geometry((7, 7), (2, 2)), 1)
    assert not foldable(f32, 3, geometry((3, 3), (4, 4)), 1)  # (phases without taps)
    assert not foldable(f32, 16, geometry((4, 4), (2, 2)), 1)
    assert not foldable(f32, 3, geometry((3, 3), (1, 1)), 1)
    assert not foldable(f32, 3, geometry((4, 4), (2, 2), (2, 2)), 1)
    assert not foldable(f32, 3, geometry((4, 4), (2, 2)), 3)
    assert not foldable(f32, 3, geometry((4, 4, 4), (2, 2, 2)), 1)
    assert not foldable(f32, 3, geometry((2, 2), (2, 2)), 1)
    assert not foldable(torch.int32, 3, geometry((4, 4), (2, 2)), 1)
    x = torch.empty(4, 64, 32, 32, device=device)
    w = torch.empty(64, 3, 4, 4, device=device)
    reason = tritonconv.explain(x, w, stride=2, padding=1, transposed=True, algo="implicit_gemm")
    assert "stride phases folded into 12 channels" in reason.reason


@pytest.mark.parametrize(
    "case",
    [
        # (N, C, spatial, K, kernel, stride, padding): dx's C channels, a few
        (2, 3, (15, 13), 8, (6, 6), (2, 2), (3, 3)),  # padding past a phase's reach
        (1, 2, (9, 11), 5, (4, 6), (2, 3), (1, 2)),  # a different stride per axis
        (2, 3, (10, 9), 4, (4, 4), (2, 2), (1, 1)),  # DCGAN's last layer, transposed
        (2, 3, (17,), 6, (6,), (3,), (1,)),  # 1-D
        (2, 1, (12, 10), 4, (4, 2), (2, 2), (0, 0)),  # one channel, nothing cropped
        (2, 1, (40,), 8, (10,), (5,), (0,)),  # wav2vec's first conv1d: phases written into dx
    ],
    ids=str,
)
def test_input_gradient_with_phases_folded(case, device, monkeypatch):
    """The phase-folded input gradient (``phases_foldable``) against float64, through
    autograd (dx of a convolution; channels-last too) and as the transposed convolution's
    forward (bias fused, output padding), with a spy that it ran."""
    N, C, spatial, K, kernel, stride, padding = case
    folded = implicit_gemm._launch_grad_input_phases_folded
    runs = []
    monkeypatch.setattr(
        implicit_gemm, "_launch_grad_input_phases_folded",
        lambda *args: runs.append(1) or folded(*args),
    )  # fmt: skip
    kw = dict(stride=stride, padding=padding)
    with exact_fp32():
        x = random_tensor((N, C, *spatial), torch.float32, device)
        w = random_tensor((K, C, *kernel), torch.float32, device)
        b = random_tensor((K,), torch.float32, device)
        if len(spatial) == 2:
            _check(x, w, b, **kw)
            cl = torch.channels_last
            _check(x.to(memory_format=cl), w.to(memory_format=cl), None, **kw)
            output_padding = tuple(s - 1 for s in stride)
            for _ in range(2):  # (the second call replays the launch plan on new tensors)
                y = random_tensor((N, K, *spatial), torch.float32, device)
                w = random_tensor((K, C, *kernel), torch.float32, device)
                bias = random_tensor((C,), torch.float32, device)
                _check(y, w, bias, transposed=True, output_padding=output_padding, **kw)
        else:
            x64, w64 = x.double().requires_grad_(), w.double()
            y64 = F.conv1d(x64, w64, stride=stride, padding=padding)
            dy = random_tensor(y64.shape, torch.float32, device)
            (want,) = torch.autograd.grad(y64, [x64], dy.double())
            xr = x.detach().requires_grad_()
            y = tritonconv.conv1d(xr, w, stride=stride, padding=padding, algo="implicit_gemm")
            (got,) = torch.autograd.grad(y, [xr], dy)
            assert_close(got, want, reduction=K * kernel[0], name="dx")
            for _ in range(2):  # (the second call replays the launch plan on new tensors)
                dy, w = (
                    random_tensor(dy.shape, torch.float32, device),
                    random_tensor(w.shape, torch.float32, device),
                )
                bias = random_tensor((C,), torch.float32, device)
                got = tritonconv.conv_transpose1d(dy, w, bias, stride, padding, stride[0] - 1,
                                                  algo="implicit_gemm")  # fmt: skip
                want = F.conv_transpose1d(dy.double(), w.double(), bias.double(), stride,
                                          padding, stride[0] - 1)  # fmt: skip
                assert_close(got, want, reduction=K * kernel[0], name="transposed")
    assert runs


@pytest.mark.parametrize(
    "case",
    [
        # (x shape, weight shape, stride, channels-last): one input channel
        ((2, 1, 40), (8, 1, 10), 5, False),  # wav2vec's first conv1d
        ((2, 1, 12, 10), (4, 1, 3, 3), 1, True),
        ((2, 1, 12, 10), (4, 1, 3, 3), 1, False),
    ],
    ids=str,
)
def test_one_channel_is_not_relaid(case, device, monkeypatch):
    """A one-channel input, its input gradient and weight gradient are alike channels-first
    and channels-last (``same_layout``): the forward runs the convolution alone (no copy of
    x or of the weight), the backward relays only dy (and moves the input gradient's phases
    straight into dx), and dW comes out in the weight's layout without a copy; results
    against float64, dx and dW poisoned first."""
    xs, ws, stride, channels_last = case
    moves = []
    empty_strided = torch.empty_strided  # (every allocation poisoned: NaN where unwritten)
    monkeypatch.setattr(torch, "empty_strided", lambda *a, **k: poison_(empty_strided(*a, **k)))
    real_crop = implicit_gemm.crop_into
    monkeypatch.setattr(
        implicit_gemm, "crop_into", lambda *a: moves.append(a[1].shape) or real_crop(*a)
    )
    copies = _spy_on_calls(monkeypatch)
    conv = tritonconv.conv1d if len(xs) == 3 else tritonconv.conv2d
    ref = F.conv1d if len(xs) == 3 else F.conv2d
    with exact_fp32():
        x = random_tensor(xs, torch.float32, device)
        if channels_last:
            x = x.to(memory_format=torch.channels_last)
        w = random_tensor(ws, torch.float32, device)
        x.requires_grad_(), w.requires_grad_()
        y = conv(x, w, stride=stride, algo="implicit_gemm")
        assert moves == []  # the forward: the convolution's kernel alone
        dy = random_tensor(y.shape, torch.float32, device)
        dx, dw = torch.autograd.grad(y, [x, w], dy)
    x64, w64 = x.detach().double().requires_grad_(), w.detach().double().requires_grad_()
    y64 = ref(x64, w64, stride=stride)
    assert_close(y, y64, reduction=math.prod(ws[1:]), name="y")
    want_dx, want_dw = torch.autograd.grad(y64, [x64, w64], dy.double())
    assert_close(dx, want_dx, reduction=ws[0] * math.prod(ws[2:]), name="dx")
    assert_close(dw, want_dw, reduction=xs[0] * math.prod(y.shape[2:]), name="dw")
    assert torch.Tensor.copy_ not in copies  # dW written in the weight's layout
    # dy relaid channels-last, and then either the weight relaid for the input gradient
    # (output channels innermost) or (stride phases) the phases moved into dx itself
    assert len(moves) == 2


def _gan_last_layer(device):
    """(a call of a GAN's last transposed layer, 16 -> 3 channels 4x4 stride 2, whose forward
    is the phase-folded input gradient; its float64 result), called once and synchronised."""
    x = random_tensor((2, 16, 9, 7), torch.float32, device)
    w = random_tensor((16, 3, 4, 4), torch.float32, device)

    def conv():
        return tritonconv.conv_transpose2d(x, w, stride=2, padding=1, algo="implicit_gemm")

    conv()
    torch.cuda.synchronize()
    return conv, F.conv_transpose2d(x.double(), w.double(), stride=2, padding=1)


def _captured(conv):
    """(a CUDA graph of ``conv()`` captured on a side stream, its output)."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
        y = conv()
    torch.cuda.current_stream().wait_stream(stream)
    return graph, y


@pytest.mark.skipif(DEVICE != "cuda", reason="CUDA graphs")
def test_phase_weight_first_built_inside_graph_capture(device):
    """The phase weight's gather index (cached per shape) first built while a CUDA graph is
    captured: its kernels are recorded there, not run, so it must not be cached then (an
    eager call before the first replay would gather through its unwritten memory). That
    call, then the graph's replays, match float64 (a GAN's last transposed layer, its
    forward the phase-folded input gradient)."""
    with exact_fp32():
        conv, want = _gan_last_layer(device)  # (Triton compiles outside the capture)
        tritonconv.clear_caches()  # (the plans, and the index: built again inside it)
        implicit_gemm._phase_indices.clear()
        graph, y = _captured(conv)
        eager = conv()  # (before any replay)
        assert_close(eager, want, reduction=16 * 4, name="eager after the capture")
        for _ in range(2):
            poison_(y)
            graph.replay()
            assert_close(y, want, reduction=16 * 4, name="graph replay")


@pytest.mark.skipif(DEVICE != "cuda", reason="CUDA graphs")
def test_graph_captured_after_the_phase_index_survives_clear_caches(device):
    """A CUDA graph captured once the phase weight's gather index is built reads it by
    address: ``clear_caches`` and new allocations afterwards must not free or reuse it (the
    replay would gather through freed memory: a relative error of 1.05 when it did)."""
    with exact_fp32():
        conv, want = _gan_last_layer(device)  # (the index built and kept, outside)
        graph, y = _captured(conv)
        tritonconv.clear_caches()
        junk = [torch.full((n,), 10**6, dtype=torch.int64, device=device) for n in range(1, 400)]
        poison_(y)
        graph.replay()
        del junk
        assert_close(y, want, reduction=16 * 4, name="graph replay")


@pytest.mark.parametrize("order", ["fake, eager", "eager, fake", "eager, compiled"])
def test_phase_index_is_not_shared_with_tracers(order, device):
    """The phase weight's gather index (kept per shape) is built afresh for a tracer: a fake
    index kept would meet real tensors in later eager calls, a real one fake tensors under
    ``torch.compile`` (both raised before)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    tritonconv.clear_caches()
    implicit_gemm._phase_indices.clear()
    x = random_tensor((1, 4, 3, 3), torch.float32, device)
    w = random_tensor((4, 3, 4, 4), torch.float32, device)
    want = F.conv_transpose2d(x.double(), w.double(), stride=2, padding=1)

    def conv(x, w):
        return tritonconv.conv_transpose2d(x, w, stride=2, padding=1, algo="implicit_gemm")

    for step in order.split(", "):
        if step == "fake":
            with FakeTensorMode() as mode:
                assert conv(mode.from_tensor(x), mode.from_tensor(w)).shape == want.shape
        else:
            run = (
                conv
                if step == "eager"
                else torch.compile(conv, backend="aot_eager", fullgraph=True)
            )
            assert_close(run(x, w), want, reduction=4 * 4, name=step)


@pytest.mark.parametrize("kernel", [(4, 4), (3, 3)], ids=["folded", "phases"])
def test_input_gradient_keeps_pytorch_infinities(kernel, device):
    """An infinite ``grad_out`` value gives infinities where float64 PyTorch has them and
    NaN nowhere else, folded (4x4 stride 2: every phase has every tap) or not (3x3 stride 2:
    folding would multiply the infinity by the zero of a phase's missing tap)."""
    with exact_fp32():
        x = random_tensor((1, 3, 9, 9), torch.float32, device).requires_grad_()
        w = torch.ones(4, 3, *kernel, device=device)
        y = tritonconv.conv2d(x, w, stride=2, padding=1, algo="implicit_gemm")
        dy = torch.zeros_like(y)
        dy[0, 1, 2, 2] = float("inf")
        (got,) = torch.autograd.grad(y, [x], dy)
    x64 = x.detach().double().requires_grad_()
    y64 = F.conv2d(x64, w.double(), stride=2, padding=1)
    (want,) = torch.autograd.grad(y64, [x64], dy.double())
    assert torch.equal(got.isnan(), want.isnan()) and not want.isnan().any()
    assert torch.equal(got.isinf(), want.isinf()) and want.isinf().any()
    finite = want.isfinite()
    assert torch.equal(got[finite].double(), want[finite])  # (zeros)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("channels", [(32, 48, 3), (24, 40, 3), (40, 24, 1), (12, 20, 3)])
def test_half_precision_channels_last(channels, dtype, device):
    """Channel counts that are multiples of 16, of 8 only and of 4 only: the kernels' strides
    are then aligned to 8, 8 and 4 elements (``ALIGN``: vector loads and stores)."""
    c_in, c_out, k = channels
    x = random_tensor((2, c_in, 9, 9), dtype, device).to(memory_format=torch.channels_last)
    w = random_tensor((c_out, c_in, k, k), dtype, device).to(memory_format=torch.channels_last)
    b = random_tensor((c_out,), dtype, device)
    _check(x, w, b, stride=2, padding=k // 2)


def test_alignment_rule():
    align = implicit_gemm._alignment
    assert align(120, 40, 0, 3360) == 8 and align(24, 12) == 4 and align(18, 6) == 2
    assert align(7, 8) == 1 and align(0, 0) == 8


def test_strided_views_and_empty_batch(device):
    base = random_tensor((2, 16, 10, 22), torch.float32, device)
    x = base[..., ::2]  # a strided width
    w = random_tensor((32, 16, 3, 3), torch.float32, device)[:, :, :, :]
    with exact_fp32():
        _check(x, w.transpose(2, 3), None, padding=1)  # a weight in neither layout
        empty = random_tensor((0, 16, 5, 5), torch.float32, device)
        y = tritonconv.conv2d(empty, w, algo="implicit_gemm", padding=1)
        assert y.shape == (0, 32, 5, 5)


def test_every_output_element_is_written(device):
    """Outputs come from torch.empty: poisoning the allocator's blocks first would show any
    position the kernel skipped (phases without taps included) as NaN."""
    for _ in range(3):
        poison_(torch.empty(1 << 16, device=device))
    x = random_tensor((1, 16, 5, 5), torch.float32, device)
    w = random_tensor((16, 16, 2, 2), torch.float32, device)
    y = tritonconv.conv_transpose2d(x, w, stride=3, dilation=2, algo="implicit_gemm")
    assert not y.isnan().any()
    assert_close(y, F.conv_transpose2d(x.double(), w.double(), stride=3, dilation=2),
                 reduction=64)  # fmt: skip


@pytest.mark.parametrize("tf32_off", ["ieee", "tf32x3_rn"])
def test_weight_is_copied_only_when_neither_channel_axis_is_innermost(
    tf32_off, device, monkeypatch
):
    """The forward reads a channels-last weight along its input channels and the input
    gradient along the same axis (its destination side): with fp32 FMA products neither
    copies it. TF32 products (``tf32x3_rn`` with TF32 off) take only tiles whose reduction
    axis is innermost, so there the input gradient copies it. A weight with neither channel
    axis innermost (NCHW, 3x3) is copied once per call, reduction side innermost (the results
    are checked against float64 by the tests above)."""
    from tritonconv.geometry import make_geometry

    monkeypatch.setattr(precision, "TF32_OFF_PRECISION", tf32_off)

    copies = []
    original = implicit_gemm.crop_into
    monkeypatch.setattr(implicit_gemm, "crop_into", lambda *a: copies.append(1) or original(*a))
    cl = torch.channels_last
    x = random_tensor((2, 16, 6, 6), torch.float32, device).to(memory_format=cl)
    dy = random_tensor((2, 24, 6, 6), torch.float32, device).to(memory_format=cl)
    geometry = make_geometry((6, 6), (3, 3), (1, 1), (1, 1), (1, 1), (1, 1))
    for weight_layout, expected in ((cl, int(tf32_off != "ieee")), (torch.contiguous_format, 2)):
        w = random_tensor((24, 16, 3, 3), torch.float32, device).to(memory_format=weight_layout)
        tritonconv.clear_caches()
        copies.clear()
        implicit_gemm.conv_forward(x, w, None, geometry, 1)
        implicit_gemm.conv_grad_input(dy, w, x, geometry, 1)
        assert len(copies) == expected, weight_layout


@pytest.mark.parametrize(
    "case",
    [
        # (input, weight, kwargs): ResNet's stem; VGG's first layer; ConvNeXt's patchify
        # stem (windows inside the image: no padded copy); wav2vec's first conv1d as a plane;
        # 5 channels, uneven strides and padding
        ((2, 3, 13, 12), (8, 3, 7, 7), dict(stride=2, padding=3)),
        ((2, 3, 9, 9), (16, 3, 3, 3), dict(padding=1)),
        ((1, 3, 16, 16), (8, 3, 4, 4), dict(stride=4)),
        ((2, 1, 1, 40), (8, 1, 1, 10), dict(stride=(1, 5))),
        ((2, 5, 7, 9), (6, 5, 3, 5), dict(stride=(2, 3), padding=(1, 2))),
    ],
    ids=["stem7x7", "3x3", "patchify", "conv1d", "uneven"],
)
@pytest.mark.parametrize("layout", ["channels_last", "nchw_weight", "nchw_input"])
def test_small_channel_convolutions_fold_width_taps(case, layout, device, monkeypatch):
    """Few input channels: the forward and the weight gradient fold the width taps into the
    channels (an overlapping view of the image and the weight), replayed from their launch
    plans; output, dx, dW and db against float64, every layout."""
    folds = []
    original = implicit_gemm._fold_input
    monkeypatch.setattr(implicit_gemm, "_fold_input", lambda *a: folds.append(1) or original(*a))
    xs, ws, kwargs = case
    cl = torch.channels_last
    x = random_tensor(xs, torch.float32, device)
    w = random_tensor(ws, torch.float32, device)
    x = x if layout == "nchw_input" else x.to(memory_format=cl)
    w = w if layout == "nchw_weight" else w.to(memory_format=cl)
    b = random_tensor((ws[0],), torch.float32, device)
    tritonconv.clear_caches()
    for _ in range(2):  # recorded, then replayed
        _check(x, w, b, **kwargs)
    assert len(folds) == 2  # the forward and the weight gradient, once each (then replayed)


def test_folding_takes_few_channels_only(device):
    """Width taps fold only for few channels (at most FOLD_MAX_CHANNELS, KW*C at most
    FOLD_MAX_WIDTH), one group, unit width dilation, tensor-core dtypes, KW > 1."""
    from tritonconv.geometry import make_geometry

    def foldable(c, kernel, dilation=1, groups=1, dtype=torch.float32):
        geometry = make_geometry((12, 12), kernel, (1, 1), (0, 0), (0, 0), (1, dilation))
        return implicit_gemm.foldable(dtype, c, geometry, groups)

    assert foldable(3, (7, 7)) and foldable(8, (3, 8)) and foldable(1, (1, 10))
    assert not foldable(16, (3, 3))  # a 16-channel step wastes nothing
    assert not foldable(8, (3, 9))  # 72 channels folded
    assert not foldable(3, (3, 1))  # one width tap
    assert not foldable(3, (3, 3), dilation=2)
    assert not foldable(4, (3, 3), groups=2)
    assert not foldable(3, (3, 3), dtype=torch.float64)  # exact path: one channel a step
    x = torch.empty(4, 3, 224, 224, device=device)
    w = torch.empty(64, 3, 7, 7, device=device)
    reason = tritonconv.explain(x, w, stride=2, padding=3, algo="implicit_gemm").reason
    assert "width taps folded into 21 channels" in reason


@pytest.mark.parametrize(
    "case",
    [
        # (input shape, weight shape, stride, padding, transposed)
        ((2, 16, 9, 8), (32, 16, 3, 3), 1, 1, False),
        ((2, 3, 15, 13), (16, 3, 7, 7), 2, 3, False),  # width taps folded
        ((2, 16, 8, 7), (16, 3, 4, 4), 2, 1, True),  # a transposed call into 3 channels
    ],
    ids=str,
)
def test_explain_names_the_tiles_each_pass_runs(case, device, monkeypatch):
    """``explain`` reports the forward, input-gradient and weight-gradient tiles (and the
    weight gradient's products) that a training step's launches then take."""
    xs, ws, stride, padding, transposed = case
    ran = {}
    real_config, real_plan = implicit_gemm.launch_config, implicit_gemm.wgrad_plan

    def launch_config(dtype, *args):
        config = real_config(dtype, *args)
        ran.setdefault("gemm", []).append(implicit_gemm.describe(dtype, config))
        return config

    def wgrad_plan(*args):
        plan = real_plan(*args)
        ran["weight"] = f"{plan.config} ({plan.precision} products"
        return plan

    monkeypatch.setattr(implicit_gemm, "launch_config", launch_config)
    monkeypatch.setattr(implicit_gemm, "wgrad_plan", wgrad_plan)
    x = random_tensor(xs, torch.float32, device).requires_grad_()
    w = random_tensor(ws, torch.float32, device).requires_grad_()
    kw = dict(stride=stride, padding=padding, algo="implicit_gemm")
    with exact_fp32():
        reason = tritonconv.explain(x, w, transposed=transposed, **kw).reason
        ran.clear()  # (explain's own calls)
        conv = tritonconv.conv_transpose2d if transposed else tritonconv.conv2d
        tritonconv.clear_caches()  # (launch plans would replay without choosing again)
        y = conv(x, w, **kw)
        torch.autograd.grad(y, (x, w), torch.ones_like(y))
    forward, input_gradient = ran["gemm"]
    assert f"forward tiles {forward}" in reason
    assert f"input gradient tiles {input_gradient}" in reason
    assert f"weight gradient tiles {ran['weight']}" in reason
    if not transposed and xs[1] == 3:  # (a 7x7 stride-2 stem: its phases do not fold)
        assert "width taps folded into 21 channels" in reason
        assert "stride phases folded" not in reason
    if transposed:
        assert "forward tiles" in reason and "stride phases folded into 12 channels" in reason


def test_folded_conv3d(device):
    """A 3-D stem (r2plus1d's 1x7x7 on 3 channels) folds too: against float64."""
    x = random_tensor((1, 3, 2, 9, 10), torch.float32, device)
    x = x.to(memory_format=torch.channels_last_3d).requires_grad_()
    w = random_tensor((6, 3, 1, 7, 7), torch.float32, device).requires_grad_()
    y = tritonconv.conv3d(x, w, None, (1, 2, 2), (0, 3, 3), algo="implicit_gemm")
    x64, w64 = (t.detach().double().requires_grad_() for t in (x, w))
    ref = F.conv3d(x64, w64, None, (1, 2, 2), (0, 3, 3))
    assert_close(y, ref, reduction=147, name="output")
    dy = random_tensor(y.shape, torch.float32, device)
    got = torch.autograd.grad(y, (x, w), dy)
    want = torch.autograd.grad(ref, (x64, w64), dy.double())
    for name, g, r in zip(("dx", "dW"), got, want, strict=True):
        assert_close(g, r, reduction=max(147, y.numel() // 6), name=name)


def test_tf32_input_gradient_reads_the_weight_along_its_reduction(device, monkeypatch):
    """With TF32 products (TF32 allowed, or ``tf32x3_rn`` with it off), an fp32 input
    gradient copies a channels-last weight output channels innermost (TF32 tensor-core tiles
    must run along the reduction: reading the weight along its destination side was 3x slower
    on the H100, 1.6x with ``tf32x3_rn``), and stays right at TF32 accuracy; 16-bit inputs,
    and fp32 with ``ieee`` products, still read it as it is. The fp32 weight gradient of
    these 16 channels (under ``WGRAD_SPLIT_MIN_CHANNELS``) computes fp32 products either way."""
    from tritonconv.geometry import make_geometry

    copies = []
    original = implicit_gemm.crop_into
    monkeypatch.setattr(implicit_gemm, "crop_into", lambda *a: copies.append(1) or original(*a))
    cl = torch.channels_last
    geometry = make_geometry((6, 6), (3, 3), (1, 1), (1, 1), (1, 1), (1, 1))
    for dtype, tf32, tf32_off, expected in (
        (torch.float32, True, "tf32x3_rn", 1),
        (torch.float32, False, "tf32x3_rn", 1),
        (torch.float32, False, "ieee", 0),
        (torch.bfloat16, True, "tf32x3_rn", 0),
    ):
        monkeypatch.setattr(precision, "TF32_OFF_PRECISION", tf32_off)
        x = random_tensor((2, 16, 6, 6), dtype, device).to(memory_format=cl)
        dy = random_tensor((2, 24, 6, 6), dtype, device).to(memory_format=cl)
        w = random_tensor((24, 16, 3, 3), dtype, device).to(memory_format=cl)
        monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", tf32)
        tritonconv.clear_caches()
        copies.clear()
        dx = implicit_gemm.conv_grad_input(dy, w, x, geometry, 1)
        dw = implicit_gemm.conv_grad_weight(dy, x, list(w.shape), geometry, 1, None, w.stride())
        assert len(copies) == expected, (dtype, tf32, tf32_off)
        x64, w64 = (t.detach().double().requires_grad_() for t in (x, w))
        want = torch.autograd.grad(F.conv2d(x64, w64, padding=1), (x64, w64), dy.double())
        if dtype == torch.float32 and tf32:  # about 10 mantissa bits
            error = (dx.double() - want[0]).abs().max() / want[0].abs().max()
            assert error < 5e-3, error
            error = (dw.double() - want[1]).abs().max() / want[1].abs().max()
            assert error < 2**-13, error  # fp32 products (wider programs: bf16x3's 16 bits)
        else:
            assert_close(dx, want[0], reduction=24 * 9, name="dx")
            assert_close(dw, want[1], reduction=72, name="dW")


@pytest.mark.parametrize("dims", [1, 2, 3])
def test_weight_gradient_takes_the_weights_layout(dims, device):
    """dW comes in the weight's own layout when that is dense (channels-last included), so
    autograd accumulates it without a copy; the values are the same bits either way."""
    from tritonconv.geometry import make_geometry

    spatial, kernel = (5,) * dims, (3,) * dims
    x = random_tensor((2, 16, *spatial), torch.float32, device)
    x = _channels_innermost(x)
    geometry = make_geometry(spatial, kernel, (1,) * dims, (1,) * dims, (1,) * dims, (1,) * dims)
    dy = _channels_innermost(random_tensor((2, 24, *spatial), torch.float32, device))
    w = random_tensor((24, 16, *kernel), torch.float32, device)
    layouts = {"contiguous": w, "channels-last": _channels_innermost(w)}
    layouts["transposed"] = w.transpose(-1, -2).contiguous().transpose(-1, -2)
    results = {}
    with exact_fp32():  # fp32 on the GPU: fp32-accurate, not TF32
        for name, weight in layouts.items():
            got = implicit_gemm.conv_grad_weight(
                dy, x, list(weight.shape), geometry, 1, None, weight.stride()
            )
            assert got.stride() == weight.stride(), name
            results[name] = got
        gaps = tuple(2 * s for s in w.stride())
        with_gaps = implicit_gemm.conv_grad_weight(dy, x, list(w.shape), geometry, 1, None, gaps)
    assert with_gaps.is_contiguous()  # not a dense layout: the default one
    for got in (*results.values(), with_gaps):
        assert torch.equal(got, results["contiguous"])
    reference = torch.ops.aten.convolution_backward(
        dy.double(), x.double(), w.double(), None, (1,) * dims, (1,) * dims, (1,) * dims,
        False, (0,) * dims, 1, (False, True, False),
    )[1]  # fmt: skip
    assert_close(results["channels-last"], reference, reduction=2 * 5**dims, name="dW")


def _spy_on_calls(monkeypatch) -> list:
    """The functions ``ops.implicit_gemm`` runs through ``launch.call`` (PyTorch calls such
    as a dW copy), recorded in order; plans cleared first, so none replays."""
    called = []
    real_call = implicit_gemm.call
    monkeypatch.setattr(
        implicit_gemm, "call", lambda fn, *a, **k: called.append(fn) or real_call(fn, *a, **k)
    )
    tritonconv.clear_caches()
    return called


def _weight_gradient_case(dims: int, device):
    """(geometry, x, dy, w) of a 3-tap 24 -> 16 convolution over ``dims`` axes of 5 (bf16; x
    and dy channels innermost, w contiguous)."""
    from tritonconv.geometry import make_geometry

    spatial, kernel = (5,) * dims, (3,) * dims
    geometry = make_geometry(spatial, kernel, (1,) * dims, (1,) * dims, (1,) * dims, (1,) * dims)
    x = _channels_innermost(random_tensor((2, 24, *spatial), torch.bfloat16, device))
    dy = _channels_innermost(random_tensor((2, 16, *spatial), torch.bfloat16, device))
    w = random_tensor((16, 24, *kernel), torch.bfloat16, device)
    return geometry, x, dy, w


@pytest.mark.parametrize("dims", [1, 2, 3])
def test_split_weight_gradient_sums_into_a_contiguous_weight(dims, device, monkeypatch):
    """Split partials (written channels-last) summed straight into a contiguous weight's
    layout (``sum_partials``' ``channels_to_taps``): no copy and no channels-last dW between,
    the same bits as a channels-last weight's dW, transposed; against float64."""

    monkeypatch.setattr(implicit_gemm, "_splits", lambda *a: 3)
    copies = _spy_on_calls(monkeypatch)
    geometry, x, dy, w = _weight_gradient_case(dims, device)
    got = implicit_gemm.conv_grad_weight(dy, x, list(w.shape), geometry, 1, None, w.stride())
    assert got.stride() == w.stride() and copies == []
    last = _channels_innermost(w)
    want = implicit_gemm.conv_grad_weight(dy, x, list(w.shape), geometry, 1, None, last.stride())
    assert torch.equal(got.cpu(), want.cpu())
    reference = torch.ops.aten.convolution_backward(
        dy.double(), x.double(), w.double(), None, (1,) * dims, (1,) * dims, (1,) * dims,
        False, (0,) * dims, 1, (False, True, False),
    )[1]  # fmt: skip
    assert_close(got, reference, reduction=2 * 5**dims, name="dW")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32])
def test_weight_gradient_of_one_split_is_stored_directly(dtype, device, monkeypatch):
    """With one split the weight-gradient kernel writes dW itself (cast on store, no partial
    buffer, no reduction pass): the same values as the split path, any dtype."""
    from tritonconv.geometry import make_geometry

    geometry = make_geometry((6, 5), (3, 3), (1, 1), (1, 1), (1, 1), (1, 1))
    x = _channels_innermost(random_tensor((2, 16, 6, 5), dtype, device))
    dy = _channels_innermost(random_tensor((2, 24, 6, 5), dtype, device))
    w = _channels_innermost(random_tensor((24, 16, 3, 3), dtype, device))
    args = (dy, x, list(w.shape), geometry, 1, None, w.stride())
    with exact_fp32():  # fp32 on the GPU: fp32-accurate, not TF32
        split = implicit_gemm.conv_grad_weight(*args)
        monkeypatch.setattr(implicit_gemm, "_splits", lambda *a: 1)
        tritonconv.clear_caches()
        single = implicit_gemm.conv_grad_weight(*args)
    assert single.dtype == dtype and single.stride() == w.stride()
    reference = torch.ops.aten.convolution_backward(
        dy.double(), x.double(), w.double(), None, (1, 1), (1, 1), (1, 1), False, (0, 0), 1,
        (False, True, False),
    )[1]  # fmt: skip
    if dtype == torch.int32:
        assert torch.equal(single, split) and torch.equal(single.double(), reference)
    else:
        assert_close(single, reference, reduction=60, name="dW, one split")


def test_weight_gradient_is_bitwise_reproducible(device):
    x = random_tensor((3, 16, 12, 12), torch.float32, device).requires_grad_()
    w = random_tensor((16, 16, 3, 3), torch.float32, device).requires_grad_()
    y = tritonconv.conv2d(x, w, padding=1, algo="implicit_gemm")
    dy = random_tensor(y.shape, torch.float32, device)
    first = torch.autograd.grad(y, (x, w), dy, retain_graph=True)
    second = torch.autograd.grad(y, (x, w), dy)
    for a, b in zip(first, second):
        assert torch.equal(a, b)


def _channels_innermost(t: torch.Tensor) -> torch.Tensor:
    """``t`` with channels the innermost axis in memory (channels-last of any rank)."""
    return t.movedim(1, -1).contiguous().movedim(-1, 1)


@pytest.mark.parametrize("dims", [1, 2, 3])
def test_weight_gradient_position_decodes_agree(dims, device, monkeypatch):
    """The weight gradient's two ways of finding each position's coordinates (fp32 carries
    from the step's first position, or one integer division per element) and its two ``dy``
    addressings (flat channels-last, or a strided view) give the same bits, and float64's
    values; steps of positions cross rows and samples (planes smaller than a step)."""
    spatial = (5, 3, 4)[-dims:]
    x = _channels_innermost(random_tensor((3, 16, *spatial), torch.float32, device))
    w = random_tensor((16, 16, *(3,) * dims), torch.float32, device)
    ones = (1,) * dims
    geometry = tritonconv.geometry.make_geometry(spatial, (3,) * dims, ones, ones, ones, ones)
    wide = random_tensor((6, 16, *spatial), torch.float32, device)
    strided = _channels_innermost(wide)[::2]  # channels innermost, positions not flat
    dense = _channels_innermost(strided)
    assert implicit_gemm._positions_flat(dense) and not implicit_gemm._positions_flat(strided)
    results = []
    with exact_fp32():
        for limit in (implicit_gemm.SMALL_QUOTIENT_LIMIT, 0):
            monkeypatch.setattr(implicit_gemm, "SMALL_QUOTIENT_LIMIT", limit)
            for dy in (dense, strided):
                tritonconv.clear_caches()
                results.append(implicit_gemm.conv_grad_weight(dy, x, w.shape, geometry, 1))
    conv_weight = getattr(torch.nn.grad, f"conv{dims}d_weight")
    ref = conv_weight(x.double(), w.shape, dense.double(), padding=1)
    assert_close(results[0], ref, reduction=3 * 60, name="dW")
    for other in results[1:]:
        assert torch.equal(other, results[0])


def test_specialised_loops_match_float64(device, monkeypatch):
    """The kernels' specialised loops against float64, each asserted to have run: a one-tap
    window (no tap walk), pointwise over flat tensors (a weight gradient without position
    coordinates) and over a view (with them), a strided one-tap window (input-gradient phases
    without taps), one-deep 3-D problems (no depth axis; and one whose only depth tap lies
    in the padding, which must keep it), channel counts the tiles divide (no channel masks)."""
    seen = []
    real = implicit_gemm.launch

    def recording(kernel, grid, *args, **meta):
        seen.append(meta)
        real(kernel, grid, *args, **meta)

    monkeypatch.setattr(implicit_gemm, "launch", recording)
    tritonconv.clear_caches()
    x = random_tensor((2, 32, 6, 5), torch.float32, device).to(memory_format=torch.channels_last)
    w = random_tensor((32, 32, 1, 1), torch.float32, device)
    flags = {}
    with exact_fp32():
        for name, view, stride in (("flat", x, 1), ("view", x[:, :, 1:], 1), ("s2", x, 2)):
            seen.clear()
            _check(view, w, None, stride=stride)
            flags[name] = {k: {m[k] for m in seen if k in m} for k in ("POINTWISE", "WINDOW")}
        for depth, pad in ((1, 0), (1, 1), (3, 1)):
            seen.clear()
            x3 = random_tensor((2, 8, depth, 5, 4), torch.float32, device)
            w3 = random_tensor((8, 8, 1, 3, 3), torch.float32, device)
            leaves = [t.detach().requires_grad_() for t in (x3, w3)]
            refs = [t.detach().double().requires_grad_() for t in (x3, w3)]
            kw = dict(stride=(3, 1, 1), padding=(pad, 1, 1))
            y = tritonconv.conv3d(*leaves, algo="implicit_gemm", **kw)
            ref = F.conv3d(*refs, **kw)
            assert_close(y, ref, reduction=72, name="output")
            dy = random_tensor(y.shape, torch.float32, device)
            got = torch.autograd.grad(y, leaves, dy)
            for name, g, r in zip(("dx", "dW"), got, torch.autograd.grad(ref, refs, dy.double())):
                assert_close(g, r, reduction=72, name=name)
            flags[depth, pad] = {m["THREE_D"] for m in seen}
    assert flags["flat"] == {"POINTWISE": {True}, "WINDOW": {False}}
    assert flags["view"]["POINTWISE"] == {False}
    assert flags["s2"] == {"POINTWISE": {False}, "WINDOW": {False}}
    assert flags[1, 0] == {False} and flags[1, 1] == {True} and flags[3, 1] == {True}


def test_split_k_rule(monkeypatch):
    """The forward/input gradient split their reduction only when the tiles fill less than a
    wave and each program's reduction is long; each split keeps its minimum of steps and the
    count is the kernel's even cut."""
    monkeypatch.setattr(implicit_gemm, "INTERPRETER_MULTIPROCESSORS", 132)
    monkeypatch.setattr(implicit_gemm, "multiprocessor_count", lambda device: 132)
    split_k = implicit_gemm.split_k
    # r2plus1d layer4: 32 programs, 3 taps x 8 blocks of 128 channels (921 channels)
    assert split_k(32, 24, 128, 2 * 512 * 2 * 49, "cuda") == 6
    assert split_k(132, 24, 128, 1000, "cuda") == 1  # a full wave
    assert split_k(8, 9, 64, 1000, "cuda") == 1  # 576 long: not worth a second launch
    assert split_k(100, 40, 64, 1000, "cuda") == 3  # 3 programs/SM wanted: 40 steps cut 14+14+12
    assert split_k(1, 40, 64, 1 << 23, "cuda") == 2  # the partials' cap


def test_tiles_under_one_wave(monkeypatch):
    """Layers whose 128-row tiles fill less than a wave get 64x64 tiles: 16-bit reductions
    shorter than SMALL_WAVE_LONG_REDUCTION in 64-channel steps of 4 stages, longer ones in
    128-channel steps of 3 (session 12's H100 probe) unless 128x64 tiles fill a wave
    (session 35's); fp32 keeps 64-channel steps of 3, but with TF32 short reductions take
    32-channel steps of 4 (session 22's)."""
    monkeypatch.setattr(precision, "TF32_OFF_PRECISION", "ieee")  # (the tiles of ieee)
    monkeypatch.setattr(implicit_gemm, "INTERPRETER", False)
    monkeypatch.setattr(implicit_gemm, "multiprocessor_count", lambda device: 132)
    Config, bf16 = implicit_gemm.Config, torch.bfloat16

    def tiles(dtype, channels, out, size, kernel, transposed=False):
        return implicit_gemm.launch_config(
            dtype, 32, channels, out, (size, size), (1, 1), (kernel, kernel), 1, transposed, "cuda"
        )

    assert tiles(bf16, 256, 256, 14, 3) == Config(64, 64, 64, 4, 4)  # 2304 long
    assert tiles(bf16, 256, 256, 14, 3, transposed=True) == Config(64, 64, 64, 4, 4)
    assert tiles(bf16, 1024, 256, 14, 1) == Config(64, 64, 64, 4, 4)  # 1024 long
    assert tiles(bf16, 512, 512, 7, 3) == Config(64, 64, 128, 4, 3)  # 4608 long
    assert tiles(bf16, 2048, 512, 7, 1) == Config(64, 64, 64, 4, 4)  # (both equal there)
    assert tiles(torch.float32, 256, 256, 14, 3) == Config(64, 64, 64, 4, 3)  # (TF32 off)
    assert tiles(bf16, 128, 128, 28, 3) == Config(256, 128, 64, 8, 3)  # over a wave

    # long reductions whose 128 x 64 tiles fill a wave take those (session 35's H200 probe):
    # UNet's 3x3 1024 -> 1024 and 512 -> 1024 at 16x16, batch 8, forward and input gradient
    # (1024 -> 512: its 128 x 64 tiles, 128 of them, leave the wave unfilled)
    def unet(channels, out, transposed=False):
        return implicit_gemm.launch_config(
            bf16, 8, channels, out, (16, 16), (1, 1), (3, 3), 1, transposed, "cuda"
        )

    assert unet(1024, 1024) == unet(1024, 1024, True) == Config(128, 64, 64, 4, 4)
    assert unet(512, 1024) == Config(128, 64, 64, 4, 4)
    assert unet(1024, 512, True) == Config(64, 64, 128, 4, 3)
    monkeypatch.setattr(implicit_gemm, "SMALL_WAVE_TALL_TILES", False)
    assert unet(1024, 1024) == Config(64, 64, 128, 4, 3)
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", True)  # TF32: shorter steps (s22)
    assert tiles(torch.float32, 256, 256, 14, 3) == Config(64, 64, 32, 4, 4)
    assert tiles(torch.float32, 512, 512, 7, 3) == Config(64, 64, 64, 4, 3)  # 4608 long


def test_tiles_for_channel_counts_off_the_tile_grid(monkeypatch):
    """Reductions of 144 channels step 32 at a time (160 padded) rather than 16; 144 output
    columns take a 128 + 16 column tile (none padded), 192 one of 128 + 64 (session 25);
    widths no such tile divides (200), or that the tiles divide, keep their tiles (session
    12's H100 probe)."""
    monkeypatch.setattr(implicit_gemm, "INTERPRETER", False)
    monkeypatch.setattr(implicit_gemm, "multiprocessor_count", lambda device: 132)
    k_block, Config, bf16 = implicit_gemm._k_block, implicit_gemm.Config, torch.bfloat16
    assert [k_block(bf16, c) for c in (144, 240, 200, 112, 80, 48, 64, 96, 120)] == [
        32, 32, 32, 16, 16, 16, 64, 32, 64,
    ]  # fmt: skip
    assert k_block(torch.float32, 144) == 32

    def tiles(src, dst):
        return implicit_gemm.launch_config(
            bf16, 8, src, dst, (16, 56, 56), (1, 1, 1), (1, 3, 3), 1, False, "cuda"
        )

    # (64-channel steps of 3 stages since session 24; fp32 and 32-channel steps keep 4)
    assert tiles(64, 144) == Config(128, 128, 64, 8, 3, 16)  # a second accumulator (session 25)
    assert tiles(64, 192) == Config(128, 128, 64, 8, 3, 64)
    assert tiles(144, 144) == Config(128, 128, 32, 8, 4, 16)
    assert tiles(64, 200) == Config(256, 128, 64, 8, 3)  # (no 128 + 16/32/64 divides 200)
    assert tiles(64, 256) == Config(256, 128, 64, 8, 3)
    assert tiles(64, 921) == Config(256, 128, 64, 8, 3)  # 1024 against 960: close enough


def test_tiles_for_short_reductions_and_64_columns(monkeypatch):
    """16-bit layers of 64 output columns run 64-channel steps in 3 stages (three programs an
    SM), reductions of one or two 64-channel steps 128x128 tiles in 2 stages (session 18's
    H100 probe); fp32 and 32-channel steps keep theirs."""
    monkeypatch.setattr(precision, "TF32_OFF_PRECISION", "ieee")  # (the tiles of ieee)
    monkeypatch.setattr(implicit_gemm, "INTERPRETER", False)
    monkeypatch.setattr(implicit_gemm, "multiprocessor_count", lambda device: 132)
    Config, bf16 = implicit_gemm.Config, torch.bfloat16

    def tiles(dtype, channels, out, size, kernel, transposed=False, batch=32):
        return implicit_gemm.launch_config(
            dtype, batch, channels, out, (size, size), (1, 1), (kernel, kernel), 1, transposed,
            "cuda",
        )  # fmt: skip

    assert tiles(bf16, 64, 64, 56, 3) == Config(128, 64, 64, 4, 3)
    assert tiles(bf16, 64, 64, 256, 3, transposed=True, batch=8) == Config(128, 64, 64, 4, 3)
    assert tiles(bf16, 96, 64, 56, 3) == Config(128, 64, 32, 4, 4)  # 32-channel steps
    # 144 channels a tap: 64-channel steps (192 padded) rather than 32 (160; session 42)
    assert tiles(bf16, 144, 64, 56, 3) == Config(128, 64, 64, 4, 3)
    assert tiles(bf16, 160, 64, 56, 3) == Config(128, 64, 64, 4, 3)
    assert tiles(bf16, 136, 64, 56, 3) == Config(128, 64, 16, 4, 4)  # (16-channel steps)
    # only windows into 64 columns, as measured: 1x1 layers and narrower tiles keep theirs
    assert tiles(bf16, 144, 64, 56, 1) == Config(128, 64, 32, 4, 4)
    assert tiles(bf16, 144, 24, 56, 1) == Config(128, 32, 32, 4, 4)
    assert tiles(bf16, 144, 32, 56, 3) == Config(128, 32, 32, 4, 4)
    assert tiles(torch.float32, 144, 64, 56, 3) == Config(128, 64, 32, 4, 4)
    assert tiles(torch.float32, 64, 64, 56, 3) == Config(128, 64, 32, 4, 4)
    assert tiles(bf16, 64, 256, 56, 1) == Config(128, 128, 64, 8, 2)  # one step
    assert tiles(bf16, 128, 512, 28, 1) == Config(128, 128, 64, 8, 2)  # two
    assert tiles(bf16, 256, 1024, 28, 1) == Config(256, 128, 64, 8, 3)  # four
    assert tiles(torch.float32, 64, 256, 56, 1) == Config(128, 128, 32, 8, 3)


def test_swap_rule():
    """The transposed product for 16-bit 256-row tiles only (session 18's H100 probe)."""
    Config, swap = implicit_gemm.Config, implicit_gemm.swap_rule
    assert swap(torch.bfloat16, Config(256, 128, 64, 8, 3))
    assert swap(torch.float16, Config(256, 64, 64, 8, 3))
    assert not swap(torch.bfloat16, Config(128, 128, 64, 8, 3))
    assert not swap(torch.float32, Config(256, 128, 32, 8, 3))
    describe = implicit_gemm.describe
    assert describe(torch.bfloat16, (256, 128, 64, 8, 3)) == "256x128x64 w8 s3 transposed product"
    assert describe(torch.bfloat16, (128, 128, 64, 8, 2)) == "128x128x64 w8 s2"


def test_tap_bits_rule(monkeypatch):
    """Precomputed tap bits for windows of 2 to 32 taps with unpacked groups (session 22)."""
    rule = implicit_gemm.tap_bits_rule
    assert rule((1, 3, 3), 1) and rule((3, 3, 3), 1) and rule((1, 1, 32), 1)
    assert not rule((1, 1, 1), 1)  # one tap: no window walk
    assert not rule((1, 7, 7), 1) and not rule((1, 3, 11), 1)  # over 32 bits
    assert not rule((1, 3, 3), 4)  # packed groups measured slower with them
    monkeypatch.setattr(implicit_gemm, "TAP_BITS", False)
    assert not rule((1, 3, 3), 1)


# (input shape, weight shape, conv kwargs, transposed): rows whose taps fall in the padding on
# every side, 2-D and 3-D, 32 taps (the last bit), and input-gradient phases
TAP_BIT_CASES = [
    ((2, 16, 5, 7), (16, 16, 5, 5), dict(padding=2), False),
    ((1, 8, 6, 9), (16, 8, 3, 3), dict(padding=(3, 2), dilation=(3, 2), stride=(2, 1)), False),
    ((2, 16, 4, 6), (16, 16, 4, 8), dict(padding=(2, 4)), False),
    ((1, 8, 4, 5, 3), (8, 8, 3, 3, 3), dict(padding=1), False),
    ((2, 16, 5, 6), (16, 8, 3, 3), dict(stride=2, padding=1, output_padding=1), True),
]


@pytest.mark.parametrize("case", TAP_BIT_CASES, ids=str)
@pytest.mark.parametrize("tap_bits", [True, False])
def test_tap_bits_match_float64(case, tap_bits, device, monkeypatch):
    """Both ways of testing the padding (``TAP_BITS`` and the per-step compares) against
    float64, forward and gradients, each asserted to have run; outputs start poisoned."""
    x_shape, w_shape, kw, transposed = case
    seen = []
    real = implicit_gemm.launch

    def recording(kernel, grid, *args, **meta):
        seen.append(meta.get("TAP_BITS"))
        real(kernel, grid, *args, **meta)

    monkeypatch.setattr(implicit_gemm, "launch", recording)
    monkeypatch.setattr(implicit_gemm, "TAP_BITS", tap_bits)
    tritonconv.clear_caches()
    poison_(torch.empty(1 << 16, device=device))
    x = random_tensor(x_shape, torch.float32, device)
    w = random_tensor(w_shape, torch.float32, device)
    kw = dict(kw)
    output_padding = kw.pop("output_padding", 0)
    with exact_fp32():  # (3-D: reductions of 8 x 27 = 216, as its output tolerance was)
        _check(x, w, None, transposed=transposed, output_padding=output_padding, **kw)
    assert tap_bits in seen


@pytest.mark.parametrize("kernel", [(3, 3), (3, 5), (2, 7)], ids=str)
def test_weight_gradient_tap_groups_with_and_without_a_tail(kernel, device, monkeypatch):
    """Width-tap groups that divide the kernel's width (no tail check: ``TAP_TAIL`` off) and
    that do not (the last group's extra taps load nothing), against float64, with padding on
    both sides of the width; each asserted to have run as intended."""
    seen = []
    real = implicit_gemm.launch

    def recording(kernel_fn, grid, *args, **meta):
        if "TAP_GROUP" in meta:
            seen.append((meta["TAP_GROUP"], meta["TAP_TAIL"]))
        real(kernel_fn, grid, *args, **meta)

    monkeypatch.setattr(implicit_gemm, "launch", recording)
    tritonconv.clear_caches()
    x = random_tensor((2, 12, 6, 9), torch.float32, device)  # (over 8 channels: not folded)
    w = random_tensor((16, 12, *kernel), torch.float32, device)
    with exact_fp32():
        _check(x, w, None, padding=(1, kernel[1] // 2 + 1))
    group = seen[0][0]
    assert group > 1 and seen == [(group, kernel[1] % group != 0)]


def test_weight_gradient_signed_bounds_rule():
    """Dilated layers keep the signed compares and tail checks (session 22's measurements)."""
    assert implicit_gemm.wgrad_signed_bounds((1, 2, 2))
    assert implicit_gemm.wgrad_signed_bounds((1, 1, 12))
    assert not implicit_gemm.wgrad_signed_bounds((1, 1, 1))


@pytest.mark.parametrize("dilation", [1, 2])
def test_weight_gradient_bounds_both_ways(dilation, device, monkeypatch):
    """The weight gradient with each form of bounds check (the rule's choice and the other,
    forced) against float64 on a padded, dilated and undilated, 3-wide layer."""
    for signed in (False, True):
        monkeypatch.setattr(implicit_gemm, "wgrad_signed_bounds", lambda dilation, s=signed: s)
        tritonconv.clear_caches()
        x = random_tensor((2, 12, 7, 9), torch.float32, device)
        w = random_tensor((16, 12, 3, 3), torch.float32, device)
        with exact_fp32():
            _check(x, w, None, padding=dilation + 1, dilation=dilation)


def _force_split_k(monkeypatch, min_steps=1) -> None:
    """Make the forward/input-gradient launcher split the reduction of any small shape
    (``min_steps`` steps a split at least; None: the rule's)."""
    monkeypatch.setattr(implicit_gemm, "INTERPRETER_MULTIPROCESSORS", 64)
    monkeypatch.setattr(implicit_gemm, "multiprocessor_count", lambda device: 1 << 20)
    monkeypatch.setattr(implicit_gemm, "SPLIT_K_MIN_REDUCTION", 1)
    if min_steps is not None:
        monkeypatch.setattr(implicit_gemm, "SPLIT_K_MIN_STEPS", min_steps)


SWAP_CONFIGS = [implicit_gemm.Config(64, 32, 16, 4, 2), implicit_gemm.Config(256, 128, 64, 8, 3)]


@pytest.mark.parametrize("config", SWAP_CONFIGS, ids=str)
@pytest.mark.parametrize("geometry", [GEOMETRIES[i] for i in (0, 2, 4, 5)], ids=str)
def test_transposed_product_matches_float64(geometry, config, device, monkeypatch):
    """``SWAP`` (acc^T = W^T X^T) on any configuration, forced: the forward with bias, the
    input gradient of strided, dilated, grouped layers (phases), the split reduction (forced
    onto the small shapes), each against float64 with and without it."""
    N, C, H, W, K, kernel, stride, padding, dilation, groups = geometry
    geo = tritonconv.geometry.make_geometry(
        (H, W), kernel, *((v, v) if isinstance(v, int) else v for v in (stride, padding)),
        *((v, v) if isinstance(v, int) else v for v in (padding, dilation)),
    )  # fmt: skip
    cl = torch.channels_last
    x = random_tensor((N, C, H, W), torch.float32, device).to(memory_format=cl)
    w = random_tensor((K, C // groups, *kernel), torch.float32, device).to(memory_format=cl)
    b = random_tensor((K,), torch.float32, device)
    dy = random_tensor((N, K, *geo.output), torch.float32, device).to(memory_format=cl)
    reduction = C // groups * kernel[0] * kernel[1]
    want_y = F.conv2d(x.double(), w.double(), b.double(), stride, padding, dilation, groups)
    want_dx = torch.ops.aten.convolution_backward(
        dy.double(), x.double(), w.double(), None, geo.stride, geo.pad_before, geo.dilation,
        False, (0, 0), groups, (True, False, False),
    )[0]  # fmt: skip
    _force_split_k(monkeypatch, None)
    with exact_fp32():
        for swapped in (False, True):
            monkeypatch.setattr(implicit_gemm, "swap_rule", lambda dtype, cfg, s=swapped: s)
            tritonconv.clear_caches()
            y = implicit_gemm.conv_forward(x, w, b, geo, groups, config)
            dx = implicit_gemm.conv_grad_input(dy, w, x, geo, groups, config=config)
            assert_close(y, want_y, reduction=reduction, name="output")
            assert_close(dx, want_dx, reduction=K // groups * kernel[0] * kernel[1], name="dx")
    tritonconv.clear_caches()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(
    "case",
    [
        # (input, weight, kwargs, minimum steps per split)
        ((2, 40, 5, 4), (24, 40, 3, 3), dict(padding=1), 1),  # every step its own split
        ((1, 20, 6, 5), (16, 10, 3, 2), dict(padding=(1, 0), groups=2), 2),
        ((2, 100, 4, 3), (32, 100, 1, 1), dict(), 1),  # one tap: channel blocks only
        ((1, 12, 3, 5, 4), (8, 12, 3, 3, 3), dict(padding=1, dilation=(1, 2, 1)), 3),  # 3-D
    ],
    ids=["3x3", "groups", "1x1", "3d"],
)
def test_split_k_matches_float64(case, dtype, device, monkeypatch):
    """Forward and input gradient with the reduction split (forced onto these small shapes):
    the bias added once, every split's steps (from any first channel block and tap) summed,
    against float64; the split path asserted to have run, and bitwise reproducible."""
    shape, wshape, kwargs, min_steps = case
    _force_split_k(monkeypatch, min_steps)
    splits = []
    real = implicit_gemm.split_k
    monkeypatch.setattr(implicit_gemm, "split_k", lambda *a: splits.append(real(*a)) or splits[-1])
    tritonconv.clear_caches()
    conv = tritonconv.conv3d if len(shape) == 5 else tritonconv.conv2d
    reference = F.conv3d if len(shape) == 5 else F.conv2d
    x = _channels_innermost(random_tensor(shape, dtype, device)).requires_grad_()
    w = random_tensor(wshape, dtype, device).requires_grad_()
    b = random_tensor((wshape[0],), dtype, device).requires_grad_()
    refs = [t.detach().double().requires_grad_() for t in (x, w, b)]
    with exact_fp32():
        y = conv(x, w, b, algo="implicit_gemm", **kwargs)
        again = conv(x, w, b, algo="implicit_gemm", **kwargs)
        dy = random_tensor(y.shape, dtype, device)
        got = torch.autograd.grad(y, (x, w, b), dy)
    assert max(splits) > 1, "the split path did not run"
    assert torch.equal(y, again)
    ref = reference(*refs, **kwargs)
    taps = w.shape[1] * w[0, 0].numel()
    assert_close(y, ref, reduction=taps, name="output")
    want = torch.autograd.grad(ref, refs, dy.double())
    for name, g, r in zip(("dx", "dW", "db"), got, want):
        assert_close(g, r, reduction=max(taps, y.numel() // y.shape[1]), name=name)


def test_split_k_kernel_is_given_all_partials(device, monkeypatch):
    """The split forward and input gradient write every split's partial sums: the kernel is
    given the whole partials buffer, not split 0's view of it. A traced launch (torch.compile)
    bounds a kernel's writes by the tensors it is given: given the view, compiled ResNet-50's
    split layers read uninitialised memory (NaN) and wrote out of bounds (session 16)."""
    _force_split_k(monkeypatch)
    given = []
    real = implicit_gemm.launch

    def spy(kernel, grid, *args, **meta):
        if meta.get("SPLIT_K"):
            given.append((grid, args[3]))
        return real(kernel, grid, *args, **meta)

    monkeypatch.setattr(implicit_gemm, "launch", spy)
    tritonconv.clear_caches()
    x = random_tensor((2, 40, 5, 4), torch.float32, device).requires_grad_()
    w = random_tensor((24, 40, 3, 3), torch.float32, device)
    y = tritonconv.conv2d(x, w, padding=1, algo="implicit_gemm")
    y.backward(torch.ones_like(y))
    assert len(given) == 2, "the forward and the input gradient did not both split"
    for grid, partials in given:
        assert partials.shape[0] == grid[2] > 1
        assert partials.untyped_storage().nbytes() == partials.numel() * 4


def test_explicit_config(device):
    """A launcher takes any tile configuration (what tuning sweeps)."""
    x = random_tensor((2, 20, 7, 7), torch.float32, device)
    w = random_tensor((24, 20, 3, 3), torch.float32, device)
    geometry = tritonconv.geometry.make_geometry((7, 7), (3, 3), (1, 1), (1, 1), (1, 1), (1, 1))
    with exact_fp32():
        for config in (
            implicit_gemm.Config(32, 16, 16, 4, 1),
            implicit_gemm.Config(16, 32, 32, 4, 1),
        ):
            y = implicit_gemm.conv_forward(x, w, None, geometry, 1, config)
            assert_close(y, F.conv2d(x.double(), w.double(), padding=1), reduction=180)


@pytest.mark.parametrize("transposed", [False, True], ids=["forward", "input-gradient"])
def test_64_channel_steps_over_144_channels(transposed, device, monkeypatch):
    """``long_steps``' tiles on r2plus1d's 3x1x1 layer shape (shrunk): 144 channels a tap in
    64-channel steps, the third step 16 channels of 64, forward and input gradient (144 dy
    channels into 64), bf16 channels-last into poisoned outputs, against float64. The 144
    channels are a view of 192 whose last 48 hold Inf: a step that read past the view's
    channels would make NaN even where the weight's masked values are zeros."""

    def wide_view(shape):  # (the 144 channels of a 192-channel channels-last tensor)
        big = random_tensor((shape[0], 192, *shape[2:]), torch.bfloat16, device)
        big = big.to(memory_format=torch.channels_last_3d)
        big[:, 144:] = float("inf")
        return big[:, :144]

    empty, empty_strided = torch.empty, torch.empty_strided
    monkeypatch.setattr(torch, "empty", lambda *a, **k: poison_(empty(*a, **k)))
    monkeypatch.setattr(torch, "empty_strided", lambda *a, **k: poison_(empty_strided(*a, **k)))
    cl = torch.channels_last_3d
    if transposed:
        x = random_tensor((1, 64, 3, 2, 3), torch.bfloat16, device).to(memory_format=cl)
    else:
        x = wide_view((1, 144, 3, 2, 3))
    w = random_tensor((64 if not transposed else 144, x.shape[1], 3, 1, 1), torch.bfloat16, device)
    w = w.to(memory_format=cl)
    geometry = tritonconv.geometry.make_geometry(
        (3, 2, 3), (3, 1, 1), (1, 1, 1), (1, 0, 0), (1, 0, 0), (1, 1, 1)
    )
    config = implicit_gemm.Config(16, 64, 64, 4, 1)
    assert implicit_gemm.long_steps(144, 32, 3, 64) and not implicit_gemm.long_steps(144, 64, 3, 64)
    if not transposed:
        got = implicit_gemm.conv_forward(x, w, None, geometry, 1, config)
        want = F.conv3d(x.double(), w.double(), padding=(1, 0, 0))
    else:
        dy = wide_view((1, 144, 3, 2, 3))
        got = implicit_gemm.conv_grad_input(dy, w, x, geometry, 1, config=config)
        want = torch.ops.aten.convolution_backward(
            dy.double(), x.double(), w.double(), None, [1, 1, 1], [1, 0, 0], [1, 1, 1], False,
            [0, 0, 0], 1, [True, False, False],
        )[0]  # fmt: skip
    assert_close(got, want, reduction=3 * 144)  # (both reduce over 3 taps of 144 channels)


@pytest.mark.parametrize(
    "dtype, groups", [(torch.float32, 4), (torch.int32, 1)], ids=["packed", "int32"]
)
def test_second_accumulator_refuses_what_the_kernel_cannot_take(dtype, groups, device):
    """A tile configuration with a second accumulator, given where the kernel cannot run it
    (groups small enough to pack, a dtype off the tensor cores), is refused before any
    launch, with a message saying why."""
    x = random_tensor((1, 16, 5, 5), dtype, device, low=-3, high=3)
    w = random_tensor((48, 16 // groups, 3, 3), dtype, device, low=-3, high=3)
    geometry = _geometry((5, 5), (3, 3), 1, 1)
    tritonconv.clear_caches()
    with pytest.raises(ValueError, match="a second accumulator takes neither packed groups nor"):
        implicit_gemm.conv_forward(
            x, w, None, geometry, groups, implicit_gemm.Config(32, 32, 16, 4, 1, 16)
        )


@pytest.mark.parametrize("dtype", [torch.float64, torch.int32, torch.int8])
def test_exact_dtypes_take_the_outer_product_path(dtype, device):
    """float64 and integers run the same kernels one channel per step (no tensor cores):
    float64 to rounding, integers bitwise, int8 wrapping like PyTorch's int64-then-cast."""
    x = random_tensor((2, 16, 6, 7), dtype, device, low=-20, high=20)
    w = random_tensor((24, 8, 3, 3), dtype, device, low=-20, high=20)
    kw = dict(stride=2, padding=1, groups=2)
    y = tritonconv.conv2d(x, w, algo="implicit_gemm", **kw)
    expected = F.conv2d(x.cpu().double(), w.cpu().double(), **kw)
    if dtype.is_floating_point:
        assert_close(y, expected, reduction=72)
    else:
        assert torch.equal(y.cpu(), expected.long().to(dtype))
    assert tritonconv.explain(x, w, **kw).algo != "implicit_gemm"  # auto keeps its own paths


def test_custom_ops_pass_opcheck(device):
    x = torch.randn(2, 4, 6, 5, device=device)
    w = torch.randn(6, 2, 3, 3, device=device)
    geometry = ([1, 2], [1, 0], [1, 0], [1, 1], 2)
    ops = torch.ops.tritonconv
    y = ops.conv_implicit_gemm(x, w, None, *geometry, [])
    dy = torch.randn_like(y)
    for op, args in (
        (ops.conv_implicit_gemm, (x, w, torch.randn(6, device=device), *geometry, [])),
        (ops.conv_implicit_gemm_backward, (dy, x, w, *geometry, [], [True, True, True])),
        (ops.conv_transpose_implicit_gemm, (y, w, None, *geometry, [6, 5], [])),
    ):
        torch.library.opcheck(op, args)


def test_conv1d_and_conv_transpose1d(device):
    """1-D convolutions run as height-1 planes through the same kernels."""
    x = random_tensor((2, 16, 23), torch.float32, device).requires_grad_()
    cases = (
        (tritonconv.conv1d, F.conv1d, (24, 16, 5), dict(stride=2, padding=3, dilation=2)),
        (tritonconv.conv_transpose1d, F.conv_transpose1d, (16, 8, 5),
         dict(stride=3, output_padding=1)),
    )  # fmt: skip
    with exact_fp32():
        for ours, theirs, weight_shape, kw in cases:
            w = random_tensor(weight_shape, torch.float32, device).requires_grad_()
            y = ours(x, w, algo="implicit_gemm", **kw)
            ref = theirs(x.double(), w.double(), **kw)
            assert_close(y, ref, reduction=120)
            dy = random_tensor(y.shape, torch.float32, device)
            got = torch.autograd.grad(y, (x, w), dy)
            want = torch.autograd.grad(ref, (x, w), dy.double())
            for g, r in zip(got, want):
                assert_close(g, r, reduction=400)


def test_torch_compile_one_graph(device):
    """The ops trace without a graph break (Inductor on CUDA, aot_eager on CPU), forward and
    backward."""
    torch._dynamo.reset()
    backend = "aot_eager" if tritonconv.INTERPRETER else "inductor"
    counter = CompileCounterWithBackend(backend)

    def f(x, w, b):
        return torch.relu(tritonconv.conv2d(x, w, b, padding=1, algo="implicit_gemm")) * 2

    x = random_tensor((2, 16, 6, 5), torch.float32, device).requires_grad_()
    w = random_tensor((16, 16, 3, 3), torch.float32, device).requires_grad_()
    b = random_tensor((16,), torch.float32, device).requires_grad_()
    with exact_fp32():
        out = torch.compile(f, backend=counter, fullgraph=True)(x, w, b)
        assert counter.frame_count == 1
        ref_inputs = [t.detach().double().requires_grad_() for t in (x, w, b)]
        ref = torch.relu(F.conv2d(*ref_inputs, padding=1)) * 2
        assert_close(out, ref, reduction=144)
        dy = torch.randn_like(out)
        for g, r in zip(torch.autograd.grad(out, (x, w, b), dy),
                        torch.autograd.grad(ref, ref_inputs, dy.double())):  # fmt: skip
            assert_close(g, r, reduction=144)


def test_nchw_images_run_as_channels_last(device, monkeypatch):
    """NCHW images (and output gradients) are relaid channels-last before the kernels, which
    read tiles along channels (only a stride-1 channel axis lets Triton vectorise and pipeline
    those loads): the launch plans hold that copy, and the results equal the channels-last
    input's bitwise, forward and both gradients, in the caller's layout. The backward relays
    the output gradient once for both of its kernels."""
    from tritonconv import functional
    from tritonconv.ops import implicit_gemm

    relaid = []  # the (address, strides) of every tensor the backward copies channels-last
    crop_into = implicit_gemm.crop_into

    def spy(source, target, offsets):
        relaid.append((source.data_ptr(), source.stride()))
        return crop_into(source, target, offsets)

    monkeypatch.setattr(implicit_gemm, "crop_into", spy)
    monkeypatch.setattr(precision, "TF32_OFF_PRECISION", "tf32x3_rn")  # (its weight copy)

    x = random_tensor((2, 16, 7, 6), torch.float32, device)
    w = random_tensor((24, 16, 3, 3), torch.float32, device)
    grad = random_tensor((2, 24, 7, 6), torch.float32, device)
    results = {}
    for layout in ("nchw", "nhwc"):
        fmt = torch.channels_last if layout == "nhwc" else torch.contiguous_format
        xs = x.contiguous(memory_format=fmt).requires_grad_()
        # the weight in the same layout: a channels-last one makes the call channels-last
        # (PyTorch's rule), input and output included
        ws = w.contiguous(memory_format=fmt).requires_grad_()
        tritonconv.clear_caches()
        with exact_fp32():
            y = tritonconv.conv2d(xs, ws, padding=1, algo="implicit_gemm")
            relaid.clear()
            dx, dw = torch.autograd.grad(y, (xs, ws), grad.contiguous(memory_format=fmt))
            assert len(relaid) == len(set(relaid)), "a tensor relaid twice in one backward"
            # dy; the weight (neither channel axis innermost; channels-last, the input
            # gradient's TF32 products read it along the reduction); x for dW
            assert len(relaid) == (3 if layout == "nchw" else 1), relaid
            y2 = tritonconv.conv2d(xs.detach(), ws.detach(), padding=1, algo="implicit_gemm")
        assert y.is_contiguous(memory_format=fmt) and dx.is_contiguous(memory_format=fmt)
        plans = functional._CONV_PLANS.entries.values()  # the training call's, and y2's
        assert len(plans) == 2
        for plan in plans:
            kernels = [getattr(step, "kernel", None) for step in plan.replay.steps]
            names = [k.fn.__name__ for k in kernels if k is not None]
            assert ("crop_kernel" in names) == (layout == "nchw"), names
        results[layout] = (y, dx, dw, y2)
    for a, b in zip(results["nchw"], results["nhwc"]):
        assert torch.equal(a, b)


# (N, C, H, W, K, kernel, stride, padding, dilation, groups): small groups, packed per program
PACKED = [
    (2, 32, 7, 6, 32, (3, 3), 1, 1, 1, 4),  # 8 -> 8 channels: 2 groups a program (fp32)
    (1, 32, 6, 7, 16, (3, 3), 2, 1, 1, 8),  # 4 -> 2: all 8 a program
    (2, 24, 5, 6, 48, (2, 3), 1, (1, 0), (2, 1), 6),  # 4 -> 8: 2 a program (6 groups)
    (1, 24, 6, 6, 24, (3, 3), 1, 1, 1, 3),  # 8 -> 8, 3 groups: no even pack (1)
]


@pytest.mark.parametrize("geometry", PACKED, ids=str)
def test_small_groups_run_packed(geometry, device):
    """Groups narrower than PACK_CHANNELS run several per program (block-diagonal weight tile):
    forward, dX (also of a strided layer: phases) and the transposed convolution."""
    N, C, H, W, K, kernel, stride, padding, dilation, groups = geometry
    with exact_fp32():
        x = random_tensor((N, C, H, W), torch.float32, device)
        w = random_tensor((K, C // groups, *kernel), torch.float32, device)
        b = random_tensor((K,), torch.float32, device)
        kw = dict(stride=stride, padding=padding, dilation=dilation, groups=groups)
        _check(x.to(memory_format=torch.channels_last), w, b, **kw)
        xt = random_tensor((N, K, H, W), torch.float32, device)
        _check(xt, w, random_tensor((C,), torch.float32, device), transposed=True, **kw)


def test_group_pack_rule():
    pack = implicit_gemm.group_pack
    assert pack(torch.bfloat16, 8, 8, 32) == 4
    assert pack(torch.bfloat16, 4, 4, 32) == 8
    assert pack(torch.bfloat16, 16, 16, 32) == 2
    assert pack(torch.bfloat16, 32, 64, 32) == 1
    assert pack(torch.bfloat16, 8, 8, 3) == 1  # no power of two divides 3
    assert pack(torch.bfloat16, 8, 8, 2) == 2  # at most every group
    assert pack(torch.float64, 4, 4, 32) == 1  # off tensor cores
    # fp32 groups under 16 channels pack to PACK_CHANNELS_FP32 (TF32's tensor-core step is 8
    # deep, not 16); wider ones to PACK_CHANNELS, as 16-bit's
    assert pack(torch.float32, 8, 8, 32) == 2
    assert pack(torch.float32, 4, 4, 32) == 4
    assert pack(torch.float32, 2, 8, 16) == 8
    assert pack(torch.float32, 16, 16, 32) == 2


def test_wide_group_pack_rule(monkeypatch):
    """16-bit groups of 16+ channels pack to WIDE_PACK_CHANNELS when enough programs remain
    (RegNet-Y-800MF's first stage at batch 32), not on smaller grids or narrower groups."""
    monkeypatch.setattr(implicit_gemm, "INTERPRETER", False)
    monkeypatch.setattr(implicit_gemm, "multiprocessor_count", lambda device: 132)
    pack, bf16 = implicit_gemm.group_pack, torch.bfloat16
    assert pack(bf16, 16, 16, 4, 32 * 56 * 56) == 4  # 784 programs of 64 channels
    assert pack(bf16, 16, 16, 4) == 2  # (rows unknown: the narrow rule)
    assert pack(bf16, 16, 16, 32, 32 * 14 * 14) == 2  # ResNeXt's 14²: 392 programs
    assert pack(bf16, 16, 16, 20, 32 * 14 * 14) == 2  # RegNet's 14²: 245
    assert pack(bf16, 8, 8, 32, 32 * 56 * 56) == 4  # 8-channel groups: 8x the products
    assert pack(torch.float32, 16, 16, 4, 32 * 56 * 56) == 2  # 16-bit only
    assert pack(bf16, 16, 32, 4, 32 * 56 * 56) == 2  # 4 x 32 > 64 channels
    assert pack(bf16, 32, 32, 32, 32 * 56 * 56) == 1  # 32-channel groups: not measured wider
    assert pack(torch.float16, 16, 16, 4, 32 * 56 * 56) == 4
    config = implicit_gemm.launch_config(
        bf16, 32, 16, 16, (56, 56), (1, 1), (3, 3), 4, False, "cuda"
    )  # fmt: skip
    assert config.block_n == 64  # the tiles of the packed 64-channel group


@pytest.mark.parametrize("transposed", [False, True], ids=["forward", "transposed"])
def test_wide_pack_runs(transposed, device, monkeypatch, launches):
    """Four 16-channel bf16 groups as one 64-channel program (the wide pack): forward, dX
    and the transposed convolution against float64."""
    monkeypatch.setattr(implicit_gemm, "INTERPRETER_MULTIPROCESSORS", 1)
    monkeypatch.setattr(implicit_gemm, "WIDE_PACK_MIN_WAVES", 0)
    x = random_tensor((2, 64, 5, 6), torch.bfloat16, device)
    w = random_tensor((64, 16, 3, 3), torch.bfloat16, device)
    _check(x.to(memory_format=torch.channels_last), w,
           random_tensor((64,), torch.bfloat16, device), padding=1, groups=4,
           transposed=transposed)  # fmt: skip
    packs = [meta["PACK"] for name, meta in launches if name == "conv_igemm_kernel"]
    assert packs == [4, 4]  # forward and dX (or the transposed pair), both launched packed


# (N, C, spatial, K, kernel, stride, padding, dilation, groups, pack): 16-bit grouped weight
# gradients, several groups a program
PACKED_WGRAD = [
    (2, 64, (6, 7), 64, (3, 3), 1, 1, 1, 8, 8),  # 8 -> 8 channels: 8 groups a program
    (1, 32, (7, 6), 16, (3, 2), 2, (1, 0), (1, 2), 8, 8),  # 4 -> 2, strided and dilated
    (2, 48, (5, 6), 48, (3, 3), 1, 1, 1, 3, 1),  # 16 -> 16, 3 groups: no even pack
    (2, 64, (5, 5), 32, (1, 1), 1, 0, 1, 4, 4),  # 16 -> 8, 1x1 (pointwise positions)
    (1, 32, (3, 4, 5), 32, (3, 1, 3), 1, 1, 1, 4, 4),  # 3-D: 8 -> 8, 4 groups
    (2, 16, (9,), 32, (3,), 2, 1, 1, 2, 2),  # 1-D: 8 -> 16
]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("geometry", PACKED_WGRAD, ids=str)
def test_packed_weight_gradient(geometry, dtype, device, monkeypatch):
    """A 16-bit grouped weight gradient runs ``wgrad_pack`` groups a program (block-diagonal
    tile): against float64 from buffers that start poisoned (every weight element, of every
    split's partial, is written), in channels-last and NCHW, 1-D to 3-D."""
    from tritonconv import launch
    from tritonconv.geometry import make_geometry

    N, C, spatial, K, kernel, stride, padding, dilation, groups, pack = geometry
    assert implicit_gemm.wgrad_pack(dtype, C // groups, K // groups, groups) == pack
    empty, empty_strided = torch.empty, torch.empty_strided
    monkeypatch.setattr(launch.torch, "empty", lambda *a, **k: poison_(empty(*a, **k)))
    monkeypatch.setattr(
        launch.torch, "empty_strided", lambda *a, **k: poison_(empty_strided(*a, **k))
    )
    dims = len(spatial)
    conv = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[dims]
    x = random_tensor((N, C, *spatial), dtype, device)
    w = random_tensor((K, C // groups, *kernel), dtype, device)
    kw = dict(stride=stride, padding=padding, dilation=dilation, groups=groups)
    xd, wd = x.double().requires_grad_(), w.double().requires_grad_()
    y = conv(xd, wd, **kw)
    dy = random_tensor(y.shape, dtype, device)
    (want,) = torch.autograd.grad(y, [wd], dy.double())
    fix = lambda v: (v,) * dims if isinstance(v, int) else v  # noqa: E731
    geometry = make_geometry(
        spatial, kernel, fix(stride), fix(padding), fix(padding), fix(dilation)
    )
    layouts = {"nchw": lambda t: t}
    if dims > 1:
        fmt = torch.channels_last if dims == 2 else torch.channels_last_3d
        layouts["channels_last"] = lambda t: t.contiguous(memory_format=fmt)
    for name, layout in layouts.items():
        tritonconv.clear_caches()
        got = implicit_gemm.conv_grad_weight(layout(dy), layout(x), w.shape, geometry, groups)
        assert_close(got, want, reduction=y.numel() // y.shape[1], name=f"dW {name}")


def test_wgrad_pack_rule():
    pack = implicit_gemm.wgrad_pack
    assert pack(torch.bfloat16, 8, 8, 32) == 8  # 64 channels a side
    assert pack(torch.float16, 16, 16, 32) == 4
    assert pack(torch.bfloat16, 4, 16, 64) == 4  # the wider side bounds it
    assert pack(torch.bfloat16, 64, 64, 4) == 1  # wide enough already
    assert pack(torch.bfloat16, 8, 8, 3) == 1  # no power of two divides 3
    assert pack(torch.bfloat16, 8, 8, 1) == 1
    with exact_fp32(), overridden(precision, TF32_OFF_PRECISION="tf32x3_rn"):
        assert pack(torch.float32, 8, 8, 32) == 8  # TF32 off: bf16x6 products
        with overridden(precision, TF32_OFF_PRECISION="ieee"):
            assert pack(torch.float32, 8, 8, 32) == 1  # fp32 FMA products: the whole tile
    old = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = True
    try:
        assert pack(torch.float32, 8, 8, 32) == 8  # TF32 allowed: bf16x3 products
    finally:
        torch.backends.cudnn.allow_tf32 = old
    assert pack(torch.float64, 8, 8, 32) == 1


@pytest.mark.parametrize("weight_layout", ["contiguous", "channels_last"])
def test_folded_layers_weight_gradient_takes_the_weight_layout(weight_layout, device):
    """Through autograd, a layer whose width taps fold into channels (6 input channels) gets
    dW in its weight's layout too (the kernel writes input channels innermost; a contiguous
    weight's dW is copied from that), in the first call and in its replay."""
    tritonconv.clear_caches()
    fmt = getattr(torch, weight_layout.replace("contiguous", "contiguous_format"))
    for _ in range(2):
        x = random_tensor((2, 6, 7, 5), torch.float32, device).to(memory_format=torch.channels_last)
        w = random_tensor((8, 6, 3, 2), torch.float32, device).contiguous(memory_format=fmt)
        w.requires_grad_()
        with exact_fp32():
            y = tritonconv.conv2d(x, w, padding=1, algo="implicit_gemm")
        dy = random_tensor(y.shape, torch.float32, device)
        (dw,) = torch.autograd.grad(y, [w], dy)
        wd = w.detach().double().requires_grad_()
        (want,) = torch.autograd.grad(F.conv2d(x.double(), wd, padding=1), [wd], dy.double())
        assert dw.stride() == w.stride()
        assert_close(dw, want, reduction=y.numel() // y.shape[1], name="dW")


@pytest.mark.parametrize(
    "channels, groups, config",
    [
        ((64, 48), 1, None),
        ((64, 48), 8, None),  # 8 channels a group, packed 8 a program
        ((128, 128), 1, implicit_gemm.Config(128, 128, 64, 8, 3)),  # the wide rule's tiles
        ((16, 48), 1, None),  # a program under WGRAD_SPLIT_MIN_CHANNELS: ieee
    ],
    ids=["dense", "packed", "wide", "narrow"],
)
@pytest.mark.parametrize("tf32_off", ["tf32x3_rn", "ieee"])
def test_tf32_off_weight_gradient_is_fp32_accurate(
    tf32_off, channels, groups, config, device, launches
):
    """With TF32 off the fp32 weight gradient computes ``bf16x6`` products (three bfloat16
    pieces an operand, kernels/mma.py), or fp32 FMA ones where the TF32-off precision is
    ``ieee`` or the program is narrow: within fp32 accuracy of float64 (a few ulps of the
    products' magnitude along the reduction, where ``bf16x3``'s 2^-16 would be hundreds),
    dense, with packed groups and with the wide 64-deep tiles, on data whose low bits a
    bfloat16 or TF32 product would drop; the kernel is launched with that precision."""
    from tritonconv.geometry import make_geometry

    cin, cout = channels
    with overridden(precision, TF32_OFF_PRECISION=tf32_off):
        narrow = min(cin, cout) < implicit_gemm.WGRAD_SPLIT_MIN_CHANNELS
        want_precision = "ieee" if tf32_off == "ieee" or narrow else "bf16x6"
        cl = torch.channels_last
        x = random_tensor((2, cin, 6, 7), torch.float32, device).to(memory_format=cl)
        dy = random_tensor((2, cout, 6, 7), torch.float32, device).to(memory_format=cl)
        geometry = make_geometry((6, 7), (3, 3), (1, 1), (1, 1), (1, 1), (1, 1))
        shape = [cout, cin // groups, 3, 3]
        got = implicit_gemm.conv_grad_weight(dy, x, shape, geometry, groups, config)
    assert launches[0][1]["DOT_PRECISION"] == want_precision, launches
    want = torch.ops.aten.convolution_backward(
        dy.double(), x.double(), torch.empty(shape, dtype=torch.float64, device=device),
        None, (1, 1), (1, 1), (1, 1), False, (0, 0), groups, (False, True, False),
    )[1]  # fmt: skip
    terms = torch.ops.aten.convolution_backward(
        dy.double().abs(), x.double().abs(), torch.empty(shape, dtype=torch.float64, device=device),
        None, (1, 1), (1, 1), (1, 1), False, (0, 0), groups, (False, True, False),
    )[1]  # fmt: skip
    err = ((got.double() - want).abs() / terms).max().item()
    assert err < 2**-19, err  # (84 terms summed: fp32's own sum is within 2^-17 at worst)


@pytest.mark.parametrize("channels, expected", [((16, 48), "ieee"), ((32, 48), "bf16x3")])
def test_tf32_weight_gradient_products_by_width(channels, expected, device, launches, monkeypatch):
    """With TF32 allowed, the fp32 weight gradient launches ``bf16x3`` products, except for
    programs under ``WGRAD_SPLIT_MIN_CHANNELS`` a side, which launch fp32 ones (``ieee``:
    measured faster on the folded stems); both within TF32's error of float64."""
    from tritonconv.geometry import make_geometry

    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", True)
    cin, cout = channels
    cl = torch.channels_last
    x = random_tensor((2, cin, 6, 7), torch.float32, device).to(memory_format=cl)
    dy = random_tensor((2, cout, 6, 7), torch.float32, device).to(memory_format=cl)
    geometry = make_geometry((6, 7), (3, 3), (1, 1), (1, 1), (1, 1), (1, 1))
    got = implicit_gemm.conv_grad_weight(dy, x, [cout, cin, 3, 3], geometry, 1)
    assert launches[0][1]["DOT_PRECISION"] == expected, launches
    want = torch.ops.aten.convolution_backward(
        dy.double(), x.double(), torch.empty(cout, cin, 3, 3, dtype=torch.float64, device=device),
        None, (1, 1), (1, 1), (1, 1), False, (0, 0), 1, (False, True, False),
    )[1]  # fmt: skip
    err = ((got.double() - want).abs().max() / want.abs().max()).item()
    assert err < 2**-13, err  # (bf16x3: about 16 mantissa bits; ieee: fp32's)


def test_tf32_off_weight_gradient_rule(monkeypatch):
    """With TF32 off, the weight gradient's GPU rule: ``bf16x6`` products for programs at
    least ``WGRAD_SPLIT_MIN_CHANNELS`` wide a side (packed groups counted together), fp32
    FMA ones for narrower programs (folded stems) and unpacked; 128 x 128 x 64 tiles, two
    programs an SM, from ``WGRAD_BF16X6_WIDE`` channels a side. With TF32 allowed,
    ``bf16x3`` and FMA products alike."""
    monkeypatch.setattr(implicit_gemm, "INTERPRETER", False)
    f32, wide = torch.float32, implicit_gemm.Config(128, 128, 64, 8, 3)
    with exact_fp32(), overridden(precision, TF32_OFF_PRECISION="tf32x3_rn"):
        assert implicit_gemm.wgrad_precision(f32, 21, 64) == "ieee"  # ResNet-50's folded stem
        assert implicit_gemm.wgrad_precision(f32, 64, 64) == "bf16x6"
        assert implicit_gemm.wgrad_pack(f32, 8, 8, 32) == 8  # 64 channels packed: bf16x6
        assert implicit_gemm.wgrad_pack(f32, 4, 4, 2) == 1  # 8 even packed: ieee, unpacked
        assert implicit_gemm.wgrad_config(f32, 128, 128, 25088, 3) == wide
        assert implicit_gemm.wgrad_config(f32, 384, 96, 100352) == wide
        assert implicit_gemm.wgrad_programs_per_sm(f32, wide, 25088, 128, 128) == 2
        narrow = implicit_gemm.wgrad_config(f32, 64, 64, 100352, 3)
        assert narrow.block_k == 32  # (64 x 64 tiles: 32-deep steps)
        assert implicit_gemm.wgrad_programs_per_sm(f32, narrow, 100352, 64, 64) == 4
        with overridden(precision, TF32_OFF_PRECISION="ieee"):
            assert implicit_gemm.wgrad_precision(f32, 128, 128) == "ieee"
            assert implicit_gemm.wgrad_config(f32, 128, 128, 25088, 3) != wide
    # TF32 allowed: narrow programs keep FMA products too (session 41: the folded stems'
    # bf16x3 twice as slow), the others bf16x3
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", True)
    assert implicit_gemm.wgrad_precision(f32, 21, 64) == "ieee"  # ResNet-50's folded stem
    assert implicit_gemm.wgrad_precision(f32, 9, 64) == "ieee"  # VGG's
    assert implicit_gemm.wgrad_precision(f32, 64, 64) == "bf16x3"
    assert implicit_gemm.wgrad_precision(f32) == "bf16x3"  # (widths not known)
    assert implicit_gemm.wgrad_pack(f32, 8, 8, 32) == 8  # packed to 64: bf16x3
    assert implicit_gemm.wgrad_pack(f32, 4, 4, 2) == 1  # 8 even packed: ieee, unpacked


def test_tf32_off_tiles_rule(monkeypatch):
    """fp32 with TF32 off (``_tf32x3_config``), on a GPU of 132 SMs: the folded stems take
    256 x 64 tiles; ResNet-50's 3x3 at 7² (under a wave, long reduction) 128 x 128 on 8 warps,
    at 14² the general rule; 1x1 layers under two waves 64 x 64; windows of 64 columns, or of
    128 under two waves, 128 x 64 on 8 warps. Packed groups, TF32 allowed and
    ``TF32X3_TILES = False`` keep the general rule."""
    monkeypatch.setattr(implicit_gemm, "INTERPRETER", False)
    monkeypatch.setattr(implicit_gemm, "multiprocessor_count", lambda device: 132)
    f32, C = torch.float32, implicit_gemm.Config

    def config(rows, src, dst, taps, packed=False):
        return implicit_gemm.forward_config(f32, rows, src, dst, 1, "cuda", taps, packed)

    stem = (32 * 112 * 112, 21, 64, 7)
    cases = {
        stem: C(256, 64, 16, 8, 3),
        (32 * 49, 512, 512, 9): C(128, 128, 16, 8, 3),  # ResNet-50's 3x3 at 7²
        (32 * 784, 40, 120, 1): C(64, 64, 16, 4, 3),  # 1x1 under two waves
        (32 * 3136, 64, 64, 9): C(128, 64, 16, 8, 3),  # ResNet-50's 3x3 at 56²
        (32 * 784, 128, 128, 9): C(128, 64, 16, 8, 3),  # ... at 28²: 196 tiles
    }
    general = [(32 * 196, 256, 256, 9), (32 * 3136, 64, 256, 1), (16 * 4096, 256, 256, 9)]
    with exact_fp32(), overridden(precision, TF32_OFF_PRECISION="tf32x3_rn"):
        for shape, want in cases.items():
            assert config(*shape) == want, shape
        chosen = {shape: config(*shape) for shape in general}
        chosen["packed"] = config(32 * 3136, 64, 64, 9, packed=True)
        with overridden(implicit_gemm, TF32X3_TILES=False):
            assert config(*stem) != cases[stem]
            for shape in general:
                assert chosen[shape] == config(*shape), shape
            assert chosen["packed"] == config(32 * 3136, 64, 64, 9, packed=True)
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", True)
    assert config(*stem) != cases[stem]


def test_tf32_weight_gradient_rule(monkeypatch):
    """With TF32 allowed (``bf16x3`` products), the weight gradient's GPU tiles: 128 x 256 from
    256 channels a side, 128 x 64 x 64 from 128 for windows (not 1x1 layers), 64 x 64 x 32
    below."""
    monkeypatch.setattr(implicit_gemm, "INTERPRETER", False)
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", True)
    f32, C = torch.float32, implicit_gemm.Config
    assert implicit_gemm.wgrad_precision(f32, 128, 128) == "bf16x3"
    assert implicit_gemm.wgrad_config(f32, 256, 256, 6272, 3) == C(128, 256, 32, 8, 3)
    assert implicit_gemm.wgrad_config(f32, 128, 128, 25088, 3) == C(128, 64, 64, 4, 3)
    assert implicit_gemm.wgrad_config(f32, 128, 128, 25088, 1) == C(64, 64, 32, 4, 4)
    assert implicit_gemm.wgrad_config(f32, 64, 64, 100352, 3) == C(64, 64, 32, 4, 4)


@pytest.mark.parametrize(
    "kernel, channels",
    [((3, 3), (32, 48)), ((1, 1), (32, 48)), ((3, 3), (128, 128)), ((3, 3), (256, 256))],
    ids=str,
)
def test_tf32_weight_gradient_is_closer_than_tf32(kernel, channels, device):
    """With TF32 allowed the fp32 weight gradient multiplies bfloat16 halves of its operands
    (``bf16x3``): against float64 it must be well inside TF32's error (2^-11 of each operand),
    on data whose low bits a single bfloat16 or TF32 product would drop. 128 and 256 channels
    take the GPU's 128 x 64 x 64 and 128 x 256 tiles (on the GPU only: slow in the
    interpreter, which tiles differently)."""
    from tritonconv.geometry import make_geometry

    cin, cout = channels
    if cin >= 128 and device == "cpu":
        pytest.skip("the GPU's wide tiles")
    tritonconv.clear_caches()
    old = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = True
    try:
        x = random_tensor((2, cin, 6, 5), torch.float32, device).to(
            memory_format=torch.channels_last
        )
        pad = kernel[0] // 2
        geometry = make_geometry((6, 5), kernel, (1, 1), (pad, pad), (pad, pad), (1, 1))
        dy = random_tensor((2, cout, *geometry.output), torch.float32, device)
        dy = dy.to(memory_format=torch.channels_last)
        got = implicit_gemm.conv_grad_weight(dy, x, [cout, cin, *kernel], geometry, 1)
    finally:
        torch.backends.cudnn.allow_tf32 = old
    want = torch.ops.aten.convolution_backward(
        dy.double(), x.double(), torch.empty(cout, cin, *kernel, dtype=torch.float64, device=device),
        None, (1, 1), (pad, pad), (1, 1), False, (0, 0), 1, (False, True, False),
    )[1]  # fmt: skip
    terms = (dy.double().abs().unsqueeze(2) * x.double().abs().unsqueeze(1)).sum((0, 3, 4))
    # each product's error is at most about 3 * 2^-16 of it with bf16x3; 2^-10 with TF32
    err = ((got.double() - want).abs() / terms.amax()).max().item()
    assert err < 2**-13, err


@pytest.mark.parametrize("width", [32, 64])
def test_tf32_weight_gradient_of_packed_groups(width, device, monkeypatch):
    """fp32 with TF32 allowed packs groups too where ``WGRAD_PACK_CHANNELS_TF32`` says so:
    ``bf16x3`` products over the block-diagonal tile, against float64 at bf16x3's accuracy."""
    from tritonconv.geometry import make_geometry

    monkeypatch.setattr(implicit_gemm, "WGRAD_PACK_CHANNELS_TF32", width)
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", True)
    tritonconv.clear_caches()
    groups, cl = 8, torch.channels_last
    assert implicit_gemm.wgrad_pack(torch.float32, 8, 8, groups) == width // 8
    x = random_tensor((2, 64, 6, 7), torch.float32, device).to(memory_format=cl)
    dy = random_tensor((2, 64, 6, 7), torch.float32, device).to(memory_format=cl)
    geometry = make_geometry((6, 7), (3, 3), (1, 1), (1, 1), (1, 1), (1, 1))
    got = implicit_gemm.conv_grad_weight(dy, x, [64, 8, 3, 3], geometry, groups)
    want = torch.ops.aten.convolution_backward(
        dy.double(), x.double(), torch.empty(64, 8, 3, 3, dtype=torch.float64, device=device),
        None, (1, 1), (1, 1), (1, 1), False, (0, 0), groups, (False, True, False),
    )[1]  # fmt: skip
    err = ((got.double() - want).abs().max() / want.abs().max()).item()
    assert err < 2**-13, err


@pytest.mark.parametrize("dims", [1, 2, 3])
def test_weight_gradient_kernel_writes_input_channels_innermost(dims, device, monkeypatch):
    """Whatever layout dW is asked in, the weight-gradient kernel's output (dW itself or each
    split's partial) has input channels innermost: laid out as a contiguous weight, its tile
    stores were one element per 32-byte sector (2x the kernel's time on the H100)."""

    outputs = []
    original = implicit_gemm.launch

    def spy(kernel, grid, *args, **kwargs):
        if kernel is implicit_gemm.conv_igemm_wgrad_kernel:
            outputs.append(args[2])  # (dy, x, partial, ...)
        return original(kernel, grid, *args, **kwargs)

    monkeypatch.setattr(implicit_gemm, "launch", spy)
    tritonconv.clear_caches()
    geometry, x, dy, w = _weight_gradient_case(dims, device)
    got = implicit_gemm.conv_grad_weight(dy, x, list(w.shape), geometry, 1, None, w.stride())
    assert got.stride() == w.stride()
    (partial,) = outputs
    assert partial.stride(2) == 1, partial.stride()  # (splits, C_out, C_in, taps...)


TAIL_CONFIGS = [
    implicit_gemm.Config(32, 32, 16, 4, 1, 16),
    implicit_gemm.Config(16, 16, 16, 4, 1, 32),
]


@pytest.mark.parametrize("config", TAIL_CONFIGS, ids=str)
@pytest.mark.parametrize("split", [False, True], ids=["whole", "split"])
@pytest.mark.parametrize(
    "case",
    [
        # (N, C, spatial, K, kernel, stride, padding, dilation)
        (1, 16, (16, 12), 48, (3, 3), 1, 1, 1),  # one column tile of 48; over GROUP_M row tiles
        (1, 24, (7, 6), 40, (3, 2), 2, 1, 2),  # the second accumulator's columns partly masked
        # dx of 40 columns (both accumulators) over stride phases whose first tap is not 0
        (2, 40, (7, 6), 16, (3, 3), 2, 1, 1),
        (2, 20, (5, 6), 96, (1, 1), 1, 0, 1),  # two column tiles, one tap
        (1, 12, (3, 5, 4), 48, (3, 3, 3), (1, 2, 1), 1, 1),  # 3-D
    ],
    ids=["48", "40-strided", "dx40-phases", "96-1x1", "3d"],
)
def test_second_accumulator_matches_float64(case, split, config, device, monkeypatch):
    """Column tiles of ``block_n + block_n2`` channels (``BLOCK_N2``): forward with bias and
    the input gradient (its stride phases), into poisoned outputs, whole and with the
    reduction split, against float64; every column of both accumulators written."""
    N, C, spatial, K, kernel, stride, padding, dilation = case
    rank = len(spatial)
    stride, padding, dilation = ((v,) * rank if isinstance(v, int) else v
                                 for v in (stride, padding, dilation))  # fmt: skip
    geo = tritonconv.geometry.make_geometry(spatial, kernel, stride, padding, padding, dilation)
    cl = torch.channels_last if rank == 2 else torch.channels_last_3d
    conv = F.conv2d if rank == 2 else F.conv3d
    x = random_tensor((N, C, *spatial), torch.float32, device).to(memory_format=cl)
    w = random_tensor((K, C, *kernel), torch.float32, device).to(memory_format=cl)
    b = random_tensor((K,), torch.float32, device)
    dy = random_tensor((N, K, *geo.output), torch.float32, device).to(memory_format=cl)
    if split:
        _force_split_k(monkeypatch)
    splits = []
    real = implicit_gemm.split_k
    monkeypatch.setattr(implicit_gemm, "split_k", lambda *a: splits.append(real(*a)) or splits[-1])
    tritonconv.clear_caches()  # (launch plans recorded with other split rules)
    want_y = conv(x.double(), w.double(), b.double(), stride, padding, dilation)
    want_dx = torch.ops.aten.convolution_backward(
        dy.double(), x.double(), w.double(), None, stride, padding, dilation,
        False, (0,) * rank, 1, (True, False, False),
    )[0]  # fmt: skip
    y = poison_(torch.empty_like(want_y, dtype=torch.float32).to(memory_format=cl))
    dx = poison_(torch.empty_like(x))
    with exact_fp32():
        implicit_gemm._launch_conv(x, w, b, y, geo, 1, False, config)
        implicit_gemm._launch_conv(dy, w, None, dx, geo, 1, True, config)
    tritonconv.clear_caches()
    assert (max(splits) > 1) == split
    assert_close(y, want_y, reduction=C * math.prod(kernel), name="output")
    assert_close(dx, want_dx, reduction=K * math.prod(kernel), name="dx")


def test_tail_columns_rule(monkeypatch):
    """Widths 128-wide tiles pad take a 128 + 16/32/64 column tile that divides them (the
    (2+1)D widths 144, 288, 576); widths 128 divides (1152) or no such tile divides, fp32 and
    the switched-off rule take none; packed groups and 256-row tiles never see one."""
    rule, bf16 = implicit_gemm.tail_columns, torch.bfloat16
    assert [rule(bf16, c) for c in (144, 288, 576, 160, 320, 192, 960)] == [
        16, 16, 16, 32, 32, 64, 32,
    ]  # fmt: skip
    assert [rule(bf16, c) for c in (128, 1152, 256, 96, 200, 448, 64, 16)] == [0] * 8
    assert rule(torch.float32, 144) == 0 and rule(torch.float16, 144) == 16
    # groups of 16 -> 144 channels run two at a time (group_pack): 288 columns, but packed
    monkeypatch.setattr(implicit_gemm, "INTERPRETER", False)
    monkeypatch.setattr(implicit_gemm, "multiprocessor_count", lambda device: 132)
    packed = implicit_gemm.launch_config(
        bf16, 8, 16, 144, (56, 56), (1, 1), (3, 3), 2, False, "cuda"
    )  # fmt: skip
    assert implicit_gemm.group_pack(bf16, 16, 144, 2) == 2 and packed.block_n2 == 0
    assert implicit_gemm.launch_config(
        bf16, 32, 144, 144, (56, 56), (1, 1), (3, 3), 2, False, "cuda"
    ).block_n2 == 16  # fmt: skip

    def n2(batch, src, dst, spatial, kernel, transposed=False):
        return implicit_gemm.launch_config(
            bf16, batch, src, dst, spatial, (1, 1, 1), kernel, 1, transposed, "cuda"
        ).block_n2  # fmt: skip

    # r2plus1d's input gradients (session 25's probe): the spatial 1x3x3 one (9 steps, 3136
    # row tiles) takes it; the temporal 3x1x1 ones, 3 and 6 steps, or 12 steps over 196
    # programs (1.5 an SM), do not
    assert n2(8, 64, 144, (16, 56, 56), (1, 3, 3), True) == 16
    assert n2(8, 64, 144, (16, 56, 56), (3, 1, 1), True) == 0
    assert n2(8, 128, 288, (8, 28, 28), (3, 1, 1), True) == 0
    assert n2(8, 256, 576, (4, 14, 14), (3, 1, 1), True) == 0
    assert n2(8, 128, 288, (8, 28, 28), (1, 3, 3)) == 16  # the 288-wide forward: 18 steps
    monkeypatch.setattr(implicit_gemm, "TAIL_COLUMNS", False)
    assert rule(bf16, 144) == 0
    assert not implicit_gemm.swap_rule(bf16, implicit_gemm.Config(256, 128, 64, 8, 3, 16))
    assert str(implicit_gemm.Config(128, 128, 64, 8, 3, 16)) == "128x(128+16)x64 w8 s3"


@pytest.mark.parametrize("width", [144, 160, 192, 288])
def test_second_accumulator_in_16_bit(width, device, monkeypatch):
    """The widths ``tail_columns`` serves, bf16 channels-last on the H100's tiles (128 x
    (128 + n2), tensor cores on a GPU): the heuristic takes the second accumulator, and the
    forward with bias and the input gradient (``width`` its reduction too) match float64."""
    monkeypatch.setattr(implicit_gemm, "INTERPRETER", False)  # the GPU's tile rule
    monkeypatch.setattr(implicit_gemm, "multiprocessor_count", lambda device: 1)
    monkeypatch.setattr(implicit_gemm, "TAIL_MIN_WAVES", 1)  # (three row tiles here)
    monkeypatch.setattr(implicit_gemm, "window_tma_config", lambda *args: None)  # (TMA boxes)
    tritonconv.clear_caches()
    launched = []
    real = implicit_gemm.launch
    monkeypatch.setattr(
        implicit_gemm, "launch", lambda *a, **m: launched.append(m) or real(*a, **m)
    )
    cl, bf16 = torch.channels_last, torch.bfloat16
    x = random_tensor((2, 64, 12, 11), bf16, device).to(memory_format=cl)
    w = random_tensor((width, 64, 3, 3), bf16, device).to(memory_format=cl)
    b = random_tensor((width,), bf16, device)
    y = implicit_gemm.conv_forward(x, w, b, _geometry((12, 11), (3, 3), 1, 1), 1)
    n2 = implicit_gemm.tail_columns(bf16, width)
    assert n2 > 0 and [m["BLOCK_N2"] for m in launched] == [n2]
    ref = F.conv2d(x.double(), w.double(), b.double(), padding=1)
    assert_close(y, ref, reduction=64 * 9, name="output")
    # the input gradient of a convolution from ``width`` channels: ``width`` destination columns
    dy = random_tensor((2, 64, 12, 11), bf16, device).to(memory_format=cl)
    w2 = random_tensor((64, width, 3, 3), bf16, device).to(memory_format=cl)
    like = torch.empty((2, width, 12, 11), dtype=bf16, device=device).to(memory_format=cl)
    dx = implicit_gemm.conv_grad_input(dy, w2, like, _geometry((12, 11), (3, 3), 1, 1), 1)
    want = torch.ops.aten.convolution_backward(
        dy.double(), like.double(), w2.double(), None, (1, 1), (1, 1), (1, 1), False, (0, 0), 1,
        (True, False, False),
    )[0]  # fmt: skip
    assert_close(dx, want, reduction=64 * 9, name="dx")
    assert [m["BLOCK_N2"] for m in launched] == [n2, n2]
    tritonconv.clear_caches()


def _geometry(size, kernel, stride, padding):
    rank = len(size)
    stride, padding = (stride,) * rank, (padding,) * rank
    return tritonconv.geometry.make_geometry(size, kernel, stride, padding, padding, (1,) * rank)


@pytest.mark.parametrize("value", ["tf32x3", "tf32x3_rn"])
def test_tf32x3_at_tf32_off_matches_float64(value, device, monkeypatch):
    """The probes' settings ``precision.TF32_OFF_PRECISION = "tf32x3"`` and ``"tf32x3_rn"``
    (three TF32 products at TF32-off, 16-deep steps: ``TF32X3_K_BLOCK``; ``_rn`` corrects
    the tensor cores' truncation, and only on compiled kernels) compute the convolution and
    its input gradient at fp32 accuracy, and their tiles take that step (the heuristic's,
    benchmark mode's candidates, a tile handed to the launcher)."""

    # the default, unless the run chose another (TRITONCONV_TF32_OFF_PRECISION)
    chosen = os.environ.get("TRITONCONV_TF32_OFF_PRECISION", precision.DEFAULT_TF32_OFF_PRECISION)
    assert chosen == precision.TF32_OFF_PRECISION
    monkeypatch.setattr(precision, "TF32_OFF_PRECISION", value)
    compiled = "tf32x3" if tritonconv.INTERPRETER else value
    assert precision.dot_precision(torch.float32) == compiled
    assert precision.dot_precision(torch.bfloat16) == "tf32"  # (16-bit inputs ignore it)
    tritonconv.clear_caches()
    config = implicit_gemm.launch_config(
        torch.float32, 2, 64, 24, (9, 7), (1, 1), (3, 3), 1, False, torch.device(device)
    )
    assert config.block_k == direct.TF32X3_K_BLOCK
    # benchmark mode's candidates, and a tile handed to the launcher (a tuned choice), too
    wide = implicit_gemm.Config(32, 16, 64, 4, 1)
    monkeypatch.setitem(implicit_gemm.TUNING_CONFIGS, "interpreter", (wide,))
    monkeypatch.setitem(implicit_gemm.TUNING_CONFIGS, "fp32", (wide,))
    args = (2, 64, 24, (9, 7), (1, 1), (3, 3), 1, False, torch.device(device))
    candidates = implicit_gemm.tuning_configs(torch.float32, *args)[1:]
    assert candidates == [tuple(wide._replace(block_k=direct.TF32X3_K_BLOCK))]
    assert implicit_gemm.describe(torch.float32, wide).startswith(f"32x16x{direct.TF32X3_K_BLOCK} ")
    steps, real = [], implicit_gemm.launch
    monkeypatch.setattr(
        implicit_gemm,
        "launch",
        lambda *a, **meta: steps.append(meta["BLOCK_K"]) or real(*a, **meta),
    )
    x = random_tensor((2, 64, 9, 7), torch.float32, device)
    w = random_tensor((24, 64, 3, 3), torch.float32, device)
    y = implicit_gemm.conv_forward(x, w, None, _geometry((9, 7), (3, 3), 1, 1), 1, config=wide)
    assert steps == [direct.TF32X3_K_BLOCK]
    assert_close(y, F.conv2d(x.double(), w.double(), padding=1))
    monkeypatch.setattr(implicit_gemm, "launch", real)
    x = random_tensor((2, 64, 9, 7), torch.float32, device).requires_grad_()
    w = random_tensor((24, 64, 3, 3), torch.float32, device).requires_grad_()
    y = tritonconv.conv2d(x, w, padding=1, algo="implicit_gemm")
    dy = random_tensor(y.shape, torch.float32, device)
    (dx,) = torch.autograd.grad(y, (x,), dy)
    x64, w64 = (t.detach().double().requires_grad_() for t in (x, w))
    y64 = F.conv2d(x64, w64, padding=1)
    (dx64,) = torch.autograd.grad(y64, (x64,), dy.double())
    assert_close(y, y64)
    assert_close(dx, dx64)
    tritonconv.clear_caches()  # (plans recorded with tf32x3)


@triton.jit
def _mma_test_kernel(a_ptr, b_ptr, out_ptr, big_ptr, rest_ptr, lifted_ptr, N: tl.constexpr):
    """``mma`` of a 16 x 16 ``a`` and a 16 x ``N`` ``b``: ``N`` of 64 and more takes the
    step's clean-up of the operands, less its clean-up of the small sum. Also ``a``'s pieces
    by ``split_tf32`` (``split_tf32_finite`` where ``N`` is 64 or more) and ``lift(a)``."""
    r = tl.arange(0, 16)
    c = tl.arange(0, N)
    a = tl.load(a_ptr + r[:, None] * 16 + r[None, :])
    b = tl.load(b_ptr + r[:, None] * N + c[None, :])
    tl.store(
        out_ptr + r[:, None] * N + c[None, :], mma(a, b, tl.zeros((16, N), tl.float32), "tf32x3_rn")
    )
    if N >= 64:
        big, rest, _ = split_tf32_finite(a)
    else:
        big, rest = split_tf32(a)
    tile = r[:, None] * 16 + r[None, :]
    tl.store(big_ptr + tile, big)
    tl.store(rest_ptr + tile, rest)
    tl.store(lifted_ptr + tile, lift(a))


def _tf32_nearest(x: torch.Tensor) -> torch.Tensor:
    """fp32 ``x`` rounded to TF32, nearest, ties away from zero (``cvt.rna.tf32.f32``)."""
    bits = x.view(torch.int32).to(torch.int64) & 0xFFFFFFFF
    rounded = ((bits + 0x1000) & 0xFFFFE000).to(torch.int32)  # (wraps as int32 does)
    return torch.where(x.isfinite(), rounded.view(torch.float32), x)


def _operands_with_specials(n: int, tiny: float, tie: float, device, columns: int = 0):
    """Random fp32 operands, ``a`` ``[n, n]`` and ``b`` ``[n, columns or n]``; ``a``'s row 0
    starts with zeros, a tiny value, ties ``1 + tie`` and ``1 + 3 * tie`` (``tie``: half an
    ulp of the split's first piece), -inf and NaN; row 1 holds +inf, and ``b``'s column 5
    -inf."""
    a = random_tensor((n, n), torch.float32, device)
    specials = [0.0, -0.0, tiny, -3.0, 1 + tie, 1 + 3 * tie, float("-inf"), float("nan")]
    a[0, : len(specials)] = torch.tensor(specials)
    a[1, 3] = float("inf")
    b = random_tensor((n, columns or n), torch.float32, device)
    b[3, 5] = float("-inf")
    return a, b


def _assert_product_with_specials(out, a, b) -> None:
    """``out`` is ``a @ b`` at fp32 accuracy, with the infinities (not NaNs) and the NaNs
    float64 has: NaN in the NaN's row, infinities in the infinities' row and column."""
    out, exact = out.cpu(), a.cpu().double() @ b.cpu().double()
    finite = exact.isfinite()
    assert_close(out[finite], exact[finite], reduction=a.shape[1])
    terms = a.cpu().double().abs() @ b.cpu().double().abs()  # fp32 products: about 2^-24 of it
    assert ((out.double() - exact).abs() / terms)[finite].max() < 2**-20
    assert torch.equal(out.isnan(), exact.isnan())
    assert torch.equal(out[exact.isinf()], exact[exact.isinf()].float())
    assert out[0].isnan().all() and out[1].isinf().all() and out[1:, 5].isinf().all()


@pytest.mark.parametrize("columns", [16, 64], ids=["sum_cleanup", "operand_cleanup"])
def test_tf32x3_rn_split_and_lift(columns, device):
    """``tf32x3_rn``'s pieces (kernels/mma.py), bit for bit: ``split_tf32`` rounds to TF32
    (nearest, ties away) and keeps the exact rest (``split_tf32_finite``: 0 for an infinity
    or a NaN); ``lift`` is one fma (``step * (1 + STEP_LIFT)`` rounded once); and ``mma`` at
    fp32 accuracy, with infinities and NaNs where float64 has them, by either of the step's
    clean-ups (16 columns: of the small sum; 64: of the operands)."""
    from tritonconv.kernels.mma import OPERAND_CLEANUP_WIDTH, STEP_LIFT

    assert (columns >= OPERAND_CLEANUP_WIDTH * 16) == (columns == 64)
    a, b = _operands_with_specials(16, 1e-40, 2**-11, device, columns)
    out = torch.full((16, columns), -7.0, device=device)
    big, rest, lifted = (torch.full((16, 16), -7.0, device=device) for _ in range(3))
    _mma_test_kernel[(1,)](a, b, out, big, rest, lifted, columns)
    want_big = _tf32_nearest(a.cpu())
    assert torch.equal(big.cpu().view(torch.int32), want_big.view(torch.int32))
    want_rest = a.cpu() - want_big  # (NaN for the infinity and the NaN)
    if columns == 64:
        want_rest = torch.where(want_big.isfinite(), want_rest, 0.0)
    assert torch.allclose(rest.cpu(), want_rest, rtol=0, atol=0, equal_nan=True)
    assert big[0, 4].item() == 1 + 2**-10 and rest[0, 4].item() == -(2**-11)  # tie: away
    assert big[0, 5].item() == 1 + 2**-9 and rest[0, 5].item() == -(2**-11)
    finite = a.isfinite()
    want_lifted = (a.double() * (1 + STEP_LIFT)).float()  # exact in float64, one rounding
    assert torch.equal(lifted[finite], want_lifted[finite])
    _assert_product_with_specials(out, a, b)


@triton.jit
def _bf16x6_test_kernel(a_ptr, b_ptr, out_ptr, hi_ptr, mid_ptr, lo_ptr, PIECE: tl.constexpr):
    r = tl.arange(0, 32)
    tile = r[:, None] * 32 + r[None, :]
    a = tl.load(a_ptr + tile)
    b = tl.load(b_ptr + tile)
    a_hi, a_mid, a_lo = split_bf16(a, PIECE)
    b_hi, b_mid, b_lo = split_bf16(b, PIECE)
    tl.store(out_ptr + tile, bf16x6_step(a_hi, a_mid, a_lo, b_hi, b_mid, b_lo))
    tl.store(hi_ptr + tile, a_hi.to(tl.float32))
    tl.store(mid_ptr + tile, a_mid.to(tl.float32))
    tl.store(lo_ptr + tile, a_lo.to(tl.float32))


def test_bf16x6_split_and_step(device):
    """The weight gradient's ``bf16x6`` pieces (kernels/mma.py): ``split_bf16`` gives three
    bfloat16 values summing to the fp32 input exactly, on the GPU each its rest rounded to
    nearest (Triton's interpreter converts to bfloat16 by truncation); ``bf16x6_step`` is an
    fp32-accurate product, with infinities and NaNs where float64 has them (an infinity's
    rests are NaN: its row stays infinite, not NaN)."""
    a, b = _operands_with_specials(32, 1e-30, 2**-8, device)
    out, hi, mid, lo = (torch.full((32, 32), -7.0, device=device) for _ in range(4))
    piece = direct.dot_dtype(torch.bfloat16)
    _bf16x6_test_kernel[(1,)](a, b, out, hi, mid, lo, piece)
    a, out, hi, mid, lo = (t.cpu() for t in (a, out, hi, mid, lo))
    finite = a.isfinite()
    for part in (hi, mid, lo):
        assert torch.equal(part[finite], part[finite].to(torch.bfloat16).float())
    assert torch.equal((hi + mid + lo)[finite], a[finite])
    assert hi[1, 3].item() == float("inf") and hi[0, 6].item() == float("-inf")
    assert hi[0, 7].isnan() and mid[~finite].isnan().all() and lo[~finite].isnan().all()
    if device == "cuda":
        for part, rest in ((hi, a), (mid, a - hi), (lo, a - hi - mid)):  # each rest's nearest
            assert torch.equal(part[finite], rest[finite].to(torch.bfloat16).float())
        assert hi[0, 4].item() == 1 and mid[0, 4].item() == 2**-8  # tie: to even
        assert hi[0, 5].item() == 1 + 2**-6 and mid[0, 5].item() == -(2**-8)
    _assert_product_with_specials(out, a, b)


def test_tf32_off_precision_from_the_environment(monkeypatch):
    """``TRITONCONV_TF32_OFF_PRECISION`` (read at import) chooses fp32's products with TF32
    off: ``ieee`` unless set; a value that is not a choice is refused, naming the choices."""
    monkeypatch.delenv("TRITONCONV_TF32_OFF_PRECISION", raising=False)
    assert precision._tf32_off_precision() == "tf32x3_rn"
    monkeypatch.setenv("TRITONCONV_TF32_OFF_PRECISION", "ieee")
    assert precision._tf32_off_precision() == "ieee"
    monkeypatch.setenv("TRITONCONV_TF32_OFF_PRECISION", "tf32x3_rn")
    assert precision._tf32_off_precision() == "tf32x3_rn"
    monkeypatch.setenv("TRITONCONV_TF32_OFF_PRECISION", "tf32")
    with pytest.raises(ValueError, match=r"TRITONCONV_TF32_OFF_PRECISION='tf32': expected one of"):
        precision._tf32_off_precision()


def test_tf32x3_steps_capped_in_direct_and_depthwise_kernels(device, monkeypatch):
    """The direct and depthwise tensor-core kernels reduce ``tf32x3`` products 16 deep too
    (``direct.tf32x3_block``), and compute the same convolutions."""
    from tritonconv.geometry import make_geometry
    from tritonconv.ops import depthwise

    monkeypatch.setattr(precision, "TF32_OFF_PRECISION", "ieee")
    assert direct._conv_tiles(torch.float32, 64, 64)[2] == 32  # (ieee: the wider steps)
    monkeypatch.setattr(precision, "TF32_OFF_PRECISION", "tf32x3_rn")
    assert direct._conv_tiles(torch.float32, 64, 64)[2] == direct.TF32X3_K_BLOCK
    assert direct._grad_weight_tiles(torch.float32, 64, 64)[3] == direct.TF32X3_K_BLOCK
    assert direct._conv_tiles(torch.bfloat16, 64, 64)[2] == 32
    blocks, real = [], depthwise.launch
    monkeypatch.setattr(
        depthwise,
        "launch",
        lambda *a, **meta: (
            blocks.append(meta.get("BLOCK_J", meta.get("BLOCK_K"))) or real(*a, **meta)
        ),
    )
    monkeypatch.setattr(depthwise, "_window_axes", lambda *a: None)  # the band kernels
    x = random_tensor((1, 2, 12, 20), torch.float32, device)
    w = random_tensor((2, 1, 7, 7), torch.float32, device)
    geometry = make_geometry((12, 20), (7, 7), (1, 1), (3, 3), (3, 3), (1, 1))
    y = depthwise.depthwise_forward(x, w, None, geometry)
    dy = random_tensor(y.shape, torch.float32, device)
    dw, _ = depthwise.depthwise_grad_weight(dy, x, w.shape, geometry)
    assert blocks[0] == blocks[1] == direct.TF32X3_K_BLOCK
    x64, w64 = x.double().requires_grad_(), w.double().requires_grad_()
    y64 = F.conv2d(x64, w64, padding=3, groups=2)
    (dw64,) = torch.autograd.grad(y64, (w64,), dy.double())
    assert_close(y, y64, reduction=49)
    assert_close(dw, dw64, reduction=12 * 20)
