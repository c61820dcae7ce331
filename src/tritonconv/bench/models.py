"""Suites ``models`` and ``layers``: whole networks with every convolution swapped (issue 14).

``models``: torchvision's resnet50, mobilenet_v3_large, convnext_tiny, regnet_y_800mf,
efficientnet_b0 and video.r2plus1d_18 (built with ``weights=None``: random weights, nothing
downloaded), and the small standard :class:`UNet` below; ``resnext50_32x4d`` when named.
Each model is copied and every convolution of the copy swapped by
:func:`tritonconv.nn.convert` (the number swapped is in the rows' notes). Per model:

* **fp32 accuracy** (TF32 off), eval mode: the output and every parameter's gradient (of
  ``(output * probe).sum()``, one fixed random probe) of ours and of the torch model, each
  against a float64 run of the same model on the same input. Distances are relative: max
  abs error over max abs value, for the output and per parameter (the worst parameter
  reported). The target is ours within 2x of torch's own distance.
* **speed**, in ``speed_dtypes`` (bf16 by default), channels-last: inference (eval,
  ``torch.no_grad``) and a training step (train mode, forward, ``loss.backward()``), eager
  and/or ``torch.compile``'d; ours and torch's model in the same process, timed in
  alternation (ours, torch, torch, ours, ...) so a noisy machine slows both alike; medians
  of CUDA-event timings after warm-up, two input batches rotated. Beside each: the peak
  memory one step allocates on top of what was allocated before it.
* **per layer**: every convolution's call captured by a forward hook (one forward pass of
  the torch model), calls of the same signature timed once; ours (the module converted)
  against the torch module on the captured input, forward and forward + backward (input,
  weight and bias gradients), per call and on the GPU alone (CUDA-graph replay, the rows'
  ``*_kernel_ms``): the layers that hold a model back. The summary sums them over the
  model's convolution calls (each layer times its count), kernel time and per-call time,
  forward and forward + backward: beside the whole step's speed, whether the kernels or
  the calls (the host path) hold the model back.

``layers``: the per-layer part alone, for the model(s) asked for (default resnet50), each
layer with the algorithm ``algo="auto"`` picks (named in the row).

cuDNN runs with ``cudnn.benchmark = True`` (its best algorithm per shape). tritonconv's
``auto`` uses its heuristic here, or measures (its benchmark mode) when the environment sets
``TRITONCONV_BENCHMARK=1``; rows say which. ``Options.quick`` (and the CPU, where kernels run
in Triton's interpreter) takes tiny inputs and one repetition, and only the UNet by default:
the numbers then only show that the plumbing works.

:func:`write_outputs` writes ``models.md`` and the PNG plots (matplotlib, optional), and
:func:`tables` the console summary.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import math
import statistics
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from .. import choice as _choice
from .. import nn as tnn
from ..ops.common import channels_last_format, is_channels_last
from ..testing import DEVICE
from ..warmup import ConvCall, capture_calls, warm_calls
from . import Options, Row, input_sets, kernel_ms, suite
from .conv import exact_fp32

CUDA = DEVICE == "cuda"
REF_NAME = "cuDNN (torch.nn)" if CUDA else "torch CPU (torch.nn)"
ACCURACY_BATCH = 8  # the float64 comparison runs on at most this many samples
MAX_REPS = 20  # whole-model steps are long: at most this many alternated pairs
TORCHVISION_HINT = (
    "this needs torchvision (every model but 'unet'): pip install torchvision, or "
    "pip install 'tritonconv[bench]' ('.[bench]' from a checkout); or choose --models unet"
)
MATPLOTLIB_HINT = "PNG plots need matplotlib: pip install matplotlib (or '.[bench]')"
DETAIL_OPS = ("layer fwd", "layer fwd+bwd")


class MissingDependency(RuntimeError):
    """An optional package the suite needs is not installed (the message says how to get it)."""


# ---------------------------------------------------------------------------------------------
# The models


class DoubleConv(nn.Sequential):
    """UNet's block: (3x3 convolution, batch norm, ReLU) twice."""

    def __init__(self, cin: int, cout: int):
        super().__init__(
            nn.Conv2d(cin, cout, 3, padding=1, bias=False),
            nn.BatchNorm2d(cout),
            nn.ReLU(inplace=True),
            nn.Conv2d(cout, cout, 3, padding=1, bias=False),
            nn.BatchNorm2d(cout),
            nn.ReLU(inplace=True),
        )


class UNet(nn.Module):
    """The standard UNet (Ronneberger et al., 2015) with 'same' padding and batch norm:
    ``depth`` times (double convolution, 2x2 max pool) down, a double convolution at the
    bottom, then ``depth`` times (2x2 stride-2 transposed convolution, concatenation with the
    skip, double convolution) up, and a 1x1 convolution to ``classes`` channels. Widths
    ``base * 2**level``. The input's sides must be divisible by ``2**depth``."""

    def __init__(self, in_channels: int = 3, classes: int = 2, base: int = 64, depth: int = 4):
        super().__init__()
        widths = [base * 2**level for level in range(depth + 1)]
        self.down = nn.ModuleList(
            [DoubleConv(in_channels, widths[0])]
            + [DoubleConv(widths[i], widths[i + 1]) for i in range(depth)]
        )
        levels = list(reversed(range(depth)))
        self.up = nn.ModuleList(
            nn.ConvTranspose2d(widths[i + 1], widths[i], 2, stride=2) for i in levels
        )
        self.decode = nn.ModuleList(DoubleConv(2 * widths[i], widths[i]) for i in levels)
        self.head = nn.Conv2d(widths[0], classes, 1)

    def forward(self, x):
        skips = []
        for level, block in enumerate(self.down):
            x = block(F.max_pool2d(x, 2) if level else x)
            skips.append(x)
        skips.pop()  # the bottom's output is x itself
        for up, block in zip(self.up, self.decode):
            x = block(torch.cat([skips.pop(), up(x)], dim=1))
        return self.head(x)


@dataclass(frozen=True)
class ModelSpec:
    name: str
    input: tuple[int, ...]  # full size, batch first
    quick_input: tuple[int, ...]  # the interpreter's size
    build: Callable[[bool], nn.Module]  # quick -> a fresh model (random weights)
    torchvision: bool = True


def import_torchvision():
    """torchvision, or :class:`MissingDependency` saying how to get it."""
    try:
        import torchvision
    except Exception as e:  # not installed, or built for another torch
        raise MissingDependency(f"{TORCHVISION_HINT} ({type(e).__name__}: {e})") from e
    return torchvision


def _torchvision_builder(name: str, video: bool = False) -> Callable[[bool], nn.Module]:
    def build(quick: bool) -> nn.Module:
        models = import_torchvision().models
        return getattr(models.video if video else models, name)(weights=None)

    return build


def _image(name: str) -> ModelSpec:
    # quick: batch 2, so that batch norm in train mode has 2 values per channel at 1x1
    return ModelSpec(name, (32, 3, 224, 224), (2, 3, 32, 32), _torchvision_builder(name))


