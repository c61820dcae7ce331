"""The ``__torch_function__`` protocol, as ``torch.nn.functional`` keeps it: a tensor subclass's
inputs give that subclass's output, a subclass that overrides the protocol sees the call (the
tritonconv function as ``func``, the caller's arguments), a ``TorchFunctionMode`` sees every
call, and parameters stay plain."""

import pytest
import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

import tritonconv as tc
from tritonconv.testing import assert_close


class _Tagged(torch.Tensor):
    """A subclass that keeps Tensor's ``__torch_function__`` (outputs become ``_Tagged``)."""


class _Calls(TorchFunctionMode):
    def __init__(self):
        super().__init__()
        self.funcs = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.funcs.append(func)
        return func(*args, **(kwargs or {}))


def _conv_calls(device):
    """(tritonconv function, torch function, args, kwargs) for each convolution function."""
    x1, x2, x3 = (torch.randn(2, 4, *(5,) * d, device=device) for d in (1, 2, 3))
    w1, w2, w3 = (torch.randn(4, 2, *(3,) * d, device=device) for d in (1, 2, 3))
    b = torch.randn(4, device=device)  # (the weights serve the transposed calls too: 4 in, 4 out)
    kw = dict(stride=1, padding=1, groups=2)
    return [
        (tc.conv1d, F.conv1d, (x1, w1, b), kw),
        (tc.conv2d, F.conv2d, (x2, w2, b), kw),
        (tc.conv3d, F.conv3d, (x3, w3, b), kw),
        (tc.conv_transpose1d, F.conv_transpose1d, (x1, w1, b),
         dict(stride=2, padding=1, output_padding=1, groups=2)),
        (tc.conv_transpose2d, F.conv_transpose2d, (x2, w2, b),
         dict(stride=2, padding=1, output_padding=1, groups=2)),
        (tc.conv_transpose3d, F.conv_transpose3d, (x3, w3, b),
         dict(stride=2, padding=1, output_padding=1, groups=2)),
    ]  # fmt: skip


@pytest.mark.parametrize("index", range(6))
def test_convolution_of_a_subclass_is_that_subclass(index, device):
    ours, theirs, args, kw = _conv_calls(device)[index]
    want = theirs(*args, **kw)
    for position in range(3):  # input, weight or bias a subclass
        tagged = [a.as_subclass(_Tagged) if i == position else a for i, a in enumerate(args)]
        got = ours(*tagged, **kw)
        assert type(got) is type(theirs(*tagged, **kw)) is _Tagged
        assert_close(got.as_subclass(torch.Tensor), want, reduction=36)


def test_gradients_of_subclass_leaves_match(device):
    x = torch.randn(2, 4, 6, 5, dtype=torch.float64, device=device)
    w = torch.randn(3, 4, 3, 3, dtype=torch.float64, device=device)
    ref = [t.clone().requires_grad_() for t in (x, w)]
    want = torch.autograd.grad(F.conv2d(*ref, padding=1).sum(), ref)
    leaves = [t.clone().as_subclass(_Tagged).requires_grad_() for t in (x, w)]
    out = tc.conv2d(*leaves, padding=1)
    assert type(out) is _Tagged
    for got, exact in zip(torch.autograd.grad(out.sum(), leaves), want):
        assert_close(got.as_subclass(torch.Tensor), exact, reduction=36 * 2)


def test_a_mode_sees_every_public_function(device):
    x = torch.randn(1, 2, 6, 6, device=device)
    w = torch.randn(2, 2, 3, 3, device=device)
    seq = torch.randn(1, 4, 7, device=device)
    cw = torch.randn(4, 3, device=device)
    state = torch.zeros(1, 4, 2, device=device)
    with _Calls() as mode:
        tc.conv2d(x, w, padding=1)
        tc.conv_transpose2d(x, w)
        cols = tc.unfold(x, 3, padding=1)
        tc.fold(cols, (6, 6), 3, padding=1)
        tc.crop(x, [1, 2, 4, 4], offset=1)
        tc.causal_conv1d(seq, cw, activation="silu")
        tc.causal_conv1d_update(seq[..., 0], state, cw)
    seen = [f for f in mode.funcs if getattr(f, "__module__", "").startswith("tritonconv")]
    assert [f.__name__ for f in seen] == [
        "conv2d",
        "conv_transpose2d",
        "unfold",
        "fold",
        "crop",
        "causal_conv1d",
        "causal_conv1d_update",
    ]


def test_an_override_sees_the_call_as_made(device):
    """A subclass that overrides the protocol receives tritonconv's function and the
    caller's arguments, keywords included, and its result is returned as it is."""
    calls = []

    class Logged(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            if func is tc.conv2d:
                calls.append((args, kwargs))
                return "handled"
            return super().__torch_function__(func, types, args, kwargs or {})

    x = torch.randn(1, 2, 5, 5, device=device).as_subclass(Logged)
    w = torch.randn(2, 2, 3, 3, device=device)
    assert tc.conv2d(x, w, None, 2, algo="direct") == "handled"
    (args, kwargs), = calls  # fmt: skip
    assert args[1] is w and args[2] is None and args[3] == 2
    assert kwargs == {"algo": "direct", "workspace_limit": None}


def test_parameters_and_plain_tensors_stay_plain(device):
    conv = tc.nn.Conv2d(2, 3, 3).to(device)
    y = conv(torch.randn(1, 2, 5, 5, device=device))
    assert type(y) is torch.Tensor


def test_the_device_context_manager_is_a_mode_too(device):
    """``with torch.device(...)`` is a ``TorchFunctionMode``: calls under it still run."""
    x = torch.randn(1, 2, 5, 5, device=device)
    w = torch.randn(3, 2, 3, 3, device=device)
    with torch.device(device):
        got = tc.conv2d(x, w, padding=1)
    assert_close(got, F.conv2d(x, w, padding=1), reduction=18)


def test_compiled_with_a_subclass_input_is_one_graph(device):
    """Under ``torch.compile(fullgraph=True)`` a subclass input goes through the protocol
    once: Dynamo's ``has_torch_function`` ignores the subclass being disabled inside
    ``Tensor.__torch_function__``, which re-entered the protocol with nothing to dispatch to
    (a ``TypeError``) before ``_protocol_on``."""
    x = torch.randn(1, 2, 6, 6, device=device)
    w = torch.randn(3, 2, 3, 3, device=device)
    compiled = torch.compile(lambda x, w: tc.conv2d(x, w, padding=1) + 1, backend="eager",
                             fullgraph=True)  # fmt: skip
    got = compiled(x.as_subclass(_Tagged), w)
    assert_close(got.as_subclass(torch.Tensor), F.conv2d(x, w, padding=1) + 1, reduction=18)
