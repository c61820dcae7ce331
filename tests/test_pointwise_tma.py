"""1x1 layers as TMA GEMMs (``pointwise_tma_kernel``, ``algo="implicit_gemm"``).

16-bit 1x1 stride-1 unpadded one-group layers over dense channels-last tensors run forward and
input gradient as one GEMM whose tiles TMA descriptors load and store. These tests check which
calls take it (and which must not: layouts and addresses TMA cannot read), its results against
float64 in one, two and three spatial dimensions, and that a launch plan recorded on aligned
tensors is not replayed on unaligned ones.
"""

import pytest
import torch
import torch.nn.functional as F

import tritonconv
from tritonconv import launch
from tritonconv.geometry import make_geometry
from tritonconv.ops import implicit_gemm
from tritonconv.testing import (
    assert_close,
    exact_fp32,
    poison_,
    random_tensor,
    rows_layout,
    tolerance,
)

CONV = {1: (tritonconv.conv1d, F.conv1d), 2: (tritonconv.conv2d, F.conv2d),
        3: (tritonconv.conv3d, F.conv3d)}  # fmt: skip


def _run(x, w, b):
    """Output, dx, dW, db of the implicit GEMM and of float64 PyTorch."""
    ours, ref = CONV[x.dim() - 2]
    leaves = [t.detach().requires_grad_() if t is not None else None for t in (x, w, b)]
    refs = [t.detach().double().requires_grad_() if t is not None else None for t in (x, w, b)]
    y = ours(*leaves, algo="implicit_gemm")
    want = ref(*refs)
    dy = rows_layout(random_tensor(y.shape, x.dtype, x.device))
    got = torch.autograd.grad(y, [t for t in leaves if t is not None], dy)
    wanted = torch.autograd.grad(want, [t for t in refs if t is not None], dy.double())
    return (y, *got), (want, *wanted)


# (N, C, spatial, K, bias); both sides at least 64 channels (the input gradient swaps them)
CASES = [
    (2, 64, (5, 7), 64, True),
    (3, 72, (4, 5), 136, False),
    (1, 96, (3, 3), 64, True),
    (2, 64, (6,), 72, True),
    (1, 64, (2, 3, 4), 80, True),
]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("case", CASES, ids=str)
def test_pointwise_layers_match_float64(case, dtype, device, kernels):
    N, C, spatial, K, bias = case
    for _ in range(3):  # outputs come from these blocks: an unwritten element shows as NaN
        poison_(torch.empty(1 << 16, device=device))
    x = rows_layout(random_tensor((N, C, *spatial), dtype, device))
    w = random_tensor((K, C, *[1] * len(spatial)), dtype, device)
    b = random_tensor((K,), dtype, device) if bias else None
    got, want = _run(x, w, b)
    assert kernels.count("pointwise_tma_kernel") == 2, kernels  # forward and dx
    positions = x.numel() // C
    for name, g, r in zip(("output", "dx", "dW", "db"), got, want):
        assert not g.isnan().any(), name
        assert_close(g, r, reduction=max(C, K, positions), name=name)
    if x.dim() > 3:  # (1-D outputs are contiguous, as PyTorch's)
        assert got[0].stride() == rows_layout(got[0]).stride(), "output left channels-last"


