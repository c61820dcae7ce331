"""scripts/distributed_check.py, the multi-GPU training check, run small on the CPU (two ranks
over gloo, the interpreter's kernels), so that the script the 2-GPU machine runs cannot rot
between its runs there: DDP on half batches is as close to a float64 training as one process
on the combined batch, and the report says so."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import tritonconv

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(
    not tritonconv.INTERPRETER or not torch.distributed.is_available(),
    reason="on a GPU the check is its own run (torchrun on 2 GPUs); here: gloo on CPU",
)


def test_ddp_matches_float64_as_one_process_does(tmp_path):
    command = [
        sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
        str(ROOT / "scripts/distributed_check.py"), "--mode", "ddp", "--steps", "1",
        "--size", "8", "--batch", "2", "--out", str(tmp_path),
    ]  # fmt: skip
    env = dict(os.environ, TRITON_INTERPRET="1", OMP_NUM_THREADS="1")
    done = subprocess.run(
        command, env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = json.loads((tmp_path / "distributed_check.json").read_text())
    assert summary["passed"] and summary["world_size"] == 2, summary["failures"]
    assert summary["convs_swapped"] == summary["convs"] == 8
    ddp, one = summary["modes"]["ddp"], summary["one_process"]
    # fp32 rounding of a small net: both far inside the tolerances, and measured (not 0)
    assert 0 < max(ddp["grad_err"]) < 1e-5 and 0 < max(one["grad_err"]) < 1e-5
    assert max(ddp["vs_one_process"]["grad_err"]) < 1e-5
    assert "RESULT: PASS" in done.stdout
