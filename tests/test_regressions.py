"""Regression geometries, each through every algorithm that accepts it (and ``auto``), forward
and the input, weight and bias gradients against float64 (integers exactly).

Issue 9: the direct path's input gradient came out 2x, 4x or 8x too large on the GPU (a
compiled-Triton reduction over a narrow axis counted replicated lanes; the interpreter was
right). These run on the CPU in CI and on CUDA in scripts/gpu_check.sh.
"""

import pytest
import torch

import tritonconv
from tritonconv import fuzz
from tritonconv.testing import DEVICE, assert_close, random_tensor

# (N, C, H, W), (K, R, S), stride, padding, dilation, groups: the five cases of issue 9.
ISSUE_9 = [
    ((5, 16, 14, 25), (4, 1, 1), (1, 1), (3, 2), (1, 3), 1),
    ((2, 16, 23, 22), (1, 1, 4), (2, 2), (0, 3), (1, 1), 1),
    ((3, 32, 6, 26), (8, 3, 1), (1, 2), (3, 0), (1, 3), 2),
    ((3, 64, 15, 23), (16, 7, 7), (3, 2), (2, 2), (1, 1), 4),
    ((1, 16, 39, 24), (1, 2, 3), (1, 2), (3, 2), (2, 1), 1),
]


def _case(geometry, dtype, layout, seed=0) -> fuzz.Case:
    (n, c, h, w), (k, kh, kw), stride, padding, dilation, groups = geometry
    if tritonconv.INTERPRETER:  # CI: one sample (the bug lived in the channel tiles, which
        n = min(n, 1)  # batch does not change; the GPU script runs the full batches)
    return fuzz.Case(
        n, c, k, h, w, kh, kw, stride, padding, dilation, groups, True, dtype, layout, layout,
        "contiguous", seed,
    )  # fmt: skip


@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int32"])
@pytest.mark.parametrize("geometry", ISSUE_9, ids=[f"issue9-{i}" for i in range(5)])
def test_issue_9_every_algorithm(geometry, dtype, layout):
    case = _case(geometry, dtype, layout)
    failures = [r for r in fuzz.check_case(case, [*case.algos(), "auto"]) if r[1] is not None]
    assert not failures, "\n".join(f.line() for f in failures)


