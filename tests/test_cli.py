"""The tritonconv command: demo, verify, info and a quick bench run end to end."""

import json

import pytest

import tritonconv
from tritonconv.cli import main


def test_demo_passes(capsys):
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    assert "conv2d backward" in out and "MISMATCH" not in out


def test_verify_and_info(capsys):
    assert main(["verify", "--seed", "3"]) == 0
    assert main(["info"]) == 0
    assert "im2col_gemm" in capsys.readouterr().out


def test_bench_writes_json_and_markdown(tmp_path):
    args = [
        "bench",
        "--quick",
        "--suite",
        "conv",
        "--suite",
        "im2col",
        "--case",
        "r50_3x3_56",
        "--out",
        str(tmp_path),
    ]
    assert main(args) == 0
    rows = json.loads((tmp_path / "bench.json").read_text())["rows"]
    assert {(r["suite"], r["op"]) for r in rows} == {
        ("conv", "fwd"),
        ("conv", "bwd (dX+dW)"),
        ("im2col", "unfold"),
        ("im2col", "fold"),
    }
    assert all(r["ours_ms"] > 0 and r["ref_ms"] > 0 for r in rows)
    assert "| conv | r50_3x3_56 |" in (tmp_path / "bench.md").read_text()


def test_bench_rejects_unknown_suite():
    assert main(["bench", "--suite", "nope"]) == 2


def test_verify_fuzz_and_repro(capsys):
    from tritonconv import fuzz

    assert (
        main(["verify", "--fuzz", "--draws", "2", "--max-elements", "400", "--max-macs", "9000"])
        == 0
    )
    assert "0 mismatches, 0 errors" in capsys.readouterr().out
    case = fuzz.draw_case(1, max_elements=400, max_macs=9000)
    algo = case.algos()[0]
    assert main(["verify", "--repro", case.spec(), "--algo", algo]) == 0
    assert f"ok algo={algo}" in capsys.readouterr().out


def test_verify_fuzz_draws_interpreter_sized_cases(capsys, monkeypatch):
    """Without size limits, ``verify --fuzz`` draws cases sized for where the kernels run
    (the interpreter's are CI's: a GPU-sized draw takes minutes of CPU there); limits given
    on the command line win."""
    from tritonconv import _runtime, fuzz

    seen = []

    def run(**kwargs):
        seen.append({k: kwargs[k] for k in ("max_elements", "max_macs")})
        return fuzz.Report()

    monkeypatch.setattr(fuzz, "run", run)
    for interpreter, limits in ((True, fuzz.INTERPRETER_LIMITS), (False, fuzz.GPU_LIMITS)):
        monkeypatch.setattr(_runtime, "INTERPRETER", interpreter)
        assert main(["verify", "--fuzz", "--draws", "1"]) == 0
        assert seen.pop() == limits
        assert f"up to {limits['max_elements']} input elements" in capsys.readouterr().out
    assert main(["verify", "--fuzz", "--draws", "1", "--max-macs", "777"]) == 0
    assert seen.pop() == dict(fuzz.GPU_LIMITS, max_macs=777)
    assert fuzz.INTERPRETER_LIMITS["max_macs"] < fuzz.GPU_LIMITS["max_macs"]


def test_verify_repro_rejects_a_bad_spec(capsys):
    assert main(["verify", "--repro", "n=1 c=2"]) == 2
    out = capsys.readouterr().out
    assert "bad --repro spec" in out and "missing field(s)" in out and "'k'" in out


def test_bench_host_and_more_suites(tmp_path):
    """The host-overhead and issue-12 suites run end to end (toy sizes, one case each)."""
    args = ["bench", "--quick", "--suite", "host", "--suite", "more", "--out", str(tmp_path)]
    args += ["--case", "dw3x3_96_56", "--case", "unet_up_2x2"]
    assert main(args) == 0
    rows = json.loads((tmp_path / "bench.json").read_text())["rows"]
    assert {(r["suite"], r["case"]) for r in rows} == {
        ("host", "dw3x3_96_56"),
        ("more", "unet_up_2x2"),
    }
    assert {r["op"] for r in rows if r["suite"] == "more"} == {"fwd", "bwd"}
    assert all(r["ours_ms"] > 0 and r["ref_ms"] > 0 for r in rows)