MODELS: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in (
        _image("resnet50"),
        _image("mobilenet_v3_large"),
        _image("convnext_tiny"),
        _image("regnet_y_800mf"),
        _image("efficientnet_b0"),
        ModelSpec(
            "r2plus1d_18",
            (2, 3, 16, 112, 112),
            (2, 3, 4, 16, 16),
            _torchvision_builder("r2plus1d_18", video=True),
        ),
        ModelSpec(
            "unet",
            (8, 3, 256, 256),
            (1, 3, 16, 16),
            lambda quick: UNet(base=4, depth=2) if quick else UNet(),
            torchvision=False,
        ),
    )
}
# Models run only when named (``--models resnext50_32x4d``): ResNeXt's grouped 3x3 layers of
# 4, 8, 16 and 32 channels a group, which ``auto``'s rules sent to the direct kernel until
# session 44 and no default model has (RegNet's groups are 16 channels wide).
EXTRA_MODELS = ("resnext50_32x4d",)
MODELS.update({name: _image(name) for name in EXTRA_MODELS})
DEFAULT_MODELS = tuple(name for name in MODELS if name not in EXTRA_MODELS)
ALIASES = {"video.r2plus1d_18": "r2plus1d_18"}
QUICK_MODELS = ("unet",)  # the default in quick mode (the interpreter is slow)
LAYERS_DEFAULT, LAYERS_QUICK = ("resnet50",), ("unet",)


# ---------------------------------------------------------------------------------------------
# Options


@dataclass
class ModelOptions(Options):
    """:class:`Options` plus what the model suites take (``tritonconv bench`` fills them)."""

    models: tuple[str, ...] = ()  # empty: the default models (quick: the UNet; layers: resnet50)
    batch: int | None = None  # every model's batch size (None: each model's own)
    speed_dtypes: tuple[str, ...] = ("bfloat16",)
    compile: str = "off"  # "off": eager only; "on": eager and compiled; "only": compiled only
    on_step: Callable[[str, float, int], None] | None = None  # (what, steps done, of all)


def model_options(opts: Options) -> ModelOptions:
    if isinstance(opts, ModelOptions):
        return opts
    return ModelOptions(**{f.name: getattr(opts, f.name) for f in fields(Options)})


def model_names(opts: ModelOptions, suite_name: str = "models") -> list[str]:
    """The models a suite runs, canonical names; ValueError for an unknown name."""
    names = [ALIASES.get(n, n) for n in opts.models]
    if not names:
        if suite_name == "layers":
            names = list(LAYERS_QUICK if opts.quick else LAYERS_DEFAULT)
        else:
            names = list(QUICK_MODELS if opts.quick else DEFAULT_MODELS)
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        raise ValueError(f"unknown model(s) {unknown}; known: {[*MODELS, *ALIASES]}")
    return list(dict.fromkeys(names))


def check(suites: list[str], opts: Options) -> str | None:
    """Why the model suites among ``suites`` cannot run as asked (None: they can)."""
    opts = model_options(opts)
    if opts.compile not in ("off", "on", "only"):
        return f"--compile must be off, on or only, not {opts.compile!r}"
    for name in suites:
        if name not in ("models", "layers"):
            continue
        try:
            names = model_names(opts, name)
        except ValueError as e:
            return str(e)
        if any(MODELS[n].torchvision for n in names):
            try:
                import_torchvision()
            except MissingDependency as e:
                return str(e)
    return None


def wanted(suites) -> bool:
    return bool({"models", "layers"} & set(suites))


def is_detail(row: Row) -> bool:
    """A per-layer row (summarised by :func:`tables`, listed in ``models.md``)."""
    return row.op in DETAIL_OPS


# ---------------------------------------------------------------------------------------------
# Timing and memory


def _reps(opts: Options) -> tuple[int, int]:
    """(warm-up calls, timed pairs) per measurement."""
    if opts.quick:
        return 0, 1
    return 3, max(3, min(opts.reps, MAX_REPS))


def _sync() -> None:
    if CUDA:
        torch.cuda.synchronize()


def paired_ms(fns: dict[str, Callable[[int], object]], n_inputs: int, opts: Options) -> dict:
    """Median ms of each ``fn(i)`` (``i`` cycling over ``n_inputs`` input sets), the functions
    measured in alternation, the order flipped every round (A B, B A, ...): CUDA events on a
    GPU, wall clock on the CPU."""
    warmup, reps = _reps(opts)
    for fn in fns.values():
        for i in range(warmup):
            fn(i % n_inputs)
    _sync()
    names = list(fns)
    samples: dict[str, list] = {name: [] for name in names}
    for rep in range(reps):
        for name in names if rep % 2 == 0 else reversed(names):
            i = rep % n_inputs
            if CUDA:
                start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
                start.record()
                fns[name](i)
                end.record()
                samples[name].append((start, end))
            else:
                begin = time.perf_counter()
                fns[name](i)
                samples[name].append((time.perf_counter() - begin) * 1e3)
    _sync()
    if CUDA:
        samples = {n: [s.elapsed_time(e) for s, e in pairs] for n, pairs in samples.items()}
    return {name: statistics.median(times) for name, times in samples.items()}


def peak_mib(fn: Callable[[], object]) -> float | None:
    """MiB that one call of ``fn`` allocates at its peak on top of what was allocated before
    it (CUDA only; None elsewhere)."""
    if not CUDA:
        return None
    _sync()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    fn()
    _sync()
    return (torch.cuda.max_memory_allocated() - before) / 2**20


@contextlib.contextmanager
def _choices():
    """tritonconv's ``auto`` by heuristic while cuDNN is told to measure, unless the
    environment asks tritonconv to measure too (``TRITONCONV_BENCHMARK=1``)."""
    previous = _choice._benchmark
    _choice.set_benchmark(_choice._BENCHMARK_ENV)
    try:
        yield "measured" if _choice._BENCHMARK_ENV else "heuristic"
    finally:
        _choice.set_benchmark(previous)


def _free() -> None:
    if CUDA:
        torch.cuda.empty_cache()


# ---------------------------------------------------------------------------------------------
# Helpers


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _shape(shape) -> str:
    return "×".join(str(v) for v in shape)


def input_shape(spec: ModelSpec, opts: ModelOptions) -> tuple[int, ...]:
    shape = spec.quick_input if opts.quick else spec.input
    return (opts.batch, *shape[1:]) if opts.batch else tuple(shape)


def _layout(rank: int) -> torch.memory_format:
    return channels_last_format(rank) or torch.contiguous_format


def count_convolutions(model: nn.Module) -> int:
    """torch.nn convolution modules that :func:`tritonconv.nn.convert` swaps."""
    return sum(type(m) in tnn.CONVERTED for m in model.modules())


def converted(model: nn.Module) -> tuple[nn.Module, int]:
    """(a copy of ``model`` with every convolution swapped, how many were swapped)."""
    ours = tnn.convert(copy.deepcopy(model))
    ours_types = tuple(tnn.CONVERTED.values())
    return ours, sum(isinstance(m, ours_types) for m in ours.modules())


def build(spec: ModelSpec, quick: bool) -> nn.Module:
    """The model with seeded random weights (float32, CPU)."""
    torch.manual_seed(0)
    return spec.build(quick)


