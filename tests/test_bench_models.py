"""The model suites (``tritonconv bench --suite models`` / ``--suite layers``) end to end on a
tiny UNet, their outputs, and what they say when torchvision or matplotlib is missing.

Everything runs through Triton's interpreter here, so the UNet is shrunk to a few channels and
an 8x8 image; the torchvision models are only built through a fake torchvision module."""

import json
import sys

import pytest
import torch
from torch import nn

from tritonconv.bench import Options, Row
from tritonconv.bench import models as bm
from tritonconv.cli import main
from tritonconv.warmup import WarmupReport

TINY_UNET = bm.ModelSpec(
    "unet", (8, 3, 256, 256), (1, 3, 8, 8), lambda quick: bm.UNet(base=2, depth=1), False
)


@pytest.fixture
def tiny_unet(monkeypatch):
    monkeypatch.setitem(bm.MODELS, "unet", TINY_UNET)


def _rows(path):
    return json.loads((path / "bench.json").read_text())["rows"]


def test_unet_is_the_standard_shape():
    model = bm.UNet(base=2, depth=2).eval()
    assert model(torch.randn(2, 3, 16, 12)).shape == (2, 2, 16, 12)
    # 3 levels of 2 convolutions down, 2 transposed + 2 x 2 up, the 1x1 head
    assert bm.count_convolutions(model) == 13
    ours, swapped = bm.converted(model)
    assert swapped == 13 and bm.count_convolutions(ours) == 0
    assert bm.count_convolutions(model) == 13  # the original is left alone


