"""PyTorch's own OpInfo samples and error inputs, through tritonconv.

Every sample PyTorch's test suite uses for an op is run through ours (float64, forward and the
gradients of every differentiable input) and compared with PyTorch's op on the same sample;
every error input must raise the same error type with a message matching PyTorch's pattern.
"""

import re

import pytest
import torch

import tritonconv as tc
from tritonconv.testing import assert_close

pytest.importorskip("expecttest")  # torch's testing internals need it (a test dependency)
from torch.testing._internal.common_methods_invocations import op_db

# Importing torch's test internals freezes the cudnn/cuBLAS flags for the whole process
# (torch.backends.disable_global_flags); the rest of our suite sets allow_tf32 and must go on
# being able to.
torch.backends.flags_frozen.__globals__["__allow_nonbracketed_mutation_flag"] = True

OURS = {
    "nn.functional.conv1d": tc.conv1d,
    "nn.functional.conv2d": tc.conv2d,
    "nn.functional.conv3d": tc.conv3d,
    "nn.functional.conv_transpose1d": tc.conv_transpose1d,
    "nn.functional.conv_transpose2d": tc.conv_transpose2d,
    "nn.functional.conv_transpose3d": tc.conv_transpose3d,
}
# PyTorch defines no error inputs for these (its own OpInfo entries have none).
NO_ERROR_INPUTS = {
    "nn.functional.conv_transpose1d",
    "nn.functional.conv_transpose2d",
    "nn.functional.conv_transpose3d",
}
OPS = [op for op in op_db if op.name in OURS and op.variant_test_name == ""]


def _on(device, value):
    if isinstance(value, torch.Tensor):
        return value.detach().to(device).requires_grad_(value.requires_grad)
    return value


@pytest.mark.parametrize("op", OPS, ids=lambda op: op.name)
def test_opinfo_samples(op, device):
    ours = OURS[op.name]
    samples = list(op.sample_inputs("cpu", torch.float64, requires_grad=True))
    assert samples
    for sample in samples:
        args = [sample.input, *sample.args]
        expected = op.op(*args, **sample.kwargs)
        mine = [_on(device, a) for a in args]
        got = ours(*mine, **sample.kwargs)
        assert_close(got, expected, name=f"{op.name} {sample}")
        grad = torch.randn_like(expected)
        leaves = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]
        my_leaves = [a for a in mine if isinstance(a, torch.Tensor) and a.requires_grad]
        want = torch.autograd.grad(expected, leaves, grad)
        have = torch.autograd.grad(got, my_leaves, grad.to(got.device))
        for h, w in zip(have, want, strict=True):
            assert_close(h, w, reduction=64, name=f"{op.name} grad {sample}")


@pytest.mark.parametrize(
    "op", [op for op in OPS if op.name not in NO_ERROR_INPUTS], ids=lambda op: op.name
)
def test_opinfo_error_inputs(op, device):
    ours = OURS[op.name]
    errors = list(op.error_inputs("cpu"))
    assert errors
    for error in errors:
        sample = error.sample_input
        args = [_on(device, a) for a in (sample.input, *sample.args)]
        with pytest.raises(error.error_type) as raised:
            ours(*args, **sample.kwargs)
        assert re.search(error.error_regex, str(raised.value)), (
            f"{sample.kwargs}: {raised.value!s} does not match {error.error_regex!r}"
        )
