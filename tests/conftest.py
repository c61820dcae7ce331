"""Shared fixtures: every test runs on the device tritonconv's kernels take in this process
(CPU through Triton's interpreter in CI, CUDA on the GPU machine)."""

import os

import pytest
import torch
from hypothesis import settings

# On CPU tensors ``algo="auto"`` runs PyTorch's convolution (tritonconv.aten); the suite tests the
# Triton kernels, so it keeps ``auto`` on them (test_aten.py covers the default).
os.environ.setdefault("TRITONCONV_CPU_KERNELS", "1")

import tritonconv
from tritonconv.launch import kernel_name
from tritonconv.testing import DEVICE, exact_fp32

settings.register_profile("ci", max_examples=25, deadline=None, derandomize=True)
settings.register_profile("gpu", max_examples=30, deadline=None)
settings.load_profile(
    os.environ.get("HYPOTHESIS_PROFILE", "ci" if tritonconv.INTERPRETER else "gpu")
)


@pytest.fixture(autouse=True, scope="session")
def _private_choice_cache(tmp_path_factory):
    """Measured algorithm choices (benchmark mode) go to a temporary folder, not ~/.cache."""
    os.environ["TRITONCONV_CACHE_DIR"] = str(tmp_path_factory.mktemp("choices"))


@pytest.fixture
def device():
    return DEVICE


@pytest.fixture(autouse=True)
def _exact_fp32():
    """fp32 means fp32: no TF32 in the GEMMs or in cuDNN references."""
    with exact_fp32():
        yield


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture
def plan_recordings(monkeypatch):
    """A list that gains one entry each time a launch plan is built (a call recorded) while
    the test runs: how tests see that later calls replay instead of recording again."""
    from tritonconv import launch

    recordings = []
    real = launch._build_plan
    monkeypatch.setattr(launch, "_build_plan", lambda *a: recordings.append(1) or real(*a))
    return recordings


def _spy_on_launches(monkeypatch, record, module=None) -> None:
    """``record(kernel name, constexprs and options)`` at each launch of ``module``
    (``ops.implicit_gemm`` by default; plans cleared first: none replays)."""
    if module is None:
        from tritonconv.ops import implicit_gemm as module

    tritonconv.clear_caches()
    original = module.launch

    def spy(kernel, grid, *args, **meta):
        record(kernel_name(kernel), meta)
        return original(kernel, grid, *args, **meta)

    monkeypatch.setattr(module, "launch", spy)


@pytest.fixture
def kernels(monkeypatch):
    """Names of the kernels ``ops.implicit_gemm`` launches (plans cleared: none replays)."""
    names = []
    _spy_on_launches(monkeypatch, lambda name, meta: names.append(name))
    return names


@pytest.fixture
def common_kernels(monkeypatch):
    """Names of the kernels ``ops.common`` launches (the fixed-order reductions)."""
    from tritonconv.ops import common

    names = []
    _spy_on_launches(monkeypatch, lambda name, meta: names.append(name), common)
    return names


@pytest.fixture
def launches(monkeypatch):
    """``(kernel name, constexprs and options)`` of each launch of ``ops.implicit_gemm``
    (plans cleared before and after: none replays, none recorded here outlives the test)."""
    seen = []
    _spy_on_launches(monkeypatch, lambda name, meta: seen.append((name, meta)))
    yield seen
    tritonconv.clear_caches()


@pytest.fixture
def tma_gpu(monkeypatch):
    """``ops.implicit_gemm``'s rules as on a 132-multiprocessor GPU with TMA: the
    interpreter's small tiles and the device check set aside (the rule tests)."""
    from tritonconv.ops import implicit_gemm

    monkeypatch.setattr(implicit_gemm, "INTERPRETER", False)
    monkeypatch.setattr(implicit_gemm, "_has_tma", lambda device: True)
    monkeypatch.setattr(implicit_gemm, "multiprocessor_count", lambda device: 132)
