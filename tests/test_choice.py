"""algo="auto": the heuristic's reasons, measured choices (benchmark mode) and their on-disk cache
shared by processes, tritonconv.explain and the CLI."""

import json
import subprocess
import sys
import time

import pytest
import torch
import torch.nn.functional as F

import tritonconv as tc
from tritonconv import choice
from tritonconv.cli import main
from tritonconv.ops.implicit_gemm import Config
from tritonconv.testing import assert_close


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    """An empty on-disk cache, benchmark mode off afterwards, no choice left in memory."""
    monkeypatch.setenv("TRITONCONV_CACHE_DIR", str(tmp_path))
    choice.forget_measurements()
    tc.clear_caches()
    yield tmp_path
    tc.set_benchmark(None)
    choice.forget_measurements()
    tc.clear_caches()


def test_heuristic_reasons(cache_dir, device):
    x = torch.randn(1, 8, 6, 6, device=device)
    assert tc.explain(x, torch.randn(16, 8, 3, 3, device=device)).algo == "im2col_gemm"
    assert tc.explain(x, torch.randn(4, 8, 3, 3, device=device)).algo == "direct"
    x16, w16 = torch.randn(1, 16, 6, 6, device=device), torch.randn(16, 16, 3, 3, device=device)
    dense = tc.explain(x16, w16)
    assert dense.algo == "implicit_gemm" and "implicit GEMM" in dense.reason
    w64 = torch.randn(16, 8, 3, 3, dtype=torch.float64, device=device)
    assert tc.explain(x.double(), w64).algo == "im2col_gemm"  # no float64 implicit GEMM
    dw = tc.explain(x, torch.randn(8, 1, 3, 3, device=device), groups=8)
    assert dw.algo == "depthwise" and "read the input once" in dw.reason
    xi, wi = x.long(), torch.zeros(16, 8, 3, 3, dtype=torch.long, device=device)
    assert "integer" in tc.explain(xi, wi).reason
    assert tc.explain(x, torch.randn(16, 8, 3, 3, device=device), algo="direct").algo == "direct"
    t = tc.explain(x, torch.randn(8, 2, 3, 3, device=device), transposed=True, stride=2)
    assert t.algo == "direct"


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_heuristic_measured_rules(dtype, cache_dir, device):
    """The measured rules of choice.py: 16-bit image stems (3x3, 4x4, 7x7) run on the implicit
    GEMM, fp32 ones keep im2col + GEMM; 16-bit convolutions with few output channels run on
    the implicit GEMM over many output rows (a segmentation head) and on the direct kernel
    over few (a squeeze-and-excitation layer); fp32 ones keep the rules before."""
    half = dtype != torch.float32
    image = torch.randn(2, 3, 16, 16, device=device, dtype=dtype)
    for k in (3, 4, 7):
        stem = tc.explain(image, torch.randn(16, 3, k, k, device=device, dtype=dtype), stride=2)
        assert stem.algo == ("implicit_gemm" if half else "im2col_gemm"), stem
    squeeze = torch.randn(2, 240, 1, 1, device=device, dtype=dtype)
    fc1 = tc.explain(squeeze, torch.randn(10, 240, 1, 1, device=device, dtype=dtype))
    assert fc1.algo == ("direct" if half else "im2col_gemm"), fc1
    features = torch.randn(1, 64, 128, 128, device=device, dtype=dtype)
    head = tc.explain(features, torch.randn(2, 64, 1, 1, device=device, dtype=dtype))
    assert head.algo == ("implicit_gemm" if half else "direct"), head


