"""Which kernel the GPU's rules give each pass of the benchmark suites' layers (CPU, no GPU).

Session 40 found suite ``more``'s 3-D layers' backward at 0.65x cuDNN on an H200: rules
fitted on 2-D 3x3 layers (sessions 36-38) had moved them onto the TMA kernels, and no run of
that suite had followed. This table is the guard: for the dense and ``more`` suites' layers
(bf16, channels-last, as measured there), the kernel family each pass takes under the GPU's
rules (a 132-multiprocessor GPU with TMA, :func:`tritonconv.explain`'s reasons). A rule
change that moves a layer fails here; the fix is to measure the suites the layer belongs to
(``tritonconv bench --suite dense --suite more``) and then update the row.
"""

import pytest
import torch

import tritonconv

WINDOW, POINTWISE, TAP_GEMM, ROWS = "window TMA", "1x1 TMA", "tap GEMM", "row boxes TMA"
POINTER, FOLDED, PHASES = "pointer", "width folded", "phases folded"


def family(reason: str) -> str:
    """The kernel family a tiles description of ``explain`` names."""
    if "as TMA boxes" in reason:
        return WINDOW
    if "as one TMA GEMM scattered by tap" in reason:
        return TAP_GEMM
    if "as one TMA GEMM" in reason:
        return POINTWISE
    if "as TMA row boxes" in reason:
        return ROWS
    if "width taps folded" in reason:
        return FOLDED
    if "stride phases folded" in reason:
        return PHASES
    return POINTER


def passes(input_shape, weight_shape, device, transposed=False, nlc=False, **kwargs):
    """(forward, input gradient, weight gradient) families of a bf16 channels-last call (a
    1-D one NCL, or with ``nlc`` channels innermost) on ``device`` (the suite's: tensors the
    kernels take, CPU ones under the interpreter)."""
    rank = len(input_shape) - 2
    layout = torch.channels_last_3d if rank == 3 else torch.channels_last
    x = torch.empty(input_shape, dtype=torch.bfloat16, device=device)
    w = torch.empty(weight_shape, dtype=torch.bfloat16, device=device)
    if rank >= 2:
        x, w = x.to(memory_format=layout), w.to(memory_format=layout)
    elif nlc:
        x = x.transpose(1, 2).contiguous().transpose(1, 2)
    found = tritonconv.explain(x, w, None, transposed=transposed, algo="implicit_gemm", **kwargs)
    reason = found.reason
    parts = {}
    for name in ("forward tiles", "input gradient tiles", "weight gradient tiles"):
        start = reason.index(name) + len(name)
        ends = [reason.find(f"; {n}", start) for n in ("input gradient", "weight gradient")]
        end = min([e for e in ends if e >= 0], default=len(reason))
        parts[name] = family(reason[start:end])
    return tuple(parts.values())