def test_bench_depthwise_suite_reports_the_copy_share(tmp_path):
    """Issue 13's suite end to end (toy size, one depthwise and one grouped case): forward and
    forward + backward against the reference, the forward's bandwidth over the copy's."""
    args = ["bench", "--quick", "--suite", "depthwise", "--case", "mobilenet_3x3"]
    args += ["--case", "grouped_3x3_8ch", "--dtype", "bfloat16", "--out", str(tmp_path)]
    assert main(args) == 0
    rows = json.loads((tmp_path / "bench.json").read_text())["rows"]
    assert {(r["case"], r["op"]) for r in rows} == {
        (case, op) for case in ("mobilenet_3x3", "grouped_3x3_8ch") for op in ("fwd", "fwd+bwd")
    }
    assert all(r["ours_ms"] > 0 and r["ref_ms"] > 0 and r["unit"] == "GB/s" for r in rows)
    assert all((r["of_copy"] is not None) == (r["op"] == "fwd") for r in rows)
    assert all(r["of_copy"] > 0 and r["extra"]["copy_ms"] > 0 for r in rows if r["op"] == "fwd")
    assert "| of copy |" in (tmp_path / "bench.md").read_text()
    # the algorithm auto ran, named (on CPU tensors: PyTorch's, unless the kernels are asked for)
    assert all(r["note"] == f"auto: {r['extra']['auto']}" and r["extra"]["auto"] for r in rows)


def test_explain_channels_last_needs_a_4d_or_5d_input(capsys):
    assert main(["explain", "2,16,20", "16,16,3", "--channels-last"]) == 2
    assert "--channels-last needs a 4-D or 5-D input" in capsys.readouterr().out
    assert main(["explain", "1,16,4,6,6", "16,16,3,3,3", "--channels-last"]) == 0
    assert "implicit_gemm" in capsys.readouterr().out


def test_bench_dense_suite_with_the_benchmark_mode_row(tmp_path):
    """The implicit GEMM vs cuDNN suite end to end (toy size, one case): forward, backward,
    and the forward ``auto`` picks in benchmark mode, named in its note."""
    args = ["bench", "--quick", "--suite", "dense", "--case", "pw_40_120_28", "--dtype"]
    args += ["bfloat16", "--out", str(tmp_path)]
    try:
        assert main(args) == 0
    finally:
        tritonconv.choice.forget_measurements()
        tritonconv.clear_caches()
    rows = json.loads((tmp_path / "bench.json").read_text())["rows"]
    assert [r["op"] for r in rows] == ["fwd", "bwd (dX+dW)", "fwd (auto, benchmark mode)"]
    assert rows[2]["note"].startswith("auto: ") and rows[2]["extra"]["auto"]


def test_warmup_command(capsys, monkeypatch):
    """``tritonconv warmup MODEL`` converts the model and warms it; the report is printed (on
    CPU tensors there is nothing to compile), exit 1 if a call failed, 2 without the model."""
    import torch

    from tritonconv import cli

    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU())
    monkeypatch.setattr(
        cli, "_torchvision_model", lambda name, args: (model, torch.randn(1, 3, 8, 8))
    )
    assert main(["warmup", "tiny", "--workers", "2", "--no-backward"]) == 0
    assert "nothing to compile" in capsys.readouterr().out
    assert main(["warmup", "tiny", "--workers", "-1"]) == 2
    assert "workers" in capsys.readouterr().out
    monkeypatch.setattr(cli, "_torchvision_model", lambda name, args: None)
    assert main(["warmup", "missing"]) == 2


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["explain", "8,64,56,56", "128,64,3,3", "--dtype", "notadtype"],
            "unknown dtype 'notadtype'",
        ),
        (["bench", "--suite", "cpu", "--dtype", "float99"], "unknown dtype 'float99'"),
        (["verify", "--fuzz", "--draws", "2", "--workers", "0"], "--workers: must be positive"),
        (["verify", "--fuzz", "--max-elements", "0"], "--max-elements: must be positive"),
        (["bench", "--reps", "-3"], "--reps: must be positive"),
    ],
)
def test_bad_command_lines_are_usage_errors(argv, message, capsys):
    """Found by an adversarial review (session 13): each was a traceback or a hang."""
    with pytest.raises(SystemExit) as exit:
        main(argv)
    assert exit.value.code == 2 and message in capsys.readouterr().err


