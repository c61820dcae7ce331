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


# --------------------------------------------------------------------------------------------
# The module's last plan (functional.memoized_convolution)


def _counting_plans(monkeypatch) -> list:
    """Patch the plan lookup to count its calls (the memo's misses)."""
    from tritonconv import functional

    looked_up = []
    lookup = functional._convolution_plan

    def counted(*args, **kwargs):
        looked_up.append(args[1].shape)
        return lookup(*args, **kwargs)

    monkeypatch.setattr(functional, "_convolution_plan", counted)
    return looked_up


def _reference(module: torch.nn.Conv2d, x: torch.Tensor) -> torch.Tensor:
    """The torch module's output in float64 on the CPU, for ``module``'s current attributes."""
    return torch.nn.functional.conv2d(
        x.double().cpu(), module.weight.double().cpu(),
        None if module.bias is None else module.bias.double().cpu(),
        module.stride, module.padding, module.dilation, module.groups,
    )  # fmt: skip


def test_a_repeated_module_call_reuses_its_plan_and_a_changed_one_is_planned(monkeypatch, device):
    module = tc.nn.Conv2d(3, 4, 3, padding=1).to(device=device, dtype=torch.float64)
    looked_up = _counting_plans(monkeypatch)
    x = torch.randn(2, 3, 6, 5, dtype=torch.float64, device=device)
    for _ in range(3):  # a fresh input of the same signature each call: one lookup
        fresh = x.clone()
        assert_close(module(fresh), _reference(module, fresh), reduction=27)
    assert len(looked_up) == 1
    changes = [
        lambda: (module, torch.randn(1, 3, 7, 5, dtype=torch.float64, device=device)),  # shape
        lambda: (module, x.to(memory_format=torch.channels_last)),  # strides
        lambda: (module, torch.randn(2, 3, 6, 10, dtype=torch.float64, device=device)[..., ::2]),
        lambda: (module.float(), x.float()),  # the module's dtype
        lambda: (module.double(), x.double().requires_grad_()),  # the gradient mask
    ]
    for change in changes:
        before = len(looked_up)
        m, inp = change()
        out = m(inp)
        assert len(looked_up) == before + 1
        assert_close(out, _reference(m, inp).to(out.dtype), reduction=27)
        m(inp)  # and then reused
        assert len(looked_up) == before + 1


def test_a_module_whose_attributes_change_is_planned_again(monkeypatch, device):
    module = tc.nn.Conv2d(3, 4, 3, padding=1).to(device=device, dtype=torch.float64)
    looked_up = _counting_plans(monkeypatch)
    x = torch.randn(2, 3, 6, 6, dtype=torch.float64, device=device)
    module(x)
    for attribute, value in [("padding", (2, 1)), ("stride", (2, 1)), ("dilation", (2, 2))]:
        setattr(module, attribute, value)
        before = len(looked_up)
        assert_close(module(x), _reference(module, x), reduction=27)
        assert len(looked_up) == before + 1
    module.padding = tuple([2, 1])  # an equal tuple, another object: looked up (a cache hit)
    before = len(looked_up)
    module(x)
    assert len(looked_up) == before + 1
    module.padding = [1, 1]  # a list may change in place: never kept
    module(x)
    module.padding[1] = 2
    assert_close(module(x), _reference(module, x), reduction=27)
    module.padding = (1, 1)
    module(x)
    module.padding = (True, True)  # equal to (1, 1), not the same call: refused as on a first
    with pytest.raises((TypeError, ValueError, RuntimeError)):
        module(x)


