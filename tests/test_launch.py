"""Launch plans and plan caches (issue 10): recorded launches replay on new tensors, nothing that
varies between calls is frozen into a plan, errors are never cached, the caches are bounded and
safe with several threads. On the GPU the replay calls the compiled kernel directly (the lean
path); under the interpreter it interprets the recorded launches."""

import ctypes
import threading

import pytest
import torch
import torch.nn.functional as F
import triton
import triton.language as tl

import tritonconv as tc
from tritonconv import caches, functional, launch, plans
from tritonconv.ops.common import needs_int64
from tritonconv.testing import assert_close, is_leading_part


@triton.jit
def _axpy_kernel(x_ptr, y_ptr, out_ptr, n, alpha, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, alpha * x + y, mask=mask)


@launch.launch_plan
def _axpy(x, y, out, alpha: int):
    n = out.numel()
    launch.launch(_axpy_kernel, (triton.cdiv(n, 64),), x, y, out, n, alpha, BLOCK=64)


def test_replay_uses_the_new_tensors(device):
    """The second call with the same signature replays the plan on its own tensors."""
    _axpy.plans.clear()
    for trial in range(3):
        x, y = torch.randn(100, device=device), torch.randn(100, device=device)
        out = torch.full((100,), float("nan"), device=device)
        _axpy(x, y, out, 3)
        assert_close(out, (3 * x + y).cpu())
        assert len(_axpy.plans.entries) == 1, trial


def test_replay_keys_on_values_and_alignment(device):
    """A different scalar is a different plan; a misaligned view (Triton specialises on 16-byte
    alignment) still gets the right result."""
    _axpy.plans.clear()
    base = torch.randn(101, device=device)
    y = torch.randn(100, device=device)
    for alpha, x in ((2, base[:100]), (5, base[:100]), (5, base[1:])):
        out = torch.empty(100, device=device)
        _axpy(x, y, out, alpha)
        assert_close(out, (alpha * x + y).cpu())
    assert len(_axpy.plans.entries) == 2


@launch.launch_plan
def _axpy_or_nothing(x, y, wanted: bool):
    """(alpha x + y, placeholder) or (placeholder, placeholder)."""
    out = launch.allocate(tuple(x.shape), x.dtype, x.device) if wanted else None
    if wanted:
        launch.launch(
            _axpy_kernel, (triton.cdiv(x.numel(), 64),), x, y, out, x.numel(), 2, BLOCK=64
        )
    return (
        out if wanted else launch.placeholder(x.dtype, x.device),
        launch.placeholder(x.dtype, x.device),
    )


def test_placeholders_are_left_out_where_the_caller_drops_them(device):
    """A planned function's placeholders (the empty tensor of an output not asked for) replay
    as empty tensors, or as None without allocating when the caller says it drops them (the
    eager backward); the computed outputs are the same either way."""
    _axpy_or_nothing.plans.clear()
    x, y = torch.randn(100, device=device), torch.randn(100, device=device)
    for wanted in (True, False):
        first = _axpy_or_nothing(x, y, wanted)  # recorded
        again = _axpy_or_nothing(x, y, wanted)  # replayed: placeholders allocated
        plan = _axpy_or_nothing.plan_of(x, y, wanted)
        lean = plan.run([x, y], placeholders=False)
        for outputs in (first, again):
            assert outputs[1].shape == (0,) and outputs[1].dtype == x.dtype
        assert lean[1] is None
        if wanted:
            for outputs in (first, again, lean):
                assert_close(outputs[0], (2 * x + y).cpu())
        else:
            assert again[0].shape == (0,) and lean[0] is None


def test_conv_backward_without_bias_allocates_no_placeholder(device, monkeypatch):
    """An eager convolution backward whose bias gradient is not wanted replays without
    allocating its placeholder, and its gradients stay right (against float64)."""
    x = torch.randn(2, 4, 6, 5, dtype=torch.float64, device=device)
    w = torch.randn(6, 4, 3, 3, dtype=torch.float64, device=device)
    dy = torch.randn(2, 6, 6, 5, dtype=torch.float64, device=device)
    x64, w64 = (t.clone().requires_grad_() for t in (x, w))
    exact = torch.autograd.grad(F.conv2d(x64, w64, padding=1), (x64, w64), dy)
    tc.clear_caches()
    for _ in range(2):  # recorded, then replayed
        xg, wg = (t.clone().requires_grad_() for t in (x, w))
        got = torch.autograd.grad(tc.conv2d(xg, wg, padding=1, algo="implicit_gemm"), (xg, wg), dy)
        for g, e in zip(got, exact, strict=True):
            assert_close(g, e, reduction=36)
    made = []
    run = launch._Placeholder.run
    monkeypatch.setattr(
        launch._Placeholder, "run", lambda self, *a: made.append(1) or run(self, *a)
    )
    xg, wg = (t.clone().requires_grad_() for t in (x, w))
    got = torch.autograd.grad(tc.conv2d(xg, wg, padding=1, algo="implicit_gemm"), (xg, wg), dy)
    for g, e in zip(got, exact, strict=True):
        assert_close(g, e, reduction=36)
    assert made == []
    (plan,) = functional._CONV_PLANS.entries.values()
    (replay,) = plan.backward.values()
    assert sum(isinstance(step, launch._Placeholder) for step in replay.steps) == 1


def test_aliased_arguments_are_not_frozen(device):
    """A call that passes one tensor twice is not cached: a later call with two distinct tensors
    must read both."""
    _axpy.plans.clear()
    x = torch.randn(64, device=device)
    out = torch.empty(64, device=device)
    _axpy(x, x, out, 1)
    assert_close(out, (2 * x).cpu())
    assert not _axpy.plans.entries
    y = torch.randn(64, device=device)
    _axpy(x, y, out, 1)
    assert_close(out, (x + y).cpu())


def test_conv_plans_are_reused_and_layout_sensitive(device):
    """One plan per signature; a channels-last input is a new signature with its own plan and
    result; the results of every call are right (the replay uses each call's data)."""
    functional._CONV_PLANS.clear()
    w = torch.randn(4, 3, 3, 3, device=device)
    for fmt in (torch.contiguous_format, torch.channels_last, torch.contiguous_format):
        x = torch.randn(2, 3, 7, 6, device=device).contiguous(memory_format=fmt)
        for algo in ("direct", "im2col_gemm"):
            y = tc.conv2d(x, w, padding=1, algo=algo)
            assert_close(y, F.conv2d(x.cpu().double(), w.cpu().double(), padding=1))
    assert len(functional._CONV_PLANS) == 4


def test_errors_are_not_cached(device):
    functional._CONV_PLANS.clear()
    x = torch.randn(1, 4, 5, 5, device=device)
    w = torch.randn(2, 4, 3, 3, device=device)
    for _ in range(2):
        with pytest.raises(tc.TritonConvError, match="expected input"):
            tc.conv2d(x, w, groups=2)
    assert len(functional._CONV_PLANS) == 0


def test_plan_key_tells_bool_from_int(device):
    """``groups=True`` is rejected even after ``groups=1`` was planned (equal and hash-equal
    values must not share a plan)."""
    x = torch.randn(1, 2, 5, 5, device=device)
    w = torch.randn(2, 2, 3, 3, device=device)
    tc.conv2d(x, w, groups=1)
    with pytest.raises(tc.TritonConvError, match="groups"):
        tc.conv2d(x, w, groups=True)


def test_workspace_limit_is_part_of_the_plan(device):
    x = torch.randn(2, 3, 6, 6, device=device, dtype=torch.float64)
    w = torch.randn(4, 3, 3, 3, device=device, dtype=torch.float64)
    expected = F.conv2d(x.cpu(), w.cpu())
    try:
        for limit in (tc.DEFAULT_WORKSPACE_LIMIT, 3 * 27 * 8):
            tc.set_workspace_limit(limit)
            assert_close(tc.conv2d(x, w, algo="im2col_gemm"), expected)
    finally:
        tc.set_workspace_limit(tc.DEFAULT_WORKSPACE_LIMIT)