def _error_row(suite_name, case, op, dtype, shape, error: Exception, extra=None) -> Row:
    """A row saying a measurement failed (the suite goes on); the traceback in ``extra``."""
    note = f"error: {type(error).__name__}: {error}".replace("\n", " ")[:400]
    trace = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    extra = dict(extra or {}, error=note, traceback=trace[-4000:])
    return Row(
        suite=suite_name, case=case, shape=shape, op=op, dtype=dtype, ours_ms=math.nan,
        ref_ms=None, ref_name=REF_NAME, note=note, extra=extra,
    )  # fmt: skip


def _relative(actual: torch.Tensor, exact: torch.Tensor) -> float:
    """max |actual - exact| / max |exact| (0 where ``exact`` is all zeros)."""
    scale = exact.abs().max().item()
    return (actual.double() - exact).abs().max().item() / scale if scale else 0.0


# ---------------------------------------------------------------------------------------------
# fp32 accuracy against float64


@dataclass
class Exact:
    """A float64 run of a model in eval mode: its output, and its parameters' gradients of
    ``(output * probe).sum()`` for one fixed random ``probe``."""

    names: list[str]
    output: torch.Tensor
    probe: torch.Tensor
    grads: tuple[torch.Tensor, ...]


def exact_run(model: nn.Module, x: torch.Tensor) -> Exact:
    """``model`` (float32, eval) run in float64 on ``x`` (on the device)."""
    exact = copy.deepcopy(model).double()
    names = [n for n, p in exact.named_parameters() if p.requires_grad]
    y64 = exact(x.double())
    probe = torch.randn(y64.shape, generator=torch.Generator().manual_seed(1)).to(DEVICE)
    params64 = dict(exact.named_parameters())
    grads64 = torch.autograd.grad((y64 * probe.double()).sum(), [params64[n] for n in names])
    return Exact(names, y64.detach(), probe, grads64)


def _leaves(m: nn.Module, exact: Exact) -> list[torch.Tensor]:
    """``m``'s parameters in ``exact``'s order."""
    params = dict(m.named_parameters())
    return [params[n] for n in exact.names]


def _probe_grads(m: nn.Module, x: torch.Tensor, exact: Exact, leaves: list[torch.Tensor]):
    """``m``'s output on ``x`` and its parameters' (``leaves``) gradients of the probe's sum."""
    y = m(x)
    return y, torch.autograd.grad((y * exact.probe).sum(), leaves)


def _distances_of(y: torch.Tensor, grads, exact: Exact) -> dict:
    errors = {n: _relative(g, g64) for n, g, g64 in zip(exact.names, grads, exact.grads)}
    worst = max(errors, key=errors.get, default="")
    return dict(out_err=_relative(y.detach(), exact.output), grad_err=errors.get(worst, 0.0),
                grad_worst=worst)  # fmt: skip


def distances(m: nn.Module, x: torch.Tensor, exact: Exact) -> dict:
    """``m``'s (float32, eval; run under the caller's precision settings) relative distances
    to ``exact``: ``out_err``, the worst parameter's ``grad_err`` and its name ``grad_worst``."""
    return _distances_of(*_probe_grads(m, x, exact, _leaves(m, exact)), exact)


def accuracy_sides(model: nn.Module, x: torch.Tensor) -> tuple:
    """(torch's model and ours, float32 in eval mode on the device; ``x`` there; their
    float64 run :class:`Exact`): what :func:`accuracy` compares."""
    ref = copy.deepcopy(model).to(DEVICE, torch.float32).eval()
    ours, _ = converted(ref)
    x = x.to(DEVICE, torch.float32)
    return ref, ours, x, exact_run(ref, x)


def accuracy(model: nn.Module, x: torch.Tensor, opts: Options) -> dict:
    """fp32 (TF32 off) distances to float64 of ours and of ``model`` (eval mode): the output's
    and the worst parameter gradient's; plus the fp32 eval forward + backward times of both
    (ms, alternated; in quick mode the first pass's) at that size."""
    ref, ours, x, exact = accuracy_sides(model, x)
    result: dict = {}
    steps, once = {}, {}
    with exact_fp32(torch.float32):
        for side, m in (("ours", ours), ("ref", ref)):
            leaves = _leaves(m, exact)
            begin = time.perf_counter()
            y, grads = _probe_grads(m, x, exact, leaves)
            _sync()
            once[side] = (time.perf_counter() - begin) * 1e3
            result.update({f"{side}_{k}": v for k, v in _distances_of(y, grads, exact).items()})
            del y, grads

            def step(_, m=m, leaves=leaves):
                _probe_grads(m, x, exact, leaves)

            steps[side] = step
        # quick: the one pass above (the interpreter is slow), else alternated repetitions
        result["times"] = once if opts.quick else paired_ms(steps, 1, opts)
    return result


# ---------------------------------------------------------------------------------------------
# Speed of whole models


def _inputs(shape: tuple[int, ...], dtype: torch.dtype) -> list[torch.Tensor]:
    """Two input batches (rotated between calls), channels-last."""
    fmt = _layout(len(shape))
    return [
        torch.randn(shape, device=DEVICE).to(dtype).contiguous(memory_format=fmt) for _ in range(2)
    ]


def _infer(model: nn.Module, xs) -> Callable[[int], object]:
    def run(i):
        with torch.no_grad():
            model(xs[i])

    return run


def _train(model: nn.Module, xs) -> Callable[[int], object]:
    params = [p for p in model.parameters() if p.requires_grad]

    def run(i):
        for p in params:
            p.grad = None
        model(xs[i]).float().square().mean().backward()

    return run


STEPS = {"infer": _infer, "train": _train}


def _measure(sides: dict[str, nn.Module], mode: str, xs, opts: Options) -> tuple[dict, dict]:
    """({side: median ms}, {side: peak MiB}) of ``mode`` ("infer": eval, no gradients;
    "train": train mode, forward and backward) for each side, measured in alternation."""
    for m in sides.values():
        m.train(mode == "train")
    fns = {side: STEPS[mode](m, xs) for side, m in sides.items()}
    times = paired_ms(fns, len(xs), opts)
    for m in sides.values():
        m.zero_grad(set_to_none=True)
    peaks = {side: peak_mib(functools.partial(fn, 0)) for side, fn in fns.items()}
    return times, peaks


def _graph_breaks() -> int:
    from torch._dynamo.utils import counters

    return sum(counters["graph_break"].values())


def _compile(model: nn.Module) -> nn.Module:
    """``torch.compile`` in the default mode (Inductor on a GPU; ``aot_eager`` on the CPU,
    where Inductor would compile our interpreted kernels' host code for nothing)."""
    return torch.compile(model, backend="inductor" if CUDA else "aot_eager")


def _speed_row(info: dict, mode: str, kind: str, dname: str, shape, times, peaks, **extra) -> Row:
    peak = ""
    if peaks["ours"] is not None:
        peak = f"peak MiB ours {peaks['ours']:.0f} / torch {peaks['ref']:.0f}"
    return Row(
        suite="models", case=info["model"], shape=f"{_shape(shape)} channels-last",
        op=f"{mode} {kind}", dtype=dname, ours_ms=times["ours"], ref_ms=times["ref"],
        ref_name=REF_NAME + (" compiled" if kind == "compiled" else ""), note=peak,
        extra=dict(info, ours_peak_mib=peaks["ours"], ref_peak_mib=peaks["ref"], **extra),
    )  # fmt: skip


