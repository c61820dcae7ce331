"""``tritonconv.warmup``: capturing a model's convolution calls, and running them in this process
or in spawned workers, with failures reported rather than raised.

On the CPU nothing compiles (Triton's interpreter), so ``warmup`` itself returns at once here;
the records and the per-call function are tested directly, on CPU tensors through the
interpreter (``TRITONCONV_CPU_KERNELS=1``, set by conftest)."""

import dataclasses
import importlib
import pickle

import pytest
import torch
from torch import nn

import tritonconv
from tritonconv import nn as tnn
from tritonconv.ops.conv_gemm import get_workspace_limit
from tritonconv.testing import DEVICE

wu = importlib.import_module("tritonconv.warmup")  # the module: tritonconv.warmup is the function


class Net(nn.Module):
    """Two identical convolutions (one call), a different one (tritonconv's, direct), a
    transposed one given ``output_size``, a 1-D one, and batch norm in train mode."""

    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(4, 4, 3, padding=1)
        self.b = nn.Conv2d(4, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.c = tnn.Conv2d(4, 8, 3, stride=2, bias=False, algo="direct")
        self.up = tnn.ConvTranspose2d(8, 4, 2, stride=2)
        self.seq = nn.Conv1d(3, 5, 3)

    def forward(self, x, s):
        y = self.c(self.bn(self.b(self.a(x))))
        return self.up(y, output_size=[7, 7]), self.seq(s)


def _inputs(device=DEVICE):
    """On the test device: CPU (the interpreter) in CI, CUDA on the GPU machine."""
    return torch.randn(1, 4, 8, 8, device=device), torch.randn(1, 3, 8, device=device)


@pytest.fixture
def calls():
    return wu.capture_calls(Net().to(DEVICE), *_inputs())


def _boom(*args, **kwargs):
    raise AssertionError("a tritonconv kernel ran while capturing")


def test_capture_merges_equal_calls_and_keeps_distinct_ones(monkeypatch):
    model = Net().to(DEVICE)
    # Capturing computes with torch's convolutions: none of tritonconv's runs (or compiles)
    monkeypatch.setattr(tnn.functional, "memoized_convolution", _boom)
    stats = model.bn.running_mean.clone()
    calls = wu.capture_calls(model, *_inputs())
    assert [c.module for c in calls] == [
        "tritonconv.nn.Conv2d", "tritonconv.nn.Conv2d", "tritonconv.nn.ConvTranspose2d",
        "tritonconv.nn.Conv1d",
    ]  # fmt: skip
    a, c, up, seq = calls
    assert dict(a.options)["algo"] == "auto" and dict(a.options)["bias"] is True
    assert dict(c.options)["algo"] == "direct" and c.bias is None
    assert c.input.shape == (1, 4, 8, 8) and c.weight.shape == (8, 4, 3, 3)
    assert up.args == ((7, 7),) and up.kwargs == () and up.input.shape == (1, 8, 3, 3)
    assert seq.input == wu.TensorSpec("float32", (1, 3, 8), (24, 8, 1))
    assert torch.device(a.device).type == torch.device(DEVICE).type
    assert a.settings.cudnn_allow_tf32 is False  # conftest: TF32 off
    assert pickle.loads(pickle.dumps(calls)) == calls and len(set(calls)) == 4
    # the model is left as it was: no hook, no patched method, batch-norm statistics kept
    assert torch.equal(model.bn.running_mean, stats) and model.training
    assert "_conv_forward" not in vars(model.c) and "forward" not in vars(model.up)
    assert not model.a._forward_pre_hooks
    # a channels-last input makes other calls of the 2-D convolutions (their outputs too are
    # channels-last); the 1-D one is the same call
    x, s = _inputs()
    more = wu.capture_calls(model, x.to(memory_format=torch.channels_last), s)
    assert more[3] == calls[3] and len(set(calls + more)) == 7
    assert more[0].input.stride == (256, 1, 32, 4)


def test_in_process_runs_every_call(calls, monkeypatch):
    ran = []

    def spy(call, backward=True):
        ran.append((call, backward))
        return warm_call(call, backward)

    warm_call = wu.warm_call
    monkeypatch.setattr(wu, "warm_call", spy)
    report = wu.warm_calls(calls + calls[:2], workers=0)  # repeats run once
    assert (report.calls, report.workers, report.failures) == (4, 0, ())
    assert ran == [(c, True) for c in calls] and report.seconds > 0
    assert "4 convolution call(s) in 0 worker(s)" in str(report)


def test_a_call_applies_its_settings_and_restores_them(calls):
    settings = dataclasses.replace(calls[0].settings, cudnn_benchmark=True, workspace_limit=1 << 20)
    limit = get_workspace_limit()
    assert wu.warm_call(dataclasses.replace(calls[0], settings=settings), backward=False) is None
    assert torch.backends.cudnn.benchmark is False and get_workspace_limit() == limit


def test_cpu_inputs_have_nothing_to_compile(monkeypatch):
    def fail(*args, **kwargs):
        raise AssertionError("nothing should be captured or run")

    monkeypatch.setattr(wu, "capture_calls", fail)
    monkeypatch.setattr(wu, "warm_calls", fail)
    report = tritonconv.warmup(Net(), *_inputs("cpu"))
    assert (report.calls, report.workers, report.failures) == (0, 0, ())
    assert "nothing to compile" in report.note and "nothing to compile" in str(report)


def test_a_failing_call_is_reported_not_raised(calls):
    missing = dataclasses.replace(calls[0], module="tritonconv.nn.NoSuchConv")
    options = dict(calls[3].options, groups=2)  # 3 input channels in 2 groups
    invalid = dataclasses.replace(calls[3], options=tuple(options.items()))
    report = wu.warm_calls([missing, calls[3], invalid], workers=0)
    assert report.calls == 3 and [f[0] for f in report.failures] == [str(missing), str(invalid)]
    assert "NoSuchConv" in report.failures[0][1] and "groups" in report.failures[1][1]
    assert "2 failed" in str(report)


@pytest.mark.parametrize("workers", [-1, 1.5, True])
def test_bad_workers_raise(workers):
    with pytest.raises(ValueError, match="workers"):
        tritonconv.warmup(Net().to(DEVICE), *_inputs(), workers=workers)
    with pytest.raises(tritonconv.TritonConvError):
        wu.warm_calls([], workers=workers)


def test_spawned_worker(calls):
    """One spawned process (never more workers than calls): the interpreter on the CPU, the
    compiler on a GPU."""
    report = wu.warm_calls(calls[3:], backward=False)
    assert (report.calls, report.workers, report.failures) == (1, 1, ())