@pytest.mark.parametrize("tf32", [True, False])
def test_small_groups_run_on_the_implicit_gemm(tf32, cache_dir, device, monkeypatch):
    """Groups of 4 to 15 channels (ResNeXt's) run on the implicit GEMM, packed into
    block-diagonal tiles, in 16-bit, channels-last, or fp32 with TF32 allowed; fp32 NCHW
    with TF32 off and groups under 4 channels keep the direct kernel. The result matches
    float64 (to TF32's accuracy where it is allowed: the GPU's, not the interpreter's)."""
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", tf32)
    cl = torch.channels_last
    x = torch.randn(2, 32, 6, 5, device=device)
    w = torch.randn(32, 8, 3, 3, device=device)  # 4 groups of 8
    for dtype, layout, want in (
        (torch.bfloat16, torch.contiguous_format, "implicit_gemm"),
        (torch.float16, cl, "implicit_gemm"),
        (torch.float32, cl, "implicit_gemm"),
        (torch.float32, torch.contiguous_format, "implicit_gemm" if tf32 else "direct"),
    ):
        xs, ws = (t.to(dtype).to(memory_format=layout) for t in (x, w))
        found = tc.explain(xs, ws, padding=1, groups=4)
        assert found.algo == want, (dtype, layout, found)
        if want == "implicit_gemm":  # packed to 32 channels (fp32: 16)
            packed = 2 if dtype == torch.float32 else 4
            assert f"{packed} groups a program as one block-diagonal" in found.reason
    four = tc.explain(x.bfloat16(), torch.randn(32, 4, 3, 3, device=device).bfloat16(), groups=8)
    assert four.algo == "implicit_gemm"
    for in_per_group, out_per_group in ((2, 2), (3, 8), (8, 3)):
        xs = torch.randn(1, 8 * in_per_group, 5, 5, device=device, dtype=torch.bfloat16)
        ws = torch.randn(8 * out_per_group, in_per_group, 3, 3, device=device).bfloat16()
        assert tc.explain(xs, ws, groups=8).algo == "direct", (in_per_group, out_per_group)
    y = tc.conv2d(x.to(memory_format=cl), w, padding=1, groups=4)
    want = F.conv2d(x.cpu().double(), w.cpu().double(), padding=1, groups=4)
    if tf32:  # TF32 products (10-bit mantissas), as cuDNN's: a relative error near 1e-3
        error = (y.cpu().double() - want).abs().max() / want.abs().max()
        assert error < 1e-2, error
    else:  # fp32 accuracy (three TF32 products)
        assert_close(y, want, reduction=72, name="grouped 8 channels, fp32 channels-last")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_pointwise_layers_in_graphs_run_as_one_gemm(dtype, cache_dir, device):
    """16-bit channels-last 1x1 stride-1 convolutions: one cuBLAS GEMM per pass (im2col +
    GEMM's pointwise case) where the call is traced into a graph, the implicit GEMM in eager
    (its one launch costs less host time than the GEMM's PyTorch calls). fp32, NCHW, strided
    and grouped 1x1 layers keep their rules; the graph's result matches float64."""
    from torch.fx.experimental.proxy_tensor import make_fx

    half = dtype == torch.bfloat16
    cl = torch.channels_last
    x = torch.randn(2, 32, 5, 6, device=device, dtype=dtype).to(memory_format=cl)
    w = torch.randn(48, 32, 1, 1, device=device, dtype=dtype)
    assert tc.explain(x, w).algo == "implicit_gemm"  # eager, either dtype

    def gemm_in_graph(fn, *args) -> bool:
        graph = make_fx(fn, tracing_mode="fake")(*args).graph
        targets = {str(n.target) for n in graph.nodes if n.op == "call_function"}
        return "tritonconv.conv2d_gemm.default" in targets

    assert gemm_in_graph(lambda x, w: tc.conv2d(x, w), x, w) == half
    for variant in (
        lambda x, w: tc.conv2d(x.contiguous(), w),  # NCHW
        lambda x, w: tc.conv2d(x, w, stride=2),
        lambda x, w: tc.conv2d(x, w[:, :16], groups=2),
    ):
        assert not gemm_in_graph(variant, x, w)
    b = torch.randn(48, device=device, dtype=dtype)
    got = make_fx(lambda x, w, b: tc.conv2d(x, w, b))(x, w, b)(x, w, b)
    want = torch.nn.functional.conv2d(*(t.cpu().double() for t in (x, w, b)))
    assert_close(got, want)


def test_benchmark_mode_measures_once_and_a_new_process_reads_the_disk(
    cache_dir, device, monkeypatch
):
    x = torch.randn(1, 8, 6, 6, device=device)
    w = torch.randn(16, 8, 3, 3, device=device)
    tc.set_benchmark(True)
    first = tc.explain(x, w, padding=1)
    assert set(first.timings) == {"implicit_gemm", "im2col_gemm", "direct"}
    assert first.algo == min(first.timings, key=first.timings.get)
    stored = json.loads(choice.cache_file().read_text())
    assert [v["algo"] for v in stored.values()] == [first.algo]
    choice.forget_measurements()  # as a new process would start
    monkeypatch.setattr(choice, "device_ms", lambda *a, **k: pytest.fail("measured again"))
    again = tc.explain(x, w, padding=1)
    y = tc.conv2d(x, w, padding=1)  # the call itself uses the cached choice
    assert again.algo == first.algo and "cached" in again.reason
    assert y.shape == (1, 16, 6, 6)


