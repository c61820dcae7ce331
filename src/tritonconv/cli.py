"""The ``tritonconv`` command: ``demo | verify | bench | explain | tune | warmup | info``.

* ``demo``: the built-in example (DESIGN.md's reference case) through every op, compared with
  PyTorch, as a table. Works on CPU (Triton's interpreter) and on a GPU.
* ``verify``: random geometries through every op against float64 / exact references; exits 1 on
  any mismatch.
* ``bench``: tritonconv against cuDNN / PyTorch on named suites; writes JSON and Markdown.
* ``explain``: which algorithm ``algo="auto"`` runs for one convolution, and why (measured and
  cached on disk with ``--benchmark``).
* ``tune``: measure and cache (on disk) the algorithms of a torchvision model's convolutions.
* ``warmup``: compile the Triton kernels of a torchvision model's convolutions ahead of its first
  pass, in parallel worker processes (``tritonconv.warmup``; Triton's on-disk cache keeps them).
* ``info``: versions, device, where kernels run, algorithms, workspace limit.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from rich.console import Console
from rich.markup import escape
from rich.table import Table

import tritonconv as tc

from . import fuzz
from .geometry import FLOAT_DTYPES, INT_DTYPES, dtype_name
from .ops.common import channels_last_format
from .testing import DEVICE, assert_close, exact_fp32, random_tensor

console = Console(width=None if sys.stdout.isatty() else 140)


@dataclass
class Check:
    op: str
    shape: str
    dtype: str
    max_error: float
    ms: float
    ok: bool
    detail: str = ""


def _timed(fn: Callable[[], object]) -> tuple[object, float]:
    fn()  # compile / warm up
    if DEVICE == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    result = fn()
    if DEVICE == "cuda":
        torch.cuda.synchronize()
    return result, (time.perf_counter() - start) * 1e3


def _check(op, shape, ours_fn, reference, reduction=1) -> Check:
    """Run ``ours_fn`` (timed) and compare every tensor it returns with ``reference``."""
    ours, ms = _timed(ours_fn)
    ours = ours if isinstance(ours, tuple) else (ours,)
    reference = reference if isinstance(reference, tuple) else (reference,)
    worst, detail = 0.0, ""
    try:
        for a, e in zip(ours, reference, strict=True):
            assert_close(a, e, reduction=reduction, name=op)
            worst = max(worst, (a.detach().cpu().double() - e.cpu().double()).abs().max().item())
        ok = True
    except AssertionError as err:
        ok, detail = False, str(err)
    dtype = str(ours[0].dtype).removeprefix("torch.")
    return Check(op, shape, dtype, worst, ms, ok, detail)


def demo_checks() -> list[Check]:
    """DESIGN.md's example: a 112x112 single-channel image, a 3x3 kernel holding 0..8, stride 1,
    'same' padding; and a 3-channel image checked exactly in int64."""
    checks = []
    image = torch.rand(1, 1, 112, 112, dtype=torch.float32)
    kernel = torch.arange(9, dtype=torch.float32).view(1, 1, 3, 3)
    x, w = image.to(DEVICE), kernel.to(DEVICE)
    x64, w64 = image.double(), kernel.double()
    shape = "1×1×112×112, 3×3 (0..8), same"

    cols_ref = F.unfold(x64, 3, padding=1)
    checks.append(_check("unfold (im2col)", shape, lambda: tc.unfold(x, 3, padding=1), cols_ref))
    cols = cols_ref.float().to(DEVICE)
    checks.append(
        _check(
            "fold (col2im)",
            shape,
            lambda: tc.fold(cols, (112, 112), 3, padding=1),
            F.fold(cols_ref, (112, 112), 3, padding=1),
            reduction=9,
        )
    )
    checks.append(
        _check(
            "conv2d forward",
            shape,
            lambda: tc.conv2d(x, w, padding="same"),
            F.conv2d(x64, w64, padding="same"),
            reduction=9,
        )
    )

    xg = x.clone().requires_grad_()
    wg = w.clone().requires_grad_()
    x64g, w64g = x64.clone().requires_grad_(), w64.clone().requires_grad_()
    grad = torch.randn(1, 1, 112, 112, dtype=torch.float64)
    ref_grads = torch.autograd.grad(F.conv2d(x64g, w64g, padding="same"), (x64g, w64g), grad)

    def backward():
        y = tc.conv2d(xg, wg, padding="same")
        return torch.autograd.grad(y, (xg, wg), grad.float().to(DEVICE))

    checks.append(
        _check("conv2d backward (dX, dW)", shape, backward, ref_grads, reduction=112 * 112)
    )

    xi = random_tensor((1, 3, 64, 64), torch.int64, "cpu", low=-50, high=50)
    wi = random_tensor((4, 3, 3, 3), torch.int64, "cpu", low=-9, high=10)
    shape_i = "1×3×64×64 → 4, 3×3, same"
    xi_dev, wi_dev = xi.to(DEVICE), wi.to(DEVICE)
    checks.append(
        _check(
            "unfold int64 (exact)",
            shape_i,
            lambda: tc.unfold(xi_dev, 3, padding=1),
            F.unfold(xi.double(), 3, padding=1).long(),
        )
    )
    checks.append(
        _check(
            "conv2d int64 (exact)",
            shape_i,
            lambda: tc.conv2d(xi_dev, wi_dev, padding="same"),
            F.conv2d(xi, wi, padding="same"),
        )
    )
    # The seed image upsampled 2x by a transposed convolution (the kernel as its weight), and
    # a causal depthwise conv1d over its rows (Mamba's width-4 filter, SiLU).
    checks.append(
        _check(
            "conv_transpose2d (2x up)",
            "1×1×112×112 → 224×224, 3×3 s2 p1 op1",
            lambda: tc.conv_transpose2d(x, w, stride=2, padding=1, output_padding=1),
            F.conv_transpose2d(x64, w64, stride=2, padding=1, output_padding=1),
            reduction=9,
        )
    )
    rows, taps = x[0, :, :16], torch.linspace(-1, 1, 4, dtype=torch.float64).repeat(16, 1)
    checks.append(
        _check(
            "causal_conv1d + SiLU",
            "16 rows × 112, width 4",
            lambda: tc.causal_conv1d(rows, taps.float().to(DEVICE), activation="silu"),
            F.silu(F.conv1d(x64[0, :, :16], taps[:, None], padding=3, groups=16)[..., :112]),
            reduction=4,
        )
    )
    # A short clip (4 channels, 8 frames of 14x14): a 3x3x3 convolution and a 2x transposed
    # 3-D convolution (a 3-D UNet's up-sampling); exact in int64 too.
    gen = torch.Generator().manual_seed(0)
    clip64 = torch.rand(1, 4, 8, 14, 14, generator=gen, dtype=torch.float64)
    w3 = torch.randn(16, 4, 3, 3, 3, generator=gen, dtype=torch.float64) / 10
    wt3 = torch.randn(16, 8, 2, 2, 2, generator=gen, dtype=torch.float64) / 4
    clip, w3_dev, wt3_dev = (t.float().to(DEVICE) for t in (clip64, w3, wt3))
    checks.append(
        _check(
            "conv3d",
            "1×4×8×14×14 → 16, 3×3×3, p1",
            lambda: tc.conv3d(clip, w3_dev, padding=1),
            F.conv3d(clip64, w3, padding=1),
            reduction=108,
        )
    )
    up_in64 = F.conv3d(clip64, w3, padding=1)
    up_in = up_in64.float().to(DEVICE)
    checks.append(
        _check(
            "conv_transpose3d (2x up)",
            "1×16×8×14×14 → 8×16×28×28, 2×2×2 s2",
            lambda: tc.conv_transpose3d(up_in, wt3_dev, stride=2),
            F.conv_transpose3d(up_in64, wt3, stride=2),
            reduction=16,
        )
    )
    clip_i = xi[:, :, :48].reshape(1, 3, 3, 32, 32)
    w3_i = wi.unsqueeze(2).expand(4, 3, 2, 3, 3).contiguous()
    checks.append(
        _check(
            "conv3d int64 (exact)",
            "1×3×3×32×32 → 4, 2×3×3",
            lambda: tc.conv3d(clip_i.to(DEVICE), w3_i.to(DEVICE), padding=(0, 1, 1)),
            F.conv3d(clip_i, w3_i, padding=(0, 1, 1)),
        )
    )
    return checks


def verify_checks(seed: int = 0) -> list[Check]:
    """Random geometries: unfold/fold/conv2d forward and backward against float64."""
    gen = torch.Generator().manual_seed(seed)
    checks = []
    for _ in range(4):
        n, c, k = (int(v) for v in torch.randint(1, 4, (3,), generator=gen))
        kh, kw = (int(v) for v in torch.randint(1, 4, (2,), generator=gen))
        sh, sw, dh, dw, ph, pw = (int(v) for v in torch.randint(1, 3, (6,), generator=gen))
        h, w = (int(v) for v in torch.randint(7, 14, (2,), generator=gen))
        window = dict(kernel_size=(kh, kw), dilation=(dh, dw), padding=(ph, pw), stride=(sh, sw))
        shape = f"{n}×{c}×{h}×{w} k{kh}×{kw} s{sh},{sw} p{ph},{pw} d{dh},{dw}"
        x64 = torch.randn(n, c, h, w, dtype=torch.float64, generator=gen)
        w64 = torch.randn(k, c, kh, kw, dtype=torch.float64, generator=gen)
        x, wt = x64.float().to(DEVICE), w64.float().to(DEVICE)
        cols_ref = F.unfold(x64, **window)
        checks.append(_check("unfold", shape, lambda x=x, wd=window: tc.unfold(x, **wd), cols_ref))
        cols = cols_ref.float().to(DEVICE)
        checks.append(
            _check(
                "fold",
                shape,
                lambda cols=cols, hw=(h, w), wd=window: tc.fold(cols, hw, **wd),
                F.fold(cols_ref, (h, w), **window),
                reduction=kh * kw,
            )
        )
        conv = dict(stride=(sh, sw), padding=(ph, pw), dilation=(dh, dw))
        checks.append(
            _check(
                "conv2d",
                shape,
                lambda x=x, wt=wt, cv=conv: tc.conv2d(x, wt, **cv),
                F.conv2d(x64, w64, **conv),
                reduction=c * kh * kw,
            )
        )
    return checks


def _print_checks(title: str, checks: list[Check]) -> bool:
    table = Table(title=title)
    for column in ("op", "shape", "dtype", "max |error|", "time ms", "result"):
        table.add_column(column)
    for c in checks:
        table.add_row(
            c.op,
            c.shape,
            c.dtype,
            f"{c.max_error:.2e}",
            f"{c.ms:.3f}",
            "[green]ok[/]" if c.ok else "[red]MISMATCH[/]",
        )
    console.print(table)
    for c in checks:
        if not c.ok:
            console.print(f"[red]{c.op}[/]: {c.detail}")
    return all(c.ok for c in checks)


def _where() -> str:
    if tc.INTERPRETER:
        return "Triton kernels through Triton's interpreter on CPU (no CUDA device)"
    return f"compiled Triton kernels on {torch.cuda.get_device_name()}"


def cmd_demo(args) -> int:
    # The demo shows tritonconv's own kernels: on CPU tensors "auto" would run PyTorch's CPU
    # ops (aten.py), so ask for the interpreted kernels, as the test suite does.
    os.environ.setdefault("TRITONCONV_CPU_KERNELS", "1")
    console.print(f"tritonconv {tc.__version__}: {_where()}")
    torch.manual_seed(args.seed)
    with exact_fp32():  # float32 compared at float32 accuracy: no TF32 on the GPU
        checks = demo_checks()
    ok = _print_checks("tritonconv demo: ours vs PyTorch (float64 / exact reference)", checks)
    return 0 if ok else 1


def _positive(kind):
    """An argparse type: a positive ``kind`` (int or float)."""

    def parse(text: str):
        value = kind(text)
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be positive, got {text}")
        return value

    parse.__name__ = kind.__name__
    return parse


# Every dtype the ops take, by name (``torch.<name>``).
_DTYPE_NAMES = tuple(dtype_name(d) for d in (*FLOAT_DTYPES, *INT_DTYPES))


def _dtype(text: str) -> str:
    """An argparse type: a dtype's name (``torch.<name>``)."""
    if text not in _DTYPE_NAMES:
        raise argparse.ArgumentTypeError(
            f"unknown dtype {text!r}: one of {', '.join(_DTYPE_NAMES)}"
        )
    return text