def test_plan_cache_is_bounded():
    cache = plans.BoundedCache("test", size=3)
    for i in range(10):
        assert plans.lookup(cache, lambda i=i: i, lambda i=i: -i) == -i
    assert len(cache) == 3
    assert plans.lookup(cache, lambda: 0, lambda: "rebuilt") == "rebuilt"  # evicted
    assert plans.lookup(cache, lambda: 9, lambda: pytest.fail("rebuilt")) == -9
    plans.clear_caches()
    assert len(cache) == 0


def test_a_full_cache_drops_its_oldest_entries_first():
    cache = plans.BoundedCache("test: order", size=8)
    try:
        for i in range(9):
            cache.put(i, -i)
        assert list(cache.entries) == [1, 2, 3, 4, 5, 6, 7, 8]
        cache.put(3, -3)  # (a key put again keeps its place)
        cache.put(9, -9)
        assert list(cache.entries) == [2, 3, 4, 5, 6, 7, 8, 9]
    finally:
        caches._ALL.remove(cache)


def test_threads_share_the_caches_safely(device):
    """Eight threads convolving different shapes at once (plans and launch plans built and
    replayed concurrently) all get their own right answers."""
    functional._CONV_PLANS.clear()
    errors = []

    def work(seed):
        try:
            gen = torch.Generator().manual_seed(seed)
            c = 1 + seed % 3
            x = torch.randn(1, c, 5 + seed % 4, 6, generator=gen)
            w = torch.randn(2, c, 3, 3, generator=gen)
            for _ in range(3):
                y = tc.conv2d(x.to(device), w.to(device), padding=1, algo="direct")
                assert_close(y, F.conv2d(x.double(), w.double(), padding=1))
        except Exception as e:  # surfaced below: a thread's assertion does not fail the test
            errors.append(e)

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_needs_int64_reads_the_view_not_the_storage():
    big = torch.empty(2**31 + 16, dtype=torch.int8, device="meta")
    assert not needs_int64(big[:1000])
    assert needs_int64(big)
    assert needs_int64(torch.empty(1, device="meta").expand(2**31 + 1))
    # a strided view whose last element lies past 2**31 elements
    assert needs_int64(torch.empty(2**31 + 8, dtype=torch.int8, device="meta")[:: 2**20])
    assert not needs_int64(None, torch.empty(10))


def test_op_bodies_replay_allocations_and_launches(device):
    """A planned op body (allocations + launches) replays: one plan, fresh outputs each call,
    right values each call, for the forward and both gradients."""
    from tritonconv import library

    body = library.conv2d_direct.impl
    body.plans.clear()
    outputs = []
    for _ in range(3):
        x = torch.randn(2, 3, 6, 5, device=device, dtype=torch.float64, requires_grad=True)
        w = torch.randn(4, 3, 3, 3, device=device, dtype=torch.float64, requires_grad=True)
        y = tc.conv2d(x, w, padding=1, algo="direct")
        dy = torch.randn_like(y)
        got = torch.autograd.grad(y, (x, w), dy)
        ref = F.conv2d(x.cpu(), w.cpu(), padding=1)
        want = torch.autograd.grad(ref, (x, w), dy.cpu())
        assert_close(y, ref)
        for g, e in zip(got, want, strict=True):
            assert_close(g, e)
        outputs.append(y)
    assert len(body.plans.entries) == 1
    assert outputs[0].data_ptr() != outputs[1].data_ptr()


@launch.launch_plan
def _returns_a_view(x, out):
    _axpy(x, x, out, 1)  # nested: recorded into this plan, aliasing irrelevant here
    return out[1:]


def test_a_body_returning_a_view_is_not_planned(device):
    _returns_a_view.plans.clear()
    for _ in range(2):
        x = torch.randn(8, device=device)
        out = torch.empty(8, device=device)
        assert_close(_returns_a_view(x, out), (2 * x)[1:].cpu())
    # remembered as unplannable: no replay (it would return no view), no re-recording
    assert list(_returns_a_view.plans.entries.values()) == [launch.UNPLANNABLE]


def test_tf32_setting_is_part_of_every_plan(device):
    """Flipping ``allow_tf32`` between two identical calls re-plans (the fp32 dot precision is
    baked into a launch plan), and both calls are right at their precision."""
    x = torch.randn(2, 16, 6, 6, device=device)
    w = torch.randn(16, 16, 3, 3, device=device)
    expected = F.conv2d(x.cpu().double(), w.cpu().double())
    before = len(functional._CONV_PLANS)
    for allow in (False, True):
        torch.backends.cudnn.allow_tf32 = allow
        try:
            y = tc.conv2d(x, w, algo="direct")
        finally:
            torch.backends.cudnn.allow_tf32 = False
        if not allow:
            assert_close(y, expected)
        else:  # TF32: about 10 mantissa bits
            assert (y.double().cpu() - expected).abs().max() < 5e-2 * expected.abs().max()
    assert len(functional._CONV_PLANS) == before + 2


def test_tf32_off_precision_is_part_of_every_plan(device, monkeypatch):
    """Changing fp32's TF32-off dot precision between two identical calls re-plans too, the
    call and the launches: a launch plan replayed after it would launch the kernels of the
    old precision (session 28: a probe comparing precisions in one process measured one)."""
    from tritonconv import caches, precision

    x = torch.randn(2, 16, 6, 6, device=device)
    w = torch.randn(16, 16, 3, 3, device=device)
    expected = F.conv2d(x.cpu().double(), w.cpu().double())
    tc.clear_caches()
    for value in ("ieee", "tf32x3_rn", "ieee"):
        monkeypatch.setattr(precision, "TF32_OFF_PRECISION", value)
        assert_close(tc.conv2d(x, w, algo="implicit_gemm"), expected)
    assert len(functional._CONV_PLANS) == 2
    launch_plans = [c for c in caches._ALL if c.name.startswith("launch plans of")]
    assert sum(len(c) for c in launch_plans) == 2, [(c.name, len(c)) for c in launch_plans]


def test_plans_do_not_keep_tensors_alive(device):
    """A cached plan records shapes and slots, never the recording call's tensors."""
    import gc
    import weakref

    for algo in ("direct", "im2col_gemm", "depthwise"):
        x = torch.randn(2, 4, 8, 8, device=device)
        w = torch.randn(4, 1 if algo == "depthwise" else 4, 3, 3, device=device)
        groups = 4 if algo == "depthwise" else 1
        with torch.no_grad():
            y = tc.conv2d(x, w, padding=1, groups=groups, algo=algo)
            tc.conv2d(x.clone(), w, padding=1, groups=groups, algo=algo)  # a replay
        refs = [weakref.ref(t) for t in (x, y)]
        del x, y
        gc.collect()
        assert all(r() is None for r in refs), algo


def test_strided_bias(device):
    """A bias that is a strided view is read right (the kernels read a dense vector)."""
    base = torch.randn(12, dtype=torch.float64)
    strided = base.to(device)[::2]  # made on the device: .to() would make it contiguous
    assert not strided.is_contiguous()
    x = torch.randn(2, 6, 7, 7, dtype=torch.float64)
    for algo, w in (
        ("direct", torch.randn(6, 3, 3, 3, dtype=torch.float64)),
        ("im2col_gemm", torch.randn(6, 3, 3, 3, dtype=torch.float64)),
        ("depthwise", torch.randn(6, 1, 3, 3, dtype=torch.float64)),
    ):
        groups = 6 if algo == "depthwise" else 2
        got = tc.conv2d(x.to(device), w.to(device), strided, groups=groups, algo=algo)
        assert_close(got, F.conv2d(x, w, base[::2], groups=groups))
    x1, w1 = torch.randn(2, 6, 9, dtype=torch.float64), torch.randn(6, 6, 3, dtype=torch.float64)
    assert_close(tc.conv1d(x1.to(device), w1.to(device), strided), F.conv1d(x1, w1, base[::2]))
    taps = torch.randn(6, 4, dtype=torch.float64)
    got = tc.causal_conv1d(x1.to(device), taps.to(device), strided)
    want = F.conv1d(x1, taps[:, None], base[::2], padding=3, groups=6)[..., :9]
    assert_close(got, want)
    with pytest.raises(tc.TritonConvError, match="contiguous bias"):
        torch.ops.tritonconv.conv2d_direct(
            x.to(device), w.to(device), strided, [1, 1], [0, 0], [0, 0], [1, 1], 6, True
        )