def test_a_recorded_choice_is_per_precision(cache_dir, device, monkeypatch):
    """Benchmark mode's records are keyed by the dots' precision: a choice measured for fp32
    with TF32 off (the tests' setting) is not replayed for fp32 with TF32 on."""
    x = torch.randn(1, 8, 6, 6, device=device)
    w = torch.randn(16, 8, 3, 3, device=device)
    tc.set_benchmark(True)
    tc.explain(x, w, padding=1)
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", True)
    again = tc.explain(x, w, padding=1)
    assert "cached" not in again.reason and again.timings
    assert len(json.loads(choice.cache_file().read_text())) == 2


ALTERNATIVE = (32, 16, 16, 4, 1)  # tiles the interpreter takes


def _tuning(monkeypatch, configs) -> list:
    """Benchmark mode tries ``configs``; a timer makes :data:`ALTERNATIVE` the fastest of
    everything; returns the list of forward tiles as the implicit GEMM receives them (a
    ``Config``, whose sixth field the 5-tuples here leave at its default, or ``()``)."""
    from tritonconv.ops import implicit_gemm

    monkeypatch.setattr(implicit_gemm, "tuning_configs", lambda *a: configs)
    seen = []
    real_forward = implicit_gemm.conv_forward

    def forward(x, w, b, geometry, groups, config=None):
        seen.append(implicit_gemm.Config(*config) if config else ())
        return real_forward(x, w, b, geometry, groups, config)

    def timer(fn, reps, **_):
        fn(0)
        return 1.0 if seen and seen[-1] == implicit_gemm.Config(*ALTERNATIVE) else 5.0

    monkeypatch.setattr(implicit_gemm, "conv_forward", forward)
    monkeypatch.setattr(choice, "device_ms", timer)
    return seen


def test_benchmark_mode_tunes_the_implicit_gemm_tiles(cache_dir, device, monkeypatch):
    """Every tuning configuration is timed; the fastest is recorded with the choice, on disk
    too, and the call (and explain) use it; a configuration that fails is passed over."""
    alternative = ALTERNATIVE
    broken = (48, 16, 16, 4, 1)  # not a power of two: the kernel cannot take it
    seen = _tuning(monkeypatch, [(), broken, alternative])
    x = torch.randn(1, 16, 6, 6, device=device)
    w = torch.randn(16, 16, 3, 3, device=device)
    tc.set_benchmark(True)
    first = tc.explain(x, w, padding=1)
    assert first.algo == "implicit_gemm" and first.config == alternative
    assert {(), Config(*broken), Config(*alternative)} <= set(seen)
    assert "32x16x16 w4 s1 (measured)" in first.reason
    stored = json.loads(choice.cache_file().read_text())
    assert [v["config"] for v in stored.values()] == [list(alternative)]
    choice.forget_measurements()
    tc.clear_caches()
    seen.clear()
    y = tc.conv2d(x, w, padding=1)  # from the disk: the measured tiles, not measured again
    assert seen == [Config(*alternative)]
    expected = torch.nn.functional.conv2d(x.double().cpu(), w.double().cpu(), padding=1)
    assert torch.allclose(y.double().cpu(), expected, atol=1e-4)


def test_benchmark_mode_tunes_a_3d_call_too(cache_dir, device, monkeypatch):
    """A 3-D call has one algorithm but still the implicit GEMM's tiles to choose."""
    alternative = ALTERNATIVE
    _tuning(monkeypatch, [(), alternative])
    x = torch.randn(1, 16, 3, 4, 4, device=device)
    w = torch.randn(16, 16, 3, 3, 3, device=device)
    tc.set_benchmark(True)
    found = tc.explain(x, w, padding=1)
    assert found.algo == "implicit_gemm" and found.config == alternative
    assert "(measured)" in found.reason