def _eager_rows(pair, xs, info, dname, opts) -> list[Row]:
    rows = []
    for mode in STEPS:
        times, peaks = _measure(pair, mode, xs, opts)
        rows.append(_speed_row(info, mode, "eager", dname, xs[0].shape, times, peaks))
    return rows


def _gradients(model: nn.Module, mode: str, x) -> dict:
    """``{"output": y}`` of an inference step ("infer"), else each parameter's gradient after
    a training step, by name."""
    model.train(mode == "train")
    if mode == "infer":
        with torch.no_grad():
            return {"output": model(x)}
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    STEPS["train"](model, [x])(0)
    grads = {n.removeprefix("_orig_mod."): p.grad.clone() for n, p in named}
    for _, p in named:
        p.grad = None
    return grads


def _distances(got: dict, want: dict) -> tuple[float, dict]:
    """(the worst relative max difference, ``{name: relative L2}``) of ``got`` from ``want``
    (``|got - want| / |want|`` each)."""
    worst, l2 = 0.0, {}
    for name, g in got.items():
        g, w = g.float(), want[name].float()
        scale = w.abs().max().clamp_min(1e-30)
        worst = max(worst, ((g - w).abs().max() / scale).item())
        l2[name] = ((g - w).norm() / w.norm().clamp_min(1e-30)).item()
    return worst, l2


def compiled_mismatch(
    ours: float,
    ref: float,
    ours_l2: dict | None = None,
    ref_l2: dict | None = None,
    eager_l2: dict | None = None,
) -> str:
    """The note a compiled row carries when ours compiled is far from ours eager (non-finite,
    or more than 10x PyTorch's own compiled-vs-eager difference plus 1e-2), or when one
    output or parameter gradient is: relative L2 over 10x its noise plus 0.1 (a wrong
    gradient reads about 1); else "".

    The noise of a name is the larger of two samples of how far bf16 rounding alone moves it:
    PyTorch compiled from PyTorch eager (``ref_l2``) and ours eager from PyTorch eager
    (``eager_l2``). In a bf16 training step with batch statistics a gradient whose exact value
    is small next to its terms moves by several times its size (efficientnet_b0's SE biases:
    0.66 from float64 for PyTorch eager itself, session 19), more than one sample shows."""
    if not (math.isfinite(ours) and ours <= 10 * ref + 1e-2):
        return f"COMPILED DIFFERS FROM EAGER: {ours:.1e} (torch: {ref:.1e})"
    for name, l2 in (ours_l2 or {}).items():
        noise = max((ref_l2 or {}).get(name, 0.0), (eager_l2 or {}).get(name, 0.0))
        if not (math.isfinite(l2) and l2 <= 10 * noise + 0.1):
            return f"COMPILED DIFFERS FROM EAGER: {name} at L2 {l2:.1e} (noise: {noise:.1e})"
    return ""


def _compiled_rows(pair, xs, info, dname, opts) -> list[Row]:
    """Each side compiled once; its first call in each mode (the compile) timed alone; each
    compiled side checked against itself eager (``*_compiled_error``: compiled ResNet-50 gave
    NaN where eager was exact until session 16, and nothing here looked)."""
    torch._dynamo.reset()
    compiled = {side: _compile(m) for side, m in pair.items()}
    rows = []
    try:
        for mode in STEPS:
            first: dict = {}
            for side, m in compiled.items():
                m.train(mode == "train")
                breaks, begin = _graph_breaks(), time.perf_counter()
                STEPS[mode](m, xs)(0)
                _sync()
                first[f"{side}_compile_s"] = time.perf_counter() - begin
                first[f"{side}_graph_breaks"] = _graph_breaks() - breaks
            per_param, eager = {}, {}
            for side, m in compiled.items():
                eager[side] = _gradients(pair[side], mode, xs[0])
                error, per_param[side] = _distances(_gradients(m, mode, xs[0]), eager[side])
                first[f"{side}_compiled_error"] = error
                first[f"{side}_compiled_l2"] = max(per_param[side].values())
            _, eager_l2 = _distances(eager["ours"], eager["ref"])
            del eager
            # the output or parameter farthest from its noise, for the record
            ours_l2, ref_l2 = per_param["ours"], per_param["ref"]
            noise = {n: max(ref_l2.get(n, 0.0), eager_l2.get(n, 0.0)) for n in ours_l2}
            worst = max(ours_l2, key=lambda n: ours_l2[n] / (noise[n] + 1e-3))
            first["compiled_l2_worst_vs_noise"] = (worst, ours_l2[worst], noise[worst])
            times, peaks = _measure(compiled, mode, xs, opts)
            row = _speed_row(info, mode, "compiled", dname, xs[0].shape, times, peaks, **first)
            errors = first["ours_compiled_error"], first["ref_compiled_error"]
            flag = compiled_mismatch(*errors, ours_l2, ref_l2, eager_l2)
            row.note = flag + ("; " if flag and row.note else "") + row.note
            rows.append(row)
    finally:
        torch._dynamo.reset()
    return rows


# ---------------------------------------------------------------------------------------------
# Per layer


@dataclass
class LayerCall:
    """A convolution call of a model: the modules (by name) that make it, the first one, and
    the arguments it received (captured by a forward pre-hook)."""

    names: list[str]
    module: nn.Module
    args: tuple

    @property
    def transposed(self) -> bool:
        return isinstance(self.module, nn.modules.conv._ConvTransposeNd)

    def describe(self) -> str:
        m, x = self.module, self.args[0]
        dims = m.weight.dim() - 2
        op = f"conv{'_transpose' if self.transposed else ''}{dims}d"
        layout = " channels-last" if is_channels_last(x) else ""
        parts = [f"{op} {_shape(x.shape)}{layout}"]
        parts.append(f"w {_shape(m.weight.shape)}")
        for label, value, default in (
            ("s", m.stride, 1),
            ("p", m.padding, 0),
            ("d", m.dilation, 1),
        ):
            if isinstance(value, str):
                parts.append(f"{label}={value}")
            elif any(v != default for v in value):
                same = all(v == value[0] for v in value)
                parts.append(label + (str(value[0]) if same else ",".join(map(str, value))))
        if m.groups > 1:
            parts.append(f"g{m.groups}")
        return " ".join(parts)

    def flops(self, output: torch.Tensor) -> float:
        """Multiply-adds x 2 of the forward pass."""
        per_element = self.module.weight[0].numel()
        many = self.args[0] if self.transposed else output
        return 2.0 * many.numel() * per_element


def capture_layers(model: nn.Module, x: torch.Tensor) -> list[LayerCall]:
    """Every convolution call of one forward pass of ``model`` (eval, no gradients) in call
    order, calls with the same signature (module kind and hyper-parameters, input shape,
    strides and dtype) merged: the first module's input is kept."""
    calls: dict = {}

    def visit(name, module, args, kwargs):
        inp = args[0]
        key = (
            type(module), tuple(inp.shape), inp.stride(), inp.dtype, tuple(module.weight.shape),
            module.stride, module.padding, module.dilation, module.groups, module.padding_mode,
            getattr(module, "output_padding", None), module.bias is None, repr(args[1:]),
        )  # fmt: skip
        if key in calls:
            calls[key].names.append(name)
        else:
            calls[key] = LayerCall([name], module, (inp.detach().clone(), *args[1:]))

    model.eval()
    tnn.visit_convolutions(model, (x,), visit)
    return list(calls.values())


