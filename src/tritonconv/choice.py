"""Which algorithm ``algo="auto"`` runs, and why (``tritonconv.explain``).

Two ways to choose:

* **Heuristic** (the default): rules from what each algorithm is good at, each with its reason.
* **Measurement**, when asked for (``tritonconv.set_benchmark(True)``, the environment variable
  ``TRITONCONV_BENCHMARK=1``, or ``torch.backends.cudnn.benchmark = True``, the switch PyTorch
  users already set for cuDNN): every algorithm that accepts the call is timed on inputs of the
  call's exact signature (shapes, strides, dtype, device; forward pass), the implicit GEMM with
  each of its tuning tile configurations (``implicit_gemm.tuning_configs``), and the fastest
  algorithm runs, with its fastest tiles.
  Measured choices are kept in memory and **on disk**, and a choice on record is used from then
  on, benchmark mode or not, so a second process starts tuned (``tune`` fills the record for a
  whole model): one
  JSON file per GPU, Triton and PyTorch version in ``$TRITONCONV_CACHE_DIR`` (default
  ``~/.cache/tritonconv``), updated under a file lock and replaced atomically, so several
  processes (DDP ranks, parallel jobs) can share it.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

import torch

from .caches import clear_caches
from .geometry import FLOAT_DTYPES
from .ops import conv_gemm, implicit_gemm
from .timing import device_ms

_benchmark: bool | None = None  # None: follow the environment and cudnn.benchmark
_BENCHMARK_ENV = os.environ.get("TRITONCONV_BENCHMARK", "") not in ("", "0")
_lock = threading.Lock()
_memory: dict[str, dict] = {}  # choices of this process, by key
_loaded: set[Path] = set()
# Whether measured choices are written to the on-disk cache: not by tritonconv.warmup's
# workers, which time candidates side by side on one GPU (each still compiles every kernel).
_store_on_disk = True


@dataclass(frozen=True)
class Choice:
    """The algorithm a call runs and why; ``timings`` (ms per algorithm) when measured, and
    ``config``: the tile configuration measured fastest for it (the implicit GEMM's forward
    tiles, ``Config`` fields), empty for its heuristic's."""

    algo: str
    reason: str
    timings: dict = field(default_factory=dict)
    config: tuple = ()

    def __str__(self) -> str:
        text = f"{self.algo}: {self.reason}"
        if self.timings:
            text += " (" + ", ".join(f"{a} {t:.4g} ms" for a, t in self.timings.items()) + ")"
        return text


def set_benchmark(enabled: bool | None) -> None:
    """Choose ``algo="auto"`` by measurement (True), by heuristic (False), or as the
    environment and ``torch.backends.cudnn.benchmark`` say (None, the default)."""
    global _benchmark
    _benchmark = enabled


def benchmark_enabled() -> bool:
    if _benchmark is not None:
        return _benchmark
    return _BENCHMARK_ENV or bool(torch.backends.cudnn.benchmark)


_cudnn_benchmark = torch._C._get_cudnn_benchmark


def benchmark_switch() -> bool:
    """:func:`benchmark_enabled` for eager plan keys: cuDNN's switch read by the C getter
    behind ``torch.backends.cudnn.benchmark`` (the property's Python call costs 0.4 µs a
    call). Dynamo traces :func:`benchmark_enabled`, never this."""
    if _benchmark is not None:
        return _benchmark
    return _BENCHMARK_ENV or _cudnn_benchmark()


def cpu_kernels() -> bool:
    """Whether ``auto`` runs the Triton kernels (in the interpreter) on CPU tensors instead of
    PyTorch's CPU convolution: ``TRITONCONV_CPU_KERNELS=1`` (the test suite sets it)."""
    return os.environ.get("TRITONCONV_CPU_KERNELS", "") not in ("", "0")


#: 16-bit convolutions with fewer input channels per group than the 16-wide tensor-core step
#: (image stems) and at most this many taps run on the implicit GEMM. Measured (bf16
#: channels-last, batch 32, benchmarks/probe_pointwise.py): MobileNetV3's 3x3 stem 1.14x cuDNN
#: forward + backward against 0.71x by im2col + GEMM (session 9); after session 10's loop
#: change, ResNet-50's 7x7 stem 0.53x against 0.46x (training-step wall 1608 against 1886 µs)
#: and ConvNeXt's 4x4 stride-4 stem 0.49x against 0.45x (396 against 1313 µs: im2col_gemm's
#: host path was not replayed then; it is since session 19, not yet re-measured here); VGG's
#: first layer 0.43-0.59x against 0.40x (sessions 1 and 5).
NARROW_IMPLICIT_MAX_TAPS = 49