def test_processes_share_the_cache_file(cache_dir):
    """Two processes adding choices at once: the file keeps both (lock + atomic replace)."""
    code = (
        "import sys; from tritonconv import choice\n"
        "for i in range(20): choice._store(f'{sys.argv[1]}-{i}', {'algo': 'direct', 'timings': {}})\n"
    )
    procs = [subprocess.Popen([sys.executable, "-c", code, tag]) for tag in ("a", "b")]
    assert all(p.wait(timeout=120) == 0 for p in procs)
    keys = set(json.loads(choice.cache_file().read_text()))
    assert keys == {f"{t}-{i}" for t in "ab" for i in range(20)}


def test_plans_follow_the_benchmark_switch_and_the_record(cache_dir, device):
    x = torch.randn(1, 8, 6, 6, device=device)
    w = torch.randn(16, 8, 3, 3, device=device)
    assert tc.explain(x, w).reason.startswith("16 output channels")  # the heuristic
    tc.conv2d(x, w)
    tc.set_benchmark(True)
    tc.conv2d(x, w)  # a new plan: measured
    assert choice.cache_file().exists()
    tc.set_benchmark(False)
    assert "measured" in tc.explain(x, w).reason  # on record: used without benchmark mode


def test_cli_explain(capsys):
    assert main(["explain", "1,8,6,6", "8,1,3,3", "--groups", "8", "--padding", "1"]) == 0
    assert "depthwise" in capsys.readouterr().out
    assert main(["explain", "1,4,8", "8,2,3", "--groups", "2"]) == 0
    assert "conv1d" in capsys.readouterr().out
    assert main(["explain", "1,4,8,8", "4,3,3,3"]) == 2
    assert "expected input" in capsys.readouterr().out


def test_tune_measures_every_convolution_of_a_model(cache_dir, device):
    model = torch.nn.Sequential(
        tc.nn.Conv2d(4, 16, 3, padding=1), torch.nn.ReLU(), tc.nn.Conv2d(16, 16, 1)
    ).to(device)
    x = torch.randn(1, 4, 6, 6, device=device)
    choices = tc.tune(model, x)
    assert len(choices) == 2
    algos = {"implicit_gemm", "im2col_gemm", "direct"}
    assert all(set(c.timings) == algos for c in choices.values())
    assert not choice.benchmark_enabled()  # the switch is back where it was
    assert len(json.loads(choice.cache_file().read_text())) == 2
    again = tc.tune(model, x)  # everything on record now: nothing measured again
    assert again.keys() == choices.keys()
    assert all("cached" in c.reason for c in again.values())


def test_cli_tune_without_torchvision(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "torchvision", None)  # as if not installed
    assert main(["tune", "resnet50"]) == 2
    assert "pip install torchvision" in capsys.readouterr().out


def test_cli_tune_unknown_model(capsys, monkeypatch):
    fake = type(sys)("torchvision")
    fake.models = type(sys)("torchvision.models")
    fake.models.video = type(sys)("torchvision.models.video")
    monkeypatch.setitem(sys.modules, "torchvision", fake)
    assert main(["tune", "no_such_net"]) == 2
    assert "no torchvision model 'no_such_net'" in capsys.readouterr().out


class _Net(torch.nn.Module):
    """Every kind of convolution module, one transposed with an explicit output_size."""

    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 16, 3, padding=1, padding_mode="reflect")
        self.body = torch.nn.Conv2d(16, 16, 3, padding=1)
        self.dw = tc.nn.Conv2d(16, 16, 3, padding=1, groups=16, algo="direct")
        self.up = torch.nn.ConvTranspose2d(16, 4, 3, stride=2, padding=1)
        self.line = torch.nn.Conv1d(4, 4, 3)
        self.video = torch.nn.Conv3d(1, 2, 1)

    def forward(self, x):
        y = self.up(self.dw(self.body(self.stem(x))), output_size=(12, 12))
        z = self.line(y.flatten(2))
        return self.video(z.unsqueeze(1).unsqueeze(1))


def test_explain_model_reports_every_convolution_in_call_order(cache_dir, device):
    model = _Net().to(device)
    layers = tc.explain_model(model, torch.randn(2, 3, 6, 6, device=device))
    assert [layer.name for layer in layers] == ["stem", "body", "dw", "up", "line", "video"]
    algos = [layer.choice.algo for layer in layers]
    assert algos == ["im2col_gemm", "implicit_gemm", "direct", "im2col_gemm", "direct",
                     "implicit_gemm"]  # fmt: skip
    assert "input [2, 3, 8, 8]" in layers[0].call  # reflect-padded first, as the module does
    assert "asked for" in layers[2].choice.reason  # the module's own algo
    assert "forward tiles" in layers[1].choice.reason
    assert layers[3].call.startswith("conv_transpose2d input [2, 16, 6, 6]")