@pytest.mark.parametrize(
    "layout",
    ["nchw", "strided", "stride2", "padded", "groups", "fp32", "channels12", "narrow"],
)
def test_other_layers_keep_the_implicit_gemm(layout, device, kernels):
    """What TMA cannot read or this kernel does not compute runs ``conv_igemm_kernel``, and
    is right."""
    dtype = torch.float32 if layout == "fp32" else torch.bfloat16
    C = 12 if layout == "channels12" else 16 if layout == "narrow" else 64
    x = random_tensor((2, C, 6, 5), dtype, device)
    if layout != "nchw":
        x = rows_layout(x)
    if layout == "strided":  # channels innermost, but every other column
        x = rows_layout(random_tensor((2, C, 6, 10), dtype, device))[..., ::2]
    w = random_tensor((64, C // (2 if layout == "groups" else 1), 1, 1), dtype, device)
    kw = {"stride": 2} if layout == "stride2" else {"padding": 1} if layout == "padded" else {}
    if layout == "groups":
        kw = {"groups": 2}
    y = tritonconv.conv2d(x, w, algo="implicit_gemm", **kw)
    # (a stride-2 1x1 layer reads x's strided view on window_tma_kernel where its rule takes
    # the plane, tested in tests/test_window_tma.py; the pointer kernel elsewhere)
    took = "window_tma_kernel" if layout == "stride2" and "window_tma_kernel" in kernels else None
    assert "pointwise_tma_kernel" not in kernels, kernels
    assert took or "conv_igemm_kernel" in kernels, kernels
    assert_close(y, F.conv2d(x.double(), w.double(), **kw), reduction=C, name="output")


@pytest.mark.parametrize("case", CASES[:2] + CASES[3:], ids=str)
def test_tf32_forward_and_input_gradient(case, device, kernels):
    """fp32 with TF32 allowed (PyTorch's default for convolutions): the forward takes the TMA
    GEMM with TF32 products, within TF32's rounding of float64, and so does the input
    gradient (reading a transposed copy of the weight: TF32 tiles must be K-major)."""
    N, C, spatial, K, bias = case
    poison_(torch.empty(1 << 16, device=device))
    x = rows_layout(random_tensor((N, C, *spatial), torch.float32, device))
    w = random_tensor((K, C, *[1] * len(spatial)), torch.float32, device)
    b = random_tensor((K,), torch.float32, device) if bias else None
    old = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = True
    try:
        for call in ("recorded", "replayed"):  # (the second call replays the launch plans)
            got, want = _run(x, w, b)
            if call == "recorded":
                assert kernels.count("pointwise_tma_kernel") == 2, kernels  # forward and dx
            positions = x.numel() // C
            for name, g, r in zip(("output", "dx", "dW", "db"), got, want):
                atol, rtol = tolerance(torch.float16, max(C, K, positions))  # (10 mantissa bits)
                err = (g.double() - r).abs() - (atol + rtol * r.abs())
                assert not g.isnan().any() and err.max() <= 0, f"{call} {name}"
    finally:
        torch.backends.cudnn.allow_tf32 = old


def test_tf32_input_gradient_plan_with_weight_and_bias_in_one_buffer(device, monkeypatch):
    """The TF32 input gradient's transposed weight copy is recorded in the launch plan even
    when the weight and the bias are slices of one flat buffer (as flat-parameter wrappers
    keep them): the transposed 1x1 convolution with a bias is planned, and right."""
    built = []
    real = launch._build_plan

    def recording(*args):
        plan = real(*args)
        built.append(plan is not launch.UNPLANNABLE)
        return plan

    monkeypatch.setattr(launch, "_build_plan", recording)
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", True)
    tritonconv.clear_caches()
    x = rows_layout(random_tensor((2, 128, 5, 7), torch.float32, device))
    flat = random_tensor((128 * 64 + 64,), torch.float32, device)
    w, b = flat[: 128 * 64].view(128, 64, 1, 1), flat[128 * 64 :]
    for _ in range(3):  # recorded, then replayed
        y = tritonconv.conv_transpose2d(x, w, b, algo="implicit_gemm")
        want = F.conv_transpose2d(x.double(), w.double(), b.double())
        atol, rtol = tolerance(torch.float16, 128)  # (TF32: 10 mantissa bits)
        assert ((y.double() - want).abs() <= atol + rtol * want.abs()).all()
    assert built and all(built), built


def _unaligned_like(t: torch.Tensor) -> torch.Tensor:
    """A copy of channels-last ``t`` with the same strides, 2 bytes past a 16-byte boundary."""
    N, C, H, W = t.shape
    buffer = torch.empty(t.numel() + 8, dtype=t.dtype, device=t.device)
    u = buffer[1 : 1 + t.numel()].view(N, H, W, C).permute(0, 3, 1, 2)
    u.copy_(t)
    assert u.stride() == t.stride() and u.data_ptr() % 16
    return u


@pytest.mark.skipif(tritonconv.INTERPRETER, reason="compiled launches only")
def test_replays_encode_each_descriptor_once_per_address(device, monkeypatch):
    """Replayed TMA launches reuse each descriptor's encoded tensor map while its tensor's
    address and layout repeat, encode a new address anew, and compute the right outputs
    either way (from poisoned memory: a map left pointing at another tensor would show)."""
    tritonconv.clear_caches()
    encoded = []
    if launch._direct_triton():  # (where the direct launcher encodes the descriptors)
        encode = launch._tensor_map_encoder()

        def counting(address, *rest):
            encoded.append(address)
            return encode(address, *rest)

        monkeypatch.setattr(launch, "_tensor_map_encoder", lambda: counting)
    w = random_tensor((64, 64, 1, 1), torch.bfloat16, device)
    xs = [rows_layout(random_tensor((2, 64, 5, 7), torch.bfloat16, device)) for _ in range(3)]
    with torch.no_grad():
        for _ in range(3):
            for x in xs:
                poison_(torch.empty(1 << 16, device=device))
                y = tritonconv.conv2d(x, w, algo="implicit_gemm")
                assert_close(y, F.conv2d(x.double(), w.double()), reduction=64, name="output")
    if launch._direct_triton():
        # the first call launched through Triton's own path; the others replayed
        inputs = sorted(x.data_ptr() for x in xs)
        assert sorted(a for a in encoded if a in inputs) == inputs, "each input encoded once"


def test_plans_are_not_replayed_on_unaligned_tensors(device, kernels):
    """A launch plan recorded with TMA on aligned tensors, called again with the same shapes
    and strides at an unaligned address (which TMA cannot read), runs the pointer kernel;
    an aligned call after it replays the TMA plan. Forward and input gradient."""
    x = rows_layout(random_tensor((2, 64, 4, 6), torch.bfloat16, device))
    w = random_tensor((72, 64, 1, 1), torch.bfloat16, device)
    b = random_tensor((72,), torch.bfloat16, device)
    for tensor in (x, _unaligned_like(x), x):
        kernels.clear()
        got, want = _run(tensor, w, b)
        for name, g, r in zip(("output", "dx", "dW", "db"), got, want):
            assert_close(g, r, reduction=72, name=name)
        if tensor.data_ptr() % 16:  # (the aligned calls replay: nothing launched by name)
            # the forward reads x: the pointer kernel (the input gradient may take TMA: it
            # reads dy, aligned; the backward's plan runs unplanned where the weight
            # gradient's TMA descriptor of x is unaligned)
            assert kernels[0] == "conv_igemm_kernel", kernels


def test_input_gradient_of_unaligned_output_gradient(device):
    """The input gradient's own plan (``conv_grad_input``) on an unaligned ``dy``."""
    dy = rows_layout(random_tensor((2, 72, 4, 6), torch.bfloat16, device))
    w = random_tensor((72, 64, 1, 1), torch.bfloat16, device)
    like = torch.empty((2, 64, 4, 6), dtype=torch.bfloat16, device=device)
    like = like.contiguous(memory_format=torch.channels_last)
    geometry = make_geometry((4, 6), (1, 1), (1, 1), (0, 0), (0, 0), (1, 1))
    want = torch.nn.grad.conv2d_input(like.shape, w.double(), dy.double())
    tritonconv.clear_caches()
    for g in (dy, _unaligned_like(dy), dy):
        dx = implicit_gemm.conv_grad_input(g, w, like, geometry, 1)
        assert_close(dx, want, reduction=72, name="dx")


def test_tma_rule(monkeypatch):
    """Which shapes ``pointwise_tma_config`` takes (on this machine's device kind)."""
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    g1 = make_geometry((8, 8), (1, 1), (1, 1), (0, 0), (0, 0), (1, 1))
    take = implicit_gemm.pointwise_tma_config
    expected = implicit_gemm._has_tma(device)
    assert (take(torch.bfloat16, 2048, 64, 256, g1, 1, device) is not None) == expected
    assert (take(torch.float16, 2048, 32, 64, g1, 1, device) is not None) == expected
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", True)  # (PyTorch's default)
    tf32 = take(torch.float32, 2048, 64, 256, g1, 1, device)
    assert (tf32 is not None) == expected
    if tf32 is not None:  # the same 128-byte rows
        assert tf32.block_k * 4 == take(torch.bfloat16, 2048, 64, 256, g1, 1, device).block_k * 2
    with exact_fp32():  # TF32 off: fp32 products, which TMA's tensor-core tiles do not make
        assert take(torch.float32, 2048, 64, 256, g1, 1, device) is None
    monkeypatch.setattr(implicit_gemm, "TMA_TF32", False)
    assert take(torch.float32, 2048, 64, 256, g1, 1, device) is None
    assert take(torch.bfloat16, 2048, 64, 256, g1, 2, device) is None
    assert take(torch.bfloat16, 2048, 76, 256, g1, 1, device) is None  # rows not 16 bytes
    assert take(torch.bfloat16, 2048, 16, 256, g1, 1, device) is None  # narrow: pointers
    assert take(torch.bfloat16, 2048, 64, 40, g1, 1, device) is None
    for kernel, stride, pad in (((3, 3), (1, 1), (1, 1)), ((1, 1), (2, 2), (0, 0)),
                                ((1, 1), (1, 1), (1, 1))):  # fmt: skip
        g = make_geometry((8, 8), kernel, stride, pad, pad, (1, 1))
        assert take(torch.bfloat16, 2048, 64, 256, g, 1, device) is None


def test_wide_tile_rule(tma_gpu, monkeypatch):
    """128 x 256 tiles for 16-bit layers with destination channels a multiple of 256, at
    least 128 source channels and most of a wave of such tiles (ResNet-50's 1x1 layers at
    batch 128, session 38's measurements); not for one-step reductions, 128 destination
    channels, small batches or fp32."""
    g = make_geometry((7, 7), (1, 1), (1, 1), (0, 0), (0, 0), (1, 1))

    def take(rows, c_src, c_dst, dtype=torch.bfloat16):
        return implicit_gemm.pointwise_tma_config(dtype, rows, c_src, c_dst, g, 1, "gpu")

    wide = implicit_gemm.TmaConfig(128, 256, 64, 8, 3, True)
    assert take(128 * 49, 2048, 512) == wide  # 98 tiles: 0.74 of a wave
    assert take(128 * 49, 512, 2048) == wide
    assert take(128 * 196, 1024, 256) == wide
    assert take(128 * 3136, 64, 256) != wide  # 64 source channels: one step
    assert take(128 * 784, 512, 128) != wide  # 128 destination channels
    assert take(32 * 49, 2048, 512) != wide  # 26 tiles
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", True)
    assert take(128 * 49, 2048, 512, torch.float32).block_n == 128


@pytest.mark.parametrize("per_sm", [1, 2])
def test_persistent_programs_a_multiprocessor(per_sm, device, kernels, monkeypatch):
    """Persistent tiles walked by ``per_sm`` programs a multiprocessor (``TmaConfig.per_sm``):
    the grid asks for that many, and every tile is still computed once."""
    tile = implicit_gemm.TmaConfig(32, 64, 32, 4, 1, True, per_sm)
    monkeypatch.setattr(implicit_gemm, "pointwise_tma_config", lambda *args: tile)
    grids, programs = [], implicit_gemm._persistent_programs
    monkeypatch.setattr(
        implicit_gemm, "_persistent_programs", lambda *a: grids.append(programs(*a)) or grids[-1]
    )
    x = rows_layout(random_tensor((2, 64, 5, 7), torch.bfloat16, device))
    w = random_tensor((128, 64, 1, 1), torch.bfloat16, device)
    with torch.no_grad():
        y = tritonconv.conv2d(x, w, algo="implicit_gemm")
    assert kernels == ["pointwise_tma_kernel"], kernels
    assert_close(y, F.conv2d(x.double(), w.double()), reduction=64, name="output")
    sms = implicit_gemm.INTERPRETER_TMA_PROGRAMS
    if not tritonconv.INTERPRETER:
        sms = implicit_gemm.multiprocessor_count(x.device)
    assert grids == [min(3 * 2, per_sm * sms)]  # 70 rows in 32-row tiles by 2 channel tiles


# ---------------------------------------------------------------------------------------------
# Transposed convolutions whose kernel equals their stride: one GEMM, scattered by tap
# ---------------------------------------------------------------------------------------------

TRANSPOSED = {1: (tritonconv.conv_transpose1d, F.conv_transpose1d),
              2: (tritonconv.conv_transpose2d, F.conv_transpose2d),
              3: (tritonconv.conv_transpose3d, F.conv_transpose3d)}  # fmt: skip


@pytest.fixture
def scatters(monkeypatch):
    """Each ``pointwise_tma_kernel`` launch's ``SCATTER`` (plans cleared: none replays), and
    outputs allocated poisoned (an element the epilogue misses shows as NaN)."""
    tritonconv.clear_caches()
    seen = []
    original = implicit_gemm.launch

    def spy(kernel, grid, *args, **meta):
        if kernel is implicit_gemm.pointwise_tma_kernel:
            seen.append(meta["SCATTER"] and ("boxes" if meta["TAP_BOX"] else meta["BLOCK_M"]))
        return original(kernel, grid, *args, **meta)

    monkeypatch.setattr(implicit_gemm, "launch", spy)
    empty, empty_strided = torch.empty, torch.empty_strided
    monkeypatch.setattr(launch.torch, "empty", lambda *a, **k: poison_(empty(*a, **k)))
    monkeypatch.setattr(
        launch.torch, "empty_strided", lambda *a, **k: poison_(empty_strided(*a, **k))
    )
    return seen


# (N, C_in, spatial, C_out, kernel = stride, bias, weight channels-last); row tiles that are
# boxes of whole input rows store by TMA (``_tap_box_width``), the others by pointers; BOXED:
# those that are boxes with the interpreter's 32-row tiles
TAP_CASES = [
    (2, 16, (5,), 24, (4,), True, False),
    (2, 32, (3, 5), 16, (2, 2), True, True),
    (1, 24, (4, 3), 40, (3, 2), False, False),
    (2, 16, (2, 3, 4), 16, (2, 2, 2), True, True),
    (1, 8, (3, 2, 2), 32, (1, 2, 3), False, False),
    (2, 16, (64,), 16, (2,), True, False),
    (2, 16, (8, 4), 24, (2, 2), False, True),
    (1, 16, (3, 16, 8), 16, (1, 1, 2), True, False),
    (2, 8, (2, 4, 8), 16, (2, 2, 2), True, True),
    (2, 16, (16, 16), 32, (2, 2), True, True),
    (1, 16, (2, 16, 32), 16, (2, 2, 2), False, True),
    (1, 16, (4, 8), 16, (3, 2), True, False),
    (1, 16, (2, 4, 8), 16, (3, 1, 2), False, True),
]
BOXED = {(64,), (8, 4), (3, 16, 8), (2, 4, 8), (16, 16), (2, 16, 32), (4, 8)}


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("case", TAP_CASES, ids=str)
def test_transposed_kernel_equal_to_stride_is_one_gemm(case, dtype, device, scatters):
    """A transposed convolution whose kernel equals its stride (UNet's and the video nets'
    2x2(x2) s2 upsampling): every output position takes one tap of one input position, so
    the forward is one GEMM of the input's rows by the ``[C_in, taps * C_out]`` weight whose
    epilogue scatters each tap's columns (``SCATTER``), for 1 to 3 spatial axes, kernels not
    the same along each axis, with and without bias, either weight layout. Against float64,
    from poisoned outputs, forward and every gradient."""
    N, C, spatial, K, kernel, bias, last = case
    dims = len(spatial)
    ours, ref = TRANSPOSED[dims]
    x = rows_layout(random_tensor((N, C, *spatial), dtype, device))
    w = random_tensor((C, K, *kernel), dtype, device)
    if last:
        w = rows_layout(w)
    b = random_tensor((K,), dtype, device) if bias else None
    leaves = [t.detach().requires_grad_() if t is not None else None for t in (x, w, b)]
    refs = [t.detach().double().requires_grad_() if t is not None else None for t in (x, w, b)]
    y = ours(*leaves, stride=kernel, algo="implicit_gemm")
    want = ref(*refs, stride=kernel)
    with torch.no_grad():  # a second forward replays the launch plan the first recorded
        again = ours(x, w, b, stride=kernel, algo="implicit_gemm")
    assert torch.equal(again, y.detach()), "the replayed forward differs"
    (how,) = scatters  # "boxes", or the row tile of pointer stores
    if how != "boxes":  # only where the row tile is no box
        height, width = (1, 1, *spatial)[-2:]
        assert not implicit_gemm._tap_box_width(how, height, width), scatters
    if tritonconv.INTERPRETER:  # (32-row tiles)
        assert (how == "boxes") == (spatial in BOXED), scatters
    dy = rows_layout(random_tensor(y.shape, dtype, device))
    got = torch.autograd.grad(y, [t for t in leaves if t is not None], dy)
    wanted = torch.autograd.grad(want, [t for t in refs if t is not None], dy.double())
    positions = x.numel() // C
    for name, g, r in zip(("output", "dx", "dW", "db"), (y, *got), (want, *wanted)):
        assert not g.isnan().any(), name
        assert_close(g, r, reduction=max(C, K, positions), name=name)
    if dims > 1:
        assert y.stride() == rows_layout(y).stride(), "output left channels-last"
    if dims == 2:  # explain says so (its signature takes 1-D and 2-D)
        told = tritonconv.explain(x, w, stride=kernel, transposed=True, algo="auto")
        assert told.algo != "implicit_gemm" or "scattered by tap" in told.reason, told
        told = tritonconv.explain(x, w, stride=kernel, transposed=True, algo="implicit_gemm")
        assert "scattered by tap" in told.reason, told


@pytest.mark.parametrize("dims", [1, 2, 3])
def test_patch_convolution_input_gradient_is_one_gemm(dims, device, scatters):
    """A convolution whose kernel equals its stride (a patch embedding, ConvNeXt's stem) has
    that transposed convolution for its input gradient: it takes the same GEMM."""
    ours, ref = CONV[dims]
    kernel = (2, 4, 2)[-dims:]
    x = rows_layout(random_tensor((2, 16, *(6, 8, 4)[-dims:]), torch.bfloat16, device))
    w = random_tensor((32, 16, *kernel), torch.bfloat16, device)
    leaves = [t.detach().requires_grad_() for t in (x, w)]
    refs = [t.detach().double().requires_grad_() for t in (x, w)]
    y = ours(*leaves, stride=kernel, algo="implicit_gemm")
    want = ref(*refs, stride=kernel)
    dy = rows_layout(random_tensor(y.shape, torch.bfloat16, device))
    (dx,) = torch.autograd.grad(y, leaves[:1], dy)
    (want_dx,) = torch.autograd.grad(want, refs[:1], dy.double())
    assert len(scatters) == 1 and scatters[0], scatters
    assert not dx.isnan().any()
    assert_close(dx, want_dx, reduction=32, name="dx")


@pytest.mark.parametrize(
    "variant", ["output_padding", "padding", "groups", "channels12", "nchw", "fp32", "stride"]
)
def test_transposed_kernel_equal_to_stride_elsewhere(variant, device, scatters):
    """Where one tap a position does not hold (output padding, padding, a stride below the
    kernel) or TMA cannot take the tensors (channel counts not multiples of 8, NCHW, fp32),
    the transposed convolution keeps ``conv_igemm_kernel``'s phases, and is right. (Padding 1
    with output padding 2 at kernel = stride = 3: the output is still three times the input,
    so only the padding check refuses it.)"""
    dtype = torch.float32 if variant == "fp32" else torch.bfloat16
    C, K = (12, 16) if variant == "channels12" else (16, 16)
    x = random_tensor((2, C, 4, 5), dtype, device)
    if variant != "nchw":
        x = rows_layout(x)
    groups = 2 if variant == "groups" else 1
    k = 3 if variant == "padding" else 2
    w = random_tensor((C, K // groups, k, k), dtype, device)
    kw = {"stride": 1 if variant == "stride" else k, "groups": groups}
    if variant == "output_padding":
        kw["output_padding"] = 1
    if variant == "padding":
        kw["padding"], kw["output_padding"] = 1, 2
    y = tritonconv.conv_transpose2d(x, w, algo="implicit_gemm", **kw)
    assert not any(scatters), scatters
    want = F.conv_transpose2d(x.double(), w.double(), **kw)
    if variant == "padding":
        assert y.shape[2:] == tuple(3 * n for n in x.shape[2:])
    assert not y.isnan().any()
    assert_close(y, want, reduction=C * k * k, name="output")


def test_pointwise_input_gradient_is_not_scattered(device, scatters):
    """A 1x1 stride-1 layer's kernel equals its stride too, but its input gradient is the
    plain TMA GEMM (a scattered one would store by pointers wherever rows do not tile)."""
    x = rows_layout(random_tensor((2, 64, 5, 7), torch.bfloat16, device)).requires_grad_()
    w = random_tensor((64, 64, 1, 1), torch.bfloat16, device).requires_grad_()
    y = tritonconv.conv2d(x, w, algo="implicit_gemm")
    (dx,) = torch.autograd.grad(y, (x,), torch.ones_like(y))
    assert scatters == [False, False], scatters  # forward, input gradient
    assert_close(dx, F.conv_transpose2d(torch.ones_like(y).double(), w.double()), reduction=64)


@pytest.mark.parametrize("boxes", [True, False], ids=["tma", "pointers"])
def test_tap_gemm_checks_the_output_it_is_given(boxes, device, scatters, monkeypatch):
    """The tap GEMM takes only a dense channels-last output: a slice of a wider one is
    refused (the phase kernel writes it), and a batch of one whose batch stride is anything
    (PyTorch's layout checks ignore it) is written at the strides its sizes give, by TMA
    boxes and by pointers."""
    monkeypatch.setattr(implicit_gemm, "TAP_BOX", boxes)  # (64-row tiles: 8 rows of 8 a box)
    monkeypatch.setattr(
        implicit_gemm, "TAP_GEMM_TILES", implicit_gemm.TmaConfig(64, 32, 32, 4, 2, True)
    )
    geometry = make_geometry((4, 16, 16), (2, 2, 2), (2, 2, 2), (0,) * 3, (0,) * 3, (1,) * 3)
    x = rows_layout(random_tensor((1, 16, 2, 8, 8), torch.bfloat16, device))
    w = rows_layout(random_tensor((16, 16, 2, 2, 2), torch.bfloat16, device))
    want = F.conv_transpose3d(x.double(), w.double(), stride=2)
    wide = rows_layout(torch.zeros((1, 32, 4, 16, 16), dtype=torch.bfloat16, device=device))
    assert not implicit_gemm._launch_tap_gemm(x, w, None, wide[:, :16], geometry, 1)
    odd = torch.empty_strided((1, 16, 4, 16, 16), (16384 + 8, 1, 4096, 256, 16),
                              dtype=torch.bfloat16, device=device)  # fmt: skip
    poison_(odd)
    assert implicit_gemm._launch_tap_gemm(x, w, None, odd, geometry, 1)
    assert scatters == ["boxes" if boxes else 64], scatters
    assert_close(odd, want, reduction=16, name="output")