def test_models_suite_end_to_end(tiny_unet, tmp_path, capsys):
    assert main(["bench", "--suite", "models", "--models", "unet", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "8/8 convolutions swapped" in out
    rows = _rows(tmp_path)
    assert not [r for r in rows if r["extra"].get("error")]
    ops = {r["op"] for r in rows}
    assert ops == {"fp32 fwd+bwd vs float64", "infer eager", "train eager", "layer fwd",
                   "layer fwd+bwd"}  # fmt: skip
    assert {r["dtype"] for r in rows} == {"fp32", "bfloat16"}  # speed in bf16 by default
    acc = next(r for r in rows if r["op"] == "fp32 fwd+bwd vs float64")["extra"]
    assert acc["swapped"] == acc["convs"] == 8
    assert 0 < acc["ours_out_err"] < 1e-5 and 0 < acc["ours_grad_err"] < 1e-4
    assert acc["ref_out_err"] < 1e-5 and acc["ours_grad_worst"]
    layers = [r for r in rows if r["op"] == "layer fwd+bwd"]
    assert sum(r["extra"]["count"] for r in layers) == 8  # every call, same shapes merged
    assert all(r["extra"]["algo"] and r["ours_ms"] > 0 and r["ref_ms"] > 0 for r in layers)
    assert any("conv_transpose2d" in r["shape"] for r in layers)
    md = (tmp_path / "models.md").read_text()
    assert "| unet | 8/8 |" in md and "per layer (call order)" in md
    assert "layers losing the most time" in out
    assert ("no plots" in out) != (tmp_path / "models.png").exists()
    assert not (tmp_path / "bench.partial.json").exists()  # only while it runs


def test_layers_suite_through_the_api(tiny_unet):
    """A plain ``Options`` works too: each layer in float32 with the algorithm auto picks."""
    from tritonconv import bench

    opts = bm.ModelOptions(quick=True, speed_dtypes=("float32",), models=("unet",))
    rows = bench.run(["layers"], opts)
    assert {r.suite for r in rows} == {"layers"} and {r.dtype for r in rows} == {"float32"}
    assert {r.op for r in rows} == {"layer fwd", "layer fwd+bwd"}
    assert rows[0].case == "unet/down.0.0" and rows[0].rate is not None
    assert bm.summarize(rows)[("layers", "unet")]["layers"]["float32"]
    plain = bm.model_options(Options(quick=True))
    assert bm.model_names(plain, "layers") == bm.model_names(plain, "models") == ["unet"]
    assert bm.model_names(bm.model_options(Options()), "layers") == ["resnet50"]


def test_models_suite_compiled_only(tiny_unet):
    opts = bm.ModelOptions(quick=True, compile="only", speed_dtypes=("float32",))
    rows = list(bm.models_suite(opts))
    assert [r.op for r in rows] == ["infer compiled", "train compiled"]
    assert not [r for r in rows if r.extra.get("error")]
    assert all(r.extra["ours_compile_s"] > 0 and r.extra["ours_graph_breaks"] == 0 for r in rows)
    for row in rows:  # each compiled side checked against itself eager
        for key in ("compiled_error", "compiled_l2"):
            assert row.extra[f"ours_{key}"] < 1e-4, row.extra
            assert row.extra[f"ref_{key}"] < 1e-4, row.extra
        assert "DIFFERS" not in row.note
        name, ours_l2, noise = row.extra["compiled_l2_worst_vs_noise"]
        assert ours_l2 < 1e-4 and noise < 1e-4, row.extra
        assert name == "output" if row.op == "infer compiled" else name.endswith(("weight", "bias"))


def test_a_compiled_model_unlike_its_eager_self_is_flagged():
    """The compiled rows say so when ours compiled differs from ours eager (session 16's NaN)."""
    assert bm.compiled_mismatch(1e-6, 1e-6) == ""
    assert bm.compiled_mismatch(2e-2, 1.3e-2) == ""  # (bf16: both sides alike)
    assert "COMPILED DIFFERS FROM EAGER" in bm.compiled_mismatch(float("nan"), 1e-2)
    assert "COMPILED DIFFERS FROM EAGER" in bm.compiled_mismatch(0.5, 1e-3)
    # one parameter's gradient wrong while the worst relative max says nothing (bf16 training)
    ours, torch_l2 = {"a.weight": 1.4, "b.weight": 0.9}, {"a.weight": 1.5, "b.weight": 0.02}
    flag = bm.compiled_mismatch(2.0, 1.9, ours, torch_l2)
    assert "b.weight at L2 9.0e-01" in flag
    assert bm.compiled_mismatch(2.0, 1.9, ours, dict(torch_l2, **{"b.weight": 0.5})) == ""
    assert "DIFFERS" in bm.compiled_mismatch(1e-3, 1e-3, {"output": float("nan")}, {})
    # a gradient bf16 rounding moves far: ours eager from torch eager is a second noise sample
    # (efficientnet_b0's SE bias in a training step with batch statistics, session 19)
    ours, torch_l2 = {"se.bias": 4.1}, {"se.bias": 0.39}
    assert "se.bias at L2 4.1e+00" in bm.compiled_mismatch(2.0, 1.9, ours, torch_l2)
    assert bm.compiled_mismatch(2.0, 1.9, ours, torch_l2, {"se.bias": 0.7}) == ""
    assert "se.bias" in bm.compiled_mismatch(2.0, 1.9, {"se.bias": 9.0}, torch_l2, {"se.bias": 0.7})


def test_without_torchvision_the_suite_says_how_to_get_it(monkeypatch, capsys, tmp_path):
    monkeypatch.setitem(sys.modules, "torchvision", None)  # as if not installed
    for suite in ("models", "layers"):
        args = ["bench", "--suite", suite, "--models", "unet,resnet50", "--out", str(tmp_path)]
        assert main(args) == 2
        out = capsys.readouterr().out
        assert "pip install torchvision" in out and "Traceback" not in out
    assert main(["bench", "--suite", "models", "--models", "nope"]) == 2
    assert "unknown model(s) ['nope']" in capsys.readouterr().out


def test_torchvision_models_are_built_without_weights(monkeypatch):
    """Through a fake torchvision: each model is built with ``weights=None`` (nothing to
    download), video models from ``torchvision.models.video``."""
    built = []

    def factory(name):
        def build(weights="default"):
            built.append((name, weights))
            conv = nn.Conv2d(3, 4, 3, stride=4)
            return nn.Sequential(conv, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 2))

        return build

    fake = type(sys)("torchvision")
    fake.models = type(sys)("torchvision.models")
    fake.models.video = type(sys)("torchvision.models.video")
    fake.models.resnet50 = factory("resnet50")
    fake.models.video.r2plus1d_18 = factory("r2plus1d_18")
    monkeypatch.setitem(sys.modules, "torchvision", fake)
    opts = bm.ModelOptions(quick=True, models=("resnet50",), speed_dtypes=("float32",))
    rows = list(bm.layers_suite(opts))
    assert built == [("resnet50", None)]
    assert [(r.case, r.op) for r in rows] == [
        ("resnet50/0", "layer fwd"),
        ("resnet50/0", "layer fwd+bwd"),
    ]
    assert rows[0].shape == "conv2d 2×3×32×32 channels-last w 4×3×3×3 s4"
    bm.build(bm.MODELS[bm.ALIASES["video.r2plus1d_18"]], quick=True)
    assert built[-1] == ("r2plus1d_18", None)


def test_models_suite_warms_up_its_phases_calls_first(monkeypatch):
    """The calls of the fp32 accuracy phase (TF32 off, at most ACCURACY_BATCH samples) and of
    each speed dtype (channels-last, the model's shape) are warmed in workers (faked here)
    before the phases run, on the GPU only (faked too), and the seconds go into the rows."""
    opts = bm.ModelOptions(speed_dtypes=("bfloat16",))
    base, shape = bm.build(TINY_UNET, True), (10, 3, 8, 8)
    calls = bm.warmup_calls(base, shape, opts)
    fp32 = [c for c in calls if c.input.dtype == "float32"]
    bf16 = [c for c in calls if c.input.dtype == "bfloat16"]
    assert fp32 and bf16 and len(fp32) + len(bf16) == len(calls) == len(set(calls))
    assert {c.input.shape[0] for c in fp32} == {bm.ACCURACY_BATCH}
    assert not any(c.settings.cudnn_allow_tf32 or c.settings.matmul_allow_tf32 for c in fp32)
    assert bf16[0].input.shape == shape and bf16[0].input.stride == (192, 1, 24, 3)
    assert all(c.settings.cudnn_benchmark and c.weight.dtype == c.input.dtype for c in calls)
    # the layers suite measures no accuracy: its warm-up leaves the fp32 calls out
    assert bm.warmup_calls(base, shape, opts, accuracy=False) == bf16

    warmed, steps = [], []
    monkeypatch.setattr(bm, "CUDA", True)
    monkeypatch.setattr(bm, "_free", lambda: None)
    monkeypatch.setattr(
        bm, "warm_calls",
        lambda calls: warmed.append(calls) or WarmupReport(len(calls), 2, 0.1, (("c", "boom"),)),
    )  # fmt: skip
    opts.on_step = lambda what, done, total: steps.append(what)
    extra = bm._warm_up(TINY_UNET, base, shape, opts, bm._Progress(opts, 1))
    assert warmed == [calls] and extra["warmup_s"] > 0 and "warm-up" in steps[-1]
    assert (extra["warmup_calls"], extra["warmup_workers"], extra["warmup_failures"]) == (
        len(calls), 2, 1,
    )  # fmt: skip
    assert extra["warmup_error"] == "c: boom"
    for other in (dict(quick=True), dict(compile="only")):
        assert bm._warm_up(TINY_UNET, base, shape, bm.ModelOptions(**other), None) == {}


def test_paired_timing_alternates_the_sides():
    calls = []
    fns = {"ours": lambda i: calls.append(("ours", i)), "ref": lambda i: calls.append(("ref", i))}
    times = bm.paired_ms(fns, 2, Options(reps=4))
    assert set(times) == {"ours", "ref"}
    timed = calls[6:]  # after 3 warm-up calls each
    assert [side for side, _ in timed] == ["ours", "ref", "ref", "ours"] * 2
    assert [i for _, i in timed] == [0, 0, 1, 1, 0, 0, 1, 1]


def _fake_rows():
    info = dict(model="unet", convs=8, swapped=8, choice="heuristic")
    acc = dict(info, ours_out_err=2e-7, ref_out_err=1e-7, ours_grad_err=5e-6, ref_grad_err=1e-6)
    acc.update(out_err_ratio=2.0, grad_err_ratio=5.0, ours_grad_worst="head.weight")
    common = dict(suite="models", case="unet", shape="8×3×256×256", ref_name="cuDNN")
    rows = [Row(**common, op="fp32 fwd+bwd vs float64", dtype="fp32", ours_ms=3.0, ref_ms=2.0,
                extra=acc)]  # fmt: skip
    for op, ours in (("infer eager", 2.0), ("train eager", 6.0), ("infer compiled", 1.0)):
        extra = dict(info, ours_peak_mib=100.0, ref_peak_mib=90.0)
        rows.append(Row(**common, op=op, dtype="bfloat16", ours_ms=ours, ref_ms=3.0, extra=extra))
    for index, (layer, ours) in enumerate((("down.0.0", 1.0), ("up.0", 0.5))):
        extra = dict(info, layer=layer, layers=[layer], count=2, algo="implicit_gemm", index=index)
        for op in ("layer fwd", "layer fwd+bwd"):
            rows.append(
                Row("models", f"unet/{layer}", "conv2d …", op, "bfloat16", ours, 0.8, "cuDNN",
                    work=1e9, unit="TFLOP/s", extra=extra, ours_kernel_ms=ours / 2,
                    ref_kernel_ms=0.6)
            )  # fmt: skip
    rows.append(bm._error_row("models", "unet", "compiled", "bfloat16", "", RuntimeError("x")))
    return rows


def test_summary_markdown_and_tables_from_rows(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if not installed
    rows = _fake_rows()
    env = {"date": "today", "gpu": "GPU", "torch": "2", "triton": "3"}
    written = bm.write_outputs(rows, env, tmp_path)
    assert written[0].endswith("models.md")
    assert written[-1] == f"no plots: {bm.MATPLOTLIB_HINT}"
    md = (tmp_path / "models.md").read_text()
    line = next(line for line in md.splitlines() if line.startswith("| unet |"))
    assert "| 2.0e-07 / 1.0e-07 | 5.0e-06 / 1.0e-06 | NO (5.00×) | bfloat16 |" in line
    # the conv sums: kernels (0.6 + 0.6) x 2 against (0.5 + 0.25) x 2 ms, calls (0.8 + 0.8)
    # x 2 against (1.0 + 0.5) x 2 ms
    assert "| 1.50× | 0.50× | 3.00× | — | 1.60× / 1.60× | 1.07× / 1.07× | 100 / 90 |" in line
    assert "down.0.0 ×2 (+0.40 ms)" in line  # (1.0 - 0.8) ms × 2 calls
    assert "- error in models unet compiled bfloat16: error: RuntimeError: x" in md
    titles = [t.title for t in bm.tables(rows)]
    assert titles[0].startswith("models:") and titles[-1].startswith("errors")
    assert bm.write_outputs([r for r in rows if r.suite != "models"], env, tmp_path) == []
    # models.md again from bench.json (e.g. after a GPU run, on a machine with matplotlib)
    from tritonconv.bench import to_json

    (tmp_path / "bench.json").write_text(to_json(rows, env))
    assert bm.main([str(tmp_path / "bench.json"), str(tmp_path / "again")]) == 0
    assert (tmp_path / "again" / "models.md").read_text() == md


def test_conv_sums_need_every_layer():
    """A sum over a model's convolutions with one layer unmeasured (an error row, a kernel
    time the graph replay could not take) is not shown: it would flatter one side."""
    layers = bm.summarize(_fake_rows())["models", "unet"]["layers"]["bfloat16"]
    assert bm._sums(layers, kernel=True) == "1.60× / 1.60×"
    layers[1]["both"].ours_kernel_ms = None
    assert bm._sums(layers, kernel=True) == "1.60× / —"
    assert bm._sums(layers, kernel=False) == "1.07× / 1.07×"
    # a layer whose measurement failed (an error row in its place): no sum in the summary
    rows = [r for r in _fake_rows() if r.case != "unet/up.0"]
    rows.append(bm._error_row("models", "unet/up.0", "layer fwd+bwd", "bfloat16", "",
                              RuntimeError("x"), dict(model="unet")))  # fmt: skip
    line = next(line for line in bm._model_lines(bm.summarize(rows)) if line[0] == "unet")
    assert line[10:12] == ["— / —", "— / —"]


def test_plots(tmp_path):
    pytest.importorskip("matplotlib")
    env = {"date": "today", "gpu": "GPU", "torch": "2", "triton": "3"}
    written = bm.write_outputs(_fake_rows(), env, tmp_path)
    assert [p.rsplit("/", 1)[-1] for p in written] == [
        "models.md",
        "models.png",
        "models-unet-bfloat16.png",
    ]
    assert all((tmp_path / name).stat().st_size > 1000 for name in ("models.png",))


def test_resnext_runs_only_when_named():
    """``resnext50_32x4d`` (ResNeXt's small groups) is a model the suites know but do not run
    unless asked: the default set stays issue 14's seven."""
    default = bm.model_names(bm.ModelOptions())
    assert "resnext50_32x4d" not in default and len(default) == 7
    assert bm.model_names(bm.ModelOptions(models=("resnext50_32x4d",))) == ["resnext50_32x4d"]