def cmd_verify(args) -> int:
    if args.repro:
        return _verify_repro(args.repro, args.algo)
    if args.fuzz:
        return _verify_fuzz(args)
    with exact_fp32():
        checks = verify_checks(args.seed)
    ok = _print_checks(f"tritonconv verify (seed {args.seed})", checks)
    return 0 if ok else 1


def _verify_repro(spec: str, algo: str | None) -> int:
    """One fuzz case (the line a failure printed), every algorithm or ``algo``."""
    try:
        case = fuzz.parse_spec(spec)
        accepted = [*case.algos(), "auto"] if isinstance(case, fuzz.Case) else case.algos()
    except (ValueError, KeyError, tc.TritonConvError) as e:  # fields unknown or at odds
        console.print(f"[red]bad --repro spec: {escape(str(e))}[/]")
        return 2
    if algo is not None and algo not in accepted:
        console.print(f"[red]bad --algo {algo!r}: this case runs {', '.join(accepted)}[/]")
        return 2
    console.print(f"case: {escape(case.spec())}")
    ok = True
    try:
        for result in fuzz.check_case(case, [algo] if algo else None):
            if isinstance(result, fuzz.Failure):
                ok = False
                console.print(f"[red]{escape(result.line())}[/]")
            else:
                console.print(f"[green]ok[/] algo={result[0]}")
    except (tc.TritonConvError, RuntimeError) as e:  # a spec whose fields do not fit together
        console.print(f"[red]bad --repro spec: {escape(str(e).splitlines()[0])}[/]")
        return 2
    return 0 if ok else 1