#: 16-bit convolutions with fewer output channels per group than 16 (and 16 or more input
#: channels, one group): the implicit GEMM from this many output rows (batch x positions),
#: the direct kernel below it. Measured (session 10, probe_pointwise.py --wall): UNet's
#: 64 -> 2 1x1 head at 8x256x256 (524288 rows) 1.34x cuDNN forward + backward, training-step
#: wall 395 µs, against the direct kernel's 0.13x and 1117 µs; EfficientNet's 240 -> 10 SE
#: squeeze at batch 32 (32 rows) 299 µs with the direct kernel, 424 with the implicit GEMM,
#: 927 with im2col + GEMM (its kernels there are a few µs either way: the host decides).
NARROW_OUT_IMPLICIT_ROWS = 16384


#: Grouped convolutions with at least this many channels a group on both sides but fewer than
#: 16 (ResNeXt's 4 and 8; 16 and more take the implicit GEMM's dense rule) run on the
#: implicit GEMM, its small groups packed into block-diagonal tensor-core tiles, where the
#: tiles are 16-bit, or read channels-last, or fp32 with TF32 allowed; fp32 NCHW with TF32
#: off keeps the direct kernel (session 34, H100: its forward 1.93x cuDNN's fp32 there).
#: Measured (session 44, H200, groups-32 3x3 with 8 channels a group, N32 C256 28², fp32 with
#: TF32, forward µs): channels-last implicit GEMM 59.0 against the direct kernel's 427.6
#: (cuDNN 37.2); NCHW 81.7 against 100.0 (cuDNN 74.7). Until then the rule sent every group of
#: 8 or fewer output channels to the direct kernel, 16-bit and channels-last included.
GROUPED_IMPLICIT_MIN_CHANNELS = 4