def test_conv1d_output_is_contiguous_like_pytorch(device):
    """An (N, L, C)-stored input viewed as (N, C, L) gives a contiguous output, as F.conv1d."""
    x = torch.randn(2, 7, 6, dtype=torch.float64).transpose(1, 2)
    w = torch.randn(4, 6, 3, dtype=torch.float64)
    got = tc.conv1d(x.to(device), w.to(device))
    assert got.is_contiguous()
    assert_close(got, F.conv1d(x, w))


@pytest.mark.parametrize("algo", ["implicit_gemm", "direct", "depthwise"])
def test_eager_backward_replays_per_gradient_layout_and_mask(algo, device):
    """The forward's plan keeps the backward op's launch plans, keyed by the output gradient's
    layout and dtype and by which gradients are asked for: a repeated backward replays, and a
    new layout or mask records its own (each checked against float64). The mask is also the
    plan's: one plan per mask."""
    groups = 4 if algo == "depthwise" else 1
    x = torch.randn(2, 4, 7, 6, dtype=torch.float64, device=device)
    w = torch.randn(4, 4 // groups, 3, 3, dtype=torch.float64, device=device)
    kwargs = dict(padding=1, groups=groups)
    tc.clear_caches()
    grads = [
        torch.randn(2, 4, 7, 6, dtype=torch.float64, device=device),
        torch.randn(2, 4, 7, 6, dtype=torch.float64, device=device).to(
            memory_format=torch.channels_last
        ),
        torch.randn(1, 1, 1, 1, dtype=torch.float64, device=device).expand(2, 4, 7, 6),
    ]
    for mask in ([True, True], [False, True], [True, False], [True, True]):
        for grad in (*grads, grads[0]):
            leaves = [t.clone().requires_grad_(m) for t, m in zip((x, w), mask)]
            out = tc.conv2d(*leaves, **kwargs, algo=algo)
            wanted = [t for t, m in zip(leaves, mask) if m]
            got = torch.autograd.grad(out, wanted, grad)
            x64, w64 = (t.detach().clone().requires_grad_() for t in (x, w))
            exact = torch.autograd.grad(F.conv2d(x64, w64, **kwargs), (x64, w64), grad)
            for g, e in zip(got, [e for e, m in zip(exact, mask) if m]):
                assert_close(g, e, reduction=36)
    # one plan per mask of gradients (``auto`` may choose each its algorithm: test_choice.py),
    # each with the three layouts' backward recorded once
    plans = list(functional._CONV_PLANS.entries.values())
    assert len(plans) == 3 and all(len(plan.backward) == 3 for plan in plans)


class _Wrapper36:
    """Stands in for Triton 3.6's ``CudaLauncher``: the wrapper the direct launcher skips."""

    def __init__(self, scratch=0):
        self.calls = []
        self.launch = lambda *args: self.calls.append(args)
        self.launch_cooperative_grid, self.launch_pdl = False, True
        self.global_scratch_size = scratch
        self.profile_scratch_size = 0

    def __call__(self, gridX, gridY, gridZ, stream, function, *args):
        raise AssertionError("the direct launcher must not go through the wrapper")


class _Compiled:
    def __init__(self, run):
        self.run, self.function, self.packed_metadata = run, "fn", ("meta",)


@pytest.fixture
def triton_36(monkeypatch):
    """The direct launcher is bound on Triton 3.6 only: these tests describe 3.6's wrapper."""
    monkeypatch.setattr(launch, "_direct_triton", lambda: True)


def test_direct_launcher_passes_what_tritons_wrapper_would(triton_36):
    """Triton 3.6's wrapper calls its C launcher with (grid, stream, function, flags, two
    scratch pointers, packed metadata, launch metadata, two hooks, kernel args): the direct
    launcher passes exactly that, scratch pointers and hooks None."""
    wrapper = _Wrapper36()
    direct = launch._direct_launcher(_Compiled(wrapper))
    direct(3, 2, 1, 77, "x", 5, 1.5, 64)
    assert wrapper.calls == [
        (3, 2, 1, 77, "fn", False, True, None, None, ("meta",), None, None, None, "x", 5, 1.5, 64)
    ]


def test_direct_launcher_only_where_it_is_exact(triton_36, monkeypatch):
    """Kernels that need scratch memory, and wrappers of another form (other Triton versions),
    keep Triton's own wrapper."""
    assert launch._direct_launcher(_Compiled(_Wrapper36(scratch=128))) is None

    class Other(_Wrapper36):
        def __call__(self, gridX, gridY, gridZ, stream, function, kernel_metadata, *args):
            pass

    assert launch._direct_launcher(_Compiled(Other())) is None
    assert launch._direct_launcher(_Compiled(lambda *args: None)) is None
    monkeypatch.setattr(launch, "_direct_triton", lambda: False)  # another Triton version
    assert launch._direct_launcher(_Compiled(_Wrapper36())) is None


def wrap_handle_tensordesc(launcher, tensordesc_indices, tensordesc_meta):
    """Stands in for Triton 3.6's descriptor wrapper of the same name: a closure over the C
    launcher, the descriptor parameters' positions and their compile-time layouts."""

    def inner(*args):
        raise AssertionError(
            ("the direct launcher expands descriptors itself", launcher),
            (tensordesc_indices, tensordesc_meta),
        )

    return inner


class _Desc:
    def __init__(self, base, shape, strides, padding="zero"):
        self.base, self.shape, self.strides, self.padding = base, shape, strides, padding


def _tma_meta(block):
    return {"swizzle": 3, "elem_size": 2, "elem_type": 9, "block_size": block, "fp4_padded": 0}


def test_direct_launcher_expands_descriptors_encoding_each_once(triton_36, monkeypatch):
    """Triton 3.6 wraps a kernel's C launcher in a closure that encodes every TMA descriptor
    argument on every launch. The direct launcher passes the C launcher the same expansion
    (encoded map, shape, strides, in place of each descriptor), encoding a descriptor once
    per base address and layout; a new address or layout is encoded anew."""
    encoded = []

    def encode(address, swizzle, elem_size, elem_type, block, shape, strides, padding):
        encoded.append((address, shape, strides))
        return ("map", address, swizzle, elem_size, elem_type, tuple(block), padding)

    monkeypatch.setattr(launch, "_tensor_map_encoder", lambda: encode)
    wrapper = _Wrapper36()
    metas = [_tma_meta([64, 32]), _tma_meta([32, 64])]
    wrapper.launch = wrap_handle_tensordesc(lambda *args: wrapper.calls.append(args), {1, 3}, metas)
    direct = launch._direct_launcher(_Compiled(wrapper))
    a, b, c = torch.empty(64), torch.empty(64), torch.empty(64)
    head = (3, 2, 1, 77, "fn", False, True, None, None, ("meta",), None, None, None)
    for _ in range(3):
        direct(3, 2, 1, 77, 5, _Desc(a, (4, 8), (8, 1)), 6, _Desc(b, [8, 4], [4, 1], "nan"), 7)
    map_a = ("map", a.data_ptr(), 3, 2, 8, (64, 32), 0)  # (element type 9 is the host's 8)
    map_b = ("map", b.data_ptr(), 3, 2, 8, (32, 64), 1)
    assert wrapper.calls == [(*head, 5, map_a, 4, 8, 8, 1, 6, map_b, 8, 4, 4, 1, 7)] * 3
    assert len(encoded) == 2
    direct(3, 2, 1, 77, 5, _Desc(c, (4, 8), (8, 1)), 6, _Desc(b, (8, 2), (4, 1), "nan"), 7)
    assert len(encoded) == 4  # a new address, a new shape
    assert wrapper.calls[-1][14][1] == c.data_ptr() and wrapper.calls[-1][21:23] == (8, 2)
    monkeypatch.setattr(launch, "TENSOR_MAP_CACHE_SIZE", 2)  # bounded: emptied when full
    for t in (a, b, c, a):
        direct(3, 2, 1, 77, 5, _Desc(t, (4, 8), (8, 1)), 6, _Desc(b, (8, 2), (4, 1), "nan"), 7)
    # a hits; b fills the full cache after emptying it, c joins it, a empties it again
    assert [address for address, _, _ in encoded[4:]] == [t.data_ptr() for t in (b, c, a)]


def test_described_launcher_only_where_every_layout_is_known(triton_36, monkeypatch):
    """Descriptors whose compile-time layout the wrapper does not hold (or holds in a form
    this was not written for: fp4 padding) keep Triton's wrapper."""
    monkeypatch.setattr(launch, "_tensor_map_encoder", lambda: None)
    for metas in ([None], [{**_tma_meta([8, 8]), "fp4_padded": 1}], [{"swizzle": 1}]):
        wrapper = _Wrapper36()
        wrapper.launch = wrap_handle_tensordesc(lambda *args: None, {0}, metas)
        direct = launch._direct_launcher(_Compiled(wrapper))
        assert launch._unwrap_descriptors(wrapper.launch) is None
        with pytest.raises(AssertionError, match="expands descriptors itself"):
            direct(1, 1, 1, 0, "descriptor")  # (the plain direct launcher: the wrapper runs)


def _axpy_step(wrapper) -> tuple:
    """``(step, x, out, key)``: a recorded ``_axpy_kernel`` launch on ``x`` and ``out`` whose
    compiled kernel (under ``key``: the device, and which addresses are 16-byte aligned, a
    bit each in order) launches through the direct launcher of ``wrapper``."""
    x, out = torch.randn(64), torch.empty(64)
    step = launch._Launch(
        _axpy_kernel, (1,), [x, None, out, 64, 2], {"BLOCK": 64}, [(0, 0), (2, 1)]
    )
    key = (0, 2 * (x.data_ptr() % 16 == 0) + (out.data_ptr() % 16 == 0))
    step.compiled[key] = ("compiled", (64,), launch._direct_launcher(_Compiled(wrapper)))
    return step, x, out, key


def test_replayed_launches_pass_addresses_to_the_c_launcher(triton_36, monkeypatch):
    """A replayed launch gives Triton's C launcher each tensor's address as an int (no
    data_ptr call and driver check per pointer there); Triton's own wrapper, where the direct
    launcher is not bound, still gets the tensors. (The compiled path, faked on the CPU.)"""
    monkeypatch.setattr(launch, "INTERPRETER", False)
    wrapper = _Wrapper36()
    step, x, out, key = _axpy_step(wrapper)
    where = (0, 7, False)  # device, stream, launch hooks installed
    step.run([x, out], where)
    head = (1, 1, 1, 7, "fn", False, True, None, None, ("meta",), None, None, None)
    assert wrapper.calls == [(*head, x.data_ptr(), None, out.data_ptr(), 64, 2, 64)]
    seen = []
    monkeypatch.setattr(
        launch, "_run_compiled", lambda entry, grid, stream, args: seen.append(args)
    )
    step.compiled[key] = ("compiled", (64,), None)
    launch._ready.clear()
    step.run([x, out], where)
    assert seen[-1][0] is x and seen[-1][2] is out


def _kept(step) -> int:
    """How many argument tuples ``launch._ready`` keeps for ``step``."""
    return sum(key[0] is step for key in launch._ready.entries)


def test_a_repeated_launch_reuses_its_arguments(triton_36, monkeypatch):
    """A replayed launch on tensors at the addresses of an earlier one (a training loop's)
    passes the C launcher the arguments it built then, TMA descriptors encoded and expanded,
    building nothing again; new addresses or another stream get their own, a launch hook
    takes Triton's own path, and the kept tuples are bounded, the oldest dropped first.
    (The compiled path, faked.)"""
    tc.clear_caches()
    monkeypatch.setattr(launch, "INTERPRETER", False)
    monkeypatch.setattr(launch, "bind_cuda_context", lambda device: None)
    encoded, built = [], []

    def encode(address, *layout):
        encoded.append(address)
        return ("map", address)

    class Counted(launch._Descriptor):
        __slots__ = ()

        def __init__(self, base, *layout):
            built.append(base.data_ptr())
            super().__init__(base, *layout)

    monkeypatch.setattr(launch, "_tensor_map_encoder", lambda: encode)
    monkeypatch.setattr(launch, "_Descriptor", Counted)
    wrapper = _Wrapper36()
    wrapper.launch = wrap_handle_tensordesc(wrapper.launch, {1}, [_tma_meta([8, 8])])
    x, y, z = torch.randn(64), torch.randn(64), torch.randn(64)
    layout = ((8, 8), (8, 1), (8, 8), "zero")
    step = launch._Launch(_axpy_kernel, (2,), [x, None, 3], {}, [(0, 0)], [(1, 1, *layout)])
    step.compiled[(0, int(x.data_ptr() % 16 == 0))] = (
        "compiled", (), launch._direct_launcher(_Compiled(wrapper))
    )  # fmt: skip
    head = (2, 1, 1, 7, "fn", False, True, None, None, ("meta",), None, None, None)
    for _ in range(3):
        step.run([x, y], (0, 7, False))
    assert wrapper.calls == [(*head, x.data_ptr(), ("map", y.data_ptr()), 8, 8, 8, 1, 3)] * 3
    assert encoded == built == [y.data_ptr()]
    step.run([x, z], (0, 7, False))  # a new address: its own arguments
    assert wrapper.calls[-1][14] == ("map", z.data_ptr())
    step.run([x, z], (0, 8, False))  # another stream (the map already encoded)
    assert wrapper.calls[-1][3] == 8 and encoded == [y.data_ptr(), z.data_ptr()]
    assert built == [y.data_ptr(), z.data_ptr(), z.data_ptr()] and _kept(step) == 3
    tritons = []

    class Kernel:  # Triton's own launch, where a launch hook is installed
        arg_names = _axpy_kernel.arg_names

        def __getitem__(self, grid):
            return lambda *args, **meta: tritons.append(args)

    step.kernel = Kernel()
    step.run([x, y], (0, 7, True))
    assert len(tritons) == 1 and len(wrapper.calls) == 5 and _kept(step) == 3
    monkeypatch.setattr(launch._ready, "size", 3)  # bounded: the oldest dropped first
    step.run([y, y], (0, 7, False))
    assert _kept(step) == 3 and len(built) == 4
    step.run([x, y], (0, 7, False))  # the oldest, dropped: built anew
    assert len(built) == 5


def test_benchmarks_can_replace_every_compiled_launch(triton_36, monkeypatch):
    """``bench.host.launches_replaced`` (the host tools' no-launch and per-kernel rows)
    reaches every compiled launch after the first: a replay's kept arguments, the launch
    that first keeps them, and Triton's wrapper; blocks nest, and each exit leaves things as
    they were."""
    from tritonconv.bench.host import launches_replaced

    tc.clear_caches()
    monkeypatch.setattr(launch, "INTERPRETER", False)
    wrapper = _Wrapper36()
    step, x, out, key = _axpy_step(wrapper)
    step.run([x, out], (0, 7, False))  # (its arguments kept)
    seen, run_compiled, launch_kept = [], launch._run_compiled, launch._launch_kept

    def recorder(name):
        return lambda launcher, kernel: lambda *args: seen.append((name or kernel, len(args)))

    with launches_replaced(recorder(None)):
        step.run([x, out], (0, 7, False))  # its kept arguments
        launch._ready.clear()
        step.run([x, out], (0, 7, False))  # kept anew, the launch replaced too
        with launches_replaced(recorder("inner")):
            step.run([x, out], (0, 7, False))
        step.run([x, out], (0, 7, False))  # the outer block's again
        step.compiled[key] = ("compiled", (64,), None)  # Triton's own wrapper launches
        launch._ready.clear()
        step.run([x, out], (0, 7, False))
    assert seen == [("_axpy_kernel", 19)] * 2 + [("inner", 19), ("_axpy_kernel", 19),
                                                 ("compiled", 0)]  # fmt: skip
    assert len(wrapper.calls) == 1  # (the launch before the block)
    assert launch._run_compiled is run_compiled and launch._launch_kept is launch_kept
    assert "get" not in vars(launch._ready)


def test_unexpanded_descriptors_are_not_kept(triton_36, monkeypatch):
    """Where the direct launcher leaves descriptors to Triton's wrapper (a form of it this was
    not written for), the arguments hold the descriptor objects, and those the tensors: such a
    launch keeps nothing, so no replay pins its tensors' memory."""
    tc.clear_caches()
    monkeypatch.setattr(launch, "INTERPRETER", False)
    monkeypatch.setattr(launch, "_tensor_map_encoder", lambda: None)
    wrapper = _Wrapper36()
    wrapper.launch = wrap_handle_tensordesc(wrapper.launch, {1}, [None])  # (layout unknown)
    direct = launch._direct_launcher(_Compiled(wrapper))
    assert direct is not None and not direct.expands
    x, y = torch.randn(64), torch.randn(64)
    layout = ((8, 8), (8, 1), (8, 8), "zero")
    step = launch._Launch(_axpy_kernel, (2,), [x, None, 3], {}, [(0, 0)], [(1, 1, *layout)])
    step.compiled[(0, int(x.data_ptr() % 16 == 0))] = ("compiled", (), direct)
    with pytest.raises(AssertionError, match="expands descriptors itself"):
        step.run([x, y], (0, 7, False))  # (the stand-in wrapper refuses: it was reached)
    assert _kept(step) == 0


def test_a_replay_looks_the_device_up_once(device, triton_36, monkeypatch):
    """A replayed plan asks for the device, its stream and the launch hooks once, whatever
    the number of its launches; each launch gets them. (The compiled path, faked.)"""
    _axpy.plans.clear()
    x, y = torch.randn(64, device=device), torch.randn(64, device=device)
    out = torch.empty(64, device=device)
    _axpy(x, y, out, 2)  # recorded
    (plan,) = _axpy.plans.entries.values()
    plan.steps = plan.steps * 3  # three launches
    monkeypatch.setattr(launch, "INTERPRETER", False)
    asked = []
    monkeypatch.setattr(launch, "current_device", lambda: asked.append("device") or 0)
    monkeypatch.setattr(launch, "_hooks_installed", lambda: asked.append("hooks") or False)
    monkeypatch.setattr(
        torch._C, "_cuda_getCurrentRawStream", lambda d: asked.append("stream") or 5, raising=False
    )
    wrapper = _Wrapper36()
    direct = launch._direct_launcher(_Compiled(wrapper))
    for step in plan.steps:
        step.compiled = {(0, k): ("compiled", (), direct) for k in range(8)}  # every alignment
    plan.run([x, y, out])
    assert asked == ["device", "stream", "hooks"]
    assert [args[3] for args in wrapper.calls] == [5, 5, 5]  # (the stream)


@pytest.mark.skipif(tc.INTERPRETER, reason="compiled kernels only")
def test_lean_launches_on_the_gpu_match_tritons_own(device, monkeypatch):
    """On the GPU: repeated lean launches (direct where Triton's wrapper allows) compute what
    Triton's own launch computes, and Triton 3.6 gets the direct launcher."""
    _axpy.plans.clear()
    for alpha in (2, 3):  # a signature each: recorded once (Triton's launch), then replayed
        for _ in range(3):
            x, y = torch.randn(1000, device=device), torch.randn(1000, device=device)
            out = torch.full((1000,), float("nan"), device=device)
            _axpy(x, y, out, alpha)
            torch.testing.assert_close(out, alpha * x + y)
    plans = list(_axpy.plans.entries.values())
    assert len(plans) == 2
    entries = [e for plan in plans for step in plan.steps for e in step.compiled.values()]
    assert len(entries) == 2  # each replay found its compiled kernel
    if not launch._direct_triton():  # another Triton: its own wrapper launches
        return
    assert all(direct is not None for _, _, direct in entries)
    # the same tensors again, their output poisoned: the kept arguments (one tuple per step
    # and addresses) compute the new values in place
    hits, get = [], launch._ready.get
    monkeypatch.setattr(launch._ready, "get", lambda key: hits.append(get(key)) or hits[-1])
    for alpha in (3, 2, 2, 3):  # (alpha 3's tuple for these tensors kept by the loop above)
        out.fill_(float("nan"))
        y.add_(1)
        _axpy(x, y, out, alpha)
        torch.testing.assert_close(out, alpha * x + y)
    # alpha 3 found its tuple both times; alpha 2 (whose last tensors' addresses these may
    # be) its own the second time at least
    found = [h is not None for h in hits]
    assert len(found) == 4 and found[0] and found[2] and found[3], found
    # Triton's own wrapper and the direct launcher give its C launcher the same arguments.
    compiled, tail, _ = entries[0]
    wrapper, seen = compiled.run, []
    c_launch = wrapper.launch
    wrapper.launch = lambda *args: seen.append(args)
    try:
        args = ("x", "y", "out", 1000, 2, *tail)
        type(wrapper).__call__(
            wrapper, 16, 1, 1, 7, compiled.function, compiled.packed_metadata, None, None, None,
            *args,
        )  # fmt: skip
        launch._direct_launcher(compiled)(16, 1, 1, 7, *args)
    finally:
        wrapper.launch = c_launch
    assert len(seen) == 2 and seen[0] == seen[1]


@launch.launch_plan
def _axpy_halves(x, y, out):
    """Two launches on views it makes of its arguments (the kernel reads them contiguously;
    the strided depthwise input gradient's tests cover strided views)."""
    half = out.numel() // 2
    launch.launch(_axpy_kernel, (1,), x[:half], y[half:], out[:half], half, 2, BLOCK=64)
    launch.launch(_axpy_kernel, (1,), x[half:], y[:half], out[half:], half, 3, BLOCK=64)


def test_launches_on_views_replay(device, plan_recordings):
    """Views a planned function makes of its tensors are re-made over each call's tensors by
    the replay (offset and strides): recorded once, right on every call."""
    _axpy_halves.plans.clear()
    for _ in range(3):
        x, y = torch.randn(64, device=device), torch.randn(64, device=device)
        out = torch.full((64,), float("nan"), device=device)
        _axpy_halves(x, y, out)
        assert_close(out[:32], (2 * x[:32] + y[32:]).cpu())
        assert_close(out[32:], (3 * x[32:] + y[:32]).cpu())
    assert len(plan_recordings) == 1
    assert _axpy_halves.plan_of(x, y, out) is not None


@launch.launch_plan
def _axpy_on_a_copy(x, y, out):
    """A launch on a tensor another op made (not :func:`launch.allocate`): not replayable."""
    _axpy(x.clone(), y, out, 2)


def test_an_unplannable_signature_is_recorded_once(device, plan_recordings):
    """A call whose launch reads a tensor some other op made cannot be replayed: its signature
    is remembered as unplannable, later calls run unrecorded (was: recorded and discarded on
    every call, nested plans bypassed), and the planned functions it calls replay theirs."""
    _axpy.plans.clear()
    _axpy_on_a_copy.plans.clear()
    for _ in range(3):
        x, y = torch.randn(64, device=device), torch.randn(64, device=device)
        out = torch.full((64,), float("nan"), device=device)
        _axpy_on_a_copy(x, y, out)
        assert_close(out, (2 * x + y).cpu())
    # one recording of the outer function, then one of the inner one's signature
    assert len(plan_recordings) == 2
    assert list(_axpy_on_a_copy.plans.entries.values()) == [launch.UNPLANNABLE]
    assert _axpy_on_a_copy.plan_of(x, y, out) is None
    assert len(_axpy.plans.entries) == 1


@launch.launch_plan
def _gemm_plus(a, b, bias):
    """PyTorch operations through ``launch.call``: a GEMM into an allocation, an in-place add
    on a view of an argument, a new tensor a call returns and a launch on it."""
    out = launch.allocate((a.shape[0], b.shape[1]), a.dtype, a.device)
    launch.call(torch.mm, a, b, out=out)
    launch.call(torch.Tensor.add_, out, bias.view(1, -1))
    doubled = launch.call(torch.mul, out, 2)  # a new tensor: later steps may use it
    n = doubled.numel()
    launch.launch(_axpy_kernel, (triton.cdiv(n, 64),), doubled, out, doubled, n, 1, BLOCK=64)
    return doubled


def test_pytorch_calls_replay_on_the_new_tensors(device, plan_recordings, monkeypatch):
    """``launch.call`` records a PyTorch operation like a launch: the replay calls it again on
    the call's own tensors (out= and in-place targets included), and a tensor a call returned
    is one the later steps and the result may use. Recorded once; the body never runs again."""
    _gemm_plus.plans.clear()
    for trial in range(3):
        a, b = torch.randn(5, 7, device=device), torch.randn(7, 3, device=device)
        bias = torch.randn(3, device=device)
        got = _gemm_plus(a, b, bias)
        assert_close(got, (3 * (a @ b + bias)).cpu())
        if trial == 0:  # from now on, a replay: the body's Python must not run
            monkeypatch.setattr(launch, "allocate", None)
    assert len(plan_recordings) == 1


@launch.launch_plan
def _call_on_a_list(a, b):
    out = launch.allocate((2 * a.shape[0],), a.dtype, a.device)
    launch.call(torch.cat, [a, b], out=out)
    return out


@launch.launch_plan
def _returns_a_call_view(x):
    out = launch.allocate((x.numel(),), x.dtype, x.device)
    launch.call(torch.mul, x, 2, out=out)
    return launch.call(torch.reshape, out, (2, -1))  # a view of the allocation


def test_a_body_returning_a_view_a_call_made_is_not_planned(device):
    """A view is never what a planned body returns, whoever made it (a call here)."""
    _returns_a_call_view.plans.clear()
    for _ in range(2):
        x = torch.randn(8, device=device)
        assert_close(_returns_a_call_view(x), (2 * x).view(2, -1).cpu())
    assert list(_returns_a_call_view.plans.entries.values()) == [launch.UNPLANNABLE]


def test_a_call_on_a_list_of_tensors_is_not_planned(device):
    """Tensors inside a call's list arguments are not taken apart into slots: such a call
    signature is unplannable (run every time), never replayed on the first call's tensors."""
    _call_on_a_list.plans.clear()
    for _ in range(2):
        a, b = torch.randn(4, device=device), torch.randn(4, device=device)
        assert_close(_call_on_a_list(a, b), torch.cat([a, b]).cpu())
    assert list(_call_on_a_list.plans.entries.values()) == [launch.UNPLANNABLE]


_GEMM_CASES = {  # (input shape, weight shape, conv2d keywords, channels-last, bias, transposed)
    "1x1 channels-last": ((3, 8, 5, 4), (6, 8, 1, 1), {}, True, True, False),
    "1x1 NCHW": ((2, 8, 3, 5), (6, 8, 1, 1), {}, False, True, False),
    "1x1 grouped channels-last": ((2, 8, 3, 5), (6, 4, 1, 1), {"groups": 2}, True, True, False),
    "3x3 in chunks": ((3, 4, 6, 5), (6, 4, 3, 3), {"padding": 1, "stride": 2}, False, True, False),
    "3x3 grouped channels-last": ((2, 4, 6, 5), (6, 2, 3, 3), {"groups": 2}, True, False, False),
    "transposed": ((2, 6, 4, 3), (6, 4, 3, 3), {"stride": 2, "padding": 1}, True, True, True),
}


@pytest.mark.parametrize("case", sorted(_GEMM_CASES))
def test_im2col_gemm_ops_replay(case, device):
    """im2col + GEMM's ops (cuBLAS GEMMs, bias adds and copies through ``launch.call``) replay
    from launch plans, forward and backward: a plan per op and signature, right against
    float64 on every call with fresh data (workspace small enough for several chunks)."""
    from tritonconv import library

    shape, wshape, kwargs, channels_last, with_bias, transposed = _GEMM_CASES[case]
    fn, ref_fn = (tc.conv_transpose2d, F.conv_transpose2d) if transposed else (tc.conv2d, F.conv2d)
    forward = library.conv_transpose2d_gemm if transposed else library.conv2d_gemm
    tc.clear_caches()
    for _ in range(3):
        x = torch.randn(shape, dtype=torch.float64, device=device)
        if channels_last:
            x = x.to(memory_format=torch.channels_last)
        w = torch.randn(wshape, dtype=torch.float64, device=device)
        b = (
            torch.randn(
                wshape[1 if transposed else 0] * kwargs.get("groups", 1)
                if transposed
                else wshape[0],
                dtype=torch.float64,
                device=device,
            )
            if with_bias
            else None
        )
        leaves = [t.requires_grad_() for t in (x, w, b) if t is not None]
        out = fn(x, w, b, **kwargs, algo="im2col_gemm", workspace_limit=4 * 8 * 36)
        dy = torch.randn_like(out)
        got = torch.autograd.grad(out, leaves, dy)
        refs = [t.detach().cpu().requires_grad_() for t in leaves]
        ref = ref_fn(refs[0], refs[1], refs[2] if with_bias else None, **kwargs)
        assert_close(out, ref)
        for g, e in zip(got, torch.autograd.grad(ref, refs, dy.cpu()), strict=True):
            assert_close(g, e)
    assert [p for p in forward.impl.plans.entries.values() if p is launch.UNPLANNABLE] == []
    (plan,) = (
        functional._TRANSPOSED_PLANS.entries.values()
        if transposed
        else (functional._CONV_PLANS.entries.values())
    )
    assert plan.replay is not None and (transposed or len(plan.backward) == 1)


@pytest.mark.parametrize("algo", ["direct", "depthwise"])
def test_transposed_direct_op_replays(algo, device):
    """The transposed convolution's direct op (the convolution's input-gradient kernels and a
    bias add through ``launch.call``) replays from its launch plan: right on every call."""
    from tritonconv import library

    groups = 4 if algo == "depthwise" else 2
    tc.clear_caches()
    for _ in range(3):
        x = torch.randn(2, 4, 5, 4, dtype=torch.float64, device=device)
        w = torch.randn(4, 6 // groups if algo == "direct" else 1, 3, 3, dtype=torch.float64,
                        device=device)  # fmt: skip
        b = torch.randn(w.shape[1] * groups, dtype=torch.float64, device=device)
        got = tc.conv_transpose2d(x, w, b, stride=2, padding=1, groups=groups, algo=algo)
        want = F.conv_transpose2d(x.cpu(), w.cpu(), b.cpu(), stride=2, padding=1, groups=groups)
        assert_close(got, want)
    plans = list(library.conv_transpose2d_direct.impl.plans.entries.values())
    assert len(plans) == 1 and plans[0] is not launch.UNPLANNABLE


def test_a_grid_cuda_would_refuse_is_a_clear_error(device, monkeypatch):
    """CUDA takes at most 65535 programs along a grid's second and third axes; a launch past
    that (a depthwise convolution on a 4K image, say) failed as Triton's "invalid argument".
    It is refused before it launches, under the interpreter as on the GPU. (Launches are
    recorded, not run: the interpreter's path taken on either device.)"""
    ran = []
    monkeypatch.setattr(launch, "INTERPRETER", True)
    monkeypatch.setattr(launch, "_interpret", lambda *a: ran.append(a))
    x = torch.zeros(4, device=device)
    args = (x, x, x, 4, 1)
    launch.launch(_axpy_kernel, (1, launch.GRID_YZ_LIMIT), *args, BLOCK=4)
    assert len(ran) == 1
    with pytest.raises(tc.TritonConvError, match=r"_axpy_kernel.*grid \(1, 65536\).*split"):
        launch.launch(_axpy_kernel, (1, launch.GRID_YZ_LIMIT + 1), *args, BLOCK=4)
    with pytest.raises(tc.TritonConvError, match=r"grid \(2, 1, 70000\)"):
        launch.launch(_axpy_kernel, (2, 1, 70000), *args, BLOCK=4)
    assert len(ran) == 1


def test_launch_signature_tells_bool_and_float_from_int():
    """Triton compiles ``True``, ``1.0`` and ``1`` as three signatures (i1, fp32, the constant
    1); equal as Python keys, they must not share a compiled kernel."""
    keys = {launch._signature((v,), {}) for v in (True, 1, 1.0)}
    assert len(keys) == 3


def _strided_depthwise(x, w):
    return tc.conv2d(x, w, stride=2, padding=1, groups=x.shape[1], algo="depthwise")


_OWN_BUFFER_CASES = {
    "depthwise_s2": (_strided_depthwise, (2, 3, 9, 8), (6, 1, 3, 3)),
    "depthwise_s2_nhwc": (_strided_depthwise, (2, 3, 9, 8), (3, 1, 3, 3)),
    "implicit_gemm_s2": (
        lambda x, w: tc.conv2d(x, w, stride=2, padding=1, algo="implicit_gemm"),
        (2, 4, 7, 6),
        (5, 4, 3, 3),
    ),
    "direct_s2": (
        lambda x, w: tc.conv2d(x, w, stride=2, padding=1, algo="direct"),
        (2, 4, 7, 6),
        (5, 4, 3, 3),
    ),
    "transposed_s2": (
        lambda x, w: tc.conv_transpose2d(x, w, stride=2, padding=1, output_padding=1),
        (2, 4, 5, 4),
        (4, 3, 3, 3),
    ),
    "conv3d_s2": (lambda x, w: tc.conv3d(x, w, stride=2, padding=1), (1, 2, 5, 4, 4), (3, 2, 3, 3, 3)),
    "causal": (lambda x, w: tc.causal_conv1d(x, w, activation="silu"), (2, 5, 9), (5, 4)),
    "depthwise_transposed_s2": (
        lambda x, w: tc.conv_transpose2d(x, w, stride=2, padding=1, groups=x.shape[1]),
        (2, 3, 5, 4),
        (3, 2, 3, 3),
    ),
    "im2col_gemm_chunked": (
        lambda x, w: tc.conv2d(x, w, padding=1, algo="im2col_gemm"),
        (5, 4, 6, 5),
        (3, 4, 3, 3),
    ),
    "unfold_fold_crop": (
        lambda x, w: tc.crop(tc.fold(tc.unfold(x, 3, padding=1, stride=2) * w.sum(), x.shape[2:], 3, padding=1, stride=2), x[:, :, 1:4, 1:4], offset=1),
        (2, 3, 7, 6),
        (1,),
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(_OWN_BUFFER_CASES))
def test_kernels_write_no_offset_or_strided_view_of_our_buffers(case, device, monkeypatch):
    """Every tensor a kernel is launched on that tritonconv allocated (not the caller's data)
    is a whole buffer or a leading part of one (no storage offset, no gaps), and the kernel
    writes nothing past its end. Under torch.compile a kernel writing an offset or strided view
    is cloned into a buffer sized to the view, and torch 2.11 then reads past it (compiled
    MobileNetV3 training faulted on the GPU this way, session 17;
    ``testing.check_no_view_written`` checks Inductor's graphs)."""
    if not tc.INTERPRETER:
        pytest.skip("records launches under the interpreter (the GPU's replay passes addresses)")
    fn, x_shape, w_shape = _OWN_BUFFER_CASES[case]
    x = torch.randn(x_shape, device=device, dtype=torch.float64)
    if case.endswith("nhwc"):
        x = x.to(memory_format=torch.channels_last)
    x.requires_grad_()
    w = torch.randn(w_shape, device=device, dtype=torch.float64, requires_grad=True)
    launched, callers, real = [], set(), launch._interpret

    def record(kernel, grid, args, meta):
        """Also: no kernel writes past the end of a leading part of a buffer it is given
        (session 16's split-K bug: given split 0's view of the partials, it wrote the rest)."""
        launched.append(args)
        tails = []
        for t in args:
            if isinstance(t, torch.Tensor) and t.numel():
                flat = torch.empty(0, dtype=t.dtype).set_(t.untyped_storage())
                end = launch._extent(t)[1] + 1
                if end < flat.numel():  # (bytes: an unwritten tail may hold NaN)
                    tails.append((flat, end, flat[end:].view(torch.uint8).clone()))
        real(kernel, grid, args, meta)
        for flat, end, before in tails:
            after = flat[end:].view(torch.uint8)
            assert torch.equal(after, before), f"{kernel} wrote past an argument's end"

    monkeypatch.setattr(launch, "_interpret", record)
    # (chunked: the column buffer holds 2 of the 5 samples, the last chunk one)
    monkeypatch.setattr(tc.ops.conv_gemm, "_workspace_limit", 2 * 4 * 9 * 30 * 8)
    for _ in range(2):  # (the first call records its launch plans, the second replays them)
        y = fn(x, w)
        grad = torch.randn_like(y)
        callers |= {t.untyped_storage().data_ptr() for t in (x, w, grad)}
        torch.autograd.grad(y, (x, w), grad)
    tensors = [a for args in launched for a in args if isinstance(a, torch.Tensor)]
    assert tensors, "no launch recorded"
    for t in tensors:
        if t.untyped_storage().data_ptr() in callers or t.numel() == 0:
            continue
        assert is_leading_part(t), (tuple(t.shape), t.stride(), t.storage_offset())


@triton.jit
def _doubled_box_kernel(src, out_ptr, R, C, BR: tl.constexpr, BC: tl.constexpr):
    value = src.load([0, 0])  # zero-filled past R x C
    r = tl.arange(0, BR)[:, None]
    c = tl.arange(0, BC)[None, :]
    tl.store(out_ptr + r * C + c, value * 2, mask=(r < R) & (c < C))


launch.needs_aligned(_doubled_box_kernel, "src")


@launch.launch_plan
def _doubled(x):
    out = launch.allocate(tuple(x.shape), x.dtype, x.device)
    box = launch.TensorDescriptor(x, list(x.shape), [x.stride(0), 1], [8, 16])
    launch.launch(_doubled_box_kernel, (1,), box, out, *x.shape, BR=8, BC=16)
    return out


def test_descriptor_arguments_replay_on_the_new_tensors(device):
    """A TMA descriptor argument is recorded as its base's slot and its layout: a replay
    makes it over the replay's tensor (the plan keeps none of the recording's), and a replay
    on a tensor whose address TMA cannot take runs the function itself, which says why."""
    _doubled.plans.clear()
    for _ in range(3):
        x = torch.randn(6, 8, device=device)
        assert_close(_doubled(x), (2 * x).cpu())
    (plan,) = _doubled.plans.entries.values()
    (step,) = [s for s in plan.steps if isinstance(s, launch._Launch)]
    assert step.template[0] is None and len(step.descriptors) == 1
    assert plan.aligned == ((0, 0),)
    unaligned = torch.randn(49, device=device)[1:].view(6, 8)
    with pytest.raises(AssertionError, match="16-byte aligned"):
        _doubled(unaligned)  # (TensorDescriptor's own check, in the unrecorded function)


_FULL_ARGUMENT_CASES = {
    **{name: (fn, x, w, torch.float64) for name, (fn, x, w) in _OWN_BUFFER_CASES.items()},
    "pointwise_tma": (
        lambda x, w: tc.conv2d(x, w, algo="implicit_gemm"), (2, 64, 3, 4), (64, 64, 1, 1),
        torch.bfloat16,
    ),
    "tap_gemm": (
        lambda x, w: tc.conv_transpose2d(x, w, stride=2, algo="implicit_gemm"), (2, 16, 3, 4),
        (16, 16, 2, 2), torch.bfloat16,
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(_FULL_ARGUMENT_CASES))
def test_every_launch_passes_every_parameter(case, device, monkeypatch):
    """Every kernel launch of a forward and backward passes all of the kernel's parameters:
    one left to its default makes the lean launcher step aside (``launch._tail``), and each
    such launch then goes through Triton's own ``JITFunction.run``, 30-40 µs of host time on
    the H100 machine. (A defaulted ``SCATTER`` did that to every 1x1 TMA launch before its
    first GPU run, session 24.)"""
    if not tc.INTERPRETER:
        pytest.skip("records launches under the interpreter")
    fn, x_shape, w_shape, dtype = _FULL_ARGUMENT_CASES[case]
    x = torch.randn(x_shape, device=device, dtype=dtype)
    if case.endswith("nhwc") or dtype == torch.bfloat16:
        x = x.to(memory_format=torch.channels_last)
    x.requires_grad_()
    w = torch.randn(w_shape, device=device, dtype=dtype, requires_grad=True)
    short, real = [], launch._interpret

    def record(kernel, grid, args, meta):
        if launch._tail(kernel, len(args), meta) is None:
            short.append(getattr(kernel, "__name__", None) or kernel.fn.__name__)
        real(kernel, grid, args, meta)

    monkeypatch.setattr(launch, "_interpret", record)
    monkeypatch.setattr(tc.ops.conv_gemm, "_workspace_limit", 2 * 4 * 9 * 30 * 8)
    tc.clear_caches()
    y = fn(x, w)
    torch.autograd.grad(y, (x, w), torch.randn_like(y))
    assert not short, f"launched with parameters left to their defaults: {short}"


@triton.jit
def _twice(v):
    return v + v


@triton.jit
def _helpers_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offsets, mask=offsets < n)
    for _ in tl.static_range(3):
        x = _twice(x)
    tl.store(out_ptr + offsets, x, mask=offsets < n)


@pytest.mark.skipif(not tc.INTERPRETER, reason="Triton's interpreter only")
def test_interpreted_launch_patches_the_language_once(monkeypatch):
    """Under the interpreter a launch patches ``triton.language`` once, not again for each
    ``@triton.jit`` helper call inside the kernel; overflow checks are off for our launches
    (unless asked for) and both are as they were after the launch; results are unchanged."""
    from triton.runtime import interpreter

    if not hasattr(interpreter, "_LangPatchScope"):
        pytest.skip("a Triton whose interpreter patches the language another way")
    patches = []
    real = interpreter._patch_lang

    def spy(fn):
        patches.append(fn)
        return real(fn)

    monkeypatch.setattr(interpreter, "_patch_lang", spy)
    checks = []
    real_sanitizer = interpreter.TritonSemantic.binary_op_sanitize_overflow_impl

    def sanitizer(self, *args):
        checks.append(self.builder.options.sanitize_overflow)
        return real_sanitizer(self, *args)

    monkeypatch.setattr(interpreter.TritonSemantic, "binary_op_sanitize_overflow_impl", sanitizer)
    options = interpreter.interpreter_builder.options
    x = torch.arange(100, dtype=torch.int32)
    # Triton's own launch: the kernel's patch, then one per helper call (3 a program, 2 programs)
    out = torch.zeros_like(x)
    _helpers_kernel[(2,)](x, out, 100, BLOCK=64)
    assert torch.equal(out, x * 8) and len(patches) == 7
    for overflow_checks in (False, True):
        monkeypatch.setattr(launch, "INTERPRETER_OVERFLOW_CHECKS", overflow_checks)
        patches.clear(), checks.clear()
        out = torch.zeros_like(x)
        launch.launch(_helpers_kernel, (2,), x, out, 100, BLOCK=64)
        assert torch.equal(out, x * 8)
        assert len(patches) == 1  # the launch's own patch does for every helper call
        assert checks and set(checks) == {overflow_checks}
        assert interpreter.interpreter_builder.options is options
        assert interpreter._patch_lang is spy


class _Subclass(torch.Tensor):
    """A tensor subclass that leaves dispatch alone (as torchvision's ``tv_tensors`` do): its
    data is a tensor's, so the kernels read it."""


@pytest.mark.parametrize("algo", ["implicit_gemm", "direct", "im2col_gemm"])
def test_tensor_subclasses_with_real_data_convolve(algo, device):
    """A subclass input, weight or output gradient (one that does not take over
    ``__torch_dispatch__``) gives PyTorch's values, forward and backward; a backward replay
    recorded for plain tensors serves it with its own data."""
    x = torch.randn(2, 4, 7, 6, dtype=torch.float64, device=device)
    w = torch.randn(6, 4, 3, 3, dtype=torch.float64, device=device)
    dy = torch.randn(2, 6, 7, 6, dtype=torch.float64, device=device)
    ref = [t.clone().requires_grad_() for t in (x, w)]
    want = torch.autograd.grad(F.conv2d(*ref, padding=1), ref, dy)
    with torch.no_grad():
        got = tc.conv2d(x.as_subclass(_Subclass), w.as_subclass(_Subclass), padding=1, algo=algo)
    assert_close(got, F.conv2d(x, w, padding=1), reduction=36)
    for grad in (dy, dy.as_subclass(_Subclass), dy):  # plain first: its replay records
        leaves = [t.clone().requires_grad_() for t in (x, w)]
        grads = torch.autograd.grad(tc.conv2d(*leaves, padding=1, algo=algo), leaves, grad)
        for g, exact in zip(grads, want):
            assert_close(g, exact, reduction=36 * 2)
    leaves = [t.clone().as_subclass(_Subclass).requires_grad_() for t in (x, w)]
    grads = torch.autograd.grad(tc.conv2d(*leaves, padding=1, algo=algo), leaves, dy)
    for g, exact in zip(grads, want):
        assert_close(g, exact, reduction=36 * 2)


def test_int64_decision_follows_a_lowered_limit(monkeypatch):
    """``needs_int64`` answers for the limit in force: a shape first judged under the real
    2**31 limit is judged again under a lowered one (as tests and ``compile_check --index64``
    lower it), not read from the first answer's cache."""
    from tritonconv.ops import common

    t = torch.empty(4, 8)
    assert not common.needs_int64(t)
    monkeypatch.setattr(common, "INDEX32_LIMIT", 16)
    assert common.needs_int64(t)


@pytest.mark.skipif(tc.INTERPRETER, reason="compiled kernels only")
def test_a_tma_launch_in_a_thread_without_a_context(device):
    """A thread that has made no CUDA call has no current context (autograd's device thread at
    a backward's first launch), and Triton encodes a kernel's TMA descriptors before its
    launcher binds one: the launch binds the primary context first (session 38: "Failed to
    create tensor map descriptor: invalid device context"). First launches and replays, on
    16-bit channels-last layers the TMA kernels take (where the GPU has TMA)."""
    x = torch.randn(3, 64, 13, 17, device=device, dtype=torch.bfloat16)
    x = x.contiguous(memory_format=torch.channels_last)
    weights = [torch.randn(k, 64, s, s, device=device, dtype=torch.bfloat16) / 24 for k, s in
               ((96, 1), (64, 3))]  # fmt: skip
    weights = [w.contiguous(memory_format=torch.channels_last) for w in weights]
    tc.clear_caches()
    seen = {}

    def run():
        try:
            context = ctypes.c_void_p()
            launch._libcuda().cuCtxGetCurrent(ctypes.byref(context))
            seen["context before"] = context.value
            for w in weights:
                for _ in range(2):  # the first launch, then a replay
                    y = tc.conv2d(x, w, padding=w.shape[-1] // 2, algo="implicit_gemm")
                    want = F.conv2d(x.double(), w.double(), padding=w.shape[-1] // 2)
                    assert_close(y, want, reduction=64 * w[0, 0].numel(), name="output")
        except BaseException as error:  # (re-raised in the test's thread)
            seen["error"] = error

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    if "error" in seen:
        raise seen["error"]
    assert seen["context before"] is None, "the thread had a context: the case is not tested"


def test_tritons_wrapper_gets_a_context_before_it_encodes_descriptors(monkeypatch):
    """Where no direct launcher is bound (another Triton than 3.6), a cached launch goes
    through Triton's wrapper, which encodes descriptor arguments before its C launcher binds
    a context: the thread's context is bound first, as before a first launch; a launch
    without descriptors binds nothing."""
    if launch.TensorDescriptor is None:
        pytest.skip("this Triton has no host-side TMA descriptors")
    bound, runs = [], []
    monkeypatch.setattr(launch, "bind_cuda_context", bound.append)
    monkeypatch.setattr(launch, "current_device", lambda: 3)
    entry = (_Compiled(lambda *args: runs.append(args)), (), None)
    descriptor = launch.TensorDescriptor(torch.empty(64), [8, 8], [8, 1], [8, 8])
    launch._run_compiled(entry, (1,), 0, [5, descriptor])
    assert bound == [3] and len(runs) == 1
    launch._run_compiled(entry, (1,), 0, [5])
    assert bound == [3] and len(runs) == 2


def test_a_driver_failure_binding_the_context_says_which_call(monkeypatch):
    """A CUDA driver error while binding the context raises, naming the driver call and its
    error code, and leaves the thread unmarked (the next launch tries again)."""

    class Driver:  # the driver without a current context, refusing the primary one
        def cuCtxGetCurrent(self, out):
            return 0

        def cuDeviceGet(self, out, ordinal):
            return 0

        def cuDevicePrimaryCtxRetain(self, out, device):
            return 101  # CUDA_ERROR_INVALID_DEVICE

    monkeypatch.setattr(launch, "_libcuda", Driver)
    seen = {}

    def run():  # (a fresh thread: nothing bound in it yet)
        try:
            launch.bind_cuda_context(7)
        except RuntimeError as error:
            seen["error"] = str(error)
        seen["marked"] = getattr(launch._thread_context, "device", None)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    assert seen["error"] == "tritonconv: cuDevicePrimaryCtxRetain failed with CUDA driver error 101"
    assert seen["marked"] is None
