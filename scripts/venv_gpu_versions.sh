#!/usr/bin/env bash
# A second virtual environment with the GPU machine's torch and Triton (torch 2.11, Triton 3.6:
# the device tool's machines; the development machine's .venv has torch 2.13 / Triton 3.9), so
# that the CPU suite (Triton's interpreter) runs under those versions before any device time is
# spent. Session 14's first GPU call found every compiled convolution broken by a torch 2.11
# difference that torch 2.13 does not show (benchmarks/NOTES.md, session 14).
#
# Checked in session 14: with session 13's code it fails test_compile.py's one-graph tests at
# trace time (InternalTorchDynamoError), as the GPU did.
#
#   scripts/venv_gpu_versions.sh                     # makes .venv-gpu (4.8 GB: a CUDA build)
#   TRITON_INTERPRET=1 PYTHONPATH=src .venv-gpu/bin/python -m pytest -q tests/test_compile.py
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv-gpu}
python3 -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip
# numpy < 2.4: Triton 3.6's interpreter takes int() of one-element arrays, which NumPy 2.4
# refuses ("only 0-dimensional arrays can be converted to Python scalars": 676 tests failed)
"$VENV/bin/python" -m pip install -q "torch==2.11.0" "triton==3.6.0" "numpy<2.4" "rich>=13" \
    "pytest>=8" "hypothesis>=6.100" expecttest matplotlib pytest-xdist
"$VENV/bin/python" -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