def test_bad_repro_fields_algo_and_out_folder(capsys, tmp_path):
    spec = (
        "n=1 c={c} k=4 h=5 w=5 kh=3 kw=3 stride=1,1 padding=1,1 dilation=1,1 groups=2 bias=0 "
        "dtype={dtype} x_layout=contiguous dy_layout=contiguous w_layout=contiguous seed=1 "
        "transposed=0 d=0 kd=1 stride_d=1 pad_d=0 dil_d=1"
    )
    assert main(["verify", "--repro", spec.format(c=4, dtype="float99")]) == 2
    assert main(["verify", "--repro", spec.format(c=3, dtype="float32")]) == 2  # groups 2, 3 ch.
    assert main(["verify", "--repro", spec.format(c=4, dtype="float32"), "--algo", "x"]) == 2
    assert main(["verify", "--fuzz", "--draws", "1", "--max-elements", "1", "--max-macs", "1"]) == 2
    (tmp_path / "file").write_text("")
    assert main(["bench", "--quick", "--suite", "cpu", "--out", str(tmp_path / "file" / "x")]) == 2
    out = capsys.readouterr().out
    assert out.count("bad --repro spec") == 2 and "bad --algo 'x'" in out
    assert "no fuzz case fits" in out and "not a folder" in out


def test_bench_overridden_sets_and_restores_a_probes_knobs(monkeypatch):
    """``bench.overridden`` (the probes' variants): the constants take the given values inside,
    get their own back afterwards (also when the body raises), and launch plans recorded under
    one setting are cleared on the way in and out."""
    from tritonconv import caches
    from tritonconv.bench import overridden
    from tritonconv.ops import implicit_gemm as ig

    cleared = []
    monkeypatch.setattr(caches, "clear_caches", lambda: cleared.append(1))
    before = ig.PACK_CHANNELS, ig.WGRAD_PACK_CHANNELS
    with overridden(ig, PACK_CHANNELS=64, WGRAD_PACK_CHANNELS=16):
        assert (ig.PACK_CHANNELS, ig.WGRAD_PACK_CHANNELS) == (64, 16)
        assert len(cleared) == 1
    assert before == (ig.PACK_CHANNELS, ig.WGRAD_PACK_CHANNELS)
    assert len(cleared) == 2
    with pytest.raises(RuntimeError), overridden(ig, PACK_CHANNELS=8):
        raise RuntimeError
    assert before[0] == ig.PACK_CHANNELS


def test_bench_measurements_fit_their_time_budget(monkeypatch):
    """A measurement's warm-up: its untimed calls first (compilation and benchmark mode
    happen there), then one timed pass over the input sets; slow calls get fewer
    repetitions (never under MIN_REPS for that, never more than asked)."""
    from tritonconv import bench

    calls = []
    assert bench._warm_ms(calls.append, 3, 2) >= 0
    assert calls == [0, 1, 0, 0, 1]  # 3 untimed, then sets 0 and 1 timed
    monkeypatch.setattr(bench, "MEASURE_BUDGET_MS", 100.0)
    assert bench._budget_reps(50, 1.0) == 50  # 50 ms of 100: all
    assert bench._budget_reps(50, 10.0) == 10
    assert bench._budget_reps(50, 1000.0) == bench.MIN_REPS
    assert bench._budget_reps(3, 1000.0) == 3  # (fewer asked: fewer given)
    assert bench._budget_reps(50, 0.0) == 50