@pytest.mark.skipif(
    not tritonconv.INTERPRETER,
    reason="a CPU machine's case: on the GPU machine (Triton 3.6, numpy 2.5) Triton's own "
    "interpreter cannot run a loop whose bound depends on program_id, Triton first or not",
)
def test_triton_imported_before_tritonconv_on_a_cpu_machine():
    """``import torchvision`` (or anything importing Triton) before tritonconv on a machine
    without CUDA left Triton's own helpers (tl.cdiv, tl.sum) built for compilation, and every
    interpreted kernel calling one failed. A fresh process, Triton first, no GPU visible."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["CUDA_VISIBLE_DEVICES"] = ""
    script = (
        "import triton.language, torch, tritonconv as tc\n"
        "x = torch.randn(1, 16, 5, 5); w = torch.randn(16, 16, 3, 3)\n"
        "y = tc.conv2d(x, w, padding=1, algo='implicit_gemm')\n"
        "assert (y - torch.nn.functional.conv2d(x, w, padding=1)).abs().max() < 1e-3\n"
        "assert tc.crop(torch.ones(2, 3, 4), [1, 2, 2], axis=0).shape == (1, 2, 2)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]


# Session 7: efficientnet_b0 (an in-place SiLU on a squeeze-excitation 1x1 convolution's
# output) failed with "Output 0 of FunctionBackward is a view and is being modified inplace":
# im2col+GEMM's channels-last 1x1 forward returned a permuted view of its GEMM's result.
IN_PLACE_CALLS = {  # op, input shape, weight shape, bias, keyword arguments
    "conv2d 1x1": ("conv2d", (2, 16, 3, 3), (24, 16, 1, 1), True, {}),
    "conv2d 3x3": ("conv2d", (2, 16, 3, 3), (24, 16, 3, 3), False, dict(padding=1)),
    "depthwise": ("conv2d", (2, 16, 3, 3), (16, 1, 3, 3), True, dict(padding=1, groups=16)),
    "conv_transpose2d 1x1": ("conv_transpose2d", (2, 16, 3, 3), (16, 8, 1, 1), False, {}),
    "conv1d 1x1": ("conv1d", (2, 16, 5), (24, 16, 1), True, {}),
}


@pytest.mark.parametrize("algo", ["auto", "im2col_gemm", "implicit_gemm", "direct", "depthwise"])
@pytest.mark.parametrize("call", IN_PLACE_CALLS, ids=str)
def test_outputs_take_in_place_ops(call, algo):
    """A convolution's output is a tensor of its own: an in-place op on it (as networks'
    in-place activations do) and the backward through both give float64 PyTorch's gradients
    (channels-last where the input has 4 dimensions)."""
    op, x_shape, w_shape, has_bias, kwargs = IN_PLACE_CALLS[call]
    x = random_tensor(x_shape, torch.float32, DEVICE)
    if x.dim() == 4:
        x = x.to(memory_format=torch.channels_last)
    w = random_tensor(w_shape, torch.float32, DEVICE)
    b = random_tensor((w_shape[1 if "transpose" in op else 0],), torch.float32, DEVICE)
    leaves = [t.requires_grad_() for t in (x, w, b if has_bias else None) if t is not None]
    refs = [t.detach().double().requires_grad_() for t in leaves]
    try:
        y = getattr(tritonconv, op)(*leaves, algo=algo, **kwargs)
    except tritonconv.TritonConvError:
        pytest.skip(f"{algo} does not take this call")
    y.mul_(2).relu_()
    ref = getattr(torch.nn.functional, op)(*refs, **kwargs)
    ref.mul_(2).relu_()
    got = torch.autograd.grad(y.sum(), leaves)
    want = torch.autograd.grad(ref.sum(), refs)
    for name, g, r in zip(("dx", "dW", "db"), got, want):
        assert_close(g, r, reduction=x_shape[0] * 9 * 16, name=name)


# A strided depthwise convolution with the weight a converted model has: ``model.to(
# memory_format=torch.channels_last)`` gives a (C*R, 1, KH, KW) weight the strides (KH*KW, 1,
# KW, 1). The input gradient's stride phases took the channel stride from dimension 1 (size 1,
# stride 1) and read the wrong weights: dX of the convolution and the output of the
# transposed one wrong on every device, silently (found by an adversarial review, session
# 13; the fuzz's channels-last weights had been (KH*KW, KH*KW, KW, 1), fixed with it).
@pytest.mark.parametrize("transposed", [False, True], ids=["conv", "transposed"])
@pytest.mark.parametrize("multiplier", [1, 2])
@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
def test_strided_depthwise_with_a_converted_models_weight(layout, multiplier, transposed):
    c = 4
    case = fuzz.Case(
        2, c, c * multiplier, 7, 6, 3, 3, (2, 2), (1, 1), (1, 1), c, True, "float32", layout,
        layout, "channels_last", 5, transposed,
    )  # fmt: skip
    w = fuzz.to_layout(torch.zeros(c * multiplier, 1, 3, 3), "channels_last")
    assert w.stride() == (9, 1, 3, 1)
    assert "depthwise" in case.algos()
    failures = [r for r in fuzz.check_case(case, [*case.algos(), "auto"]) if r[1] is not None]
    assert not failures, "\n".join(f.line() for f in failures)


# CUDA takes at most 65535 programs along a grid's second axis: the depthwise kernels' spatial
# tiles of a 4K channels-last image are more (2160 x 4096 at 3x3: 69120). Such a grid is
# folded over the second and third axes (``launch._fold_y``, the kernels' ``program_y``); here
# the limit is lowered so that small images fold (the interpreter's tiles: 32 x 64 and
# 16-row), and every fold is checked against PyTorch.
@pytest.mark.parametrize(
    "layout, stride, kernel",
    [("channels_last", 2, 3), ("contiguous", 1, 7)],  # (the interpreter is slow: two cases)
    ids=["small-kernel", "window-kernel"],
)
def test_depthwise_grids_past_cudas_limit_fold(layout, stride, kernel, monkeypatch):
    from tritonconv import launch

    folded = []
    real = launch._fold_y
    monkeypatch.setattr(launch, "GRID_YZ_LIMIT", 2)
    monkeypatch.setattr(launch, "_fold_y", lambda *a: folded.append(a[1]) or real(*a))
    tritonconv.clear_caches()
    c = 4
    case = fuzz.Case(
        1, c, c, 40, 131, kernel, kernel, (stride, stride), (kernel // 2, kernel // 2), (1, 1),
        c, True, "float32", layout, layout, "contiguous", 7,
    )  # fmt: skip
    try:
        failures = [r for r in fuzz.check_case(case, ["depthwise"]) if r[1] is not None]
    finally:
        tritonconv.clear_caches()
    assert folded, "no launch folded"
    assert not failures, "\n".join(f.line() for f in failures)


# The implicit GEMM's input gradient (and transposed convolution) runs one program column per
# stride phase on the grid's third axis: more than CUDA's 65535 phases (strides whose product
# passes it, as the sanitizer's > 2**31-element workload has) are folded into the first axis
# (``launch._fold_y``, the kernel's ``FOLD_Z``). The limit is lowered here so that a stride of
# 3 x 2 folds.
@pytest.mark.parametrize("dtype", ["float32", "int32"])
def test_implicit_gemm_phases_past_cudas_limit_fold(dtype, monkeypatch):
    from tritonconv import launch

    launched = []
    real = launch._fold_y
    monkeypatch.setattr(launch, "GRID_YZ_LIMIT", 4)
    monkeypatch.setattr(launch, "_fold_y", lambda *a: launched.append(folded := real(*a)) or folded)
    tritonconv.clear_caches()
    case = fuzz.Case(
        2, 5, 3, 9, 10, 3, 2, (3, 2), (1, 0), (1, 1), 1, False, dtype, "contiguous",
        "contiguous", "contiguous", 11,
    )  # fmt: skip
    try:
        failures = [r for r in fuzz.check_case(case, ["implicit_gemm"]) if r[1] is not None]
        transposed = fuzz.Case(
            2, 5, 3, 4, 5, 3, 2, (3, 2), (1, 0), (1, 1), 1, False, dtype, "contiguous",
            "contiguous", "contiguous", 12, transposed=True,
        )  # fmt: skip
        failures += [r for r in fuzz.check_case(transposed, ["implicit_gemm"]) if r[1] is not None]
    finally:
        tritonconv.clear_caches()
    folds = [grid for grid, meta in launched if meta.get("FOLD_Z")]
    assert folds and all(grid[2] <= 4 for grid in folds), launched
    assert not failures, "\n".join(f.line() for f in failures)
