"""The weight gradient of stride-1 windows from TMA row boxes (``wgrad_tma_kernel``).

16-bit stride-1 one-group convolutions of more than one tap reduce ``dy^T . x`` over one-row
boxes of dy and of x at each tap's shift, the padding the hardware's zero fill, in fixed
splits summed in split order. These tests check dW against float64 in one, two and three
spatial dimensions with dilation, 'same' padding, channel tiles overhanging both channel
counts, one split (written straight into dW) and two (partials summed), both weight layouts,
NCHW inputs (read from a channels-last copy), bitwise reproducibility, which calls take it
and which must not, and the tile and split rules on the GPU's shapes.
"""

import math

import pytest
import torch
import torch.nn.functional as F

import tritonconv
from tritonconv.geometry import make_geometry
from tritonconv.ops import implicit_gemm
from tritonconv.testing import assert_close, poison_, random_tensor, rows_layout

CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}
KERNEL = "wgrad_tma_kernel"
MIN_WIDTH = implicit_gemm.WGRAD_TMA_MIN_WIDTH  # (the rule's, before the fixture below)


@pytest.fixture(autouse=True)
def any_width(monkeypatch):
    """No width limit: the GPU's tiles run on these small planes too (rows of 32 and 64
    positions overhanging them), so the hardware's zero fill and clipping are what the tests
    check there."""
    monkeypatch.setattr(implicit_gemm, "WGRAD_TMA_MIN_WIDTH", 0)


def _weight_gradient(x, w, dy, **kw):
    """dW of tritonconv's implicit GEMM and of float64."""
    conv = {1: tritonconv.conv1d, 2: tritonconv.conv2d, 3: tritonconv.conv3d}[x.dim() - 2]
    leaf = w.detach().requires_grad_()
    y = conv(x, leaf, algo="implicit_gemm", **kw)
    (got,) = torch.autograd.grad(y, leaf, dy)
    ref = w.detach().double().requires_grad_()
    (want,) = torch.autograd.grad(CONV[x.dim() - 2](x.double(), ref, **kw), ref, dy.double())
    return got, want


# (N, C_in, spatial, C_out, kernel, padding, dilation)
CASES = [
    (2, 32, (9, 11), 32, (3, 3), 1, 1),  # row boxes overhanging the width
    (1, 40, (6, 13), 56, (3, 3), 2, 2),  # dilated; 40 and 56 channels: tiles overhang both
    (1, 40, (6, 13), 72, (1, 3), 2, 2),  # 72 channels: a second tile, partly empty
    (2, 32, (21,), 48, (5,), 1, 1),  # 1-D (outputs contiguous: read from a copy)
    (1, 32, (3, 5, 6), 32, (3, 3, 1), 1, 1),  # 3-D, depth taps (3x3x3's 27 are the pointer's)
    (2, 64, (10, 9), 32, (2, 3), "same", 1),  # even kernel: padding after > before
    (1, 32, (7, 8), 32, (3, 1), (0, 2), (1, 3)),  # unpadded height, a 1-wide tap
    (3, 40, (5, 7), 64, (1, 1), 0, 1),  # 1x1: the positions as one flat row
    (2, 32, (2, 3, 5), 32, (1, 1, 1), 0, 1),  # 1x1x1
]