def time_layer(call: LayerCall, opts: Options) -> dict:
    """Ours (the module converted, sharing its parameters) against the torch module on the
    captured input (and random inputs like it, rotated): forward, and forward + backward
    (input, weight and bias gradients). ms per side, FLOPs, and the algorithm ours ran."""
    ref = call.module
    ours = tnn.CONVERTED[type(ref)].from_torch(ref)
    x0, *rest = call.args
    xs = input_sets(lambda: torch.randn_like(x0), x0.numel() * x0.element_size())
    xs[0] = x0
    leaves = [x.detach().requires_grad_() for x in xs]
    params = [p for p in ref.parameters() if p.requires_grad]
    with torch.no_grad():
        y = ref(x0, *rest)
    dys = [torch.randn_like(y) for _ in xs]

    def forward(m):
        def run(i):
            with torch.no_grad():
                m(xs[i], *rest)

        return run

    def both(m):
        def run(i):
            torch.autograd.grad(m(leaves[i], *rest), [leaves[i], *params], dys[i])

        return run

    sides = {"ours": ours, "ref": ref}
    result = dict(flops=call.flops(y))
    for key, make in (("fwd", forward), ("bwd", both)):
        fns = {side: make(m) for side, m in sides.items()}
        result[key] = paired_ms(fns, len(xs), opts)
        result[f"{key}_kernel"] = {side: _kernel_ms(fn, len(xs), opts) for side, fn in fns.items()}
    found = tnn.explain_model(ours, *call.args)
    result["algo"] = found[0].choice.algo if found else ""
    return result


def _kernel_ms(fn, n_inputs: int, opts: Options) -> float | None:
    """The calls' GPU time alone (CUDA-graph replay, :func:`~tritonconv.bench.kernel_ms`);
    None on the CPU, in quick mode, or where the calls cannot be captured."""
    if not CUDA or opts.quick:
        return None
    try:
        return kernel_ms(fn, n_inputs, opts)
    except Exception:  # a call that cannot be captured: the per-call time stands alone
        with contextlib.suppress(Exception):
            torch.cuda.synchronize()
        return None


def layer_rows(
    suite_name: str, name: str, model: nn.Module, x, opts: Options, info: dict, progress=None
) -> list[Row]:
    """Per-layer rows (ops ``layer fwd`` and ``layer fwd+bwd``) of ``model`` on ``x``."""
    dname = _dtype_name(x.dtype)
    calls = capture_layers(model, x)
    rows = []
    for index, call in enumerate(calls):
        if progress:
            progress(f"{name}: layer {index + 1}/{len(calls)} {call.names[0]}", index / len(calls))
        extra = dict(info, layer=call.names[0], layers=call.names, count=len(call.names))
        extra["index"] = index
        case, shape = f"{name}/{call.names[0]}", call.describe()
        try:
            t = time_layer(call, opts)
        except MissingDependency:
            raise
        except Exception as e:
            rows.append(_error_row(suite_name, case, "layer fwd", dname, shape, e, extra))
            continue
        extra["algo"] = t["algo"]
        common = dict(
            suite=suite_name, case=case, shape=shape, dtype=dname, ref_name=REF_NAME,
            unit="TFLOP/s", note=f"×{len(call.names)} {t['algo']}", extra=extra,
        )  # fmt: skip
        for op, key, work in (("layer fwd", "fwd", 1), ("layer fwd+bwd", "bwd", 3)):
            times, kernel = t[key], t[f"{key}_kernel"]
            row = Row(
                **common, op=op, ours_ms=times["ours"], ref_ms=times["ref"],
                work=work * t["flops"], ours_kernel_ms=kernel["ours"], ref_kernel_ms=kernel["ref"],
            )  # fmt: skip
            rows.append(row)
    return rows


# ---------------------------------------------------------------------------------------------
# The suites


class _Progress:
    """Calls ``opts.on_step(what, done, total)`` as the suite goes (fractions within a step)."""

    def __init__(self, opts: ModelOptions, total: int):
        self.on_step, self.total, self.done = opts.on_step, max(1, total), 0

    def at(self, what: str, fraction: float = 0.0) -> None:
        if self.on_step:
            self.on_step(what, self.done + fraction, self.total)

    def step(self) -> None:
        self.done += 1
        self.at("")


def _phases(opts: ModelOptions) -> list[tuple[str, str | None]]:
    phases: list[tuple[str, str | None]] = []
    eager = opts.compile != "only"
    if eager:
        phases.append(("fp32 accuracy", None))
    for dname in opts.speed_dtypes:
        if eager:
            phases += [("eager", dname), ("layers", dname)]
        if opts.compile != "off":
            phases.append(("compiled", dname))
    return phases


def _model_rows(spec: ModelSpec, opts: ModelOptions, progress: _Progress, how: str):
    shape = input_shape(spec, opts)
    base = build(spec, opts.quick)
    convs = count_convolutions(base)
    _, swapped = converted(base)
    info = dict(model=spec.name, convs=convs, swapped=swapped, choice=how)
    info.update(_warm_up(spec, base, shape, opts, progress))
    pairs: dict = {}  # dtype name -> ({"ours", "ref"} models, inputs)
    for phase, dname in _phases(opts):
        progress.at(f"{spec.name}: {phase} {dname or ''}")
        begin = time.perf_counter()
        label = dname or "fp32"
        try:
            if phase == "fp32 accuracy":
                rows = [_accuracy_row(spec, base, shape, info, opts)]
            else:
                if dname not in pairs:
                    pairs.clear()
                    _free()
                    dtype = getattr(torch, dname)
                    fmt = _layout(len(shape))
                    ref = copy.deepcopy(base).to(DEVICE, dtype).to(memory_format=fmt)
                    pairs[dname] = ({"ours": converted(ref)[0], "ref": ref}, _inputs(shape, dtype))
                pair, xs = pairs[dname]
                with exact_fp32(getattr(torch, dname)):
                    if phase == "eager":
                        rows = _eager_rows(pair, xs, info, dname, opts)
                    elif phase == "compiled":
                        rows = _compiled_rows(pair, xs, info, dname, opts)
                    else:
                        rows = layer_rows(
                            "models", spec.name, pair["ref"], xs[0], opts, info,
                            progress.at,
                        )  # fmt: skip
        except MissingDependency:
            raise
        except Exception as e:
            rows = [_error_row("models", spec.name, phase, label, _shape(shape), e, info)]
        seconds = time.perf_counter() - begin
        for row in rows:
            row.extra["phase_s"] = seconds
            yield row
        progress.step()
    pairs.clear()
    _free()


def _accuracy_shape(shape: tuple[int, ...]) -> tuple[int, ...]:
    return (min(shape[0], ACCURACY_BATCH), *shape[1:])