def heuristic(
    dtype: torch.dtype,
    args,
    candidates: list[str],
    channels_last: bool = False,
    traced: bool = False,
) -> Choice:
    """The rule-based choice (measured where the reasons say so; reasoned elsewhere);
    ``channels_last``: whether the (batched) input is; ``traced``: whether the call is being
    traced into a graph (``torch.compile``), where no Python runs per call.

    Tried and reverted for eager calls (sessions 9 and 19, benchmarks/NOTES.md): 16-bit
    channels-last 1x1 convolutions as one cuBLAS GEMM per pass. The kernels are cuDNN's, but
    the eager pass is several PyTorch calls from Python (replayed from a launch plan since
    session 19) against the implicit GEMM's one launch: resnet50's eager steps 0.74x / 0.64x
    cuDNN with it against 0.90x / 0.79x without."""
    if candidates == ["aten"]:
        return Choice(
            "aten",
            "CPU tensors: PyTorch's own CPU convolution (tritonconv's kernels run on CPU "
            "tensors only in Triton's interpreter, for testing: TRITONCONV_CPU_KERNELS=1)",
        )
    if candidates == ["implicit_gemm"]:
        return Choice("implicit_gemm", "3-D: the algorithm written over three spatial axes")
    if dtype not in FLOAT_DTYPES:
        return Choice("direct", "integer dtype: the only exact integer path (no cuBLAS/cuDNN)")
    if args.depthwise and "depthwise" in candidates:
        return Choice(
            "depthwise",
            "one input channel per group: the depthwise kernels read the input once, im2col "
            "would write KH*KW copies to feed one-row GEMMs",
        )
    dense = min(args.in_per_group, args.out_per_group) >= 16
    half = dtype in (torch.float16, torch.bfloat16)
    geometry = args.geometry
    if (
        "im2col_gemm" in candidates and half and dense and channels_last and args.groups == 1
        and conv_gemm.is_pointwise(geometry) and traced
    ):  # fmt: skip
        return Choice(
            "im2col_gemm",
            f"1x1, stride 1, {args.in_per_group} -> {args.out_per_group} channels, "
            "channels-last, in a compiled graph: the input already is the GEMM's matrix, so "
            "each pass is one cuBLAS GEMM the graph calls directly (the same kernels as "
            "cuDNN's on ResNet-50's 1x1 layers, against the implicit GEMM's 0.7-0.9x); eager "
            "calls keep the implicit GEMM, whose one launch costs less host time per call "
            "than the GEMM's Python-dispatched PyTorch calls",
        )
    narrow = (
        half and args.groups == 1 and args.in_per_group < 16 <= args.out_per_group
        and geometry.kernel_numel <= NARROW_IMPLICIT_MAX_TAPS
    )  # fmt: skip
    if "implicit_gemm" in candidates and narrow:
        folded = implicit_gemm.foldable(dtype, args.in_per_group, geometry, args.groups)
        return Choice(
            "implicit_gemm",
            f"{args.in_per_group} input channel(s), {geometry.kernel_numel} taps: the implicit "
            "GEMM reads the image in place"
            + (", its width taps folded into the channels" if folded else "")
            + " (measured faster than im2col + GEMM on stems)",
        )
    narrow_out = (
        half and args.groups == 1 and args.out_per_group < 16 <= args.in_per_group
    )  # fmt: skip
    if narrow_out:
        rows = args.batch * geometry.output_numel
        if "implicit_gemm" in candidates and rows >= NARROW_OUT_IMPLICIT_ROWS:
            return Choice(
                "implicit_gemm",
                f"{args.out_per_group} output channel(s) over {rows} output rows: the implicit "
                "GEMM reads the input once at memory speed (measured faster than the direct "
                "kernel and im2col + GEMM on a 1x1 segmentation head)",
            )
        if "direct" in candidates:
            return Choice(
                "direct",
                f"{args.out_per_group} output channel(s) over {rows} output rows: the kernels "
                "take a few µs whichever runs, and the direct path's host cost is the least "
                "(measured on squeeze-and-excitation layers)",
            )
    if "implicit_gemm" in candidates and dtype in implicit_gemm.DOT_DTYPES and dense:
        return Choice(
            "implicit_gemm",
            f"{args.in_per_group} -> {args.out_per_group} channels per group: tensor-core "
            "implicit GEMM, reading the image in place (no column buffer)",
        )
    small_groups = (
        args.groups > 1 and dtype in implicit_gemm.DOT_DTYPES
        and min(args.in_per_group, args.out_per_group) >= GROUPED_IMPLICIT_MIN_CHANNELS
        and (half or channels_last or torch.backends.cudnn.allow_tf32)
    )  # fmt: skip
    if "implicit_gemm" in candidates and small_groups:
        pack = implicit_gemm.group_pack(dtype, args.in_per_group, args.out_per_group, args.groups)
        return Choice(
            "implicit_gemm",
            f"{args.in_per_group} -> {args.out_per_group} channels in each of {args.groups} "
            f"groups: the implicit GEMM runs {pack} groups a program as one block-diagonal "
            "tensor-core tile (measured faster than the direct kernel on ResNeXt-style "
            "grouped layers)",
        )
    if args.out_per_group <= 8:
        return Choice(
            "direct",
            f"{args.out_per_group} output channel(s) per group (<= 8): columns cost more "
            "memory traffic than the direct kernel's FMAs on so few filters",
        )
    return Choice("im2col_gemm", f"{args.out_per_group} output channels per group: cuBLAS GEMM")


# --------------------------------------------------------------------------------------------
# measured choices and their on-disk cache
# --------------------------------------------------------------------------------------------


def cache_dir() -> Path:
    return Path(os.environ.get("TRITONCONV_CACHE_DIR", "~/.cache/tritonconv")).expanduser()


def _machine() -> str:
    import triton

    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "interpreter"
    name = f"{device}-triton{triton.__version__}-torch{torch.__version__}"
    return "".join(c if c.isalnum() or c in ".-" else "_" for c in name)


def cache_file() -> Path:
    return cache_dir() / f"choices-{_machine()}.json"


@contextlib.contextmanager
def _file_lock(path: Path):
    """An exclusive lock on ``path`` + ``.lock`` across processes (POSIX; elsewhere none)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(str(path) + ".lock", "a+") as handle:
        try:
            import fcntl

            fcntl.flock(handle, fcntl.LOCK_EX)
        except ImportError:  # pragma: no cover (not POSIX)
            pass
        yield


def _read(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _load() -> None:
    path = cache_file()
    if path in _loaded:
        return
    with _lock:
        for key, value in _read(path).items():
            _memory.setdefault(key, value)
        _loaded.add(path)


def _store(key: str, entry: dict) -> None:
    """Add one choice to the file: read, merge, write a temporary file, replace (atomic)."""
    if not _store_on_disk:
        return
    path = cache_file()
    try:
        with _file_lock(path):
            data = _read(path)
            data[key] = entry
            temporary = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
            temporary.write_text(json.dumps(data, indent=1, sort_keys=True))
            os.replace(temporary, path)
    except OSError:  # a read-only home: the choice still holds for this process
        pass


def forget_measurements() -> None:
    """Forget this process's measured choices (the file stays; it is read again when needed)."""
    with _lock:
        _memory.clear()
        _loaded.clear()