def test_settings_and_cleared_caches_plan_a_module_again(monkeypatch, device):
    module = tc.nn.Conv2d(3, 4, 3, padding=1).to(device=device)
    looked_up = _counting_plans(monkeypatch)
    x = torch.randn(2, 3, 6, 6, device=device)
    module(x)
    flags = torch.backends.cudnn.allow_tf32
    limit = tc.get_workspace_limit()
    try:
        for change in (
            lambda: setattr(torch.backends.cudnn, "allow_tf32", not flags),
            lambda: tc.set_workspace_limit(limit // 2),
            tc.clear_caches,
        ):
            change()
            before = len(looked_up)
            module(x)
            assert len(looked_up) == before + 1
        with torch.no_grad():  # the gradient mask: none now
            before = len(looked_up)
            module(x)
            assert len(looked_up) == before + 1
    finally:
        torch.backends.cudnn.allow_tf32 = flags
        tc.set_workspace_limit(limit)


def test_modes_and_subclasses_take_the_full_path(monkeypatch, device):
    module = tc.nn.Conv2d(3, 4, 3, padding=1).to(device=device)
    x = torch.randn(2, 3, 6, 6, device=device)
    module(x)
    module(x)
    memo = module._plan_memo.entry
    from tritonconv import functional

    full = []
    convolution = functional._convolution
    monkeypatch.setattr(
        functional, "_convolution", lambda *a, **k: full.append(1) or convolution(*a, **k)
    )

    class Seen(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    with Seen():
        module(x)
    assert full
    if device == "cpu":
        full.clear()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            assert module(x).dtype == torch.bfloat16  # (autocast's cast: the full path's)
        assert full
    assert module._plan_memo.entry is memo  # the full path leaves the memo alone


def test_a_copied_or_pickled_module_starts_without_a_plan(device):
    import copy
    import io

    module = tc.nn.Conv2d(3, 4, 3, padding=1).to(device=device)
    x = torch.randn(1, 3, 5, 5, device=device)
    expected = module(x)
    assert module._plan_memo.entry is not None
    clone = copy.deepcopy(module)
    assert clone._plan_memo.entry is None and clone._plan_memo is not module._plan_memo
    buffer = io.BytesIO()
    torch.save(module, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=False)
    assert loaded._plan_memo.entry is None
    for other in (clone, loaded):
        assert torch.equal(other(x), expected)


def test_a_transposed_module_reuses_its_plan(monkeypatch, device):
    module = tc.nn.ConvTranspose2d(3, 4, 3, stride=2, padding=1).to(device, torch.float64)
    theirs = torch.nn.ConvTranspose2d(3, 4, 3, stride=2, padding=1).double()
    theirs.load_state_dict(module.state_dict())
    looked_up = _counting_plans(monkeypatch)
    x = torch.randn(2, 3, 4, 5, dtype=torch.float64, device=device)
    for _ in range(3):
        assert_close(module(x.clone()), theirs(x.cpu()), reduction=12)
    assert len(looked_up) == 1
    for _ in range(2):  # an output size: its output padding is a new list each call
        out = module(x, output_size=(8, 10))
        assert_close(out, theirs(x.cpu(), output_size=(8, 10)), reduction=12)
    assert len(looked_up) == 3
    module.stride = theirs.stride = (1, 2)
    assert_close(module(x), theirs(x.cpu()), reduction=12)
    assert len(looked_up) == 4


def test_a_plan_looked_up_while_a_setting_changed_is_not_kept(monkeypatch, device):
    """Another thread's setting changing between the memo's state and the lookup: the plan
    is the new setting's, so it is not kept under the old state (nor is any plan where the
    plan cache keeps none)."""
    from tritonconv import functional

    module = tc.nn.Conv2d(2, 3, 3, padding=1).to(device, torch.float64)
    x = torch.randn(1, 2, 5, 5, dtype=torch.float64, device=device)
    limit = tc.get_workspace_limit()
    state = functional._memo_state
    changes = iter([lambda: tc.set_workspace_limit(limit // 2)])

    def racing(*args):
        result = state(*args)
        next(changes, lambda: None)()  # (once: right after the first state is read)
        return result

    monkeypatch.setattr(functional, "_memo_state", racing)
    try:
        module(x)
        assert module._plan_memo.entry is None
        module(x)  # the setting now stays: kept
        assert module._plan_memo.entry is not None
    finally:
        tc.set_workspace_limit(limit)
    monkeypatch.setattr(functional._CONV_PLANS, "size", 0)
    other = tc.nn.Conv2d(2, 3, 3, padding=1).to(device, torch.float64)
    other(x)
    assert other._plan_memo.entry is None


def test_a_memo_holds_its_dimensions():
    from tritonconv import functional

    memo = functional.PlanMemo()
    x, w = torch.randn(1, 2, 3, 4, 4), torch.randn(3, 2, 1, 1, 1)
    options = (1, 0, 1, 1, "auto", None)
    functional.memoized_convolution(memo, 3, x, w, None, options)
    with pytest.raises(tc.TritonConvError, match=r"4D \(batched\) input to conv2d"):
        functional.memoized_convolution(memo, 2, x, w, None, options)


def test_memoized_modules_match_unmemoized_ones_bit_for_bit(device):
    """Random modules of every kind called with changing inputs, layouts and gradient modes:
    each call's output and gradients equal, bit for bit, those of a copy whose memo never
    holds a plan (every call looked up)."""
    import copy
    import random

    from tritonconv.testing import without_plan_memos

    kinds = {
        (1, False): tc.nn.Conv1d, (2, False): tc.nn.Conv2d, (3, False): tc.nn.Conv3d,
        (1, True): tc.nn.ConvTranspose1d, (2, True): tc.nn.ConvTranspose2d,
        (3, True): tc.nn.ConvTranspose3d,
    }  # fmt: skip
    rng = random.Random(48)
    for (ndim, _), kind in kinds.items():
        groups = rng.choice([1, 2])
        module = kind(
            2 * groups, groups * rng.choice([1, 2]), rng.choice([1, 2, 3]),
            stride=rng.choice([1, 2]), padding=1, groups=groups, bias=rng.random() < 0.5,
        ).to(device, torch.float64)  # fmt: skip
        unmemoized = without_plan_memos(copy.deepcopy(module))
        for _ in range(4):
            x = torch.randn(rng.choice([1, 2]), 2 * groups, *rng.choices([3, 4], k=ndim))
            x = x.to(device, torch.float64)
            if ndim == 2 and rng.random() < 0.5:
                x = x.to(memory_format=torch.channels_last)
            grad = rng.random() < 0.5
            results = []
            for m in (module, unmemoized):
                m.zero_grad(set_to_none=True)
                xi = x.clone().requires_grad_(grad)
                with torch.set_grad_enabled(grad):
                    y = m(xi)
                results.append([y.detach()])
                if grad:
                    y.sum().backward()
                    results[-1] += [xi.grad, *(p.grad for p in m.parameters())]
            for ours, theirs in zip(*results, strict=True):
                assert torch.equal(ours, theirs), (kind.__name__, x.shape, grad)
        assert module._plan_memo.entry is not None and unmemoized._plan_memo.entry is None