def warmup_calls(
    base: nn.Module, shape: tuple[int, ...], opts: ModelOptions, accuracy: bool = True
) -> list[ConvCall]:
    """The convolution calls a model's eager phases make (:func:`tritonconv.warmup.capture_calls`
    on the torch model, whose convolutions count as converted): the fp32 accuracy phase's (TF32
    off, eval, at most ``ACCURACY_BATCH`` samples; unless ``accuracy`` is False) and, in each
    speed dtype, the channels-last model's at the model's input shape."""
    calls = []
    if accuracy:
        with exact_fp32(torch.float32):
            model = copy.deepcopy(base).to(DEVICE, torch.float32).eval()
            calls += capture_calls(model, torch.randn(_accuracy_shape(shape), device=DEVICE))
    for dname in opts.speed_dtypes:
        dtype = getattr(torch, dname)
        model = copy.deepcopy(base).to(DEVICE, dtype).to(memory_format=_layout(len(shape)))
        with exact_fp32(dtype):
            calls += capture_calls(model, _inputs(shape, dtype)[0])
    return list(dict.fromkeys(calls))


def _warm_up(
    spec: ModelSpec, base, shape, opts: ModelOptions, progress: _Progress, accuracy: bool = True
) -> dict:
    """Compile the kernels of the model's eager phases in parallel worker processes
    (:mod:`tritonconv.warmup`) before they run, so that the phases find them in Triton's cache
    instead of compiling them one by one (GPU only; not in quick mode nor for compiled-only
    runs). What it took, for the rows' ``extra``: ``warmup_s`` and the calls warmed."""
    if not CUDA or opts.quick or opts.compile == "only":
        return {}
    progress.at(f"{spec.name}: warm-up (capturing the convolution calls)")
    begin = time.perf_counter()
    try:
        calls = warmup_calls(base, shape, opts, accuracy)
        _free()
        progress.at(f"{spec.name}: warm-up (compiling the kernels of {len(calls)} calls)")
        report = warm_calls(calls)
    except Exception as e:  # the phases compile what they need themselves
        error = f"{type(e).__name__}: {e}".replace("\n", " ")[:400]
        return dict(warmup_s=time.perf_counter() - begin, warmup_error=error)
    found = dict(warmup_s=time.perf_counter() - begin, warmup_calls=report.calls)
    found.update(warmup_workers=report.workers, warmup_failures=len(report.failures))
    if report.failures:
        call, error = report.failures[0]
        found["warmup_error"] = f"{call}: {error}".replace("\n", " ")[:400]
    return found


def _accuracy_row(spec, base, shape, info, opts) -> Row:
    acc_shape = _accuracy_shape(shape)
    x = torch.randn(acc_shape, generator=torch.Generator().manual_seed(0))
    found = accuracy(base, x, opts)
    times = found.pop("times")
    ratio = {
        k: found[f"ours_{k}_err"] / found[f"ref_{k}_err"] if found[f"ref_{k}_err"] else None
        for k in ("out", "grad")
    }
    note = (
        f"{info['swapped']}/{info['convs']} convolutions swapped; fp32 vs float64: output "
        f"{found['ours_out_err']:.1e} (torch {found['ref_out_err']:.1e}), worst parameter "
        f"gradient {found['ours_grad_err']:.1e} (torch {found['ref_grad_err']:.1e})"
    )
    return Row(
        suite="models", case=spec.name, shape=f"{_shape(acc_shape)} contiguous, eval",
        op="fp32 fwd+bwd vs float64", dtype="fp32", ours_ms=times["ours"],
        ref_ms=times["ref"], ref_name=REF_NAME, note=note,
        extra=dict(info, **found, out_err_ratio=ratio["out"], grad_err_ratio=ratio["grad"]),
    )  # fmt: skip


@suite("models")
def models_suite(opts: Options) -> Iterator[Row]:
    """Whole models, every convolution swapped: fp32 accuracy vs float64, speed eager and
    compiled, peak memory, and each layer's speed."""
    opts = model_options(opts)
    names = model_names(opts, "models")
    progress = _Progress(opts, len(names) * len(_phases(opts)))
    with _choices() as how:
        for name in names:
            yield from _model_rows(MODELS[name], opts, progress, how)


@suite("layers")
def layers_suite(opts: Options) -> Iterator[Row]:
    """Each convolution layer of the model(s) asked for, ours (``algo="auto"``) against the
    torch module on the input the model gives it, forward and forward + backward (the kernels
    compiled first in parallel, on a GPU: ``_warm_up``)."""
    opts = model_options(opts)
    names = model_names(opts, "layers")
    progress = _Progress(opts, len(names) * len(opts.speed_dtypes))
    with _choices() as how:
        for name in names:
            spec = MODELS[name]
            shape = input_shape(spec, opts)
            base = build(spec, opts.quick)
            info = dict(model=name, choice=how)
            info.update(_warm_up(spec, base, shape, opts, progress, accuracy=False))
            for dname in opts.speed_dtypes:
                dtype = getattr(torch, dname)
                model = copy.deepcopy(base).to(DEVICE, dtype).to(memory_format=_layout(len(shape)))
                x = _inputs(shape, dtype)[0]
                with exact_fp32(dtype):
                    yield from layer_rows("layers", name, model, x, opts, info, progress.at)
                del model, x
                _free()
                progress.step()


# ---------------------------------------------------------------------------------------------
# Summaries: console tables, models.md, PNG plots


SPEED_OPS = ("infer eager", "train eager", "infer compiled", "train compiled")


def _speed(row: Row | None) -> str:
    if row is None:
        return "—"
    if row.speedup is None or math.isnan(row.ours_ms):
        return "error" if row.extra.get("error") else "—"
    return f"{row.speedup:.2f}×"


def _model_of(row: Row) -> str:
    return row.extra.get("model") or row.case.split("/")[0]


def summarize(rows: list[Row]) -> dict:
    """{(suite, model): {"accuracy": row, "speed": {dtype: {op: row}}, "layers": {dtype:
    [layer entries]}, "errors": [rows], "incomplete": {dtypes with a layer unmeasured}}} from
    the model suites' rows."""
    found: dict = {}
    for row in rows:
        if row.suite not in ("models", "layers"):
            continue
        entry = found.setdefault(
            (row.suite, _model_of(row)),
            {"accuracy": None, "speed": {}, "layers": {}, "errors": [], "incomplete": set()},
        )
        if row.extra.get("error"):
            entry["errors"].append(row)
            if row.op.startswith("layer"):  # (a layer unmeasured: no sum over the layers)
                entry["incomplete"].add(row.dtype)
        elif row.op == "fp32 fwd+bwd vs float64":
            entry["accuracy"] = row
        elif row.op in SPEED_OPS:
            entry["speed"].setdefault(row.dtype, {})[row.op] = row
        elif is_detail(row):
            layers = entry["layers"].setdefault(row.dtype, {})
            layer = layers.setdefault(row.case, {"extra": row.extra, "shape": row.shape})
            layer["fwd" if row.op == "layer fwd" else "both"] = row
    for entry in found.values():
        for dtype, layers in entry["layers"].items():
            listed = sorted(layers.values(), key=lambda e: e["extra"].get("index", 0))
            for layer in listed:
                both = layer.get("both")
                count = layer["extra"].get("count", 1)
                layer["lost_ms"] = (both.ours_ms - both.ref_ms) * count if both else 0.0
            entry["layers"][dtype] = listed
    return found