def _fuzz_worker(args, worker: int) -> object:
    if args.workers > 1:
        torch.set_num_threads(1)  # the workers share the cores; idle OpenMP threads spin

    draws = None if args.draws is None else -(-args.draws // args.workers)
    return fuzz.run(
        seconds=args.seconds,
        draws=draws,
        seed=args.seed,
        worker=worker,
        workers=args.workers,
        max_elements=args.max_elements,
        max_macs=args.max_macs,
    )


def _verify_fuzz(args) -> int:
    """``verify --fuzz``: random cases through every algorithm, in ``--workers`` processes
    (they share the GPU; the float64 references are what costs CPU time)."""
    import concurrent.futures
    import multiprocessing

    if args.seconds is None and args.draws is None:
        args.seconds = 60.0
    # size limits not given: where the kernels run decides (interpreter draws are small)
    for name, value in fuzz.default_limits().items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    console.print(
        f"fuzz on {_where()}: seed {args.seed}, "
        + (f"{args.seconds:g} s" if args.seconds is not None else f"{args.draws} draws")
        + f", {args.workers} worker(s), draws up to {args.max_elements} input elements"
        f" and {args.max_macs} multiply-adds"
    )
    try:
        if args.workers == 1:
            report = _fuzz_worker(args, 0)
        else:
            report = fuzz.Report()
            ctx = multiprocessing.get_context("spawn")
            with concurrent.futures.ProcessPoolExecutor(args.workers, mp_context=ctx) as pool:
                for part in pool.map(_fuzz_worker, [args] * args.workers, range(args.workers)):
                    report.merge(part)
    except ValueError as e:  # size limits no case meets
        console.print(f"[red]{escape(str(e))}[/]")
        return 2
    table = Table(title="tritonconv verify --fuzz")
    for column in ("draws", "checks", "mismatches", "errors", "seconds", "draws/s"):
        table.add_column(column)
    table.add_row(
        str(report.draws),
        str(report.checks),
        str(len(report.failures)),
        str(len(report.errors)),
        f"{report.seconds:.0f}",
        f"{report.draws / max(report.seconds, 1e-9):.1f}",
    )
    console.print(table)
    console.print(
        "checks per algorithm: " + ", ".join(f"{k} {v}" for k, v in sorted(report.by_algo.items()))
    )
    console.print(
        "draws per dtype: " + ", ".join(f"{k} {v}" for k, v in sorted(report.by_dtype.items()))
    )
    for failure in report.failures + report.errors:
        console.print(escape(failure.line()), soft_wrap=True)
    if args.json:
        import json

        Path(args.json).write_text(
            json.dumps(
                {
                    "device": _where(),
                    "torch": torch.__version__,
                    "seed": args.seed,
                    "draws": report.draws,
                    "checks": report.checks,
                    "seconds": report.seconds,
                    "by_algo": dict(report.by_algo),
                    "by_dtype": dict(report.by_dtype),
                    "failures": [f.line() for f in report.failures],
                    "errors": [f.line() for f in report.errors],
                },
                indent=1,
            )
        )
    status = "[green]0 mismatches, 0 errors[/]" if report.ok else "[red]FAILED[/]"
    console.print(f"fuzz: {report.draws} draws, {report.checks} checks: {status}")
    return 0 if report.ok else 1


def cmd_bench(args) -> int:
    from . import bench
    from .bench import models as bench_models

    names = args.suite or ["conv", "im2col"]
    unknown = [n for n in names if n not in bench.suite_names()]
    if unknown:
        console.print(f"[red]unknown suite(s) {unknown}; known: {bench.suite_names()}[/]")
        return 2
    quick = args.quick or tc.INTERPRETER
    if tc.INTERPRETER and not args.quick:
        console.print("[yellow]no CUDA device: running toy shapes through the interpreter[/]")
    opts = bench_models.ModelOptions(
        reps=args.reps, quick=quick, dtypes=tuple(args.dtype or ["float32"]),
        cases=tuple(args.case or ()),
        models=tuple(n for item in args.models or () for n in item.split(",") if n),
        batch=args.batch, compile=args.compile, speed_dtypes=tuple(args.dtype or ["bfloat16"]),
    )  # fmt: skip
    problem = bench_models.check(names, opts)
    if problem:
        console.print(f"[red]{escape(problem)}[/]")
        return 2
    display = (
        bench_models.ProgressDisplay(console, opts)
        if bench_models.wanted(names)
        else console.status("benchmarking…")
    )
    out = Path(args.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        console.print(f"[red]--out {escape(args.out)}: not a folder that can be made ({e})[/]")
        return 2
    so_far: list = []
    with display as status:

        def progress(row):
            speed = f"{row.speedup:.2f}×" if row.speedup else "—"
            status.update(f"{row.suite} {row.case} {row.op} {row.dtype}: {speed}")
            so_far.append(row)  # what is measured so far, on disk (a run cut off keeps it)
            if not bench_models.is_detail(row) or len(so_far) % 25 == 0:
                partial = out / "bench.partial.json"  # replaced whole: never half written
                written = partial.with_suffix(".tmp")
                written.write_text(bench.to_json(so_far, {}))
                written.replace(partial)
            if bench_models.is_detail(row):
                return  # per-layer rows: summarised below
            note = f" {row.note}" if bench_models.wanted([row.suite]) and row.note else ""
            console.log(
                f"{row.suite:8} {row.case:16} {row.op:12} {row.dtype:9} {speed}{escape(note)}"
            )

        try:
            rows = bench.run(names, opts, progress)
        except bench_models.MissingDependency as e:
            console.print(f"[red]{escape(str(e))}[/]")
            return 2
    env = bench.environment()
    (out / "bench.json").write_text(bench.to_json(rows, env))
    (out / "bench.md").write_text(bench.markdown(rows, env))
    (out / "bench.partial.json").unlink(missing_ok=True)
    table = Table(title=f"tritonconv bench on {env['gpu']} (speedup = ref time / ours)")
    columns = ("suite", "case", "op", "dtype", "ours ms", "ref", "ref ms", "speedup", "kernel ×")
    for column in (*columns, "rate", "of copy"):
        table.add_column(column)
    shown = [r for r in rows if not bench_models.is_detail(r)]
    for r in shown:
        table.add_row(
            r.suite,
            r.case,
            r.op,
            r.dtype,
            f"{r.ours_ms:.3f}",
            escape(r.ref_name),
            f"{r.ref_ms:.3f}" if r.ref_ms else "—",
            f"{r.speedup:.2f}" if r.speedup else "—",
            f"{r.kernel_speedup:.2f}" if r.kernel_speedup else "—",
            f"{r.rate:.1f} {r.unit}" if r.rate is not None else "—",
            f"{r.of_copy:.0%}" if r.of_copy is not None else "—",
        )
    if shown:
        console.print(table)
    for extra_table in bench_models.tables(rows):
        console.print(extra_table)
    console.print(f"wrote {out / 'bench.json'} and {out / 'bench.md'}")
    for line in bench_models.write_outputs(rows, env, out):
        console.print(escape(line if line.startswith("no plots") else f"wrote {line}"))
    return 0


def cmd_info(args) -> int:
    import triton

    console.print(f"tritonconv {tc.__version__}")
    console.print(f"torch {torch.__version__}, triton {triton.__version__}")
    console.print(f"kernels: {_where()}")
    if tc.INTERPRETER and os.environ.get("TRITONCONV_CPU_KERNELS", "") in ("", "0"):
        console.print(
            "CPU tensors: PyTorch's own CPU operations by default (aten.py); "
            "TRITONCONV_CPU_KERNELS=1 or algo=<name> for the interpreted kernels"
        )
    console.print(f"conv2d algorithms: {', '.join(tc.CONV_ALGOS)}")
    console.print(f"workspace limit: {tc.get_workspace_limit()} bytes")
    return 0


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(v) for v in text.replace("x", ",").split(",") if v)


def cmd_explain(args) -> int:
    """Which algorithm ``algo="auto"`` picks for one convolution (two shapes), or for every
    convolution of a torchvision model (a name), and why."""
    if args.weight is None:
        return _explain_model(args)
    dtype = getattr(torch, args.dtype)
    try:
        x = torch.zeros(_ints(args.target), dtype=dtype, device=DEVICE)
        if args.channels_last:
            x = x.contiguous(memory_format=_channels_last_of(x))
        w = torch.zeros(_ints(args.weight), dtype=dtype, device=DEVICE)
        if args.benchmark:
            tc.set_benchmark(True)
        padding = args.padding if args.padding in ("same", "valid") else _ints(args.padding)
        found = tc.explain(
            x,
            w,
            None,
            _ints(args.stride),
            padding,
            _ints(args.dilation),
            args.groups,
            transposed=args.transposed,
            output_padding=_ints(args.output_padding),
        )
    except (ValueError, RuntimeError) as e:
        console.print(f"[red]{escape(str(e))}[/]")
        return 2
    op = "conv_transpose" if args.transposed else "conv"
    console.print(f"{op}{w.dim() - 2}d input {list(x.shape)} weight {list(w.shape)}: {found}")
    return 0


def _channels_last_of(x: torch.Tensor) -> torch.memory_format:
    """The channels-last format ``--channels-last`` asks for, for ``x``'s rank."""
    fmt = channels_last_format(x.dim())
    if fmt is None:
        raise tc.TritonConvError(
            f"--channels-last needs a 4-D or 5-D input, got input of size {list(x.shape)}"
        )
    return fmt


def _torchvision_model(name: str, args):
    """(model, example input) for a torchvision model name, on the kernels' device in
    ``args.dtype`` (channels-last with ``args.channels_last``); None (after saying why) when
    torchvision or the model is missing."""
    try:
        import torchvision
    except ImportError:
        console.print(
            "[red]"
            + escape("this needs torchvision: pip install torchvision (or .[bench])")
            + "[/]"
        )
        return None
    video = getattr(torchvision.models.video, name, None)
    factory = getattr(torchvision.models, name, None) or video
    if factory is None or not callable(factory):
        console.print(f"[red]no torchvision model {name!r}[/]")
        return None
    dtype = getattr(torch, args.dtype)
    default = "2,3,16,112,112" if video is not None else "8,3,224,224"
    x = torch.randn(_ints(args.input or default), device=DEVICE, dtype=dtype)
    model = factory().to(DEVICE, dtype).eval()
    if args.channels_last:
        fmt = _channels_last_of(x)
        model, x = model.to(memory_format=fmt), x.contiguous(memory_format=fmt)
    return model, x


def _explain_model(args) -> int:
    loaded = _torchvision_model(args.target, args)
    if loaded is None:
        return 2
    if args.benchmark:
        tc.set_benchmark(True)
    layers = tc.explain_model(*loaded)
    for layer in layers:
        console.print(escape(str(layer)))
    algos = Counter(layer.choice.algo for layer in layers)
    console.print(f"{len(layers)} convolutions: " + ", ".join(f"{a} {n}" for a, n in algos.items()))
    return 0


def cmd_tune(args) -> int:
    """Pre-tune the convolutions of a torchvision model (``tritonconv.tune``)."""
    loaded = _torchvision_model(args.model, args)
    if loaded is None:
        return 2
    model, x = loaded
    choices = tc.tune(tc.nn.convert(model), x)
    for key, found in choices.items():
        console.print(f"{escape(key)}: {found}")
    console.print(f"{len(choices)} convolution(s) tuned; choices in {choice_file()}")
    return 0


def cmd_warmup(args) -> int:
    """Compile the kernels of a torchvision model's convolutions (``tritonconv.warmup``)."""
    loaded = _torchvision_model(args.model, args)
    if loaded is None:
        return 2
    model, x = loaded
    try:
        report = tc.warmup(tc.nn.convert(model), x, workers=args.workers, backward=args.backward)
    except tc.TritonConvError as e:  # e.g. --workers -1
        console.print(f"[red]{escape(str(e))}[/]")
        return 2
    console.print(escape(str(report)))
    return 1 if report.failures else 0


def choice_file():
    from .choice import cache_file

    return cache_file()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tritonconv", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("demo", help="the built-in example through every op, vs PyTorch")
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(fn=cmd_demo)
    p = sub.add_parser("verify", help="random geometries vs float64 references")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--fuzz", action="store_true", help="random conv2d cases, every algorithm")
    p.add_argument(
        "--seconds", type=_positive(float), default=None, help="fuzz for this long (default 60)"
    )
    p.add_argument("--draws", type=_positive(int), default=None, help="fuzz this many cases")
    p.add_argument("--workers", type=_positive(int), default=1, help="fuzz processes")
    gpu, cpu = fuzz.GPU_LIMITS, fuzz.INTERPRETER_LIMITS
    p.add_argument(
        "--max-elements", type=_positive(int), default=None,
        help=f"largest input drawn (default {gpu['max_elements']}; {cpu['max_elements']} "
        "under Triton's interpreter)",
    )  # fmt: skip
    p.add_argument(
        "--max-macs", type=_positive(int), default=None,
        help=f"largest conv drawn, in multiply-adds (default {gpu['max_macs']}; "
        f"{cpu['max_macs']} under the interpreter)",
    )  # fmt: skip
    p.add_argument("--json", default=None, help="write the fuzz report here")
    p.add_argument("--repro", default=None, help="re-run one fuzz case (the line it printed)")
    p.add_argument("--algo", default=None, help="with --repro: only this algorithm")
    p.set_defaults(fn=cmd_verify)
    p = sub.add_parser("bench", help="time tritonconv against cuDNN / PyTorch")
    p.add_argument("--suite", action="append", help="suite name (repeatable); default conv, im2col")
    p.add_argument("--case", action="append", help="only this case (repeatable)")
    p.add_argument(
        "--dtype", action="append", default=None, type=_dtype,
        help="float32 (default; models/layers: bfloat16), bfloat16…",
    )  # fmt: skip
    p.add_argument("--reps", type=_positive(int), default=50)
    p.add_argument("--quick", action="store_true", help="toy shapes, few repetitions")
    p.add_argument("--out", default="bench-out", help="folder for bench.json and bench.md")
    p.add_argument(
        "--models", "--model", dest="models", action="append",
        help="suites models/layers: model names, comma-separated or repeated (default: the "
        "seven of issue 14 for models, resnet50 for layers; resnext50_32x4d when named; unet "
        "needs no torchvision)",
    )  # fmt: skip
    p.add_argument(
        "--batch", type=_positive(int), default=None, help="models/layers: every model's batch"
    )
    p.add_argument(
        "--compile", nargs="?", const="on", default="off", choices=("off", "on", "only"),
        help="models: also time torch.compile'd models (on), or only them (only); adds "
        "minutes of compiling per model",
    )  # fmt: skip
    p.set_defaults(fn=cmd_bench)
    p = sub.add_parser(
        "explain", help="which algorithm a convolution (or each of a model's) runs, and why"
    )
    p.add_argument(
        "target", help="input shape, e.g. 8,64,56,56 (or 8x64x56x56); or a torchvision model"
    )
    p.add_argument("weight", nargs="?", help="weight shape, e.g. 128,64,3,3 (with a shape)")
    p.add_argument("--input", default=None, help="a model's input shape (default 8,3,224,224)")
    p.add_argument("--stride", default="1")
    p.add_argument("--padding", default="0", help="int(s), 'same' or 'valid'")
    p.add_argument("--dilation", default="1")
    p.add_argument("--groups", type=int, default=1)
    p.add_argument("--dtype", default="float32", type=_dtype)
    p.add_argument("--channels-last", action="store_true")
    p.add_argument("--transposed", action="store_true", help="a transposed convolution")
    p.add_argument("--output-padding", default="0")
    p.add_argument("--benchmark", action="store_true", help="measure (and cache) the choice")
    p.set_defaults(fn=cmd_explain)
    p = sub.add_parser("tune", help="measure and cache the algorithms of a torchvision model")
    p.add_argument("model", help="torchvision model name, e.g. resnet50")
    p.add_argument("--input", default=None, help="input shape (default 8,3,224,224)")
    p.add_argument("--dtype", default="float32", type=_dtype)
    p.add_argument("--channels-last", action="store_true")
    p.set_defaults(fn=cmd_tune)
    p = sub.add_parser(
        "warmup", help="compile the kernels of a torchvision model's convolutions, in parallel"
    )
    p.add_argument("model", help="torchvision model name, e.g. resnet50")
    p.add_argument("--input", default=None, help="input shape (default 8,3,224,224)")
    p.add_argument("--dtype", default="float32", type=_dtype)
    p.add_argument("--channels-last", action="store_true")
    p.add_argument("--workers", type=int, default=None, help="processes (default: up to 8)")
    p.add_argument(
        "--no-backward", dest="backward", action="store_false", help="inference kernels only"
    )
    p.set_defaults(fn=cmd_warmup)
    p = sub.add_parser("info", help="versions, device, algorithms")
    p.set_defaults(fn=cmd_info)
    args = parser.parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