def test_cli_explain_model(capsys, monkeypatch):
    fake = type(sys)("torchvision")
    fake.models = type(sys)("torchvision.models")
    fake.models.video = type(sys)("torchvision.models.video")
    fake.models.tiny = _Net
    monkeypatch.setitem(sys.modules, "torchvision", fake)
    assert main(["explain", "tiny", "--input", "1,3,6,6"]) == 0
    out = capsys.readouterr().out
    assert "body: conv2d input [1, 16, 6, 6]" in out and "6 convolutions:" in out
    monkeypatch.setitem(sys.modules, "torchvision", None)  # as if not installed
    assert main(["explain", "resnet50"]) == 2
    assert "pip install torchvision" in capsys.readouterr().out


@pytest.mark.skipif(tc.INTERPRETER, reason="GPU timing")
def test_device_ms_times_the_kernels_not_the_host():
    """Benchmark mode's timer: a call whose kernel spins 200 000 cycles (~0.1 ms at the H100's
    clock) measures about that, not the 5 ms its host side takes (the bound leaves room for
    other test processes sharing the GPU)."""
    from tritonconv.timing import device_ms

    def call(_):
        time.sleep(0.005)  # a host far slower than the kernel
        torch.cuda._sleep(200_000)

    ms = device_ms(call, 3, calls=4)
    assert 0.05 < ms < 2.0, ms


def test_explain_names_the_depthwise_kernels(device):
    """explain says which depthwise kernels run, forward, dX and dW (issue 13, item 3)."""
    x = torch.randn(1, 8, 12, 12, device=device).to(memory_format=torch.channels_last)
    w7, w33 = (torch.randn(8, 1, k, k, device=device) for k in (7, 33))
    reason = tc.explain(x, w7, padding=3, groups=8, algo="depthwise").reason
    assert reason.count("sliding window along the width") == 3, reason
    reason = tc.explain(x.contiguous(), w7, stride=2, padding=3, groups=8).reason
    assert "window along the height" in reason and "per stride phase" in reason, reason
    reason = tc.explain(x.contiguous(), w33, padding=16, groups=8, algo="depthwise").reason
    assert reason.count("banded tensor-core") == 3, reason
    small = torch.randn(8, 1, 1, 3, device=device)
    assert "taps unrolled" in tc.explain(x, small, groups=8, algo="depthwise").reason


