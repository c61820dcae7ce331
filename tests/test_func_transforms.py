"""``torch.func`` transforms (vmap, grad, jacrev, jvp) over tritonconv's functions and modules:
inside them every op runs its ATen form, which the transforms batch and differentiate (the
eager kernels' autograd.Function and layout queries raised there before: per-sample gradients
with vmap, PyTorch's own tutorial case, did not run at all). Results against the same
transform over torch.nn.functional, float64."""

import pytest
import torch
import torch.nn.functional as F
from torch.func import functional_call, grad, jacrev, jvp, vmap

import tritonconv as tc
from tritonconv.testing import DEVICE, assert_close


def _t(*shape):
    return torch.randn(*shape, dtype=torch.float64, device=DEVICE)


# (ours, PyTorch's, per-example input shape, weight shape)
CONVOLUTIONS = [
    (tc.conv1d, F.conv1d, (3, 8), (4, 3, 3)),
    (tc.conv2d, F.conv2d, (3, 6, 5), (4, 3, 3, 2)),
    (tc.conv3d, F.conv3d, (2, 3, 4, 4), (3, 2, 2, 2, 2)),
    (tc.conv_transpose2d, F.conv_transpose2d, (3, 4, 4), (3, 2, 3, 3)),
]


@pytest.mark.parametrize(
    "ours, theirs, x_shape, w_shape", CONVOLUTIONS, ids=lambda v: getattr(v, "__name__", "")
)
@pytest.mark.parametrize("algo", ["auto", "implicit_gemm"])
def test_vmap_over_inputs_and_weights(ours, theirs, x_shape, w_shape, algo):
    xs, ws, b = (
        _t(5, *x_shape),
        _t(5, *w_shape),
        _t(w_shape[1 if "transpose" in ours.__name__ else 0]),
    )
    for in_dims in ((0, None), (None, 0), (0, 0)):
        x = xs if in_dims[0] == 0 else xs[0]
        w = ws if in_dims[1] == 0 else ws[0]
        got = vmap(lambda x, w: ours(x, w, b, padding=1, algo=algo), in_dims)(x, w)
        want = vmap(lambda x, w: theirs(x, w, b, padding=1), in_dims)(x, w)
        assert_close(got, want)


