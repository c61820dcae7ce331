"""causal_conv1d and causal_conv1d_update against the causal-conv1d package's reference
semantics, written here with F.conv1d in float64."""

import pytest
import torch
import torch.nn.functional as F

import tritonconv as tc
from tritonconv.testing import assert_close


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
