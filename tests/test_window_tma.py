"""Stride-1 windows as TMA GEMMs over 4-D boxes (``window_tma_kernel``, ``algo="implicit_gemm"``).

16-bit stride-1 one-group convolutions of more than one tap over dense channels-last tensors run
forward and input gradient with every tile moved by TMA and the padding from the hardware's zero
fill. These tests check which calls take it (and which must not), its results against float64
in one, two and three spatial dimensions with dilation, asymmetric padding, bias and
rectangles overhanging odd planes, the transposed convolution that reuses it, a weight that is
not channels-last, launch-plan replays (including on an unaligned tensor), and the tile rule on
the GPU's shapes.
"""

import pytest
import torch
import torch.nn.functional as F

import tritonconv
from tritonconv.geometry import make_geometry
from tritonconv.ops import implicit_gemm
from tritonconv.testing import assert_close, poison_, random_tensor, rows_layout, tolerance

WINDOW = "window_tma_kernel"
CONV = {1: (tritonconv.conv1d, F.conv1d), 2: (tritonconv.conv2d, F.conv2d),
        3: (tritonconv.conv3d, F.conv3d)}  # fmt: skip
MAX_WASTE = implicit_gemm.WINDOW_TMA_MAX_WASTE  # (the rule's, before the fixture below)


@pytest.fixture(autouse=True)
def any_overhang(monkeypatch):
    """No overhang limit: the GPU's rectangles (128 positions and more) run on these small odd
    planes too, so the hardware's clipping is what the tests check there."""
    monkeypatch.setattr(implicit_gemm, "WINDOW_TMA_MAX_WASTE", float("inf"))


def _grads(ours, ref, x, w, b, kw):
    """Output, dx, dW, db of ``ours`` (implicit GEMM) and of float64 ``ref``."""
    leaves = [t.detach().requires_grad_() if t is not None else None for t in (x, w, b)]
    refs = [t.detach().double().requires_grad_() if t is not None else None for t in (x, w, b)]
    y = ours(*leaves, algo="implicit_gemm", **kw)
    want = ref(*refs, **kw)
    dy = rows_layout(random_tensor(y.shape, x.dtype, x.device))
    got = torch.autograd.grad(y, [t for t in leaves if t is not None], dy)
    wanted = torch.autograd.grad(want, [t for t in refs if t is not None], dy.double())
    return (y, *got), (want, *wanted)