def _errors(acc: Row | None, key: str) -> str:
    if acc is None:
        return "—"
    return f"{acc.extra[f'ours_{key}_err']:.1e} / {acc.extra[f'ref_{key}_err']:.1e}"


def _within_2x(acc: Row | None) -> str:
    if acc is None:
        return "—"
    ratios = [acc.extra.get("out_err_ratio"), acc.extra.get("grad_err_ratio")]
    worst = max((r for r in ratios if r is not None), default=None)
    if worst is None:
        return "—"
    return f"{'yes' if worst <= 2 else 'NO'} ({worst:.2f}×)"


def _peaks(row: Row | None) -> str:
    if row is None or row.extra.get("ours_peak_mib") is None:
        return "—"
    return f"{row.extra['ours_peak_mib']:.0f} / {row.extra['ref_peak_mib']:.0f}"


def _summed(layers: list[dict], key: str, kernel: bool) -> float | None:
    """torch's time over ours summed over a model's convolution calls (each layer times its
    count), of the layer rows ``key`` ("fwd" or "both"): kernel time or per-call time. Side by
    side with the whole step's speed, it says whether the kernels or the calls (the host) hold
    the model back."""
    ours = ref = 0.0
    for layer in layers:
        row = layer.get(key)
        if row is None:
            continue
        mine, theirs = (
            (row.ours_kernel_ms, row.ref_kernel_ms) if kernel else (row.ours_ms, row.ref_ms)
        )
        if mine is None or theirs is None or math.isnan(mine) or math.isnan(theirs):
            return None  # (a sum missing a layer says nothing)
        count = layer["extra"].get("count", 1)
        ours, ref = ours + count * mine, ref + count * theirs
    return ref / ours if ours > 0 else None


def _sums(layers: list[dict], kernel: bool) -> str:
    ratios = (_summed(layers, key, kernel) for key in ("fwd", "both"))
    return " / ".join("—" if r is None else f"{r:.2f}×" for r in ratios)


def _worst_layer(layers: list[dict]) -> str:
    if not layers:
        return "—"
    worst = max(layers, key=lambda e: e["lost_ms"])
    if worst["lost_ms"] <= 0:
        return "none slower"
    count = worst["extra"].get("count", 1)
    return f"{worst['extra']['layer']} ×{count} (+{worst['lost_ms']:.2f} ms)"


def _model_lines(summary: dict) -> list[list[str]]:
    """One line per (model, speed dtype) of the models suite, the summary table's cells."""
    lines = []
    for (suite_name, model), entry in summary.items():
        if suite_name != "models":
            continue
        acc = entry["accuracy"]
        info = (acc.extra if acc else None) or next(
            (r.extra for d in entry["speed"].values() for r in d.values()), {}
        )
        swapped = f"{info['swapped']}/{info['convs']}" if "swapped" in info else "—"
        dtypes = list(entry["speed"]) or ["—"]
        for dtype in dtypes:
            speed = entry["speed"].get(dtype, {})
            layers = entry["layers"].get(dtype, [])
            summed = [] if dtype in entry["incomplete"] else layers
            lines.append(
                [model, swapped, _errors(acc, "out"), _errors(acc, "grad"), _within_2x(acc), dtype]
                + [_speed(speed.get(op)) for op in SPEED_OPS]
                + [_sums(summed, kernel=True), _sums(summed, kernel=False)]
                + [_peaks(speed.get("train eager")), _worst_layer(layers)]
            )
    return lines


MODEL_COLUMNS = (
    "model", "swapped", "fp32 out err ours/torch", "fp32 grad err ours/torch", "err ≤ 2×",
    "dtype", *SPEED_OPS, "conv kernels fwd / fwd+bwd", "conv calls fwd / fwd+bwd",
    "train MiB ours/torch", "layer losing most",
)  # fmt: skip
LAYER_COLUMNS = (
    "layer", "×", "call", "algo", "fwd ms ours/torch", "fwd speed", "fwd kernel speed",
    "fwd+bwd ms ours/torch", "fwd+bwd speed", "fwd+bwd kernel speed", "ms lost (×count)",
)  # fmt: skip


def _layer_cells(layer: dict) -> list[str]:
    fwd, both = layer.get("fwd"), layer.get("both")

    def ms(row):
        return "—" if row is None else f"{row.ours_ms:.3f} / {row.ref_ms:.3f}"

    def kernel(row):
        speedup = None if row is None else row.kernel_speedup
        return "—" if speedup is None else f"{speedup:.2f}×"

    extra = layer["extra"]
    return [
        extra["layer"], str(extra.get("count", 1)), layer["shape"], extra.get("algo", ""),
        ms(fwd), _speed(fwd), kernel(fwd), ms(both), _speed(both), kernel(both),
        f"{layer['lost_ms']:+.3f}",
    ]  # fmt: skip


def tables(rows: list[Row], top: int = 5) -> list:
    """rich Tables: the models summary, the layers of each model that lose the most time (all
    of them for the ``layers`` suite), and any errors."""
    from rich.markup import escape
    from rich.table import Table

    summary = summarize(rows)
    out = []
    lines = _model_lines(summary)
    if lines:
        table = Table(title="models: speed = torch time / ours (> 1: ours faster)")
        for i, column in enumerate(MODEL_COLUMNS):
            table.add_column(column, no_wrap=i == 0)
        for line in lines:
            table.add_row(*(escape(c) for c in line))
        out.append(table)
    for (suite_name, model), entry in summary.items():
        for dtype, layers in entry["layers"].items():
            shown = layers
            title = f"{suite_name}: {model} {dtype}, every convolution call (call order)"
            if suite_name == "models":
                shown = sorted(layers, key=lambda e: -e["lost_ms"])[:top]
                title = f"{model} {dtype}: the {len(shown)} layers losing the most time"
            table = Table(title=title)
            for i, column in enumerate(LAYER_COLUMNS):
                table.add_column(column, no_wrap=i == 0)
            for layer in shown:
                table.add_row(*(escape(c) for c in _layer_cells(layer)))
            out.append(table)
    errors = [r for entry in summary.values() for r in entry["errors"]]
    if errors:
        table = Table(title="errors (the suite went on without these measurements)")
        for column in ("suite", "case", "op", "dtype", "error"):
            table.add_column(column)
        for r in errors:
            table.add_row(*(escape(c) for c in (r.suite, r.case, r.op, r.dtype, r.note)))
        out.append(table)
    return out


def _md_table(columns, lines) -> list[str]:
    out = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    out += ["| " + " | ".join(c.replace("|", "\\|") for c in line) + " |" for line in lines]
    return out