def _make_like(t: torch.Tensor | None) -> torch.Tensor | None:
    """A tensor of ``t``'s shape, strides, dtype and device with random values."""
    if t is None:
        return None
    return random_strided(t.shape, t.stride(), t.dtype, t.device)


def random_strided(shape, stride, dtype: torch.dtype, device, offset: int = 0) -> torch.Tensor:
    """A tensor of ``shape`` and ``stride``, ``offset`` elements into its storage, holding
    random values (normal floats, integers in [-8, 8)); its storage is filled, so strides that
    overlap (0 on an expanded dimension) are fine."""
    span = 1 + sum((n - 1) * s for n, s in zip(shape, stride)) if all(shape) else 0
    storage = torch.empty(offset + span, dtype=dtype, device=device)
    if dtype.is_floating_point:
        storage.normal_()
    else:
        storage.random_(-8, 8)
    return storage.as_strided(tuple(shape), tuple(stride), offset)


# Timed samples per candidate in benchmark mode (after one untimed warm-up call), each of
# ``timing.device_ms``'s calls back to back on the GPU.
MEASURE_REPS = 5


def measured(key: str, candidates: list[str], run_algo, configs=None, what="") -> Choice:
    """The fastest of ``candidates`` for the call ``key`` names; ``run_algo(algo, config)``
    runs the call once with that algorithm and tile configuration (``()``: its heuristic's).
    ``configs`` maps an algorithm to the configurations to try for it (the first, the
    heuristic's, also decides when every other fails): the algorithm's time is that of its
    fastest, which is recorded with the choice. Looked up in memory, then on disk, else
    measured and stored. ``what``: what ``run_algo`` runs, when not the forward alone (said
    in the reason, e.g. ``"forward + backward"``)."""
    found = recorded(key, candidates)
    if found is None:
        timings, best_config = {}, {}
        with torch.no_grad():
            for algo in candidates:
                options = (configs or {}).get(algo) or [()]
                times = {}
                for config in options:
                    try:
                        times[config] = device_ms(
                            lambda _, a=algo, c=config: run_algo(a, c), MEASURE_REPS
                        )
                    except Exception:  # e.g. tiles that need more shared memory than there is
                        if config == options[0]:
                            raise
                best_config[algo] = min(times, key=times.get)
                timings[algo] = times[best_config[algo]]
        best = min(timings, key=timings.get)
        config = list(best_config[best])
        entry = {"algo": best, "timings": timings, "config": config}
        if what:
            entry["measured"] = what
        with _lock:
            _memory[key] = entry
        _store(key, entry)
        found = Choice(best, _reason(entry), timings, tuple(config))
    return _report(key, found)


def measure_inputs(*tensors):
    """Fresh inputs with the signature of ``tensors`` (the caller's are never touched)."""
    return [_make_like(t) for t in tensors]


def recorded(key: str, candidates: list[str]) -> Choice | None:
    """A measured choice on record for ``key``, without measuring: in this process's memory
    or in the on-disk cache."""
    _load()
    entry = _memory.get(key)
    if entry is None or entry.get("algo") not in candidates:
        return None
    config = tuple(entry.get("config", ()))
    return Choice(entry["algo"], _reason(entry, "cached"), dict(entry["timings"]), config)


def _reason(entry: dict, *notes: str) -> str:
    """A measured choice's reason: what was measured, where it is not the forward alone."""
    notes = (entry["measured"], *notes) if entry.get("measured") else notes
    return "fastest when measured" + (f" ({', '.join(notes)})" if notes else "")


def tune(model: torch.nn.Module, *example_inputs) -> dict[str, Choice]:
    """Measure and record (in memory and on disk) the algorithm of every tritonconv
    convolution ``model`` runs on ``example_inputs`` (one forward pass, no gradients), so later
    calls, and later processes, start tuned. Returns every such convolution's choice by call
    signature (measured now, or found in the cache: the reason says which)."""
    global _benchmark
    previous = _benchmark
    _benchmark = True
    _seen.choices = choices = {}
    try:
        clear_caches()  # plans made without measuring are re-planned
        with torch.no_grad():
            model(*example_inputs)
    finally:
        _benchmark = previous
        _seen.choices = None
    return choices


_seen = threading.local()  # what tune() is collecting, in this thread


def _report(key: str, found: Choice) -> Choice:
    collecting = getattr(_seen, "choices", None)
    if collecting is not None:
        collecting[key] = found
    return found
