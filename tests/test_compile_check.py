"""scripts/compile_check.py: its compiling half turns a recorded launch into an sm_90 cubin
(interpreter off, in a subprocess) and reports a configuration that does not compile."""

import json
import os
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "compile_check.py"

# sum_partials_kernel(partial_ptr, out_ptr, out2_ptr, splits, numel, split_at, taps, channels,
# BLOCK, SPLIT_BLOCK, TWO_OUTPUTS, CHANNELS_TO_TAPS, INDEX_64), as recorded
GOOD = {
    "module": "tritonconv.kernels.reduce",
    "name": "sum_partials_kernel",
    "args": ["*fp32", "*bf16", "*bf16", "i32", "i32", "i32", "i32", "i32"],
    "meta": {
        "BLOCK": 1024,
        "SPLIT_BLOCK": 4,
        "TWO_OUTPUTS": True,
        "CHANNELS_TO_TAPS": False,
        "INDEX_64": False,
        "num_warps": 4,
    },
}
BAD = dict(GOOD, meta=dict(GOOD["meta"], BLOCK=1000))  # not a power of two: tl.arange refuses


def test_compiles_a_recorded_launch_and_reports_one_that_does_not(tmp_path):
    path = tmp_path / "launches.json"
    path.write_text(json.dumps([GOOD, BAD]))
    env = dict(os.environ, TRITON_INTERPRET="0", TRITON_DEFAULT_FP_FUSION="1")
    command = [sys.executable, str(SCRIPT), "--compile", str(path), "--workers", "1"]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "compiled 1/2 configurations for sm_90" in done.stdout
    assert "FAIL sum_partials_kernel" in done.stdout and "1000" in done.stdout


def test_every_kernels_64_bit_variant_compiles():
    """``--index64``: a small workload run as if every tensor were past 2**31 elements, and
    each kernel's ``INDEX_64`` variant compiled for sm_90 as the GPU's JIT specialises it.
    Only tensors that large reach those variants on a GPU, and the interpreter compiles
    nothing: session 35's first 64-bit fix of the depthwise weight gradient (``.to`` on a
    stride the JIT makes a constant when it is 1) passed every CPU test and failed to compile
    on the GPU; this test fails on it. About 80 s on one core with Triton's cache empty."""
    env = dict(os.environ, TRITON_INTERPRET="1", TRITONCONV_CPU_KERNELS="1")
    command = [sys.executable, str(SCRIPT), "--index64", "--draws", "8", "--workers", "1"]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    found = [line for line in done.stdout.splitlines() if line.startswith("compiled ")]
    assert found and "configurations for sm_90" in found[0], done.stdout[-2000:]
    compiled, total = found[0].split()[1].split("/")
    assert compiled == total and int(total) >= 50  # (every kernel the workload reaches)
    for name in ("depthwise_kernel", "depthwise_band_kernel", "depthwise_band_grad_weight_kernel"):
        assert f" {name}," in done.stdout or f" {name}\n" in done.stdout, name  # (session 35)


def test_every_tma_kernel_configuration_compiles():
    """``--tma``: 16-bit channels-last training steps as on a GPU with TMA, and each TMA
    descriptor kernel's configuration compiled for sm_90. CPU tensors never reach these
    launches otherwise; session 36's first window kernel built a box coordinate list with a
    starred expression, which the interpreter runs and the compiler refuses: this test fails
    on it. About 35 s on two cores."""
    env = dict(os.environ, TRITON_INTERPRET="1", TRITONCONV_CPU_KERNELS="1")
    command = [sys.executable, str(SCRIPT), "--tma", "--workers", "1"]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    kernels = "pointwise_tma_kernel, wgrad_tma_kernel, window_tma_kernel"
    assert kernels in done.stdout, done.stdout[-2000:]
    found = [line for line in done.stdout.splitlines() if line.startswith("compiled ")]
    compiled, total = found[0].split()[1].split("/")
    assert compiled == total and int(total) >= 16