def test_per_sample_gradients_of_a_converted_model():
    """functorch's per-sample-gradient recipe: vmap(grad(loss)) over a batch."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(2, 4, 3, padding=1), torch.nn.ReLU(), torch.nn.Flatten(),
        torch.nn.Linear(4 * 5 * 5, 3),
    ).double().to(DEVICE)  # fmt: skip
    ours = tc.nn.convert(torch.nn.Sequential(*[m for m in model]))
    params = {k: v.detach() for k, v in model.named_parameters()}
    x, y = _t(6, 2, 5, 5), torch.randint(0, 3, (6,), device=DEVICE)

    def loss(net, params, x, y):
        out = functional_call(net, params, (x[None],))
        return F.cross_entropy(out, y[None])

    per_sample = {}
    for name, net in (("torch", model), ("ours", ours)):
        fn = vmap(grad(lambda p, x, y, net=net: loss(net, p, x, y)), in_dims=(None, 0, 0))
        per_sample[name] = fn(params, x, y)
    for key, want in per_sample["torch"].items():
        assert_close(per_sample["ours"][key], want)


def test_jacrev_and_jvp_of_conv2d():
    x, w = _t(1, 2, 4, 4), _t(3, 2, 3, 3)
    assert_close(
        jacrev(lambda w: tc.conv2d(x, w, padding=1))(w),
        jacrev(lambda w: F.conv2d(x, w, padding=1))(w),
    )
    v = _t(1, 2, 4, 4)
    _, got = jvp(lambda x: tc.conv2d(x, w, stride=2), (x,), (v,))
    assert_close(got, F.conv2d(v, w, stride=2))


def test_vmap_over_unfold_fold_crop_and_causal_conv1d():
    x = _t(4, 2, 5, 6)
    assert_close(
        vmap(lambda t: tc.unfold(t, 2, padding=1))(x), vmap(lambda t: F.unfold(t, 2, padding=1))(x)
    )
    cols = vmap(lambda t: F.unfold(t, 2))(x)
    assert_close(
        vmap(lambda c: tc.fold(c, (5, 6), 2))(cols), vmap(lambda c: F.fold(c, (5, 6), 2))(cols)
    )
    assert_close(vmap(lambda t: tc.crop(t, (2, 3, 3), axis=1, offset=1))(x), x[:, :, 1:4, 1:4])
    seq, w = _t(3, 2, 4, 7), _t(4, 3)

    def reference(s):
        return F.silu(F.conv1d(s, w[:, None], None, padding=2, groups=4)[..., :7])

    assert_close(
        vmap(lambda s: tc.causal_conv1d(s, w, activation="silu"))(seq), vmap(reference)(seq)
    )


def test_3d_windows_and_crop_under_vmap_and_grad():
    """The ATen forms without a PyTorch op of their own (3-D unfold/fold: strided windows and an
    index_add; crop: a slice) under vmap match a loop over the examples, and grad of their sum
    is the adjoint's."""
    x = _t(3, 2, 4, 3, 5)
    window = dict(kernel_size=(2, 2, 3), padding=(1, 0, 1), stride=(1, 2, 1))
    cols = vmap(lambda t: tc.unfold(t, **window))(x)
    assert_close(cols, torch.stack([tc.unfold(t, **window) for t in x]))
    back = vmap(lambda c: tc.fold(c, (4, 3, 5), **window))(cols)
    assert_close(back, torch.stack([tc.fold(c, (4, 3, 5), **window) for c in cols]))
    g = grad(lambda t: tc.unfold(t, **window).sum())(x[0])
    assert_close(g, tc.fold(torch.ones_like(cols[0]), (4, 3, 5), **window))
    g = grad(lambda t: tc.crop(t, (2, 2, 2, 2), axis=0, offset=(0, 1, 1, 2)).pow(2).sum())(x[0])
    want = torch.zeros_like(x[0])
    want[:, 1:3, 1:3, 2:4] = 2 * x[0][:, 1:3, 1:3, 2:4]
    assert_close(g, want)


def test_plans_made_inside_a_transform_are_not_kept():
    """A call inside vmap runs ATen; the same signature outside it afterwards runs as ever."""
    x, w = _t(2, 3, 6, 5), _t(4, 3, 3, 2)
    vmap(lambda t: tc.conv2d(t, w, algo="direct"))(x[:, None])
    before = tc.explain(x, w, algo="direct")
    assert before.algo == "direct"
    assert_close(tc.conv2d(x, w, algo="direct"), F.conv2d(x, w))


def test_a_tensor_escaped_from_a_transform_trains_like_a_plain_one():
    """A tensor a transform's function kept after the transform ended (a dead functorch
    wrapper) reaches the eager kernels as its plain tensor: ``autograd.run`` unwraps it as
    ``torch.autograd.Function.apply`` does (its C++ apply is called directly: without the
    unwrapping the kernels would read a wrapper, which has no storage)."""
    kept = {}

    def loss(x):
        kept["x"] = x
        return (x * 2).sum()

    x = _t(1, 3, 5, 5)
    grad(loss)(x)
    w, b = _t(4, 3, 3, 3).requires_grad_(), _t(4).requires_grad_()
    out = tc.conv2d(kept["x"], w, b, 1, 1)
    out.square().sum().backward()
    w_ref, b_ref = (t.detach().clone().requires_grad_() for t in (w, b))
    ref = F.conv2d(x, w_ref, b_ref, 1, 1)
    ref.square().sum().backward()
    assert_close(out, ref.detach(), reduction=27)
    assert_close(w.grad, w_ref.grad, reduction=25)
    assert_close(b.grad, b_ref.grad, reduction=25)
