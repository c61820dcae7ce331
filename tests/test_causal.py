"""causal_conv1d and causal_conv1d_update against the causal-conv1d package's reference
semantics, written here with F.conv1d in float64."""

import pytest
import torch
import torch.nn.functional as F

import tritonconv as tc
from tritonconv import fuzz, library
from tritonconv.geometry import INT_DTYPES
from tritonconv.testing import assert_close, poison_, random_tensor


def reference(x, weight, bias=None, activation=None, initial_states=None):
    """(out, final_states) of causal-conv1d's causal_conv1d_ref."""
    seqlen = x.shape[-1]
    dim, width = weight.shape
    if initial_states is None:
        out = F.conv1d(x, weight.unsqueeze(1), bias, padding=width - 1, groups=dim)
    else:
        x = torch.cat([initial_states, x], dim=-1)
        out = F.conv1d(x, weight.unsqueeze(1), bias, padding=0, groups=dim)
    out = out[..., :seqlen]
    final = F.pad(x, (width - 1 - x.shape[-1], 0))[..., -(width - 1) :]
    return (out if activation is None else F.silu(out)), final


@pytest.mark.parametrize("seqlen", [1, 2, 9])
@pytest.mark.parametrize("activation", [None, "silu"])
@pytest.mark.parametrize("channel_last", [False, True])
@pytest.mark.parametrize("with_state", [False, True])
def test_causal_conv1d(seqlen, activation, channel_last, with_state, device):
    batch, dim, width = 2, 5, 4
    if channel_last:  # (batch, seqlen, dim) memory, viewed as (batch, dim, seqlen)
        x = torch.randn(batch, seqlen, dim, dtype=torch.float64).transpose(1, 2)
    else:
        x = torch.randn(batch, dim, seqlen, dtype=torch.float64)
    w = torch.randn(dim, width, dtype=torch.float64)
    b = torch.randn(dim, dtype=torch.float64)
    init = torch.randn(batch, dim, width - 1, dtype=torch.float64) if with_state else None
    leaves = [t.requires_grad_() for t in (x, w, b)]
    ref, ref_final = reference(x, w, b, activation, init)
    mine = [t.detach().to(device).requires_grad_() for t in (x, w, b)]
    init_d = init.to(device) if init is not None else None
    out, final = tc.causal_conv1d(
        *mine, activation=activation, initial_states=init_d, return_final_states=True
    )
    assert_close(out, ref)
    assert_close(final, ref_final)
    grad = torch.randn_like(ref)
    got = torch.autograd.grad(out, mine, grad.to(device))
    want = torch.autograd.grad(ref, leaves, grad)
    for g, e in zip(got, want, strict=True):
        assert_close(g, e, reduction=16)


def test_causal_conv1d_update_matches_the_full_sequence(device):
    """Decoding token by token with a rolling state gives the full sequence's outputs."""
    batch, dim, width, seqlen = 2, 3, 4, 7
    x = torch.randn(batch, dim, seqlen, dtype=torch.float64)
    w = torch.randn(dim, width, dtype=torch.float64)
    b = torch.randn(dim, dtype=torch.float64)
    full, _ = reference(x, w, b, "silu")
    state = torch.zeros(batch, dim, width, dtype=torch.float64, device=device)  # longer: fine
    steps = [
        tc.causal_conv1d_update(x[:, :, t].to(device), state, w.to(device), b.to(device), "silu")
        for t in range(seqlen)
    ]
    assert_close(torch.stack(steps, dim=-1), full)
    assert_close(state, x[:, :, -width:])
    two = tc.causal_conv1d_update(x[:, :, :2].to(device), state.zero_(), w.to(device), None)
    assert_close(two, reference(x[:, :, :2], w)[0])


