"""Direct and depthwise convolution (algo="direct" / "depthwise") against PyTorch.

Integers must equal PyTorch's CPU convolution bitwise; floats are checked against a float64
PyTorch reference, forward and both gradients in one call (``_check``).
"""

import pytest
import torch
import torch.nn.functional as F

import tritonconv
from tritonconv import TritonConvError
from tritonconv.testing import assert_close, random_tensor

INT_DTYPES = (torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64)


def _reference_int(x, w, b, **kw):
    """PyTorch's CPU convolution in the tensors' own dtype (wrapping like it). PyTorch's CPU
    dilated kernel only has int64 among integers, so narrower dtypes go through int64 and wrap
    on the cast, which is the same arithmetic modulo 2**bits."""
    x, w = x.cpu(), w.cpu()
    b = None if b is None else b.cpu()
    if x.dtype != torch.int64 and kw.get("dilation", 1) != 1:
        wide = [None if t is None else t.long() for t in (x, w, b)]
        return F.conv2d(*wide, **kw).to(x.dtype)
    return F.conv2d(x, w, b, **kw)


def _check(x, w, b=None, *, algo, grads=True, **kw):
    """Forward, and (floats) dx, dW, db against float64 PyTorch on CPU."""
    reduction = w.shape[1] * w.shape[2] * w.shape[3]
    leaves = [t.detach().requires_grad_(grads) if t is not None else None for t in (x, w, b)]
    y = tritonconv.conv2d(*leaves, algo=algo, **kw)
    ref_leaves = [t.detach().cpu().double().requires_grad_() if t is not None else None
                  for t in (x, w, b)]  # fmt: skip
    ref = F.conv2d(*ref_leaves, **kw)
    assert y.dtype == x.dtype
    assert_close(y, ref, reduction=reduction, name="output")
    if x.dim() == 4 and x.is_contiguous(memory_format=torch.channels_last):
        assert y.is_contiguous(memory_format=torch.channels_last), "output lost channels-last"
    if not grads:
        return
    dy = random_tensor(y.shape, x.dtype, x.device)
    got = torch.autograd.grad(y, [t for t in leaves if t is not None], dy)
    want = torch.autograd.grad(ref, [t for t in ref_leaves if t is not None], dy.cpu().double())
    out_per_group = w.shape[0] // kw.get("groups", 1)
    positions = y.numel() // y.shape[-3] if y.numel() else 1
    reductions = (out_per_group * w.shape[2] * w.shape[3], positions, positions)
    for name, g, r, red in zip(("dx", "dW", "db"), got, want, reductions):
        assert_close(g, r, reduction=red, name=name)


# --------------------------------------------------------------------------------------------
# exact integers
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", INT_DTYPES)
def test_integer_conv_is_exact(dtype, device):
    kw = dict(stride=(2, 1), padding=(1, 2), dilation=(1, 2), groups=2)
    x = random_tensor((2, 6, 9, 11), dtype, device)
    w = random_tensor((4, 3, 3, 2), dtype, device)
    b = random_tensor((4,), dtype, device)
    y = tritonconv.conv2d(x, w, b, **kw)  # auto sends integers to "direct"
    assert y.dtype == dtype
    assert_close(y, _reference_int(x, w, b, **kw), name=str(dtype))


@pytest.mark.parametrize("dtype", (torch.int8, torch.int64))
def test_integer_depthwise_is_exact(dtype, device):
    x = random_tensor((2, 3, 7, 6), dtype, device).to(memory_format=torch.channels_last)
    w = random_tensor((6, 1, 3, 3), dtype, device)
    for algo in ("direct", "depthwise"):
        y = tritonconv.conv2d(x, w, padding="same", groups=3, algo=algo)
        assert y.is_contiguous(memory_format=torch.channels_last)
        assert_close(y, _reference_int(x, w, None, padding="same", groups=3), name=algo)