# (N, C_in, spatial, C_out, kernel, padding, dilation, bias): source channels a multiple of 32
# both ways for the input gradient to take the kernel too (C_out too), else the forward only
CASES = [
    (2, 32, (9, 11), 32, (3, 3), 1, 1, True),  # rectangles overhanging both edges
    (1, 64, (6, 13), 40, (3, 3), 2, 2, False),  # dilated; dx: 40 source channels, not taken
    (2, 32, (12,), 64, (5,), 1, 1, True),  # 1-D, padding smaller than the window's reach
    (1, 32, (3, 5, 6), 32, (3, 3, 1), 1, 1, True),  # 3-D, depth taps (at most 9 taps)
    (1, 32, (1, 6, 8), 32, (3, 1, 3), 1, 1, False),  # one deep: depth taps read the padding
    (2, 64, (10, 9), 32, (2, 3), "same", 1, False),  # even kernel: padding after > before
    (1, 32, (7, 8), 32, (3, 1), (0, 2), (1, 3), True),  # unpadded height, a 1-wide tap
]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("case", CASES, ids=str)
def test_windows_match_float64(case, dtype, device, kernels):
    N, C, spatial, K, kernel, padding, dilation, bias = case
    for _ in range(3):  # outputs come from these blocks: an unwritten element shows as NaN
        poison_(torch.empty(1 << 16, device=device))
    x = rows_layout(random_tensor((N, C, *spatial), dtype, device))
    w = rows_layout(random_tensor((K, C, *kernel), dtype, device))
    b = random_tensor((K,), dtype, device) if bias else None
    ours, ref = CONV[len(spatial)]
    got, want = _grads(ours, ref, x, w, b, {"padding": padding, "dilation": dilation})
    assert kernels.count("window_tma_kernel") == (2 if K % 32 == 0 else 1), kernels
    reduction = max(C, K) * w[0, 0].numel()
    for name, g, r in zip(("output", "dx", "dW", "db"), got, want):
        assert not g.isnan().any(), name
        assert_close(g, r, reduction=max(reduction, x.numel() // C), name=name)
    if x.dim() > 3:  # (1-D outputs are contiguous, as PyTorch's)
        assert got[0].stride() == rows_layout(got[0]).stride(), "output left channels-last"


@pytest.mark.parametrize("case", [CASES[0], CASES[3], CASES[4], CASES[5]], ids=str)
def test_tf32_forward_and_input_gradient(case, device, kernels, monkeypatch):
    """fp32 with TF32 allowed (PyTorch's default for convolutions): forward and input gradient
    take the kernel with TF32 products (the input gradient reading a ``[C_in, taps, C_out]``
    weight copy: TF32 tiles must be K-major), within TF32's rounding of float64; recorded,
    then replayed."""
    N, C, spatial, K, kernel, padding, dilation, bias = case
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", True)
    poison_(torch.empty(1 << 16, device=device))
    x = rows_layout(random_tensor((N, C, *spatial), torch.float32, device))
    w = rows_layout(random_tensor((K, C, *kernel), torch.float32, device))
    b = random_tensor((K,), torch.float32, device) if bias else None
    ours, ref = CONV[len(spatial)]
    for call in ("recorded", "replayed"):
        got, want = _grads(ours, ref, x, w, b, {"padding": padding, "dilation": dilation})
        if call == "recorded":
            assert kernels.count("window_tma_kernel") == 2, kernels
        reduction = max(max(C, K) * w[0, 0].numel(), x.numel() // C)
        for name, g, r in zip(("output", "dx", "dW", "db"), got, want):
            atol, rtol = tolerance(torch.float16, reduction)  # (TF32: 10 mantissa bits)
            err = (g.double() - r).abs() - (atol + rtol * r.abs())
            assert not g.isnan().any() and err.max() <= 0, f"{call} {name}"


@pytest.mark.parametrize(
    "case",
    [
        ((2, 32, 9, 11), 64, 2),
        ((1, 64, 3, 7, 8), 32, (1, 2, 3)),
        ((2, 32, 13), 64, 3),
        ((2, 32, 8, 16), 64, 2),
    ],  # (the last: 8-wide rows, the weight gradient's flat dy)
    ids=str,
)
def test_strided_pointwise_reads_a_strided_view(case, device, kernels, monkeypatch):
    """An unpadded strided 1x1 layer (ResNet's downsampling shortcut) runs its forward on the
    window kernel from a descriptor of ``x[..., ::s, ::s]`` and its weight gradient on the
    row-box kernel from the same view; the input gradient (a scatter) keeps the pointer
    kernel. Odd sizes: the view's last position is the input's last but one."""
    shape, K, stride = case
    monkeypatch.setattr(implicit_gemm, "WGRAD_TMA_MIN_WIDTH", 0)  # (the GPU's: these planes)
    x = rows_layout(random_tensor(shape, torch.bfloat16, device))
    w = rows_layout(random_tensor((K, shape[1], *[1] * (len(shape) - 2)), torch.bfloat16, device))
    b = random_tensor((K,), torch.bfloat16, device)
    ours, ref = CONV[len(shape) - 2]
    got, want = _grads(ours, ref, x, w, b, {"stride": stride})
    assert kernels.count("window_tma_kernel") == 1 and "wgrad_tma_kernel" in kernels, kernels
    for name, g, r in zip(("output", "dx", "dW", "db"), got, want):
        assert_close(g, r, reduction=max(shape[1], K, x.numel() // shape[1]), name=name)


@pytest.mark.parametrize(
    "case",
    [
        # r2plus1d's temporal 3x1x1 (small): its input gradient into 144 channels (3-D boxes)
        ((1, 144, (3, 4, 5)), (32, 144, 3, 1, 1), (1, 0, 0), ["conv_igemm_kernel", WINDOW]),
        ((1, 144, (3, 4, 5)), (32, 144, 1, 1, 3), (0, 0, 1), ["conv_igemm_kernel", WINDOW]),
        # a 1-D k3 layer channels-last from 144 channels (4-D boxes): its input gradient; its
        # forward, from 144 source channels, keeps the pointer kernel
        ((2, 144, (9,)), (64, 144, 3), 1, ["conv_igemm_kernel", WINDOW]),
        # into 144: the forward (not measured there) keeps the pointer kernel too
        ((2, 64, (9,)), (144, 64, 3), 1, ["conv_igemm_kernel", "conv_igemm_kernel"]),
    ],
    ids=str,
)
def test_three_taps_into_a_padded_column_tile(case, device, kernels):
    """The input gradients of windows of at most 3 taps into a width that is not a multiple
    of 64 take the window kernel's 64-channel tiles (``WINDOW_TMA_PADDED_TILE_MAX_TAPS``),
    the last tile partly empty: r2plus1d's 3x1x1 layer into 144 channels (3-D boxes), a k3
    conv1d's (4-D boxes); forwards into such widths keep the pointer kernel. Outputs land in
    poisoned memory: an element no tile writes shows as NaN."""
    (n, c, spatial), weight, padding, expected = case
    for _ in range(3):
        poison_(torch.empty(1 << 16, device=device))
    x = rows_layout(random_tensor((n, c, *spatial), torch.bfloat16, device))
    w = rows_layout(random_tensor(weight, torch.bfloat16, device))
    b = random_tensor((weight[0],), torch.bfloat16, device)
    ours, ref = CONV[len(spatial)]
    got, want = _grads(ours, ref, x, w, b, {"padding": padding})
    assert kernels[:2] == expected, kernels
    for name, g, r in zip(("output", "dx", "dW", "db"), got, want):
        assert not g.isnan().any(), name
        assert_close(g, r, reduction=max(c, weight[0]) * 3, name=name)


def test_transposed_convolution_reuses_it(device, kernels):
    """A stride-1 transposed convolution is the input gradient of a convolution: it runs the
    window kernel with its bias in the epilogue, forward and (as a forward convolution) its
    input gradient."""
    x = rows_layout(random_tensor((2, 64, 7, 9), torch.bfloat16, device))
    w = rows_layout(random_tensor((64, 32, 3, 3), torch.bfloat16, device))
    b = random_tensor((32,), torch.bfloat16, device)
    got, want = _grads(tritonconv.conv_transpose2d, F.conv_transpose2d, x, w, b, {"padding": 1})
    assert kernels.count("window_tma_kernel") == 2, kernels
    for name, g, r in zip(("output", "dx", "dW", "db"), got, want):
        assert_close(g, r, reduction=64 * 9 * 2 * 7 * 9, name=name)


def test_transposed_with_output_padding(device, kernels):
    """A stride-1 dilated transposed convolution with ``output_padding`` (its output one wider
    than the window reaches) takes the kernel; the extra row and column come from the zero
    fill alone (and the bias)."""
    x = rows_layout(random_tensor((1, 32, 6, 7), torch.float16, device))
    w = rows_layout(random_tensor((32, 32, 3, 3), torch.float16, device))
    b = random_tensor((32,), torch.float16, device)
    kw = {"padding": 1, "output_padding": 1, "dilation": 2}
    with torch.no_grad():
        y = tritonconv.conv_transpose2d(x, w, b, algo="implicit_gemm", **kw)
    assert kernels == ["window_tma_kernel"], kernels
    want = F.conv_transpose2d(x.double(), w.double(), b.double(), **kw)
    assert_close(y, want, reduction=288, name="output")


@pytest.mark.parametrize("per_sm", [1, 2])
@pytest.mark.parametrize("transposed", [False, True])
def test_gpu_tiles_under_the_interpreter(transposed, per_sm, device, kernels, monkeypatch):
    """One of the GPU's configurations (128-position rectangles by 64 channels, 64-channel
    reduction steps, pipelined), with one and two persistent programs a multiprocessor: the
    CPU tests otherwise run the interpreter's small tiles."""
    tile = implicit_gemm.WindowTmaConfig(2, 64, 64, 64, 4, 3, per_sm)
    monkeypatch.setattr(implicit_gemm, "window_tma_config", lambda *args: tile)
    grids, programs = [], implicit_gemm._persistent_programs
    monkeypatch.setattr(
        implicit_gemm, "_persistent_programs", lambda *a: grids.append(programs(*a)) or grids[-1]
    )
    x = rows_layout(random_tensor((1, 128, 3, 70), torch.bfloat16, device))
    w = rows_layout(random_tensor((128, 128, 3, 3), torch.bfloat16, device))
    conv, ref = (tritonconv.conv_transpose2d, F.conv_transpose2d) if transposed else CONV[2]
    with torch.no_grad():
        y = conv(x, w, padding=1, algo="implicit_gemm")
    assert kernels == ["window_tma_kernel"], kernels
    assert_close(y, ref(x.double(), w.double(), padding=1), reduction=128 * 9, name="output")
    # 2 x 64 rectangles over 3 x 70 positions: 2 x 2 tiles by 2 channel tiles, walked by
    # per_sm programs a multiprocessor (the interpreter counts INTERPRETER_TMA_PROGRAMS)
    sms = implicit_gemm.INTERPRETER_TMA_PROGRAMS
    if not tritonconv.INTERPRETER:
        sms = implicit_gemm.multiprocessor_count(x.device)
    assert grids == [min(8, per_sm * sms)]


def test_weight_that_is_not_channels_last(device, kernels):
    """A contiguous (NCHW) weight is read from a channels-last copy; the result is right."""
    x = rows_layout(random_tensor((2, 32, 8, 8), torch.float16, device))
    w = random_tensor((32, 32, 3, 3), torch.float16, device)
    for _ in range(2):  # recorded, then replayed
        y = tritonconv.conv2d(x, w, padding=1, algo="implicit_gemm")
        assert_close(y, F.conv2d(x.double(), w.double(), padding=1), reduction=288, name="y")
    assert kernels.count("window_tma_kernel") == 1, kernels


@pytest.mark.parametrize(
    "layout", ["nchw", "stride2", "groups", "fp32", "channels48", "pointwise", "unaligned"]
)
def test_other_layers_keep_the_pointer_kernels(layout, device, kernels):
    """What TMA cannot read or this kernel does not compute runs the other kernels, and is
    right: NCHW input and weight (an NCHW output, which the pointer kernel writes directly),
    stride 2, groups, fp32, source channels not a multiple of 32, a 1x1 window (the pointwise
    TMA GEMM's), and an input 2 bytes off a 16-byte boundary."""
    dtype = torch.float32 if layout == "fp32" else torch.bfloat16
    C = 48 if layout == "channels48" else 64
    x = random_tensor((2, C, 6, 9), dtype, device)
    if layout != "nchw":
        x = rows_layout(x)
    if layout == "unaligned":
        buffer = torch.empty(x.numel() + 8, dtype=dtype, device=device)
        u = buffer[1 : 1 + x.numel()].view(2, 6, 9, C).permute(0, 3, 1, 2)
        u.copy_(x)
        x = u
    groups = 2 if layout == "groups" else 1
    k = 1 if layout == "pointwise" else 3
    w = random_tensor((64, C // groups, k, k), dtype, device)
    if layout != "nchw":
        w = rows_layout(w)
    kw = {"stride": 2 if layout == "stride2" else 1, "padding": k // 2, "groups": groups}
    with torch.no_grad():
        y = tritonconv.conv2d(x, w, algo="implicit_gemm", **kw)
    assert "window_tma_kernel" not in kernels, kernels
    assert_close(y, F.conv2d(x.double(), w.double(), **kw), reduction=C * k * k, name="output")
    if layout == "nchw":
        assert y.is_contiguous()


def test_a_plan_recorded_aligned_replays_right_on_an_unaligned_input(device, kernels):
    """A launch plan recorded on aligned tensors is not replayed with TMA descriptors on a
    tensor of the same signature 2 bytes off a 16-byte boundary: the result is right."""
    w = rows_layout(random_tensor((32, 32, 3, 3), torch.bfloat16, device))
    x = rows_layout(random_tensor((2, 32, 6, 8), torch.bfloat16, device))
    buffer = torch.empty(x.numel() + 8, dtype=x.dtype, device=device)
    u = buffer[1 : 1 + x.numel()].view(2, 6, 8, 32).permute(0, 3, 1, 2)
    u.copy_(random_tensor(x.shape, x.dtype, device))
    with torch.no_grad():
        for t in (x, x, u, u):
            y = tritonconv.conv2d(t, w, padding=1, algo="implicit_gemm")
            assert_close(y, F.conv2d(t.double(), w.double(), padding=1), reduction=288, name="y")
            if t is x:
                assert kernels == ["window_tma_kernel"], kernels  # (recorded, then replayed)


def _rule(shape, c_out, kernel=3, pad=1, dilation=1, transposed=False):
    """``window_tma_config``'s tiles for a bf16 layer, as on a 132-multiprocessor GPU with
    TMA (the interpreter's small tiles and the device check set aside)."""
    n, c, *spatial = shape
    rank = len(spatial)
    g = make_geometry(tuple(spatial), (kernel,) * rank, (1,) * rank, (pad,) * rank,
                      (pad,) * rank, (dilation,) * rank)  # fmt: skip
    sides = (c_out, c) if transposed else (c, c_out)
    return implicit_gemm.window_tma_config(torch.bfloat16, n, *sides, g, 1, transposed, "gpu")


@pytest.fixture
def gpu_rule(tma_gpu, monkeypatch):
    """The GPU's rule, its own limit restored (the autouse fixture above lifts it)."""
    monkeypatch.setattr(implicit_gemm, "WINDOW_TMA_MAX_WASTE", MAX_WASTE)


def test_tile_rule_on_the_measured_layers(gpu_rule):
    """The rule's picks on session 36's probe layers (benchmarks/probe_tma_window.py); the
    4-warp 64-channel tiles two programs a multiprocessor (session 39)."""
    cfg = implicit_gemm.WindowTmaConfig
    assert _rule((128, 64, 56, 56), 64) == cfg(2, 64, 64, 64, 4, 4, 2)
    assert _rule((128, 128, 28, 28), 128) == cfg(8, 32, 128, 64, 8, 3)
    assert _rule((32, 256, 14, 14), 256) == cfg(8, 16, 128, 64, 8, 4)  # under half a wave
    assert _rule((128, 256, 14, 14), 256) == cfg(16, 16, 128, 64, 8, 3)
    assert _rule((8, 1024, 16, 16), 1024) == cfg(8, 16, 128, 64, 8, 4)
    assert _rule((8, 64, 256, 256), 64) == cfg(1, 128, 64, 64, 4, 4, 2)
    assert _rule((8, 256, 64, 64), 128) == cfg(4, 64, 128, 64, 8, 3)
    assert _rule((8, 128, 128, 128), 64, transposed=True) == cfg(2, 128, 128, 64, 8, 3)
    assert _rule((8, 96, 4096), 64) == cfg(1, 128, 64, 32, 4, 4, 2)  # 1-D, 96 = 3 x 32
    assert _rule((128, 512, 7, 7), 512) is None  # 7 x 7: overhang 2.6x
    assert _rule((8, 48, 32, 32), 64) is None  # 48 source channels
    assert _rule((8, 64, 32, 32), 64, kernel=1, pad=0) is None  # the pointwise GEMM's
    assert _rule((8, 64, 56, 56), 144) is None  # the second accumulator's width
    # 3 taps: the input gradient into 144 in 64-column tiles; not the forward (not measured)
    assert _rule((8, 144, 4096), 64, transposed=True) == cfg(1, 128, 64, 64, 4, 4, 2)
    assert _rule((8, 64, 4096), 144) is None
    assert _rule((8, 144, 4096), 64, kernel=4, pad=2, transposed=True) is None  # 4 taps
    assert _rule((8, 64, 56, 56), 144, kernel=1, pad=0) is None  # (1x1: pointwise_tma's)
    # a strided 1x1 layer (one tap over x's strided view) into 144: not measured, not taken;
    # TF32's path neither
    strided = make_geometry((56, 56), (1, 1), (2, 2), (0, 0), (0, 0), (1, 1))
    rule = implicit_gemm.window_tma_config
    assert rule(torch.bfloat16, 8, 64, 144, strided, 1, False, "gpu") is None  # (a forward)
    assert rule(torch.bfloat16, 8, 64, 128, strided, 1, False, "gpu") is not None
    one_d = make_geometry((4096,), (3,), (1,), (1,), (1,), (1,))
    with torch.backends.cudnn.flags(allow_tf32=True):
        assert rule(torch.float32, 8, 64, 144, one_d, 1, True, "gpu") is None
        assert rule(torch.float32, 8, 64, 128, one_d, 1, True, "gpu") is not None
    assert _rule((8, 64, 56, 56), 192) == cfg(2, 64, 64, 64, 4, 4, 2)  # three 64-column tiles
    # more than 9 taps keep the pointer kernel (3x3x3: measured faster there, session 40)
    assert _rule((8, 64, 16, 56, 56), 64) is None
    assert _rule((8, 64, 16, 56, 56), 64, transposed=True) is None
    assert _rule((8, 64, 56, 56), 64, kernel=5, pad=2) is None


def test_tf32_tile_rule(gpu_rule, monkeypatch):
    """fp32 with TF32 allowed: 32-channel steps in 128-position rectangles; 128-channel tiles
    (4 stages) only under two waves (session 37's measurement), 64-channel tiles two programs
    a multiprocessor of 3 stages (session 39's); TF32 off never."""
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", True)
    cfg = implicit_gemm.WindowTmaConfig

    def rule(shape, c_out):
        n, c, *spatial = shape
        g = make_geometry(tuple(spatial), (3, 3), (1, 1), (1, 1), (1, 1), (1, 1))
        return implicit_gemm.window_tma_config(torch.float32, n, c, c_out, g, 1, False, "gpu")

    assert rule((128, 64, 56, 56), 64) == cfg(2, 64, 64, 32, 4, 3, 2)
    assert rule((32, 256, 14, 14), 256) == cfg(8, 16, 128, 32, 8, 4)  # 128 tiles
    assert rule((8, 1024, 16, 16), 1024) == cfg(8, 16, 128, 32, 8, 4)
    assert rule((128, 256, 14, 14), 256) is None  # 512 tiles: the pointer kernel's
    assert rule((128, 128, 28, 28), 128) is None
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    assert rule((128, 64, 56, 56), 64) is None


def test_compiled_dynamic_shapes_add_no_guards_from_the_rule(device):
    """Under ``torch.compile(dynamic=True)`` the TMA rules are not asked (the path steps aside
    for a tracer): their size tests on symbolic sizes added guards that failed on new
    shapes, a recompile each (3 frames for these 5 shapes before; the session's review)."""
    from torch._dynamo.testing import CompileCounterWithBackend

    def f(x, w):
        return tritonconv.conv2d(x, w, padding=1, algo="implicit_gemm")

    torch._dynamo.reset()
    counter = CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(f, backend=counter, fullgraph=True, dynamic=True)
    w = rows_layout(random_tensor((32, 32, 3, 3), torch.bfloat16, device))
    for n, h, width in [(2, 7, 9), (3, 8, 10), (2, 11, 13), (2, 9, 30), (2, 16, 16)]:
        x = rows_layout(random_tensor((n, 32, h, width), torch.bfloat16, device))
        y = compiled(x, w)
        assert_close(y, F.conv2d(x.double(), w.double(), padding=1), reduction=288, name="y")
    assert counter.frame_count == 1