def test_causal_errors(device):
    x = torch.randn(1, 3, 5, device=device)
    w = torch.randn(3, 4, device=device)
    with pytest.raises(tc.TritonConvError, match="activation must be one of"):
        tc.causal_conv1d(x, w, activation="relu")
    with pytest.raises(tc.TritonConvError, match="x has 3 channels"):
        tc.causal_conv1d(x, torch.randn(2, 4, device=device))
    with pytest.raises(tc.TritonConvError, match="initial_states must be"):
        tc.causal_conv1d(x, w, initial_states=torch.zeros(1, 3, 2, device=device))
    with pytest.raises(tc.TritonConvError, match="fewer than width - 1"):
        tc.causal_conv1d_update(x[..., 0], torch.zeros(1, 3, 2, device=device), w)


def test_causal_rank_error_is_clear(device):
    with pytest.raises(tc.TritonConvError, match="x must be"):
        tc.causal_conv1d(torch.randn(4, device=device), torch.randn(4, 3, device=device))


def test_more_causal_errors(device):
    x, w = torch.randn(1, 3, 5, device=device), torch.randn(3, 4, device=device)
    with pytest.raises(tc.TritonConvError, match="weight must be \\(dim, width\\)"):
        tc.causal_conv1d(x, w[..., None])
    with pytest.raises(tc.TritonConvError, match="bias must have 3 elements"):
        tc.causal_conv1d(x, w, torch.randn(2, device=device))
    with pytest.raises(tc.TritonConvError, match="conv_state must be \\(1, 3, state_len\\)"):
        tc.causal_conv1d_update(x[..., 0], torch.zeros(2, 3, 4, device=device), w)


# --------------------------------------------------------------------------------------------
# the causal kernels (kernels/causal.py): dtypes, widths, layouts, every gradient, poisoned
# outputs, determinism; the fuzz's causal draws
# --------------------------------------------------------------------------------------------


def _channel_last(t):
    return t.transpose(1, 2).contiguous().transpose(1, 2)


def _strided(t):
    wide = t.new_zeros(*t.shape[:2], 2 * t.shape[2])
    wide[..., ::2] = t
    return wide[..., ::2]


