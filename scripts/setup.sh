#!/usr/bin/env bash
# Creates .venv with tritonconv installed (editable) and its test tools. Idempotent.
#
# PyTorch: a machine with an NVIDIA driver gets the regular PyPI build; a CPU-only machine
# gets a CPU build (tens of MB, not the multi-GB CUDA build). We ask for 2.13.0+cpu from the
# configured indexes and find-links first, then from PyTorch's CPU index.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
VENV=.venv
stamp=$VENV/.tritonconv-setup

if [ -f "$stamp" ] && [ "$stamp" -nt pyproject.toml ]; then
    exit 0
fi
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
pip() { "$VENV/bin/python" -m pip --disable-pip-version-check -q "$@"; }

if ! "$VENV/bin/python" -c "import torch" 2>/dev/null; then
    if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
        pip install torch
    else
        pip install "torch==2.13.0+cpu" 2>/dev/null \
            || pip install torch --index-url https://download.pytorch.org/whl/cpu
    fi
fi
pip install -e ".[test]"
touch "$stamp"
