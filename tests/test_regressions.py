"""Regression geometries, each through every algorithm that accepts it (and ``auto``), forward
and the input, weight and bias gradients against float64 (integers exactly).

Issue 9: the direct path's input gradient came out 2x, 4x or 8x too large on the GPU (a
compiled-Triton reduction over a narrow axis counted replicated lanes; the interpreter was
right). These run on the CPU in CI and on CUDA in scripts/gpu_check.sh.
"""

import pytest

from tritonconv import fuzz

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