LAYOUTS = {"channel_first": lambda t: t.contiguous(), "channel_last": _channel_last}
LAYOUTS["strided"] = _strided


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.int32])
@pytest.mark.parametrize("width", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_kernels_against_float64(dtype, width, layout, device):
    """Forward and the three gradients of the op pair, dims across the 16-channel tile."""
    batch, dim, seqlen = 2, 17, 23
    x = LAYOUTS[layout](random_tensor((batch, dim, seqlen), dtype, device))
    w = random_tensor((dim, width), dtype, device)
    b = random_tensor((dim,), dtype, device)
    silu = dtype.is_floating_point
    xd, wd, bd = (t.cpu().double() for t in (x, w, b))
    leaves = [t.requires_grad_() for t in (xd, wd, bd)]
    ref, _ = reference(*leaves, activation="silu" if silu else None)
    dy = random_tensor(tuple(ref.shape), dtype, device)
    want = torch.autograd.grad(ref, leaves, dy.cpu().double())
    y = library.causal_conv1d(x, w, b, width - 1, silu)
    assert y.stride(1) == (1 if layout == "channel_last" else seqlen)
    grads = library.causal_conv1d_backward(dy, x, w, b, width - 1, silu, [True, True, True])
    assert_close(y, ref, reduction=width)
    for name, got, exp in zip(("dx", "dw", "db"), grads, want, strict=True):
        assert_close(got, exp, reduction=batch * seqlen, name=name)


@pytest.mark.parametrize("mask", [[True, False, False], [False, True, False], [False, False, True]])
def test_backward_computes_what_the_mask_asks(mask, device):
    x = random_tensor((2, 20, 40), torch.float64, device)
    w, b = (
        random_tensor((20, 4), torch.float64, device),
        random_tensor((20,), torch.float64, device),
    )
    dy = random_tensor((2, 20, 40), torch.float64, device)
    full = library.causal_conv1d_backward(dy, x, w, b, 3, True, [True] * 3)
    part = library.causal_conv1d_backward(dy, x, w, b, 3, True, mask)
    for wanted, a, c in zip(mask, part, full, strict=True):
        if wanted:
            assert torch.equal(a, c)
        else:
            assert a.numel() == 0


def test_every_output_element_is_written(device, monkeypatch):
    """Outputs, gradients and partial buffers start poisoned: every element must be written."""
    from tritonconv import launch

    empty, empty_strided = torch.empty, torch.empty_strided
    monkeypatch.setattr(launch.torch, "empty", lambda *a, **k: poison_(empty(*a, **k)))
    monkeypatch.setattr(
        launch.torch, "empty_strided", lambda *a, **k: poison_(empty_strided(*a, **k))
    )
    tc.clear_caches()
    for dtype, layout in ((torch.float32, _channel_last), (torch.int16, _channel_last),
                          (torch.float32, torch.Tensor.contiguous)):  # fmt: skip
        x = layout(random_tensor((3, 33, 50), dtype, device))
        w, b = random_tensor((33, 4), dtype, device), random_tensor((33,), dtype, device)
        dy = random_tensor((3, 33, 50), dtype, device)
        y = library.causal_conv1d(x, w, b, 3, False)
        grads = library.causal_conv1d_backward(dy, x, w, b, 3, False, [True] * 3)
        xd, wd, bd, dyd = (t.cpu().double() for t in (x, w, b, dy))
        leaves = [t.requires_grad_() for t in (xd, wd, bd)]
        ref, _ = reference(*leaves)
        want = torch.autograd.grad(ref, leaves, dyd)
        exact = dtype in INT_DTYPES
        assert_close(y, ref.round().long().to(dtype) if exact else ref, reduction=4)
        for got, exp in zip(grads, want, strict=True):
            exp = exp.round().long().to(dtype) if exact else exp
            assert_close(got, exp, reduction=150)
    tc.clear_caches()


def test_weight_gradient_is_bitwise_reproducible(device):
    x = random_tensor((4, 40, 300), torch.float32, device)
    w, b = (
        random_tensor((40, 4), torch.float32, device),
        random_tensor((40,), torch.float32, device),
    )
    dy = random_tensor((4, 40, 300), torch.float32, device)
    first = library.causal_conv1d_backward(dy, x, w, b, 3, True, [True] * 3)
    second = library.causal_conv1d_backward(dy, x, w, b, 3, True, [True] * 3)
    for a, c in zip(first, second, strict=True):
        assert torch.equal(a, c)


@pytest.mark.parametrize("batch, dim, seqlen", [(0, 3, 5), (2, 3, 0), (2, 0, 5)])
def test_empty_inputs(batch, dim, seqlen, device):
    x = torch.randn(batch, dim, seqlen, device=device, requires_grad=True)
    w = torch.randn(dim, 4, device=device, requires_grad=True)
    b = torch.randn(dim, device=device, requires_grad=True)
    out = tc.causal_conv1d(x, w, b, activation="silu")
    assert out.shape == (batch, dim, seqlen)
    gx, gw, gb = torch.autograd.grad(out.sum(), (x, w, b))
    assert gx.shape == x.shape and not gw.any() and not gb.any()


def test_integer_inputs_with_an_activation_are_refused(device):
    x = torch.ones(1, 2, 5, dtype=torch.int32, device=device)
    w = torch.ones(2, 4, dtype=torch.int32, device=device)
    with pytest.raises(tc.TritonConvError, match="needs a floating-point weight"):
        tc.causal_conv1d(x, w, activation="silu")


def test_channel_last_x_gives_channel_last_outputs(device):
    """With and without initial states (the concatenation keeps x's layout)."""
    x = _channel_last(torch.randn(2, 8, 9, device=device))
    w = torch.randn(8, 4, device=device)
    assert tc.causal_conv1d(x, w).stride(1) == 1
    init = torch.randn(2, 8, 3, device=device)
    assert tc.causal_conv1d(x, w, initial_states=init).stride(1) == 1


FUZZ_LIMIT = dict(max_elements=3000)


# Split on the GPU machine so that xdist workers run the parts side by side.
FUZZ_SHARDS = 1 if tc.INTERPRETER else 4


@pytest.mark.parametrize("shard", range(FUZZ_SHARDS))
def test_fixed_seed_causal_fuzz_is_clean(shard):
    drawn = [fuzz.draw_causal_case(s, **FUZZ_LIMIT) for s in range(40)]
    assert {c.layout for c in drawn} == set(fuzz.CAUSAL_LAYOUTS)
    assert any(c.state for c in drawn) and any(c.silu for c in drawn)
    cases = drawn[shard::FUZZ_SHARDS]
    for case in cases:
        assert fuzz.parse_spec(case.spec()) == case
        for result in fuzz.check_case(case):
            assert not isinstance(result, fuzz.Failure), result.line()


def test_the_fuzz_draws_causal_cases():
    drawn = [fuzz.draw(s) for s in range(200)]
    share = sum(isinstance(c, fuzz.CausalCase) for c in drawn) / len(drawn)
    assert 0.05 < share < 0.25


@pytest.mark.parametrize("which", [0, 1, 2])
def test_causal_fuzz_catches_a_wrong_gradient(monkeypatch, which):
    """A doubled dx, dw or db fails the fuzz (a fuzz that cannot fail proves nothing)."""
    from tritonconv.ops import causal

    real = causal.causal_conv1d_backward

    def wrong(*args):
        grads = list(real(*args))
        grads[which] = grads[which] * 2
        return tuple(grads)

    monkeypatch.setattr(causal, "causal_conv1d_backward", wrong)
    case = fuzz.CausalCase.parse(
        "batch=2 dim=5 seqlen=30 width=4 bias=1 silu=1 state=0 dtype=float32 "
        "layout=channel_first dy_layout=channel_last seed=3"
    )
    (result,) = fuzz.check_case(case)
    assert isinstance(result, fuzz.Failure)
    assert any(p.startswith(("dx", "dw", "db")[which]) for p in result.problems), result.problems


def test_causal_ops_pass_opcheck(device):
    """Fakes agree with the real ops; registration and autograd are sound (opcheck)."""
    x = torch.randn(2, 6, 11, dtype=torch.float64, device=device)
    w = torch.randn(6, 4, dtype=torch.float64, device=device)
    b = torch.randn(6, dtype=torch.float64, device=device)
    ops = torch.ops.tritonconv
    dy = torch.randn(2, 6, 11, dtype=torch.float64, device=device)
    torch.library.opcheck(ops.causal_conv1d, (x, w, b, 3, True))
    torch.library.opcheck(ops.causal_conv1d, (_channel_last(x), w, None, 0, False))
    torch.library.opcheck(ops.causal_conv1d_backward, (dy, x, w, b, 3, True, [True, True, True]))
    torch.library.opcheck(
        ops.causal_conv1d_backward, (dy, x, w, None, 3, False, [True, False, False])
    )


def test_causal_compiles_to_one_graph_with_gradients(device):
    from torch._dynamo.testing import CompileCounterWithBackend

    counter = CompileCounterWithBackend("aot_eager" if device == "cpu" else "inductor")
    x = torch.randn(2, 8, 13, device=device, requires_grad=True)
    w = torch.randn(8, 4, device=device, requires_grad=True)
    b = torch.randn(8, device=device, requires_grad=True)

    def block(x, w, b):
        return tc.causal_conv1d(x, w, b, activation="silu")

    torch._dynamo.reset()
    compiled = torch.compile(block, backend=counter, fullgraph=True)
    out = compiled(x, w, b)
    got = torch.autograd.grad(out.sum(), (x, w, b))
    assert counter.frame_count == 1
    leaves = [t.detach().double().requires_grad_() for t in (x, w, b)]
    ref, _ = reference(*(t.cpu() for t in leaves), activation="silu")
    assert_close(out, ref, reduction=4)
    for g, e in zip(got, torch.autograd.grad(ref.sum(), leaves), strict=True):
        assert_close(g, e, reduction=26)


def test_int64_indexing_path(monkeypatch, device):
    """Force the 64-bit index arithmetic (used from 2**31 elements on) on small tensors."""
    from tritonconv.ops import common

    monkeypatch.setattr(common, "INDEX32_LIMIT", 16)
    x = _channel_last(random_tensor((3, 7, 29), torch.float64, device))
    w, b = random_tensor((7, 3), torch.float64, device), random_tensor((7,), torch.float64, device)
    dy = random_tensor((3, 7, 29), torch.float64, device)
    leaves = [t.cpu().requires_grad_() for t in (x, w, b)]
    ref, _ = reference(*leaves, activation="silu")
    want = torch.autograd.grad(ref, leaves, dy.cpu())
    assert_close(library.causal_conv1d(x, w, b, 2, True), ref, reduction=3)
    got = library.causal_conv1d_backward(dy, x, w, b, 2, True, [True] * 3)
    for g, e in zip(got, want, strict=True):
        assert_close(g, e, reduction=90)


def test_zero_width_and_bad_op_arguments_are_refused(device):
    x = torch.randn(1, 2, 5, device=device)
    with pytest.raises(tc.TritonConvError, match="width >= 1"):
        tc.causal_conv1d(x, torch.randn(2, 0, device=device))
    w = torch.randn(2, 3, device=device)
    with pytest.raises(tc.TritonConvError, match=r"pad must be in \[0, 2\]"):
        library.causal_conv1d(x, w, None, 3, False)
    with pytest.raises(tc.TritonConvError, match=r"x is torch\.float64 but weight"):
        library.causal_conv1d(x.double(), w, None, 2, False)
    with pytest.raises(tc.TritonConvError, match="grad_output must be"):
        library.causal_conv1d_backward(x[..., :4], x, w, None, 2, False, [True] * 3)
    with pytest.raises(tc.TritonConvError, match=r"x must be \(batch, dim, L\)"):
        library.causal_conv1d(x[0], w, None, 2, False)


def test_a_causal_repro_refuses_other_algorithms():
    case = fuzz.CausalCase.parse(
        "batch=1 dim=2 seqlen=5 width=3 bias=0 silu=0 state=0 dtype=float32 "
        "layout=channel_first dy_layout=channel_first seed=1"
    )
    (result,) = fuzz.check_case(case, ["direct"])
    assert isinstance(result, fuzz.Failure)
    assert "a causal case runs algo 'causal', not ['direct']" in result.problems[0]


@pytest.mark.parametrize("width", [1, 2, 3, 4, 5])
@pytest.mark.parametrize(
    "dtype, silu", [(torch.float32, False), (torch.float32, True), (torch.bfloat16, True),
                    (torch.int32, False)], ids=str,
)  # fmt: skip
def test_forward_with_x_loaded_once_matches_per_tap_loads(width, dtype, silu, device, monkeypatch):
    """The forward's ``X_ONCE`` form (x loaded once a block, each tap's shifted set gathered
    from it and the neighbouring blocks' edge positions) gives the per-tap loads' values, for
    every window shift (``pad``: the causal ``width - 1``, after ``initial_states`` 0, and
    between), over several position blocks (300 positions: the halos cross blocks) and a
    partial channel block; and float64's values. Integers bit for bit; floats to an output
    rounding: the same products in the same order, but on an H200 the compiler fuses fp32
    multiply-adds differently in the two forms (session 44: up to 2 ulp of the largest value,
    equal error against float64), which can move a rounded bf16 output by one."""
    from tritonconv.ops import causal

    launched = []
    real = causal.launch
    monkeypatch.setattr(
        causal,
        "launch",
        lambda kernel, grid, *a, **m: launched.append(m["X_ONCE"]) or real(kernel, grid, *a, **m),
    )
    monkeypatch.setattr(causal, "FORWARD_SEGMENTS", False)  # (the tile kernel's two forms)
    batch, dim, seqlen = 2, 19, 300
    x = random_tensor((batch, dim, seqlen), dtype, device)
    w = random_tensor((dim, width), dtype, device)
    b = random_tensor((dim,), dtype, device)
    for pad in sorted({0, width // 2, width - 1}):
        results = {}
        for once in (False, True):
            monkeypatch.setattr(causal, "X_ONCE", once)
            tc.clear_caches()
            results[once] = library.causal_conv1d(x, w, b, pad, silu)
        assert launched[-2:] == [False, True]
        if dtype.is_floating_point:
            ulp = torch.finfo(dtype).eps * results[False].abs().max().item()
            apart = (results[True].double() - results[False].double()).abs().max().item()
            assert apart <= 2 * ulp, f"pad {pad}: {apart} apart"
        else:
            assert torch.equal(results[True], results[False]), f"pad {pad}"
        xd, wd, bd = (t.cpu().double() for t in (x, w, b))
        want = F.conv1d(xd, wd[:, None], bd, padding=pad, groups=dim)
        want = want[..., : seqlen - (width - 1) + pad]
        assert_close(results[True], F.silu(want) if silu else want, reduction=width)


def _channel_last(t: torch.Tensor) -> torch.Tensor:
    return t.transpose(1, 2).contiguous().transpose(1, 2)


@pytest.mark.parametrize("width", [1, 2, 3, 4])
@pytest.mark.parametrize(
    "dtype, silu", [(torch.float32, False), (torch.float32, True), (torch.bfloat16, True),
                    (torch.int32, False)], ids=str,
)  # fmt: skip
def test_backward_rows_match_the_tiles(width, dtype, silu, device, monkeypatch):
    """Channel-last x's backward walking positions one row at a time (``BACKWARD_ROWS``: the
    window's rows carried in registers across steps and position chunks) gives the 2-D tile
    kernel's dx, dW and db for every window shift, over several chunks and a
    partial channel block (70 positions: two chunks of 9 four-row steps under the interpreter),
    dy laid out as x or not, and the gradients a mask leaves out are not needed for the rest:
    integers bit for bit, float dx to two roundings (the same sums in the same order; the
    compiler may fuse multiply-adds differently in the two kernels), float dW and db to a
    sum's rounding (the tile kernel adds a block's positions as a tree, the rows in order)."""
    from tritonconv.ops import causal

    kernels = []
    real = causal.launch
    monkeypatch.setattr(
        causal, "launch", lambda kernel, *a, **m: kernels.append(kernel) or real(kernel, *a, **m)
    )
    batch, dim, seqlen = 2, 19, 70
    x = _channel_last(random_tensor((batch, dim, seqlen), dtype, device))
    w = random_tensor((dim, width), dtype, device)
    b = random_tensor((dim,), dtype, device)
    for turn, pad in enumerate(sorted({0, width // 2, width - 1})):
        dy = random_tensor((batch, dim, seqlen - (width - 1) + pad), dtype, device)
        if turn % 2 == 0:  # dy laid out as x, or (odd turns) channel-first: dy's own strides
            dy = _channel_last(dy)
        results = {}
        for rows in (False, True):
            monkeypatch.setattr(causal, "BACKWARD_ROWS", rows)
            tc.clear_caches()
            results[rows] = library.causal_conv1d_backward(dy, x, w, b, pad, silu, [True] * 3)
        assert [k.__name__ for k in kernels[-2:]] == [
            "causal_conv1d_backward_kernel", "causal_conv1d_backward_rows_kernel",
        ]  # fmt: skip
        for name, tiles, row in zip(("dx", "dw", "db"), results[False], results[True], strict=True):
            if not dtype.is_floating_point:
                assert torch.equal(row, tiles), f"pad {pad} {name}"
            elif name == "dx":
                ulp = torch.finfo(dtype).eps * tiles.abs().max().item()
                apart = (row.double() - tiles.double()).abs().max().item()
                assert apart <= 2 * ulp, f"pad {pad} {name}: {apart} apart"
            else:  # sums over the sequence: the tiles add a block's positions as a tree
                assert_close(row, tiles.double(), reduction=batch * seqlen, name=name)
        for mask in ([True, False, False], [False, True, True]):
            part = library.causal_conv1d_backward(dy, x, w, b, pad, silu, mask)
            for wanted, a, c in zip(mask, part, results[True], strict=True):
                if wanted:
                    assert torch.equal(a, c), (pad, mask)


@pytest.mark.parametrize("stages", [2, 3])
def test_pipelined_segments_backward_is_the_plain_loop(stages, device, monkeypatch):
    """The segments backward's walk software-pipelined (``BACKWARD_SEGMENTS_STAGES``: the next
    blocks' loads issued while a block computes) gives the plain loop's dx, dW and db bit for
    bit (the same arithmetic in the same order). On a GPU the shape gives each program
    several blocks to walk (batch x channel blocks fill the GPU, so a program takes a chunk of
    a sequence; 2000 positions end inside a block); under the interpreter, 300 positions in
    two chunks of two and one blocks."""
    from tritonconv.ops import causal

    if device != "cuda":
        pytest.skip("Triton's interpreter ignores num_stages: both would run the same loop")
    batch, dim, seqlen = 2, 2048, 2000
    x = random_tensor((batch, dim, seqlen), torch.bfloat16, device)
    w = random_tensor((dim, 4), torch.bfloat16, device)
    b = random_tensor((dim,), torch.bfloat16, device)
    dy = random_tensor((batch, dim, seqlen), torch.bfloat16, device)
    results = []
    for depth in (1, stages):
        monkeypatch.setattr(causal, "BACKWARD_SEGMENTS_STAGES", depth)
        tc.clear_caches()
        results.append(library.causal_conv1d_backward(dy, x, w, b, 3, True, [True] * 3))
    for name, plain, piped in zip(("dx", "dw", "db"), *results, strict=True):
        assert torch.equal(piped, plain), name


def _with_switches(monkeypatch, switches, dy, x, w, b, pad, silu) -> dict:
    """(y, dx, dW, db) with ``ops.causal``'s ``switches`` (names) off, then on: by setting."""
    from tritonconv.ops import causal

    results = {}
    for on in (False, True):
        for name in switches:
            monkeypatch.setattr(causal, name, on)
        tc.clear_caches()
        y = library.causal_conv1d(x, w, b, pad, silu)
        results[on] = (y, *library.causal_conv1d_backward(dy, x, w, b, pad, silu, [True] * 3))
    return results


def _assert_same_sums(results: dict, dtype, reduction: int, pad: int) -> None:
    """The switched-on results against the switched-off ones: integers bit for bit, floats to
    two roundings of the largest value where the sums run in the same order (y, dx; the
    compiler may fuse multiply-adds differently), to a sum's rounding where not (dW, db)."""
    for name, tiles, ours in zip(("y", "dx", "dw", "db"), *results.values(), strict=True):
        if not dtype.is_floating_point:
            assert torch.equal(ours, tiles), f"pad {pad} {name}"
        elif name in ("y", "dx"):
            ulp = torch.finfo(dtype).eps * tiles.abs().max().item()
            apart = (ours.double() - tiles.double()).abs().max().item()
            assert apart <= 2 * ulp, f"pad {pad} {name}: {apart} apart"
        else:
            assert_close(ours, tiles.double(), reduction=reduction, name=name)


@pytest.mark.parametrize("width, seqlen", [(1, 300), (2, 300), (3, 300), (4, 300), (3, 5), (4, 5)])
@pytest.mark.parametrize(
    "dtype, silu", [(torch.float32, False), (torch.float32, True), (torch.bfloat16, True),
                    (torch.int32, False)], ids=str,
)  # fmt: skip
def test_segments_match_the_tiles(width, dtype, silu, seqlen, device, monkeypatch):
    """Channel-first x on the segment kernels (``FORWARD_SEGMENTS``, ``BACKWARD_SEGMENTS``:
    8-position segments a thread, the window's reach from the segments either side) gives
    the 2-D tile kernels' output, dx, dW and db, and float64's, for every window shift,
    over several position blocks and chunks (300 positions: three 128-position blocks in two
    chunks under the interpreter; 5: less than one segment), two channel blocks, dy
    laid out as x or channel-last, and the gradients a mask leaves out are not needed for
    the rest: integers bit for bit, floats to two roundings of the largest value (the
    compiler may fuse multiply-adds differently in the two kernels) where the sums run in
    the same order (the output, dx), to a sum's rounding where not (dW, db)."""
    from tritonconv.ops import causal

    kernels = []
    real = causal.launch
    monkeypatch.setattr(
        causal, "launch", lambda kernel, *a, **m: kernels.append(kernel) or real(kernel, *a, **m)
    )
    batch, dim = 2, 19
    x = random_tensor((batch, dim, seqlen), dtype, device)
    w = random_tensor((dim, width), dtype, device)
    b = random_tensor((dim,), dtype, device)
    for turn, pad in enumerate(sorted({0, width // 2, width - 1})):
        dy = random_tensor((batch, dim, seqlen - (width - 1) + pad), dtype, device)
        if turn % 2 == 1:  # dy channel-last on odd turns: dy's own strides
            dy = _channel_last(dy)
        switches = ("FORWARD_SEGMENTS", "BACKWARD_SEGMENTS")
        results = _with_switches(monkeypatch, switches, dy, x, w, b, pad, silu)
        assert [k.__name__ for k in kernels[-4:]] == [
            "causal_conv1d_kernel", "causal_conv1d_backward_kernel",
            "causal_conv1d_segments_kernel", "causal_conv1d_backward_segments_kernel",
        ]  # fmt: skip
        _assert_same_sums(results, dtype, batch * seqlen, pad)
        names = ("y", "dx", "dw", "db")
        xd, wd, bd = (t.cpu().double().requires_grad_() for t in (x, w, b))
        want = F.conv1d(xd, wd[:, None], bd, padding=pad, groups=dim)[..., : dy.shape[2]]
        want = F.silu(want) if silu else want
        want_grads = torch.autograd.grad(want, (xd, wd, bd), dy.cpu().double())
        assert_close(results[True][0], want.detach(), reduction=width, name="y")
        for name, got, exp in zip(names[1:], results[True][1:], want_grads, strict=True):
            assert_close(got, exp, reduction=batch * seqlen, name=name)
        masks = ([True, False, False], [False, True, True], [False, False, True])
        for mask in masks[turn % 2 :: 2]:  # (interpreter time: the masks over the turns)
            part = library.causal_conv1d_backward(dy, x, w, b, pad, silu, mask)
            for wanted, a, c in zip(mask, part, results[True][1:], strict=True):
                if wanted:
                    assert torch.equal(a, c), (pad, mask)


@pytest.mark.parametrize("width, seqlen", [(1, 300), (2, 300), (3, 300), (4, 300), (4, 5)])
@pytest.mark.parametrize(
    "dtype, silu", [(torch.float32, True), (torch.bfloat16, True), (torch.int32, False)], ids=str
)
def test_channel_last_segments_match_the_tiles(width, seqlen, dtype, silu, device, monkeypatch):
    """Channel-last x on the segment kernels (rows channels-fastest: ``CHANNELS_FASTEST``) gives
    the tile kernel's output and, with ``BACKWARD_SEGMENTS_CHANNEL_LAST``, the rows kernel's
    gradients, for every window shift, over several blocks (300 positions; 5: under one
    segment) and two channel blocks, dy channel-last or (odd shifts) channel-first: integers
    bit for bit, floats to two roundings (output, dx) or a sum's rounding (dW, db)."""
    from tritonconv.ops import causal

    kernels = []
    real = causal.launch
    monkeypatch.setattr(
        causal, "launch", lambda kernel, *a, **m: kernels.append(kernel) or real(kernel, *a, **m)
    )
    batch, dim = 2, 19
    x = _channel_last(random_tensor((batch, dim, seqlen), dtype, device))
    w = random_tensor((dim, width), dtype, device)
    b = random_tensor((dim,), dtype, device)
    for pad in range(width):
        dy = random_tensor((batch, dim, seqlen - (width - 1) + pad), dtype, device)
        dy = dy if pad % 2 else _channel_last(dy)
        switches = ("FORWARD_SEGMENTS_CHANNEL_LAST", "BACKWARD_SEGMENTS_CHANNEL_LAST")
        results = _with_switches(monkeypatch, switches, dy, x, w, b, pad, silu)
        assert [k.__name__ for k in kernels[-4:]] == [
            "causal_conv1d_kernel", "causal_conv1d_backward_rows_kernel",
            "causal_conv1d_segments_kernel", "causal_conv1d_backward_segments_kernel",
        ], pad  # fmt: skip
        _assert_same_sums(results, dtype, batch * seqlen, pad)
        assert results[True][0].stride(1) == 1 and results[True][1].stride(1) == 1