def markdown(rows: list[Row], env: dict) -> str:
    """``models.md``: the models summary, then every layer of each model."""
    summary = summarize(rows)
    lines = [
        f"Measured {env['date']} on {env['gpu']}; torch {env['torch']}, Triton "
        f"{env.get('triton', '?')}, cuDNN {env.get('cudnn', '—')}. Speed = torch time / ours "
        "(> 1: ours faster), medians of alternated timings; errors are max |error| / max "
        "|value| against a float64 run of the same model (eval mode); peak memory: what one "
        "step allocates on top of what was allocated before it.",
        "",
    ]
    model_lines = _model_lines(summary)
    if model_lines:
        lines += ["## Models", "", *_md_table(MODEL_COLUMNS, model_lines), ""]
    for (suite_name, model), entry in summary.items():
        for dtype, layers in entry["layers"].items():
            lines += [f"## {suite_name}: {model} {dtype}, per layer (call order)", ""]
            lines += [*_md_table(LAYER_COLUMNS, [_layer_cells(e) for e in layers]), ""]
        for r in entry["errors"]:
            lines.append(f"- error in {r.suite} {r.case} {r.op} {r.dtype}: {r.note}")
    return "\n".join(lines) + "\n"


def _plot_models(summary: dict, env: dict, path: Path) -> bool:
    from matplotlib.figure import Figure

    bars: dict = {}  # (op, dtype) -> {model: speedup}
    for (suite_name, model), entry in summary.items():
        if suite_name != "models":
            continue
        for dtype, speed in entry["speed"].items():
            for op in SPEED_OPS:
                row = speed.get(op)
                if row is not None and row.speedup is not None and not math.isnan(row.ours_ms):
                    bars.setdefault((op, dtype), {})[model] = row.speedup
        for dtype, layers in entry["layers"].items():  # what the kernels alone would give
            summed = None if dtype in entry["incomplete"] else _summed(layers, "both", True)
            if summed is not None:
                bars.setdefault(("conv kernels fwd+bwd", dtype), {})[model] = summed
    if not bars:
        return False
    models = list(dict.fromkeys(m for values in bars.values() for m in values))
    fig = Figure(figsize=(max(6.0, 1.4 * len(models) + 2), 4.5), layout="constrained")
    ax = fig.add_subplot()
    width = 0.8 / len(bars)
    for k, ((op, dtype), values) in enumerate(bars.items()):
        xs = [i + (k - (len(bars) - 1) / 2) * width for i, m in enumerate(models) if m in values]
        heights = [values[m] for m in models if m in values]
        bars_drawn = ax.bar(xs, heights, width, label=f"{op} {dtype}")
        ax.bar_label(bars_drawn, fmt="%.2f", fontsize=7)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(models)), models, rotation=20, ha="right")
    ax.set_ylabel("speed: torch time / ours (> 1: ours faster)")
    ax.set_title(f"tritonconv vs torch.nn, whole models ({env['gpu']})", fontsize=10)
    ax.legend(fontsize=8)
    fig.savefig(path, dpi=120)
    return True


def _plot_layers(suite_name, model, dtype, layers, env, path: Path) -> None:
    from matplotlib.figure import Figure

    labels = [f"{e['extra']['layer']} ×{e['extra'].get('count', 1)}" for e in layers]
    fig = Figure(figsize=(max(7.0, 0.28 * len(layers) + 3), 7), layout="constrained")
    top, bottom = fig.subplots(2, 1, sharex=True)
    xs = range(len(layers))
    for k, (key, name) in enumerate((("fwd", "forward"), ("both", "forward + backward"))):
        values = [
            e[key].speedup if e.get(key) is not None and e[key].speedup else 0.0 for e in layers
        ]
        top.bar([x + (k - 0.5) * 0.4 for x in xs], values, 0.4, label=name)
    top.axhline(1.0, color="black", linewidth=0.8)
    top.set_ylabel("speed: torch / ours")
    top.legend(fontsize=8)
    top.set_title(
        f"{model} {dtype}: each convolution call ({suite_name}, {env['gpu']})", fontsize=10
    )
    lost = [e["lost_ms"] for e in layers]
    bottom.bar(xs, lost, 0.7, color=["tab:red" if v > 0 else "tab:green" for v in lost])
    bottom.axhline(0.0, color="black", linewidth=0.8)
    bottom.set_ylabel("ms lost per step, fwd+bwd × count\n(> 0: ours slower)")
    bottom.set_xticks(list(xs), labels, rotation=90, fontsize=7)
    fig.savefig(path, dpi=120)


def write_outputs(rows: list[Row], env: dict, out: Path) -> list[str]:
    """Write ``models.md`` and the PNG plots for the model suites' rows into ``out``; returns
    what was written (or why plots were not)."""
    summary = summarize(rows)
    if not summary:
        return []
    out = Path(out)
    (out / "models.md").write_text(markdown(rows, env))
    written = [str(out / "models.md")]
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return [*written, f"no plots: {MATPLOTLIB_HINT}"]
    if _plot_models(summary, env, out / "models.png"):
        written.append(str(out / "models.png"))
    for (suite_name, model), entry in summary.items():
        for dtype, layers in entry["layers"].items():
            if layers:
                path = out / f"{suite_name}-{model}-{dtype}.png"
                _plot_layers(suite_name, model, dtype, layers, env, path)
                written.append(str(path))
    return written


class ProgressDisplay:
    """A rich progress bar for the model suites (driven by ``ModelOptions.on_step``), with the
    ``update(text)`` of ``Console.status`` so ``tritonconv bench`` can use either."""

    def __init__(self, console, opts: ModelOptions):
        from rich.progress import (
            BarColumn,
            Progress,
            TaskProgressColumn,
            TextColumn,
            TimeElapsedColumn,
        )

        self.progress = Progress(
            TextColumn("{task.description}"), BarColumn(), TaskProgressColumn(),
            TimeElapsedColumn(), console=console,
        )  # fmt: skip
        self.task = self.progress.add_task("benchmarking…", total=None)
        self.what = "benchmarking…"
        opts.on_step = self.on_step

    def __enter__(self):
        self.progress.start()
        return self

    def __exit__(self, *exc):
        self.progress.stop()

    def on_step(self, what: str, done: float, total: int) -> None:
        self.what = what or self.what
        self.progress.update(self.task, completed=done, total=total, description=self.what)

    def update(self, text: str) -> None:
        self.progress.update(self.task, description=f"{self.what} | last: {text}")


def load_rows(path: Path) -> tuple[list[Row], dict]:
    """(rows, environment) from a ``bench.json`` (the derived ratios are recomputed)."""
    import json

    data = json.loads(Path(path).read_text())
    names = {f.name for f in fields(Row)}
    rows = [Row(**{k: v for k, v in r.items() if k in names}) for r in data["rows"]]
    return rows, data["environment"]


def main(argv: list[str] | None = None) -> int:
    """``python -m tritonconv.bench.models BENCH_JSON [OUT]``: ``models.md`` and the plots
    again from a ``bench.json`` (e.g. on a machine with matplotlib, after a GPU run without)."""
    import sys

    args = sys.argv[1:] if argv is None else argv
    if not args:
        print(main.__doc__)
        return 2
    rows, env = load_rows(Path(args[0]))
    out = Path(args[1]) if len(args) > 1 else Path(args[0]).parent
    out.mkdir(parents=True, exist_ok=True)
    for line in write_outputs(rows, env, out):
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