@pytest.mark.parametrize("mask_x", [False, True], ids=["", "mask_x"])
@pytest.mark.parametrize("splits", [1, 2])
@pytest.mark.parametrize("case", CASES, ids=str)
def test_weight_gradient_from_row_boxes(case, splits, mask_x, device, launches, monkeypatch):
    N, C, spatial, K, kernel, padding, dilation = case
    monkeypatch.setattr(implicit_gemm, "WGRAD_TMA_MASK_X", mask_x)
    monkeypatch.setattr(implicit_gemm, "wgrad_tma_splits", lambda *args: splits)
    sums = []
    summed = implicit_gemm.sum_partials
    monkeypatch.setattr(
        implicit_gemm, "sum_partials", lambda p, out, **k: sums.append(summed(p, out, **k))
    )
    for _ in range(3):  # dW comes from these blocks: an unwritten element shows as NaN
        poison_(torch.empty(1 << 16, device=device))
    x = rows_layout(random_tensor((N, C, *spatial), torch.bfloat16, device))
    w = rows_layout(random_tensor((K, C, *kernel), torch.bfloat16, device))
    out = CONV[len(spatial)](x.double(), w.double(), padding=padding, dilation=dilation)
    dy = rows_layout(random_tensor(out.shape, torch.bfloat16, device))
    overhangs, real = [], implicit_gemm._wgrad_tma_overhangs_x
    monkeypatch.setattr(
        implicit_gemm,
        "_wgrad_tma_overhangs_x",
        lambda *a: overhangs.append(real(*a)) or overhangs[-1],
    )
    got, want = _weight_gradient(x, w, dy, padding=padding, dilation=dilation)
    (meta,) = [meta for name, meta in launches if name == KERNEL]
    # masked where the boxes overhang dy onto x's values (whatever the tiles: the 11-wide
    # rows of the first case in 8 to 64-wide boxes; never a 1x1 layer, whose positions past
    # dy are x's own zero fill)
    assert meta["MASK_X"] == (mask_x and (overhangs or [False])[0]), (meta, overhangs)
    if case == CASES[0]:
        assert meta["MASK_X"] == mask_x
    if math.prod(kernel) == 1:
        assert not meta["MASK_X"]
    assert len(sums) == (splits > 1), "one split is written straight into dW"
    assert not got.isnan().any()
    assert_close(got, want, reduction=out.numel() // K, name="dW")
    assert got.stride() == w.stride(), "dW not in the weight's layout"


@pytest.mark.parametrize(
    "case",
    [
        # 16 wide: the GPU's narrowest box (the interpreter's widest); rows a multiple of
        # the step's (two here, four on the GPU where the height allows)
        (2, 32, (6, 16), 40, (3, 3), 1, 1),
        (1, 32, (2, 4, 16), 32, (3, 1, 3), 1, 1),  # 3-D: a flat box never crosses a depth slice
        (2, 48, (4, 16), 32, (3, 3), 2, 2),  # dilated
    ],
    ids=str,
)
def test_rows_exactly_a_box_wide_read_dy_flat(case, device, monkeypatch, launches):
    """Where a step's rows are exactly a box wide and the height a multiple of them, dy is
    read as one flat box of the step's positions and x as one box of its rows
    (``FLAT_DY``); dW right against float64, with one split and two."""
    N, C, spatial, K, kernel, padding, dilation = case
    for splits in (1, 2):
        monkeypatch.setattr(implicit_gemm, "wgrad_tma_splits", lambda *args, n=splits: n)
        tritonconv.clear_caches()
        x = rows_layout(random_tensor((N, C, *spatial), torch.bfloat16, device))
        w = rows_layout(random_tensor((K, C, *kernel), torch.bfloat16, device))
        out = CONV[len(spatial)](x.double(), w.double(), padding=padding, dilation=dilation)
        dy = rows_layout(random_tensor(out.shape, torch.bfloat16, device))
        got, want = _weight_gradient(x, w, dy, padding=padding, dilation=dilation)
        assert_close(got, want, reduction=out.numel() // K, name="dW")
    flags = [meta["FLAT_DY"] for name, meta in launches if name == KERNEL]
    assert flags == [True, True], flags


@pytest.mark.parametrize("layout", ["contiguous weight", "nchw input"])
def test_other_layouts_are_read_or_written_through_copies(layout, device, kernels):
    """A contiguous weight gets a contiguous dW (the kernel's channels-last one copied, or its
    split partials summed into it); NCHW x and dy are read from channels-last copies.
    Replayed plans give the same result."""
    x = random_tensor((2, 32, 7, 9), torch.float16, device)
    w = random_tensor((32, 32, 3, 3), torch.float16, device)
    if layout == "contiguous weight":
        x = rows_layout(x)
    else:
        w = rows_layout(w)
    dy = random_tensor((2, 32, 7, 9), torch.float16, device)
    if layout == "contiguous weight":
        dy = rows_layout(dy)
    first, want = _weight_gradient(x, w, dy, padding=1)
    again, _ = _weight_gradient(x, w, dy, padding=1)  # (replayed: launches unseen)
    assert kernels.count(KERNEL) == 1, kernels
    assert first.stride() == w.stride()
    assert_close(first, want, reduction=2 * 63, name="dW")
    assert torch.equal(first, again), "not bitwise reproducible"


@pytest.mark.parametrize("layer", ["stride2", "groups", "fp32", "padded1x1", "channels16"])
def test_other_layers_keep_the_pointer_kernel(layer, device, kernels):
    """What this kernel does not compute runs ``conv_igemm_wgrad_kernel``, and is right."""
    dtype = torch.float32 if layer == "fp32" else torch.bfloat16
    C = 16 if layer == "channels16" else 32
    groups = 2 if layer == "groups" else 1
    k = 1 if layer == "padded1x1" else 3
    stride = 2 if layer == "stride2" else 1
    x = rows_layout(random_tensor((2, C, 6, 9), dtype, device))
    w = rows_layout(random_tensor((32, C // groups, k, k), dtype, device))
    kw = {"stride": stride, "padding": 1, "groups": groups}
    dy = rows_layout(random_tensor(F.conv2d(x.double(), w.double(), **kw).shape, dtype, device))
    got, want = _weight_gradient(x, w, dy, **kw)
    assert KERNEL not in kernels and "conv_igemm_wgrad_kernel" in kernels, kernels
    assert_close(got, want, reduction=2 * 88, name="dW")


def test_an_unaligned_channels_last_input_keeps_the_pointer_kernel(device, kernels):
    """A channels-last input 2 bytes off a 16-byte boundary is not read by TMA (nor copied):
    the pointer kernel computes dW, right."""
    x = rows_layout(random_tensor((2, 32, 6, 8), torch.bfloat16, device))
    buffer = torch.empty(x.numel() + 8, dtype=x.dtype, device=device)
    u = buffer[1 : 1 + x.numel()].view(2, 6, 8, 32).permute(0, 3, 1, 2)
    u.copy_(x)
    w = rows_layout(random_tensor((32, 32, 3, 3), torch.bfloat16, device))
    dy = rows_layout(random_tensor((2, 32, 6, 8), torch.bfloat16, device))
    got, want = _weight_gradient(u, w, dy, padding=1)
    assert KERNEL not in kernels, kernels
    assert_close(got, want, reduction=96, name="dW")


def test_explain_names_it(device):
    x = rows_layout(random_tensor((2, 32, 9, 9), torch.bfloat16, device))
    w = rows_layout(random_tensor((32, 32, 3, 3), torch.bfloat16, device))
    reason = tritonconv.explain(x, w, padding=1, algo="implicit_gemm").reason
    g = make_geometry((9, 9), (3, 3), (1, 1), (1, 1), (1, 1), (1, 1))
    tiles = implicit_gemm.wgrad_tma_config(x.dtype, 2, 32, 32, g, 1, x.device)
    assert f"weight gradient tiles {tiles} as TMA row boxes" in reason, reason


@pytest.fixture
def gpu_rule(tma_gpu, monkeypatch):
    """The GPU's rule, its own limit restored (the autouse fixture above lifts it)."""
    monkeypatch.setattr(implicit_gemm, "WGRAD_TMA_MIN_WIDTH", MIN_WIDTH)


def _rule(n, c_in, c_out, size, kernel=3, stride=1, rank=2):
    g = make_geometry((size,) * rank, (kernel,) * rank, (stride,) * rank,
                      (kernel // 2,) * rank, (kernel // 2,) * rank, (1,) * rank)  # fmt: skip
    return implicit_gemm.wgrad_tma_config(torch.bfloat16, n, c_in, c_out, g, 1, "gpu")


def test_tile_rule_on_the_measured_layers(gpu_rule):
    """The rule's picks on session 36's probe layers (benchmarks/probe_tma_wgrad.py)."""
    cfg = implicit_gemm.WgradTmaConfig
    assert _rule(8, 128, 64, 256) == cfg(64, 64, 128, 4, 4)
    assert _rule(8, 512, 256, 64) == cfg(64, 128, 128, 8, 3)
    assert _rule(128, 64, 64, 56) == cfg(64, 64, 64, 4, 4)
    assert _rule(16, 40, 48, 64) == cfg(64, 64, 64, 4, 4)
    assert _rule(8, 32, 96, 64) is None  # 96 in two 64-channel tiles (9 x 1.33: session 40)
    assert _rule(8, 64, 64, 1024, rank=1) == cfg(64, 64, 64, 4, 4)
    # windows narrower than 28 keep the pointer kernel (measured faster on ResNet-50's 14)
    assert _rule(128, 256, 256, 14) is None
    assert _rule(128, 512, 512, 7) is None
    # but rows exactly a box wide read dy flat (UNet's 1024@16: four rows a step)
    assert _rule(8, 1024, 1024, 16) == cfg(16, 128, 128, 8, 3, 4, True)
    assert _rule(8, 512, 512, 32) == cfg(32, 128, 128, 8, 3, 2, True)
    assert _rule(128, 128, 128, 28) == cfg(32, 128, 128, 8, 3, 2)  # 28 in 32: row boxes
    assert _rule(128, 128, 128, 56, stride=2) is None
    assert _rule(128, 256, 1024, 14, kernel=1) == cfg(64, 128, 128, 8, 3)  # 1x1: flat rows
    assert _rule(128, 64, 64, 56, kernel=1) == cfg(64, 64, 64, 4, 4)
    g = make_geometry((14, 14), (1, 1), (1, 1), (1, 1), (1, 1), (1, 1))  # a padded 1x1
    assert implicit_gemm.wgrad_tma_config(torch.bfloat16, 8, 64, 64, g, 1, "gpu") is None
    # taps x partial-tile waste over 10 keep the pointer kernel (measured, session 40):
    # 3x3x3 (27), (2+1)D's 1x3x3 64 -> 144 (9 x 256 / 144), 3x3 64 -> 96 (9 x 1.33); not its
    # 3x1x1 144 -> 64 (3 x 1.78), nor one-deep windows without partial tiles (5x5: 25)
    assert _rule(8, 64, 64, 56, rank=3) is None
    assert _rule(32, 64, 96, 56) is None
    assert _rule(32, 64, 64, 56, kernel=5) == cfg(64, 64, 64, 4, 4)
    for kernel, pad, taken in (((2, 5, 1), (0, 2, 0), True), ((3, 2, 2), (1, 0, 0), False)):
        g = make_geometry((16, 56, 56), kernel, (1, 1, 1), pad, pad, (1, 1, 1))  # 10, 12 taps
        found = implicit_gemm.wgrad_tma_config(torch.bfloat16, 8, 64, 64, g, 1, "gpu")
        assert (found is not None) == taken, kernel
    g = make_geometry((16, 56, 56), (1, 3, 3), (1, 1, 1), (0, 1, 1), (0, 1, 1), (1, 1, 1))
    assert implicit_gemm.wgrad_tma_config(torch.bfloat16, 8, 64, 144, g, 1, "gpu") is None
    g = make_geometry((16, 56, 56), (3, 1, 1), (1, 1, 1), (1, 0, 0), (1, 0, 0), (1, 1, 1))
    assert implicit_gemm.wgrad_tma_config(torch.bfloat16, 8, 144, 64, g, 1, "gpu") == cfg(
        64, 64, 128, 4, 4
    )
    assert _rule(8, 16, 64, 56) is None  # 16 input channels
    assert _rule(8, 36, 64, 56) is None  # 72-byte rows: not TMA's 16-byte strides


def test_strided_pointwise_rule(gpu_rule):
    """An unpadded strided 1x1 layer reads x's strided view, rows as wide as dy's: ResNet-50's
    shortcuts to 28 and 14 wide take it (14 wide in 16-position boxes, two rows a step: four
    would overhang 14 rows by two; 16 rows take four), to 7 wide not (half-empty boxes)."""
    cfg = implicit_gemm.WgradTmaConfig
    assert _rule(128, 256, 512, 56, kernel=1, stride=2) == cfg(32, 128, 128, 8, 3, 2)
    assert _rule(128, 512, 1024, 28, kernel=1, stride=2) == cfg(16, 128, 128, 8, 3, 2)
    assert _rule(32, 64, 64, 32, kernel=1, stride=2) == cfg(16, 64, 64, 4, 4, 4, True)
    assert _rule(128, 1024, 2048, 14, kernel=1, stride=2) is None


def test_split_rule_fills_two_programs_an_sm(gpu_rule):
    """Splits minimising the modelled time, rounds of two programs an SM x (row boxes a split
    + fill) + the partials' sum: session 36's probe's best counts on its layers (9 tiles: 29
    splits, 261 programs on 264 places), more than one split for UNet's 512 channels at 32 x
    32 (144 tiles of 128 x 128 channels), a round's worth for a 1x1 layer of one tile;
    partials bounded."""
    cfg = implicit_gemm.WgradTmaConfig

    def splits(rows, tiles, numel, config=None):
        config = config or cfg(64, 64, 128, 4, 4)
        return implicit_gemm.wgrad_tma_splits(rows, tiles, numel, config, "gpu")

    assert splits(8 * 256 * 4, 9, 128 * 64 * 9) == 29  # UNet 128 -> 64 at 256 x 256
    assert splits(128 * 56, 9, 64 * 64 * 9, cfg(64, 64, 64, 4, 4)) == 29  # ResNet-50 64@56
    assert splits(8 * 32, 4 * 4 * 9, 512 * 512 * 9, cfg(32, 128, 128, 8, 3)) > 1
    assert splits(128 * 56 * 56 // 64, 1, 64 * 64, cfg(64, 64, 64, 4, 4)) > 32  # 1x1, 1 tile
    assert splits(3, 9, 100) <= 3  # no more splits than rows
    assert splits(10**6, 1, implicit_gemm.WGRAD_PARTIAL_LIMIT) == 1


@pytest.mark.parametrize(
    "mask_x",
    [
        pytest.param(
            False,
            marks=pytest.mark.xfail(
                strict=True,
                reason="known, without WGRAD_TMA_MASK_X (off by default: 1.5-1.9x slower "
                "on the layers it changes, session 40): a row box overhanging dy's width, or "
                "a step's rows past dy's height, multiply dy's zero fill by x's values beyond "
                "it (benchmarks/NOTES.md)",
            ),
        ),
        True,
    ],
    ids=["", "mask_x"],
)
@pytest.mark.parametrize("axis", ["width", "height"])
def test_non_finite_input_beyond_a_tap_keeps_its_dw_finite(
    axis, mask_x, device, launches, monkeypatch
):
    """An Inf in x's last column (or row), which tap (0, 0) (or the middle row's taps) of an
    unpadded 3x3 never reaches: PyTorch's dW for that tap is finite. Without ``MASK_X`` ours
    multiplies the row box's zero-filled dy columns (or a two-row step's row past dy's 15) by
    it (0 * Inf = NaN); with it those positions of x are zeroed first. Strict: when the
    default is fixed, this passes and the marker must go."""
    monkeypatch.setattr(implicit_gemm, "WGRAD_TMA_MASK_X", mask_x)
    tritonconv.clear_caches()  # (a plan recorded with the other setting would replay)
    shape = (1, 32, 6, 13) if axis == "width" else (1, 32, 17, 34)
    x = rows_layout(random_tensor(shape, torch.bfloat16, device))
    if axis == "width":
        x[..., -1] = float("inf")
    else:
        x[..., -1, :] = float("inf")
    w = rows_layout(random_tensor((32, 32, 3, 3), torch.bfloat16, device))
    dy = rows_layout(random_tensor((1, 32, shape[2] - 2, shape[3] - 2), torch.bfloat16, device))
    got, want = _weight_gradient(x, w, dy)
    tap = (0, 0) if axis == "width" else (1, slice(None))
    assert want[:, :, tap[0], tap[1]].isfinite().all()
    masked = [meta["MASK_X"] for name, meta in launches if name == KERNEL]
    assert masked == [mask_x], launches
    assert got[:, :, tap[0], tap[1]].isfinite().all()
    reduction = dy[0, 0].numel()
    assert_close(got[:, :, tap[0], tap[1]], want[:, :, tap[0], tap[1]], reduction=reduction)


def test_masked_x_only_where_boxes_overhang_onto_x(gpu_rule):
    """``_wgrad_tma_overhangs_x``: masking (``MASK_X``) only where a step's boxes reach past
    dy onto x's real values: ResNet-50's 56- and 28-wide 3x3 layers (64- and 32-wide boxes,
    padding 1); not where the box fits (UNet's powers of two, flat dy), nor where what lies
    past dy is x's own zero fill (1x1 layers, a strided shortcut's view as large as dy)."""
    overhangs = implicit_gemm._wgrad_tma_overhangs_x
    cfg = implicit_gemm.WgradTmaConfig
    assert overhangs((128, 1, 56, 56), [128, 1, 56, 56], (0, 1, 1), cfg(64, 64, 64, 4, 4))
    assert overhangs((128, 1, 28, 28), [128, 1, 28, 28], (0, 1, 1), cfg(32, 64, 64, 4, 4, 2))
    assert overhangs((8, 1, 15, 32), [8, 1, 17, 34], (0, 0, 0), cfg(32, 64, 64, 4, 4, 2))
    assert not overhangs((8, 1, 64, 64), [8, 1, 64, 64], (0, 1, 1), cfg(64, 64, 64, 4, 4))
    assert not overhangs((8, 1, 16, 16), [8, 1, 16, 16], (0, 1, 1), cfg(16, 64, 64, 4, 4, 4, True))
    assert not overhangs((128, 1, 14, 14), [128, 1, 14, 14], (0, 0, 0), cfg(16, 64, 64, 4, 4, 4))
    assert not overhangs((1, 1, 1, 7000), [1, 1, 1, 7000], (0, 0, 0), cfg(64, 64, 64, 4, 4))