def test_int64_wraps_like_pytorch(device):
    """int64 accumulation overflows silently, modulo 2**64, exactly as PyTorch's CPU conv."""
    x = random_tensor((1, 2, 5, 5), torch.int64, device, low=2**40, high=2**41)
    w = random_tensor((1, 2, 3, 3), torch.int64, device, low=2**40, high=2**41)
    assert_close(tritonconv.conv2d(x, w), _reference_int(x, w, None), name="int64")


def test_seed_example_exact(device):
    """The design's reference: 3 channels, one 3x3 filter holding 0..8, 'same', in int64."""
    x = torch.arange(3 * 20 * 17, dtype=torch.int64).view(1, 3, 20, 17).to(device) % 251
    w = torch.arange(9, dtype=torch.int64).view(1, 1, 3, 3).expand(1, 3, 3, 3).to(device)
    assert_close(tritonconv.conv2d(x, w, padding="same"), _reference_int(x, w, None, padding=1))


# --------------------------------------------------------------------------------------------
# floats: geometry, layouts, odd shapes
# --------------------------------------------------------------------------------------------

GEOMETRIES = [
    # (input, weight, kwargs)
    ((2, 3, 7, 5), (5, 3, 3, 3), dict(padding=1)),
    ((1, 4, 11, 13), (6, 2, 2, 3), dict(stride=(2, 3), padding=(0, 2), groups=2)),
    ((2, 6, 9, 8), (3, 2, 3, 3), dict(dilation=(2, 1), padding="same", groups=3)),
    ((1, 1, 5, 7), (1, 1, 4, 2), dict(padding="same")),  # even kernel: asymmetric padding
    ((3, 2, 6, 6), (2, 2, 1, 1), dict(padding="valid")),
    ((1, 32, 5, 6), (32, 16, 3, 3), dict(padding=1, groups=2)),  # tensor-core (tl.dot) path
]


@pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel")
@pytest.mark.parametrize("shapes", GEOMETRIES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_direct_matches_float64(shapes, device):
    x_shape, w_shape, kw = shapes
    x = random_tensor(x_shape, torch.float32, device)
    w = random_tensor(w_shape, torch.float32, device)
    b = random_tensor((w_shape[0],), torch.float32, device)
    _check(x, w, b, algo="direct", **kw)


@pytest.mark.parametrize("dtype", (torch.bfloat16, torch.float16))
def test_direct_half_precision(dtype, device):
    x = random_tensor((2, 3, 9, 7), dtype, device)
    w = random_tensor((2, 3, 3, 3), dtype, device)
    _check(x, w, algo="direct", padding=1, stride=2)


def test_direct_layouts_and_views(device):
    w = random_tensor((4, 3, 3, 3), torch.float32, device)
    base = random_tensor((2, 6, 12, 10), torch.float32, device)
    channels_last = base[:, :3].contiguous(memory_format=torch.channels_last)
    strided = base[:, ::2, 1::2].transpose(-1, -2)  # non-contiguous view
    for x in (channels_last, strided):
        _check(x, w, algo="direct", padding=1)
    _check(base[0, :3], w, algo="direct", padding=1)  # unbatched


@pytest.mark.parametrize("algo", ("direct", "depthwise"))
def test_empty_batch(algo, device):
    x = random_tensor((0, 4, 6, 6), torch.float32, device)
    w = random_tensor((4, 1, 3, 3), torch.float32, device)
    _check(x, w, algo=algo, padding=1, groups=4)


# --------------------------------------------------------------------------------------------
# depthwise
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("multiplier", (1, 2))
@pytest.mark.parametrize("kernel", (3, 7), ids=("fma", "band"))
@pytest.mark.parametrize("channels_last", (False, True), ids=("nchw", "nhwc"))
def test_depthwise(multiplier, kernel, channels_last, device, window_off):
    C = 3
    x = random_tensor((2, C, 9, 10), torch.float32, device)
    if channels_last:
        x = x.to(memory_format=torch.channels_last)
    w = random_tensor((C * multiplier, 1, kernel, kernel), torch.float32, device)
    b = random_tensor((C * multiplier,), torch.float32, device)
    _check(x, w, b, algo="depthwise", padding=kernel // 2, groups=C)


@pytest.mark.parametrize(
    "kw",
    [dict(stride=2, padding=1), dict(dilation=2, padding=(3, 1)), dict(padding="valid")],
    ids=("stride2", "dilated", "valid"),
)
@pytest.mark.parametrize("kernel", (3, 7), ids=("fma", "band"))
def test_depthwise_geometry(kw, kernel, device):
    x = random_tensor((1, 2, 15, 16), torch.float32, device)
    w = random_tensor((4, 1, kernel, kernel), torch.float32, device)
    _check(x, w, algo="depthwise", groups=2, **kw)


def test_band_kernels_take_channels_last_only_from_15_wide(device, window_off):
    """In channels-last memory the band kernels' plane tiles read strided: the FMA kernels
    serve channels-last kernels up to 13 wide; the band ones still serve 15+ (checked too)."""
    from tritonconv.geometry import make_geometry
    from tritonconv.ops import depthwise

    x = random_tensor((1, 2, 16, 16), torch.bfloat16, device)
    cl = x.to(memory_format=torch.channels_last)
    for k, nchw, nhwc in ((7, True, False), (13, True, False), (15, True, True)):
        geometry = make_geometry((16, 16), (k, k), (1, 1), (k // 2,) * 2, (k // 2,) * 2, (1, 1))
        assert depthwise.uses_band(geometry, x) is nchw
        assert depthwise.uses_band(geometry, cl) is nhwc
        assert depthwise.uses_band(geometry, x, cl) is nhwc
    # an NCHW output of one pixel has stride(1) == 1 too; it is still not channels-last
    one_pixel = random_tensor((1, 2, 1, 1), torch.bfloat16, device)
    geometry = make_geometry((7, 7), (7, 7), (1, 1), (0, 0), (0, 0), (1, 1))
    assert depthwise.uses_band(geometry, x[..., :7, :7].contiguous(), one_pixel)
    w = random_tensor((2, 1, 15, 15), torch.bfloat16, device)
    _check(cl, w, algo="depthwise", padding=7, groups=2)


def test_depthwise_bf16_band(device, window_off):
    x = random_tensor((1, 2, 12, 12), torch.bfloat16, device)
    w = random_tensor((2, 1, 9, 9), torch.bfloat16, device)
    _check(x, w, algo="depthwise", padding=4, groups=2)


@pytest.fixture
def poisoned():
    """``torch.empty`` that fills floating-point tensors with NaN (monkeypatch it in): any
    element a kernel leaves unwritten shows."""
    empty = torch.empty

    def poisoned_empty(*args, **kwargs):
        t = empty(*args, **kwargs)
        if t.is_floating_point():
            t.fill_(float("nan"))
        return t

    return poisoned_empty


@pytest.fixture
def window_off(monkeypatch):
    """The window kernels switched off (they take kernels from 3 x 3 to 31 wide first), so
    the unrolled small kernels, the tap-block dW and the band kernels run what they still run
    in the library (strided dX phases, kernels under 9 taps or over 31 wide, geometries whose
    window columns are not shared); cached plans forgotten before and after."""
    from tritonconv.ops import depthwise as ops

    tritonconv.clear_caches()
    monkeypatch.setattr(ops, "WINDOW_MIN_TAPS", 10**9)
    yield
    tritonconv.clear_caches()


def _layout(x, layout):
    if layout == "nhwc":
        return x.to(memory_format=torch.channels_last)
    if layout == "strided":  # every other column of a wider tensor: no unit stride anywhere
        wide = torch.zeros((*x.shape[:3], 2 * x.shape[3]), dtype=x.dtype, device=x.device)
        wide[..., ::2] = x
        return wide[..., ::2]
    return x


@pytest.mark.parametrize("layout", ("nchw", "nhwc", "strided"))
@pytest.mark.parametrize("multiplier", (1, 2))
@pytest.mark.parametrize(
    "kernel, kw",
    [
        ((3, 3), dict(padding=1)),
        ((1, 3), dict(padding=(0, 1))),
        ((2, 2), dict(padding="same")),  # asymmetric padding (pad_before 0, after 1)
        ((3, 2), dict(stride=(2, 1), padding=(1, 0), dilation=(1, 2))),
        ((4, 5), dict(padding=(1, 2))),  # unrolled forward/dX, dW in tap blocks
    ],
    ids=("3x3", "1x3", "2x2same", "3x2geo", "4x5"),
)
def test_depthwise_small_kernels(layout, multiplier, kernel, kw, device, window_off):
    """The unrolled small-kernel kernels (forward, stride-1 dX, dW up to 3x3) in float64 against
    PyTorch, odd sizes spanning several tiles and a batch split unevenly."""
    C = 3
    x = _layout(random_tensor((3, C, 37, 9), torch.float64, device), layout)
    w = random_tensor((C * multiplier, 1, *kernel), torch.float64, device)
    b = random_tensor((C * multiplier,), torch.float64, device)
    _check(x, w, b, algo="depthwise", groups=C, **kw)


@pytest.mark.parametrize("layout", ("nchw", "nhwc"))
@pytest.mark.parametrize(
    "kernel, kw",
    [
        ((3, 3), dict(stride=2, padding=1)),
        ((5, 4), dict(stride=(2, 3), padding=(2, 1), dilation=(1, 2))),
        ((2, 1), dict(stride=3)),  # phases no tap reaches: written as zeros
        ((3, 3), dict(stride=2, padding=2, dilation=2)),  # dilation sharing the stride
        ((7, 7), dict(stride=2, padding=3)),  # four-tap phases, the unrolled kernel's limit
        ((3, 2), dict(stride=(7, 5), padding=(1, 1), dilation=(3, 2))),  # most phases tapless
    ],
    ids=("3x3s2", "5x4s23d2", "2x1s3", "3x3s2d2", "7x7s2", "3x2s75d32"),
)
def test_depthwise_strided_input_gradient(layout, kernel, kw, device, monkeypatch, poisoned):
    """The input gradient of a strided depthwise convolution, one stride-1 convolution per
    phase (negative dilation), in float64 against PyTorch, with the multiplier's channels
    summed and every position written (outputs start as NaN)."""
    from tritonconv.ops import depthwise as ops

    monkeypatch.setattr(ops.torch, "empty", poisoned)
    x = _layout(random_tensor((2, 3, 17, 13), torch.float64, device), layout)
    w = random_tensor((6, 1, *kernel), torch.float64, device)
    _check(x, w, random_tensor((6,), torch.float64, device), algo="depthwise", groups=3, **kw)


def test_depthwise_strided_phases_are_found_from_the_taps():
    """A stride of 32765 x 16383 (the sanitizer's > 2**31-element case) has 536 million phases
    and a 3x3 kernel reaches 9 of them: only those are worked out (visiting every phase in
    Python never finished), each as the phase-by-phase search finds it."""
    from tritonconv.geometry import make_geometry
    from tritonconv.ops import depthwise as ops

    w = torch.empty(2, 1, 3, 3)
    small = make_geometry((17, 13), (3, 2), (7, 5), (1, 1), (1, 1), (3, 2))
    phases = ops._phases(small, small.input, w[..., :2])
    for rh in range(7):
        for rw in range(5):
            h = ops._phase_axis(rh, 1, 3, 7, 3)
            c = ops._phase_axis(rw, 1, 2, 5, 2)
            assert ((rh, rw) in phases) == (h is not None and c is not None), (rh, rw)
    huge = make_geometry((32768, 32769), (3, 3), (32765, 16383), (0, 0), (0, 0), (1, 1))
    phases = ops._phases(huge, huge.input, w)
    assert sorted(phases) == [(r, c) for r in range(3) for c in range(3)]
    assert ops._phases_without_taps(huge, huge.input, phases)


def test_depthwise_strided_input_gradient_without_taps_replays_zeros(device, monkeypatch):
    """Every phase without a tap (1x1 kernel, stride 3, padding 1, a 2x2 input): dx is all
    zeros, from a zero-filled allocation that the backward's launch plan replays too (a
    zero_() after the allocation was not recorded: the second call returned garbage)."""
    empty_strided = torch.empty_strided

    def poisoned(*args, **kwargs):
        return empty_strided(*args, **kwargs).fill_(float("nan"))

    monkeypatch.setattr(torch, "empty_strided", poisoned)
    w = random_tensor((2, 1, 1, 1), torch.float64, device)
    for _ in range(3):  # record, then replay
        x = random_tensor((1, 2, 2, 2), torch.float64, device).requires_grad_()
        y = tritonconv.conv2d(x, w, stride=3, padding=1, groups=2, algo="depthwise")
        (dx,) = torch.autograd.grad(y, x, torch.ones_like(y))
        assert torch.equal(dx, torch.zeros_like(x))


@pytest.mark.parametrize("layout", ("nchw", "nhwc"))
def test_depthwise_strided_backward_replays_its_plan(layout, device, monkeypatch, plan_recordings):
    """The strided input gradient's phases write views of dx; the backward's launch plan
    re-makes those views over each call's dx, so repeated calls replay (nothing recorded after
    the first) and stay right, every element written (allocations start as NaN)."""
    from tritonconv import launch

    empty_strided = torch.empty_strided

    def poisoned(*args, **kwargs):
        t = empty_strided(*args, **kwargs)
        return t.fill_(float("nan")) if t.is_floating_point() else t

    monkeypatch.setattr(torch, "empty_strided", poisoned)
    tritonconv.clear_caches()
    w = random_tensor((6, 1, 3, 3), torch.float64, device)
    counts = []
    for _ in range(3):
        x = _layout(random_tensor((2, 3, 9, 8), torch.float64, device), layout)
        _check(x, w, algo="depthwise", stride=2, padding=1, groups=3)
        counts.append(len(plan_recordings))
    assert counts[1] == counts[2], counts  # the third call recorded nothing
    from tritonconv import caches

    plans = [p for cache in caches._ALL for p in cache.entries.values()]
    assert launch.UNPLANNABLE not in plans  # replayed whole, not run unrecorded
    tritonconv.clear_caches()


@pytest.mark.parametrize("dtype", (torch.int32, torch.int64))
def test_integer_depthwise_strided_is_exact(dtype, device):
    x = torch.randint(-50, 50, (2, 4, 11, 10), dtype=dtype, device=device)
    w = torch.randint(-5, 5, (8, 1, 3, 3), dtype=dtype, device=device)
    kw = dict(stride=2, padding=1, groups=4)
    y = tritonconv.conv2d(x, w, algo="depthwise", **kw)
    assert torch.equal(y.cpu(), _reference_int(x, w, None, **kw))
    # the input gradient (integer tensors carry no autograd): the op itself, against int64
    from tritonconv.geometry import make_geometry
    from tritonconv.ops.depthwise import depthwise_grad_input

    geometry = make_geometry((11, 10), (3, 3), (2, 2), (1, 1), (1, 1), (1, 1))
    dy = torch.randint(-5, 5, (2, 8, *geometry.output), dtype=dtype, device=device)
    dx = depthwise_grad_input(dy, w, x, geometry)
    ref = torch.nn.grad.conv2d_input(x.shape, w.double().cpu(), dy.double().cpu(), **kw)
    assert torch.equal(dx.cpu(), ref.round().to(dtype))


@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16))
@pytest.mark.parametrize("layout", ("nchw", "nhwc"))
def test_depthwise_small_low_precision(dtype, layout, device, window_off):
    x = _layout(random_tensor((2, 8, 11, 9), dtype, device), layout)
    w = random_tensor((8, 1, 3, 3), dtype, device)
    b = random_tensor((8,), dtype, device)
    _check(x, w, b, algo="depthwise", padding=1, groups=8)


@pytest.mark.parametrize("layout", ("nchw", "nhwc"))
@pytest.mark.parametrize("kernel", ((3, 3), (5, 4), (8, 3)), ids=("3x3", "5x4", "8x3"))
def test_depthwise_small_writes_everything(
    layout, kernel, device, monkeypatch, poisoned, window_off
):
    """Outputs and dW partial buffers start as NaN: every element must be written (kernels
    past 3 x 3 in tap blocks, the last ones partly outside the kernel; the bias gradient's
    partials by the first block only)."""
    from tritonconv.ops import depthwise as ops

    monkeypatch.setattr(torch, "empty", poisoned)
    monkeypatch.setattr(ops.torch, "empty", poisoned)
    x = _layout(random_tensor((3, 4, 35, 9), torch.float32, device), layout)
    w = random_tensor((8, 1, *kernel), torch.float32, device)
    b = random_tensor((8,), torch.float32, device)
    padding = (kernel[0] // 2, kernel[1] // 2)
    _check(x, w, b, algo="depthwise", padding=padding, groups=4)


# (kernel, multiplier, geometry): the sliding axis is the width for channels-last and the
# height otherwise, so the strided/dilated cases put them on either axis for both layouts
WINDOW_CASES = [
    ((7, 7), 1, dict(padding=3)),
    ((7, 5), 2, dict(padding=(2, 3))),
    ((5, 6), 1, dict(stride=(2, 1), padding=(0, 2), dilation=(1, 2))),
    ((6, 5), 2, dict(stride=(1, 2), padding=1, dilation=(2, 1))),
]


@pytest.mark.parametrize("layout", ("nchw", "nhwc"))
@pytest.mark.parametrize(
    "kernel, multiplier, kw", WINDOW_CASES, ids=("7x7", "7x5m2", "5x6s21d12", "6x5s12d21m2")
)
def test_depthwise_window(layout, kernel, multiplier, kw, device, monkeypatch, poisoned):
    """The sliding-window kernels (forward, stride-1 dX, dW; kernels of 9 taps and more) in
    float64 against PyTorch, odd sizes spanning several tiles and strips, outputs and dW
    partials starting as NaN; the calls must have gone through them."""
    from tritonconv.ops import depthwise as ops

    monkeypatch.setattr(torch, "empty", poisoned)
    monkeypatch.setattr(ops.torch, "empty", poisoned)
    used = []
    for name in ("_launch_window", "_launch_window_grad_weight"):
        real = getattr(ops, name)
        monkeypatch.setattr(ops, name, lambda *a, _f=real, _n=name: used.append(_n) or _f(*a))
    x = _layout(random_tensor((2, 3, 19, 11), torch.float64, device), layout)
    w = random_tensor((3 * multiplier, 1, *kernel), torch.float64, device)
    b = random_tensor((3 * multiplier,), torch.float64, device)
    _check(x, w, b, algo="depthwise", groups=3, **kw)
    stride_1 = kw.get("stride", 1) == 1
    assert used.count("_launch_window") == (2 if stride_1 else 1)
    assert used.count("_launch_window_grad_weight") == 1


@pytest.mark.parametrize("max_taps", (1, 14, 49))
def test_depthwise_window_grad_weight_rows(max_taps, device, monkeypatch, poisoned):
    """dW programs of one kernel row, of rows in groups with a masked tail (7 rows in
    groups of 2: 2, 2, 2, 1), and of every row: the same gradients."""
    from tritonconv.caches import clear_caches
    from tritonconv.ops import depthwise as ops

    clear_caches()  # no launch plan recorded under another grouping
    for key in ("wgrad_channels_last", "wgrad_nchw"):
        monkeypatch.setitem(ops.WINDOW_CONFIG, key, dict(ops.WINDOW_CONFIG[key], max_taps=max_taps))
    assert ops.window_rows(7, 7, max_taps) == {1: 1, 14: 2, 49: 7}[max_taps]
    monkeypatch.setattr(ops.torch, "empty", poisoned)
    try:
        for layout in ("nchw", "nhwc"):
            x = _layout(random_tensor((2, 3, 13, 10), torch.float64, device), layout)
            w = random_tensor((3, 1, 7, 7), torch.float64, device)
            b = random_tensor((3,), torch.float64, device)
            _check(x, w, b, algo="depthwise", groups=3, padding=(3, 2))
    finally:
        clear_caches()


@pytest.mark.parametrize("channels", (6, 40))
@pytest.mark.parametrize("kernel", (3, 5))
def test_depthwise_window_channel_blocks_straddling_the_channels(kernel, channels, device):
    """Channel blocks that overrun the channels, the last one partly masked: on the GPU a
    channels-last 3x3's 32-channel blocks over 40 channels (a 5x5's are halved to 8, which
    divide 40); under the interpreter (blocks of at most 4) the 6-channel case."""
    from tritonconv.ops import depthwise as ops

    assert ops._channel_block(40, 32, straddle=True) == 32
    assert ops._channel_block(40, 32) == 8
    x = _layout(random_tensor((2, channels, 9, 11), torch.float64, device), "nhwc")
    w = random_tensor((channels, 1, kernel, kernel), torch.float64, device)
    b = random_tensor((channels,), torch.float64, device)
    _check(x, w, b, algo="depthwise", groups=channels, padding=kernel // 2)


def test_depthwise_window_strided_views(device):
    """No unit stride anywhere (every other column of a wider tensor): the height slides."""
    x = _layout(random_tensor((1, 2, 9, 12), torch.float64, device), "strided")
    w = random_tensor((2, 1, 7, 7), torch.float64, device)
    _check(x, w, algo="depthwise", padding=3, groups=2)


@pytest.mark.parametrize("dtype", (torch.int8, torch.int64))
@pytest.mark.parametrize("layout", ("nchw", "nhwc"))
def test_integer_depthwise_window_is_exact(dtype, layout, device):
    x = _layout(torch.randint(-50, 50, (2, 4, 13, 12), dtype=dtype, device=device), layout)
    w = torch.randint(-5, 5, (4, 1, 7, 7), dtype=dtype, device=device)
    b = torch.randint(-5, 5, (4,), dtype=dtype, device=device)
    y = tritonconv.conv2d(x, w, b, padding=3, groups=4, algo="depthwise")
    assert torch.equal(y.cpu(), _reference_int(x, w, b, padding=3, groups=4))


@pytest.mark.parametrize("kernel", (3, 7))
@pytest.mark.parametrize("layout", ("nchw", "nhwc"))
def test_depthwise_window_int64_indexing(layout, kernel, device, monkeypatch):
    """Force the window kernels' 64-bit index arithmetic (from 2**31 elements on); a dilated
    3x3's dW programs take its three kernel rows, each a row step apart."""
    from tritonconv.ops import common

    monkeypatch.setattr(common, "INDEX32_LIMIT", 16)
    x = _layout(random_tensor((2, 2, 10, 9), torch.float64, device), layout)
    w = random_tensor((2, 1, kernel, kernel), torch.float64, device)
    dilation = 2 if kernel == 3 else 1
    _check(x, w, random_tensor((2,), torch.float64, device), algo="depthwise",
           padding=kernel // 2 * dilation, dilation=dilation, groups=2)  # fmt: skip


@pytest.mark.parametrize("layout", ("nchw", "nhwc"))
def test_depthwise_small_kernel_int64_indexing(layout, device, monkeypatch):
    """The same for a kernel under the window kernels' 9 taps (the FMA dW kernel, one
    accumulator a tap): its tap steps ``kh * dil_h * x_sh`` are 64-bit too."""
    from tritonconv.ops import common

    monkeypatch.setattr(common, "INDEX32_LIMIT", 16)
    x = _layout(random_tensor((2, 2, 10, 9), torch.float64, device), layout)
    w = random_tensor((2, 1, 3, 2), torch.float64, device)
    _check(x, w, random_tensor((2,), torch.float64, device), algo="depthwise",
           padding=(2, 1), dilation=(2, 3), groups=2)  # fmt: skip


def test_auto_picks_depthwise_and_direct():
    x = random_tensor((1, 4, 6, 6), torch.float32)
    w = random_tensor((4, 1, 3, 3), torch.float32)
    args = tritonconv.geometry.check_conv(x, w, None, 1, 1, 1, 4)
    assert tritonconv.functional._choose_algo("auto", x, args) == "depthwise"
    xi = x.to(torch.int32)
    args = tritonconv.geometry.check_conv(xi, w.to(torch.int32), None, 1, 1, 1, 1 * 4)
    assert tritonconv.functional._choose_algo("auto", xi, args) == "direct"


# --------------------------------------------------------------------------------------------
# gradients in float64, determinism
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "algo, w_shape, kw",
    [
        ("direct", (2, 2, 3, 2), dict(stride=(2, 1), padding=(1, 0), dilation=(1, 2))),
        ("depthwise", (4, 1, 3, 3), dict(stride=(1, 2), padding=1, groups=2)),
        ("depthwise", (2, 1, 3, 3), dict(padding="same", dilation=2, groups=2)),
    ],
    ids=("direct", "depthwise-strided", "depthwise-dilated"),
)
def test_gradcheck(algo, w_shape, kw, device):
    x = random_tensor((1, 2, 5, 6), torch.float64, device).requires_grad_()
    w = random_tensor(w_shape, torch.float64, device).requires_grad_()
    b = random_tensor((w_shape[0],), torch.float64, device).requires_grad_()
    assert torch.autograd.gradcheck(
        lambda x, w, b: tritonconv.conv2d(x, w, b, algo=algo, **kw), (x, w, b), fast_mode=True
    )


@pytest.mark.parametrize(
    "algo, w_shape, groups",
    [("direct", (4, 3, 3, 3), 1), ("depthwise", (6, 1, 3, 3), 3), ("depthwise", (3, 1, 7, 7), 3)],
    ids=("direct", "depthwise-fma", "depthwise-band"),
)
def test_deterministic(algo, w_shape, groups, device):
    x = random_tensor((3, 3, 10, 9), torch.float32, device).requires_grad_()
    w = random_tensor(w_shape, torch.float32, device).requires_grad_()

    def run():
        y = tritonconv.conv2d(x, w, padding=w_shape[-1] // 2, groups=groups, algo=algo)
        return (y, *torch.autograd.grad(y, (x, w), torch.ones_like(y)))

    for a, b in zip(run(), run()):
        assert torch.equal(a, b)


# --------------------------------------------------------------------------------------------
# errors
# --------------------------------------------------------------------------------------------


def test_errors(device):
    x = random_tensor((1, 2, 5, 5), torch.float32, device)
    w = random_tensor((2, 1, 3, 3), torch.float32, device)
    xi, wi = x.to(torch.int32), w.to(torch.int32)
    with pytest.raises(TritonConvError, match=r"Input type \(int32\) and weight type \(float32\)"):
        tritonconv.conv2d(xi, w, groups=2, algo="direct")
    # Integer tensors cannot require grad in PyTorch; the reachable case is an integer input
    # with a float weight that does, which the dtype rule rejects before any kernel runs.
    with pytest.raises(TritonConvError, match="should be the same"):
        tritonconv.conv2d(xi, w.requires_grad_(), groups=2)
    with pytest.raises(TritonConvError, match="bias type"):
        tritonconv.conv2d(xi, wi, w.detach()[:, 0, 0, 0], groups=2)
    with pytest.raises(TritonConvError, match="dtype bool"):
        tritonconv.conv2d(x > 0, w > 0, groups=2, algo="direct")
    with pytest.raises(TritonConvError, match="dtype complex64"):
        tritonconv.conv2d(x.to(torch.complex64), w.to(torch.complex64), groups=2)
    with pytest.raises(TritonConvError, match="algo='depthwise' needs one channel per group"):
        tritonconv.conv2d(x, w[:, :1].expand(2, 2, 3, 3), algo="depthwise")
    with pytest.raises(TritonConvError, match="algo='im2col_gemm' has no kernel for dtype int32"):
        tritonconv.conv2d(xi, wi, groups=2, algo="im2col_gemm")