# name: (input shape, weight shape, keyword arguments, (forward, input grad, weight grad))
# fmt: off
LAYERS = {
    # suite dense
    "r50_3x3_56": ((32, 64, 56, 56), (64, 64, 3, 3), {"padding": 1}, (WINDOW, WINDOW, ROWS)),
    "r50_1x1_56": ((32, 64, 56, 56), (256, 64, 1, 1), {}, (POINTWISE, POINTWISE, ROWS)),
    "r50_3x3_28": ((32, 128, 28, 28), (128, 128, 3, 3), {"padding": 1}, (WINDOW, WINDOW, ROWS)),
    "r50_3x3_14": ((32, 256, 14, 14), (256, 256, 3, 3), {"padding": 1},
                   (WINDOW, WINDOW, POINTER)),
    "r50_3x3_7": ((32, 512, 7, 7), (512, 512, 3, 3), {"padding": 1}, (POINTER,) * 3),
    "r50_stem": ((32, 3, 224, 224), (64, 3, 7, 7), {"stride": 2, "padding": 3},
                 (FOLDED, POINTER, FOLDED)),
    "dil2_3x3_64": ((16, 256, 64, 64), (256, 256, 3, 3), {"padding": 2, "dilation": 2},
                    (WINDOW, WINDOW, ROWS)),
    "grp32_3x3_28": ((32, 256, 28, 28), (256, 8, 3, 3), {"padding": 1, "groups": 32},
                     (POINTER,) * 3),
    "unet_3x3_128": ((8, 128, 128, 128), (64, 128, 3, 3), {"padding": 1},
                     (WINDOW, WINDOW, ROWS)),
    "unet_3x3_256": ((8, 64, 256, 256), (64, 64, 3, 3), {"padding": 1}, (WINDOW, WINDOW, ROWS)),
    "vgg_first": ((16, 3, 224, 224), (64, 3, 3, 3), {"padding": 1}, (FOLDED, POINTER, FOLDED)),
    "pw_96_384_56": ((32, 96, 56, 56), (384, 96, 1, 1), {}, (POINTWISE, POINTWISE, ROWS)),
    "pw_40_120_28": ((32, 40, 28, 28), (120, 40, 1, 1), {}, (POINTWISE, POINTER, ROWS)),
    "aspp_dil12": ((8, 512, 64, 64), (256, 512, 3, 3), {"padding": 12, "dilation": 12},
                   (WINDOW, WINDOW, ROWS)),
    # suite more (its 1-D layers NCL, as there: the forward and input gradient on the
    # pointer kernel, the weight gradient's TMA reading channels-last copies)
    "conv1d_k3": ((16, 512, 4096), (512, 512, 3), {"padding": 1}, (POINTER, POINTER, ROWS)),
    "conv3d_3x3x3": ((8, 64, 16, 56, 56), (64, 64, 3, 3, 3), {"padding": 1}, (POINTER,) * 3),
    "conv3d_1x3x3": ((8, 64, 16, 56, 56), (144, 64, 1, 3, 3), {"padding": (0, 1, 1)},
                     (POINTER,) * 3),
    "wav2vec_first_conv1d": ((8, 1, 16000), (512, 1, 10), {"stride": 5},
                             (FOLDED, PHASES, FOLDED)),
    "wav2vec_conv1d": ((4, 512, 3199), (512, 512, 3), {"stride": 2}, (POINTER,) * 3),
    # suite more's transposed convolutions (the forward is the convolution's input gradient)
    "unet_up_2x2": ((8, 128, 64, 64), (128, 64, 2, 2), {"transposed": True, "stride": 2},
                    (TAP_GEMM, POINTER, POINTER)),
    "gan_up_4x4": ((16, 256, 16, 16), (256, 128, 4, 4),
                   {"transposed": True, "stride": 2, "padding": 1}, (POINTER,) * 3),
    "up_3x3_s2": ((16, 128, 32, 32), (128, 64, 3, 3),
                  {"transposed": True, "stride": 2, "padding": 1, "output_padding": 1},
                  (POINTER,) * 3),
    "vocoder_up_k4": ((8, 256, 4096), (256, 128, 4),
                      {"transposed": True, "stride": 2, "padding": 1}, (POINTER,) * 3),
    "conv_transpose3d_2x2x2": ((2, 128, 16, 32, 32), (128, 64, 2, 2, 2),
                               {"transposed": True, "stride": 2}, (TAP_GEMM, POINTER, POINTER)),
    # r2plus1d_18's temporal layers (benchmarks/probe_passes.py: TMA's weight gradient won;
    # the input gradient's 144 channels in 64-channel window tiles, session 41)
    "conv3d_3x1x1": ((8, 144, 16, 56, 56), (64, 144, 3, 1, 1), {"padding": (1, 0, 0)},
                     (POINTER, WINDOW, ROWS)),
    # the 1-D layers channels-last (NLC): the TMA paths read them
    "conv1d_k3_nlc": ((16, 512, 4096), (512, 512, 3), {"padding": 1, "nlc": True},
                      (WINDOW, WINDOW, ROWS)),
}
# fmt: on


@pytest.fixture
def gpu_rules(tma_gpu):
    """The GPU's rules as they stand (no limit lifted), no plan kept from other tests."""
    tritonconv.clear_caches()
    yield
    tritonconv.clear_caches()


@pytest.mark.parametrize("name", LAYERS)
def test_each_pass_takes_the_measured_kernel(name, gpu_rules, device):
    input_shape, weight_shape, kwargs, expected = LAYERS[name]
    assert passes(input_shape, weight_shape, device, **kwargs) == expected