def test_model_calls_given_by_keyword(cache_dir, device):
    """A convolution a model calls with keywords (``up(input=x, output_size=...)``) is seen
    with its arguments positional, so explain_model (which crashed on ``input=``, and explained
    ``output_padding=0`` for a keyword ``output_size``), warmup and the layer benchmarks see
    the call the model makes."""

    class Up(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.up = torch.nn.ConvTranspose2d(4, 4, 3, stride=2, padding=1)

        def forward(self, x):
            return self.up(input=x, output_size=[8, 8])

    model, x = Up().to(device), torch.randn(1, 4, 4, 4, device=device)
    seen = []
    tc.nn.visit_convolutions(model, (x,), lambda *call: seen.append(call))
    ((name, module, args, kwargs),) = seen
    assert name == "up" and module is model.up and kwargs == {}
    assert args[0] is x and args[1] == [8, 8]
    (layer,) = tc.explain_model(model, x)
    assert layer.call.startswith("conv_transpose2d input [1, 4, 4, 4]")


def test_a_training_call_is_chosen_on_its_backward_too(cache_dir, device, monkeypatch):
    """In benchmark mode a call that needs gradients measures each algorithm's forward and
    backward (the gradients it needs), under its own record; a forward-only record (what
    ``tune`` measures) serves it until then, and calls without gradients keep theirs."""
    from tritonconv import library

    x = torch.randn(1, 8, 6, 6, device=device)
    w = torch.randn(16, 8, 3, 3, device=device)
    # the forward alone measured fastest with the implicit GEMM: neither the rule's algorithm
    # (im2col_gemm, test_heuristic_reasons) nor the one the training call will take
    forwards = []
    for name in ("conv2d_gemm", "conv2d_direct", "conv_implicit_gemm"):
        op = getattr(library, name)
        monkeypatch.setattr(op, "impl", _counting(op.impl, forwards, name))

    def forward_timer(fn, reps, **_):
        fn(0)
        return {"conv_implicit_gemm": 1.0}.get(forwards[-1], 5.0)

    tc.set_benchmark(True)
    with monkeypatch.context() as patch:
        patch.setattr(choice, "device_ms", forward_timer)
        forward_only = tc.explain(x, w, padding=1)
    assert forward_only.algo == "implicit_gemm"
    # benchmark mode off, the forward's record only: the training call takes it
    xg = x.clone().requires_grad_()
    with monkeypatch.context() as patch:
        patch.setattr(choice, "device_ms", lambda *a, **k: pytest.fail("measured"))
        tc.set_benchmark(False)
        assert tc.explain(xg, w, padding=1).algo == forward_only.algo
    tc.set_benchmark(True)

    # measured: each algorithm's forward and its backward op; the backward made the choice
    backwards = []
    for name in ("conv2d_gemm_backward", "conv2d_direct_backward", "conv_implicit_gemm_backward"):
        op = getattr(library, name)
        monkeypatch.setattr(op, "impl", _counting(op.impl, backwards, name))

    def timer(fn, reps, **_):
        before = len(backwards)
        fn(0)
        assert len(backwards) == before + 1, "a training measurement without its backward"
        return {"conv2d_direct_backward": 1.0}.get(backwards[-1], 5.0)

    monkeypatch.setattr(choice, "device_ms", timer)
    wg = w.clone().requires_grad_()
    packed = []  # the measurement builds no autograd graph: no saved-tensor hook sees it
    with torch.autograd.graph.saved_tensors_hooks(lambda t: packed.append(t) or t, lambda t: t):
        trained = tc.explain(xg, wg, padding=1)
    assert packed == []
    assert trained.algo == "direct" and set(trained.timings) == set(forward_only.timings)
    assert trained.reason == "fastest when measured (forward + backward)"
    assert len(json.loads(choice.cache_file().read_text())) == 2  # its own record
    # the call itself runs it, and its gradients are right
    y = tc.conv2d(xg, wg, padding=1)
    dx, dw = torch.autograd.grad(y, (xg, wg), torch.ones_like(y))
    ref = torch.nn.functional.conv2d(xg.double(), wg.double(), padding=1)
    rdx, rdw = torch.autograd.grad(ref, (xg, wg), torch.ones_like(ref))
    assert_close(dx, rdx, reduction=16 * 9)
    assert_close(dw, rdw, reduction=36)
    with torch.no_grad():  # no gradients: the forward's record, not measured again
        assert tc.explain(xg, wg, padding=1).algo == forward_only.algo
    choice.forget_measurements()  # another process: the training call's record, from disk
    tc.clear_caches()
    again = tc.explain(xg, wg, padding=1)
    assert again.reason == "fastest when measured (forward + backward, cached)"


def _counting(impl, seen: list, name: str):
    def counted(*args, **kwargs):
        seen.append(name)
        return impl(*args, **kwargs)

    return counted


def test_benchmark_mode_under_checkpointing_and_with_a_strided_bias(cache_dir, device):
    """Benchmark mode's measurements stay out of the caller's autograd: a training call
    measured inside activation checkpointing (which counts the tensors a forward saves)
    trains right; and a bias with a stride measures and runs (the call passes it dense)."""
    from torch.utils.checkpoint import checkpoint

    tc.set_benchmark(True)
    x = torch.randn(1, 4, 6, 6, dtype=torch.float64, device=device)
    w = torch.randn(8, 4, 3, 3, dtype=torch.float64, device=device)
    b = torch.randn(16, dtype=torch.float64, device=device)[::2]
    leaves = [t.clone().requires_grad_() for t in (x, w, b)]
    y = checkpoint(lambda *a: tc.conv2d(*a, padding=1).relu(), *leaves, use_reentrant=False)
    grads = torch.autograd.grad(y.sum(), leaves)
    ref = [t.clone().requires_grad_() for t in (x, w, b)]
    want = torch.autograd.grad(F.conv2d(*ref, padding=1).relu().sum(), ref)
    for got, exact in zip(grads, want):
        assert_close(got, exact, reduction=36)
    with torch.no_grad():
        assert_close(tc.conv2d(x, w, b, padding=1), F.conv2d(x, w, b, padding=1), reduction=36)
