"""Every Triton kernel launch of tritonconv goes through :func:`launch`.

One call site, three situations:

* **Tracing** (``torch.compile``, ``make_fx``, fake or functional tensors): the kernel goes
  through ``torch.library.wrap_triton``, so the graph records the Triton kernel itself and
  Inductor can schedule, fuse around and CUDA-graph it (its analysis of which arguments a
  kernel writes, Triton IR each time, is memoised per specialisation: ``access_cache``).
  Under Triton's interpreter a fake tensor has no data to interpret: the launch is skipped
  (the op's body is then its own fake implementation, exactly as
  ``torch.library.triton_op`` uses it on the GPU).
* **Interpreter** (CPU tensors, ``TRITON_INTERPRET=1``): ``kernel[grid](...)``.
* **Compiled kernels on CUDA**: a lean launch. Triton's ``JITFunction.run`` binds and
  specialises every argument and rebuilds its cache key on each call (30-40 µs per launch on the
  H100 machine, benchmarks/NOTES.md). The first launch of a given argument signature goes through
  it and keeps the compiled kernel; later launches with the same signature call the compiled
  kernel's launcher directly. The signature holds everything Triton specialises on (every
  non-tensor argument's value, every tensor's dtype and 16-byte alignment, the launch options)
  plus the device, so a cached kernel is exactly the one Triton would have picked.

The lean path is bypassed, and Triton's own path taken, whenever Triton has launch hooks
installed (profilers such as proton rely on them).

**Launch plans.** A function that only allocates (:func:`allocate`) and launches, and decides
both from its arguments' signature (tensor shapes, strides, dtypes, devices and the other
arguments' values), is decorated with :func:`launch_plan`. Its first call with a signature runs
normally while every allocation and launch is recorded, tensors by which argument or allocation
they were; later calls replay the record on the new tensors without running the function's
Python at all: geometry, tile choice, grids, strides, output layouts and the kernels' argument
lists are worked out once per signature. (Under the interpreter the replay
interprets the recorded launches, so CPU tests exercise the recording too.) A launch on a
view the function made of one of its tensors is replayed on the same view of the call's
tensor. A signature whose record cannot be replayed (a launch on a tensor some other op made)
is remembered as such: its later calls run the function unrecorded, and the planned functions
it calls replay their own plans, instead of recording (and discarding) the whole call every
time. A PyTorch operation the function runs (a cuBLAS GEMM, an in-place add) goes through
:func:`call`, which records it the same way: a replay makes the same call on the new tensors,
and a tensor it returns joins the ones later steps may use.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import functools
import inspect
import os
import threading

import torch

from . import access_cache
from ._runtime import INTERPRETER
from .caches import BoundedCache
from .geometry import TritonConvError
from .precision import dot_precision

try:  # host-side TMA descriptors (Triton 3.4+)
    from triton.tools.tensor_descriptor import TensorDescriptor
except ImportError:  # pragma: no cover (older Triton)
    TensorDescriptor = None


class _Descriptor:
    """A TMA descriptor argument as a replay passes it to the direct launcher (which expands
    it for Triton's C launcher): the attributes Triton's wrapper reads
    (``make_tensordesc_arg``: base, shape, strides, padding), without
    ``TensorDescriptor``'s Python checks, which the recording call made (the plan checks the
    base's alignment, :meth:`_Plan.run`)."""

    __slots__ = ("base", "block_shape", "padding", "shape", "strides")

    def __init__(self, base, shape, strides, block_shape, padding):
        self.base, self.shape, self.strides = base, shape, strides
        self.block_shape, self.padding = block_shape, padding


def _is_descriptor(a) -> bool:
    return TensorDescriptor is not None and isinstance(a, TensorDescriptor)


def _descriptor_key(d) -> tuple:
    """What a launch's compiled kernel may depend on of a descriptor argument."""
    return (d.base.dtype, tuple(d.shape), tuple(d.strides), tuple(d.block_shape), d.padding)


def takes_descriptors() -> bool:
    """Whether this Triton's host-side ``TensorDescriptor`` is the one launches and plans
    handle: with a ``padding`` field (Triton 3.5+; earlier ones have none)."""
    import dataclasses

    return TensorDescriptor is not None and any(
        f.name == "padding" for f in dataclasses.fields(TensorDescriptor)
    )


# Tensor types the kernels may read directly, checked first (the usual case: one type test);
# a subclass that leaves dispatch alone holds its data as any tensor does (``is_plain``).
PLAIN_TENSOR_TYPES = (torch.Tensor, torch.nn.Parameter)
_NO_DISPATCH = torch.Tensor.__torch_dispatch__

# Bound on the lean-launch cache (entries: kernel x argument signature x device).
LAUNCH_CACHE_SIZE = 8192


def is_plain(*tensors: torch.Tensor | None) -> bool:
    """True when every given tensor holds real data a kernel can read: a tensor, a parameter,
    or a Python subclass that leaves dispatch alone (torchvision's ``tv_tensors``, a user's
    own: their data is a tensor's). Not a subclass that takes over ``__torch_dispatch__``:
    fake, functional and wrapper tensors (DTensor...), which tracers and other libraries make."""
    for t in tensors:  # (a loop: ``all`` over a generator costs twice as much a call)
        if (
            t is not None
            and type(t) not in PLAIN_TENSOR_TYPES
            and type(t).__torch_dispatch__ is not _NO_DISPATCH
        ):
            return False
    return True


def transformed() -> bool:
    """True inside a ``torch.func`` transform (vmap, grad, jvp, jacrev...) or a TorchScript
    trace (``torch.jit.trace``, ``torch.onnx.export``'s): their tensors are neither data a
    kernel can read nor layouts and sizes a plan may key on, so the public functions run their
    ATen forms (``aten.py``), which the transforms batch and differentiate and the tracer
    records, themselves."""
    return functorch_active() or torch.jit.is_tracing()


def functorch_active() -> bool:
    """True inside a ``torch.func`` transform (whose tensors take no in-place writes and have
    no layout to ask)."""
    return torch._C._are_functorch_transforms_active()


def tracing(*tensors: torch.Tensor | None) -> bool:
    """True while a tracer (fake/functional tensors, a dispatch mode) is looking at the call:
    nothing may be cached by shape then, shapes may be symbolic, and kernels are recorded."""
    return not is_plain(*tensors) or torch._C._len_torch_dispatch_stack() > 0


# Compiled kernels by launch signature (a lost race compiles nothing twice: Triton caches too).
_cache = BoundedCache("compiled kernels", LAUNCH_CACHE_SIZE)
# Launch options of ``kernel[grid](..., num_warps=...)``: not kernel parameters.
_OPTIONS = frozenset({"num_warps", "num_stages", "num_ctas", "maxnreg", "enable_fp_fusion"})


try:  # where Triton keeps its launch hooks: ``knobs.runtime`` (3.4+) or CompiledKernel
    from triton import knobs as _knobs

    _HOOKS = _knobs.runtime
except ImportError:  # pragma: no cover (older Triton)
    from triton.compiler import CompiledKernel as _HOOKS


def _hooks():
    """Triton's launch hooks (enter, exit)."""
    return _HOOKS.launch_enter_hook, _HOOKS.launch_exit_hook


def _hooks_installed() -> bool:
    """Whether a launch hook is set (Triton 3.6 keeps an empty ``HookChain`` where none is)."""
    enter, leave = _HOOKS.launch_enter_hook, _HOOKS.launch_exit_hook
    return (enter is not None and bool(getattr(enter, "calls", True))) or (
        leave is not None and bool(getattr(leave, "calls", True))
    )


# The current CUDA device (``torch.cuda.current_device`` without its Python wrapper and lazy
# initialisation: this runs on every launch, always after a CUDA tensor was made). Looked up,
# not asked of ``torch.cuda.is_available()``, so importing tritonconv touches no driver.
current_device = getattr(torch._C, "_cuda_getDevice", None) or (lambda: 0)


def _signature(args, meta) -> tuple:
    """What Triton specialises a launch on: each tensor's dtype and 16-byte alignment, every
    other argument's value (and type where it is not an int: ``True``, ``1.0`` and ``1`` are
    equal keys but three signatures to Triton)."""
    return tuple(
        (a.dtype, a.data_ptr() & 15 == 0)
        if isinstance(a, torch.Tensor)
        else a
        if type(a) is int
        else _descriptor_key(a)
        if _is_descriptor(a)
        else (type(a), a)
        for a in args
    ) + tuple(meta.items())


def launch(kernel, grid: tuple, *args, **meta) -> None:
    """``kernel[grid](*args, **meta)``, traced, interpreted or launched lean (module docstring).

    ``args`` are the kernel's leading parameters in order, ``meta`` the rest (constexprs) by
    name plus launch options (``num_warps``...).
    """
    if len(grid) > 1 and max(grid[1:]) > GRID_YZ_LIMIT:
        grid, meta = _fold_y(kernel, grid, meta)
    recording = getattr(_recorder, "events", None)
    if recording is not None:
        recording.append((kernel, grid, args, meta))
    tensors = [a.base if _is_descriptor(a) else a for a in args]
    tensors = [a for a in tensors if isinstance(a, torch.Tensor)]
    if tracing(*tensors):
        if INTERPRETER:
            return  # a fake tensor has nothing to interpret: the body is its own fake
        access_cache.install()  # Inductor analyses each traced launch: once per kind, for ours
        kernel, meta = _traced(kernel, meta)
        torch.library.wrap_triton(kernel)[grid](*args, **meta)
        return
    if INTERPRETER:
        _interpret(kernel, grid, args, meta)
        return
    device = current_device()
    key = (kernel, device, _signature(args, meta))
    entry = _cache.get(key)
    if entry is None or _hooks_installed():
        if any(_is_descriptor(a) for a in args):
            bind_cuda_context(device)  # (Triton's encoding of the descriptors comes first)
        entry = _entry(kernel[grid](*args, **meta), kernel, args, meta)
        if entry is not None:
            _cache.put(key, entry)
        return
    _run_compiled(entry, grid, torch._C._cuda_getCurrentRawStream(device), args)


# Launch options a traced launch carries in a one-config ``Autotuner`` (PyTorch's
# ``SPECIAL_CONFIG_NAMES`` that our launches use).
_TRACED_OPTIONS = ("num_warps", "num_stages", "num_ctas")
_traced_kernels = BoundedCache("traced kernels", 1024)


def _traced(kernel, meta: dict) -> tuple:
    """The kernel and arguments a traced launch gives ``wrap_triton``: the launch options in
    one ``triton.autotune`` of a single config per (kernel, options), made once.

    PyTorch wraps a traced launch that passes options (``num_warps``...) in such an Autotuner
    itself, but a new one each time, and each is a new entry in its kernel side table, which
    grows for the life of the process: torch 2.11's Inductor writes every entry's source out
    (the repro string it makes for each compiled graph), and the access analysis saw a new
    kernel per launch. One object per kind keeps the table to the kinds of launches made."""
    options = tuple((name, meta[name]) for name in _TRACED_OPTIONS if name in meta)
    if not options:
        return kernel, meta
    key = (kernel, options)
    wrapped = _traced_kernels.get(key)
    if wrapped is None:
        import triton

        wrapped = triton.autotune([triton.Config({}, **dict(options))], key=[])(kernel)
        _traced_kernels.put(key, wrapped)
    return wrapped, {k: v for k, v in meta.items() if k not in _TRACED_OPTIONS}


# CUDA's limit on a launch grid's second and third axes (the first takes 2**31 - 1).
GRID_YZ_LIMIT = 65535


def kernel_name(kernel) -> str:
    """A kernel's name: its function's (a ``JITFunction``, or one an ``Autotuner`` wraps), or
    the object's text (a compiled kernel's name as given)."""
    return getattr(getattr(kernel, "fn", kernel), "__name__", str(kernel))


def _fold_y(kernel, grid, meta) -> tuple[tuple, dict]:
    """A grid with more than CUDA's 65535 programs along an axis after the first, folded for a
    kernel that can take it: a second axis over the second and third (``FOLD_Y``: the kernel
    reads its index so, ``kernels.depthwise.program_y``), a third into the first (``FOLD_Z``:
    ``kernels.implicit_gemm.conv_igemm_kernel``'s stride phases); else a clear error for what
    CUDA would refuse ("invalid argument"), under the interpreter too, so that both say the
    same."""
    if len(grid) == 2 and meta.get("FOLD_Y") is False:
        rows = -(-grid[1] // GRID_YZ_LIMIT)
        return (grid[0], -(-grid[1] // rows), rows), {**meta, "FOLD_Y": True}
    if len(grid) == 3 and grid[1] <= GRID_YZ_LIMIT and meta.get("FOLD_Z") is False:
        rows = -(-grid[2] // GRID_YZ_LIMIT)
        return (grid[0] * rows, grid[1], -(-grid[2] // rows)), {**meta, "FOLD_Z": True}
    raise TritonConvError(
        f"tritonconv cannot launch {kernel_name(kernel)} on this input: its grid {tuple(grid)} has more than "
        f"{GRID_YZ_LIMIT} programs along an axis after the first, more than CUDA allows; "
        "split the batch (or the image) into smaller calls"
    )


# Triton's interpreter patches ``triton.language`` while it runs a kernel: one at a time.
_INTERPRETER_LOCK = threading.Lock()


def _interpret(kernel, grid, args, meta) -> None:
    with _INTERPRETER_LOCK, _interpreting():
        kernel[grid](*args, **meta)


# Triton's interpreter checks every 32-bit integer add, subtract and multiply for overflow
# (``InterpreterOptions.sanitize_overflow``, on by default; compiled kernels check only in
# debug builds): each such operation then runs again in 64 bits, compared against both
# limits, with an assertion. In CI's tests that was over half of the interpreter's time
# (benchmarks/NOTES.md, session 32), and it has never fired: the tests' indices are small,
# and integer convolutions wrap as PyTorch's do. ``TRITONCONV_INTERPRETER_OVERFLOW_CHECKS=1``
# turns the checks back on for our launches.
INTERPRETER_OVERFLOW_CHECKS = os.environ.get("TRITONCONV_INTERPRETER_OVERFLOW_CHECKS") == "1"


@contextlib.contextmanager
def _interpreting():
    """While one kernel is interpreted: ``triton.language`` patched for the interpreter once,
    and Triton's overflow checks as :data:`INTERPRETER_OVERFLOW_CHECKS` says.

    Triton's interpreter patches the language when a launch starts (and restores it when the
    launch ends), and again, with the same patches, on every call of a ``@triton.jit``
    helper inside the kernel (``InterpretedFunction.__call__``): each time it scans the
    language's modules with ``inspect.getmembers``. Our kernels call helpers inside their
    loops, so on CI's small tests those scans were about a quarter of the interpreter's time
    (cProfile of a ``conv_transpose3d`` OpInfo sample, benchmarks/NOTES.md, session 32).
    Here a helper whose language modules the launch already patched gets an empty patch
    scope instead. Both are restored when the launch ends; a Triton without this scheme (no
    ``_LangPatchScope``, no ``sanitize_overflow`` option) is left as it is. Like Triton's
    own patching, this is process-wide while a launch runs: another thread interpreting a
    kernel at the same time (outside our launches' lock) shares it, as it shares the
    patched language."""
    from triton.runtime import interpreter

    real = getattr(interpreter, "_patch_lang", None)
    empty_scope = getattr(interpreter, "_LangPatchScope", None)
    builder = getattr(interpreter, "interpreter_builder", None)
    options = getattr(builder, "options", None)
    if real is None or empty_scope is None:
        yield
        return
    patched: set[int] = set()

    def patch_lang(fn):
        modules = _language_modules(fn)
        if patched and modules <= patched:
            return empty_scope()
        patched.update(modules)
        return real(fn)

    interpreter._patch_lang = patch_lang
    checks = getattr(options, "sanitize_overflow", INTERPRETER_OVERFLOW_CHECKS)
    if checks != INTERPRETER_OVERFLOW_CHECKS:
        builder.options = dataclasses.replace(
            options, sanitize_overflow=INTERPRETER_OVERFLOW_CHECKS
        )
    try:
        yield
    finally:  # (what another thread may have put there since is left to it to restore)
        if interpreter._patch_lang is patch_lang:
            interpreter._patch_lang = real
        if checks != INTERPRETER_OVERFLOW_CHECKS:
            builder.options = options


@functools.cache
def _language_modules(fn) -> frozenset[int]:
    """Which of ``triton.language`` and ``triton.language.core`` a ``@triton.jit`` function's
    module sees (the ones Triton's interpreter patches for it), once per function."""
    import triton.language as tl

    return frozenset(id(v) for v in fn.__globals__.values() if v is tl or v is tl.core)


def _run_compiled(entry, grid, stream: int, args) -> None:
    """Launch a compiled kernel directly on ``stream`` (``entry``: see :func:`_entry`)."""
    compiled, tail, direct = entry
    grid = (*grid, 1, 1)
    if direct is not None:
        direct(grid[0], grid[1], grid[2], stream, *args, *tail)
        return
    if any(_is_descriptor(a) for a in args):  # (Triton's wrapper encodes them first)
        bind_cuda_context(current_device())
    compiled.run(
        grid[0],
        grid[1],
        grid[2],
        stream,
        compiled.function,
        compiled.packed_metadata,
        None,  # launch metadata: only read by launch hooks (none installed)
        None,
        None,
        *args,
        *tail,
    )


def _entry(compiled, kernel, args, meta) -> tuple | None:
    """What a lean launch needs of what ``kernel[grid](*args, **meta)`` returned: the compiled
    kernel, its trailing constexpr values and its :func:`_direct_launcher` (or None); None
    when it cannot be launched that way."""
    tail = _tail(kernel, len(args), meta)
    if compiled is None or tail is None:
        return None
    return compiled, tail, _direct_launcher(compiled)


# The parameters of Triton 3.6's ``CudaLauncher.__call__``, the wrapper whose work
# :func:`_direct_launcher` does once instead of per launch.
_WRAPPER_PARAMETERS = ("self", "gridX", "gridY", "gridZ", "stream", "function", "args")


@functools.cache
def _direct_triton() -> bool:
    """True on the Triton versions whose C launcher takes the arguments in the order
    :func:`_direct_launcher` passes them (checked on the GPU machine: 3.6)."""
    import triton

    return triton.__version__.startswith("3.6.")


@functools.cache
def _wrapper_is_known(kind: type) -> bool:
    """True when the wrapper type's ``__call__`` has 3.6's parameter list."""
    try:
        return tuple(inspect.signature(kind.__call__).parameters) == _WRAPPER_PARAMETERS
    except (AttributeError, TypeError, ValueError):
        return False


def _direct_launcher(compiled):
    """``launch(gx, gy, gz, stream, *kernel_args)`` calling Triton's C launcher itself, or None.

    Triton's Python wrapper around its C launcher (``CudaLauncher.__call__``) allocates the
    kernel's global and profile scratch memory on every launch and passes the launcher's
    constant flags. Our kernels need no scratch memory (both sizes are 0), so the wrapper only
    adds a Python call with two closures to each launch (benchmarks/NOTES.md: several µs on
    the H100 machine's host). Bound only where the wrapper is the one this was written against
    (Triton 3.6, its parameter list and attributes) and passes no scratch; anything else keeps
    Triton's wrapper."""
    wrapper = compiled.run
    if not _direct_triton() or not _wrapper_is_known(type(wrapper)):
        return None
    try:
        c_launch = wrapper.launch
        flags = (wrapper.launch_cooperative_grid, wrapper.launch_pdl)
        scratch = wrapper.global_scratch_size or wrapper.profile_scratch_size
    except AttributeError:
        return None
    if scratch or not callable(c_launch):
        return None
    # (function, flags, scratch pointers, packed metadata, launch metadata, enter and exit
    # hooks): what the C launcher takes between the stream and the kernel's arguments
    head = (compiled.function, *flags, None, None, compiled.packed_metadata, None, None, None)
    encoders = ()
    described = _unwrap_descriptors(c_launch)
    if described is not None:
        c_launch, encoders = described

    def arguments(grid: tuple, stream: int, args) -> tuple:
        """The C launcher's arguments for a launch on ``args``: a kernel with TMA descriptor
        parameters gets each descriptor expanded as Triton 3.6's wrapper does (the encoded
        ``CUtensorMap``, then the shape and strides), the encoding reused from its
        :class:`_TensorMaps` cache."""
        if encoders:
            args = list(args)
            for position, encoder in encoders:  # (last first: a splice shifts later ones)
                args[position : position + 1] = encoder.expand(args[position])
        return (*grid, stream, *head, *args)

    def direct(gx, gy, gz, stream, *args):
        c_launch(*arguments((gx, gy, gz), stream, args))

    # a replay keeps the arguments of a launch it will repeat (:data:`_ready`), where they
    # hold no descriptor objects (``expands``: every descriptor parameter expanded here)
    direct.c_launch, direct.arguments = c_launch, arguments
    direct.expands = described is not None
    return direct


# Bound on each descriptor parameter's cache of encoded tensor maps (:class:`_TensorMaps`).
TENSOR_MAP_CACHE_SIZE = 256


class _TensorMaps:
    """The encoded TMA descriptors (``CUtensorMap``) of one descriptor parameter of one
    compiled kernel, by base address, shape, strides and padding.

    Triton 3.6's launch wrapper encodes every descriptor argument on every launch
    (``make_tensordesc_arg``: a Python call into the driver's ``cuTensorMapEncodeTiled``),
    ~11 µs a launch of three descriptors on the H100 machine's host (benchmarks/NOTES.md,
    session 23). The encoding depends only on those four and on the kernel's own block,
    swizzle and element type (``tensordesc_meta``, fixed per compiled kernel): a training
    step's activations come back at the same addresses from PyTorch's caching allocator, so
    a replay finds its encodings here (or, where every tensor of the launch came back, its
    whole argument tuple in :data:`_ready` first). A map is a value (the launch copies it
    into the kernel's parameters), so reusing one for a new tensor at the same address and
    layout is exact. Bounded: emptied when full."""

    __slots__ = ("encode", "maps", "meta")

    def __init__(self, encode, meta: dict):
        self.encode, self.meta, self.maps = encode, meta, {}

    def expand(self, d) -> list:
        """``d``'s launch arguments: its encoded map, shape and strides."""
        address = d.base.data_ptr()
        key = (address, tuple(d.shape), tuple(d.strides), d.padding)
        expanded = self.maps.get(key)
        if expanded is None:
            if d.base.is_cuda:
                bind_cuda_context(d.base.device.index)
            m = self.meta
            shape, strides = list(d.shape), list(d.strides)
            encoded = self.encode(
                address,
                m["swizzle"],
                m["elem_size"],
                _host_tma_dtype(m["elem_type"]),
                m["block_size"],
                shape,
                strides,
                1 if d.padding == "nan" else 0,
            )
            expanded = [encoded, *shape, *strides]
            if len(self.maps) >= TENSOR_MAP_CACHE_SIZE:
                self.maps.clear()
            self.maps[key] = expanded
        return expanded


_thread_context = threading.local()


def bind_cuda_context(device: int) -> None:
    """Make ``device``'s primary CUDA context current in this thread if none is.

    Triton encodes a launch's TMA descriptors (``cuTensorMapEncodeTiled``, a driver call)
    before its C launcher makes a context current. A thread that has made no CUDA runtime
    call yet has none: autograd's device thread, when a backward's first launch is a TMA
    kernel, failed there with "invalid device context" (session 38, on the GPU). Triton's
    launcher binds the primary context the same way. Once per thread and device. Called
    wherever a descriptor may be encoded: before Triton's own launch path (``kernel[grid]``,
    its wrapper in :func:`_run_compiled`) and before a :class:`_TensorMaps` encoding."""
    if getattr(_thread_context, "device", None) == device:
        return
    lib = _libcuda()
    context = ctypes.c_void_p()
    _cuda_check(lib.cuCtxGetCurrent(ctypes.byref(context)), "cuCtxGetCurrent")
    if not context.value:
        handle = ctypes.c_int()
        _cuda_check(lib.cuDeviceGet(ctypes.byref(handle), device), "cuDeviceGet")
        _cuda_check(lib.cuDevicePrimaryCtxRetain(ctypes.byref(context), handle),
                    "cuDevicePrimaryCtxRetain")  # fmt: skip
        _cuda_check(lib.cuCtxSetCurrent(context), "cuCtxSetCurrent")
    _thread_context.device = device


@functools.cache
def _libcuda():
    return ctypes.CDLL("libcuda.so.1")


def _cuda_check(result: int, name: str) -> None:
    if result != 0:
        raise RuntimeError(f"tritonconv: {name} failed with CUDA driver error {result}")


def _host_tma_dtype(device_type: int) -> int:
    """The host's TMA element-type code of the kernel's (Triton numbers a few differently)."""
    from triton.backends.nvidia.driver import TMA_DTYPE_DEVICE_TO_HOST

    return TMA_DTYPE_DEVICE_TO_HOST[device_type]


# The qualified name of Triton 3.6's descriptor-expanding wrapper around its C launcher.
_DESCRIPTOR_WRAPPER = "wrap_handle_tensordesc.<locals>.inner"


def _unwrap_descriptors(c_launch) -> tuple | None:
    """``(C launcher, [(argument position, _TensorMaps)], last position first)`` when
    ``c_launch`` is Triton 3.6's descriptor wrapper (``wrap_handle_tensordesc``) with every
    descriptor's compile-time layout known; None otherwise (no descriptors: the C launcher
    itself; a form this was not written against: Triton's wrapper stays)."""
    if getattr(c_launch, "__qualname__", None) != _DESCRIPTOR_WRAPPER:
        return None
    try:
        free = inspect.getclosurevars(c_launch).nonlocals
        launcher, positions, metas = (
            free["launcher"],
            sorted(free["tensordesc_indices"]),
            list(free["tensordesc_meta"]),
        )
        encode = _tensor_map_encoder()
    except (KeyError, TypeError, ValueError, AttributeError, ImportError):
        return None
    keys = ("swizzle", "elem_size", "elem_type", "block_size")
    if len(metas) != len(positions) or not all(
        isinstance(m, dict) and all(k in m for k in keys) and not m.get("fp4_padded") for m in metas
    ):
        return None
    encoders = [(p, _TensorMaps(encode, m)) for p, m in zip(positions, metas, strict=True)]
    return launcher, encoders[::-1]


def _tensor_map_encoder():
    """Triton's ``fill_tma_descriptor`` (the driver utility its wrapper encodes with)."""
    import triton

    return triton.runtime.driver.active.utils.fill_tma_descriptor


def _tail(kernel, leading: int, meta: dict) -> tuple | None:
    """The values of the kernel's parameters after the ``leading`` positional ones, in order,
    from ``meta``; None when one is missing (a default value: Triton's own path handles it)."""
    names = getattr(kernel, "arg_names", None)
    if names is None:
        return None
    rest = names[leading:]
    if any(n not in meta for n in rest) or set(meta) - _OPTIONS != set(rest):
        return None
    return tuple(meta[n] for n in rest)


# --------------------------------------------------------------------------------------------
# launch plans
# --------------------------------------------------------------------------------------------

_recorder = threading.local()


def allocate(
    shape, dtype: torch.dtype, device, strides=None, *, zero: bool = False
) -> torch.Tensor:
    """A new tensor (``strides``: dense row-major when None), zero-filled if ``zero``: the one
    way a planned function may allocate, so that its replay allocates the same."""
    if strides is None:
        t = torch.empty(shape, dtype=dtype, device=device)
    else:
        t = torch.empty_strided(shape, strides, dtype=dtype, device=device)
    if zero:
        t.zero_()
    recording = getattr(_recorder, "events", None)
    if recording is not None:
        recording.append(_Alloc(tuple(t.shape), t.stride(), dtype, t.device, zero, t))
    return t


def placeholder(dtype: torch.dtype, device) -> torch.Tensor:
    """The empty tensor an op returns in place of an output it was asked not to compute (a
    backward op's unwanted gradient), allocated like any other; a replay for a caller that
    drops those outputs (``_Plan.run(..., placeholders=False)``) gives None in its place and
    allocates nothing. Never launched on."""
    t = torch.empty((0,), dtype=dtype, device=device)
    recording = getattr(_recorder, "events", None)
    if recording is not None:
        recording.append(_Placeholder((0,), (1,), dtype, t.device, False, t))
    return t


def call(fn, *args, **kwargs):
    """``fn(*args, **kwargs)``: a PyTorch operation (``torch.mm(a, b, out=c)``,
    ``torch.Tensor.add_``...) in a planned function, recorded so that a replay makes the same
    call on the replay's tensors (module docstring). Its tensor arguments, positional or by
    keyword, are the function's arguments, its allocations, earlier calls' results or views of
    those; a tensor it returns that is none of these is one from then on. Every other argument
    is frozen into the plan, as a launch's are: it must follow from the call's signature."""
    result = fn(*args, **kwargs)
    recording = getattr(_recorder, "events", None)
    if recording is not None:
        recording.append(_CallEvent(fn, args, kwargs, result))
    return result


class _CallEvent:
    """A :func:`call` as recorded (its tensors kept only until the plan is built)."""

    __slots__ = ("args", "fn", "kwargs", "result")

    def __init__(self, fn, args, kwargs, result):
        self.fn, self.args, self.kwargs, self.result = fn, args, kwargs, result


class _Call:
    """A recorded :func:`call`: its arguments with the tensors left as slots (positions, or
    keywords, with indices into the replay's table); ``appends`` when what it returns is a new
    tensor of the table."""

    __slots__ = ("appends", "args", "fn", "kwargs", "slots")

    def __init__(self, fn, args, kwargs, slots, appends: bool):
        self.fn, self.slots, self.appends = fn, slots, appends
        self.args = [None if isinstance(a, torch.Tensor) else a for a in args]
        self.kwargs = {k: None if isinstance(a, torch.Tensor) else a for k, a in kwargs.items()}

    def run(self, table: list, where) -> None:
        args, kwargs = self.args.copy(), self.kwargs.copy()
        for key, index in self.slots:
            if type(key) is int:
                args[key] = table[index]
            else:
                kwargs[key] = table[index]
        result = self.fn(*args, **kwargs)
        if self.appends:
            table.append(result)


class _Alloc:
    """A recorded allocation (the tensor itself kept only until the plan is built)."""

    __slots__ = ("device", "dtype", "shape", "strides", "tensor", "zero")

    def __init__(self, shape, strides, dtype, device, zero, tensor):
        self.shape, self.strides, self.dtype, self.device = shape, strides, dtype, device
        self.zero, self.tensor = zero, tensor

    def run(self, table: list, where) -> None:
        t = torch.empty_strided(self.shape, self.strides, dtype=self.dtype, device=self.device)
        if self.zero:
            t.zero_()
        table.append(t)


class _Placeholder(_Alloc):
    """A recorded :func:`placeholder`."""

    __slots__ = ()


class _Absent:
    """Stands for a placeholder in a replay that does not return them: None in the table."""

    __slots__ = ()

    def run(self, table: list, where) -> None:
        table.append(None)


class _View:
    """A view a planned function made of a tensor of the table and launched on (the strided
    depthwise input gradient's stride phases): re-made over the replay's tensor from its
    shape, strides and storage offset relative to that tensor."""

    __slots__ = ("base", "offset", "shape", "strides")

    def __init__(self, base: int, shape, strides, offset: int):
        self.base, self.shape, self.strides, self.offset = base, shape, strides, offset

    def run(self, table: list, where) -> None:
        t = table[self.base]
        table.append(t.as_strided(self.shape, self.strides, t.storage_offset() + self.offset))


def _extent(t: torch.Tensor) -> tuple[int, int]:
    """First and last storage element ``t`` reaches (``t`` not empty)."""
    start = t.storage_offset()
    return start, start + sum((n - 1) * s for n, s in zip(t.shape, t.stride(), strict=True))


def _view_step(table: list, roots: list, t: torch.Tensor) -> _View | None:
    """``t`` as a :class:`_View` of the one tensor of ``table`` (among the ``roots``
    indices: arguments and allocations) whose storage it shares and whose elements it stays
    within; None if there is no such single tensor."""
    if t.numel() == 0:
        return None
    storage = t.untyped_storage().data_ptr()
    bases = [
        i
        for i in roots
        if (u := table[i]).device == t.device
        and u.untyped_storage().data_ptr() == storage
        and u.numel()
    ]
    if len(bases) != 1:
        return None
    base = table[bases[0]]
    (lo, hi), (base_lo, base_hi) = _extent(t), _extent(base)
    if t.dtype != base.dtype or lo < base_lo or hi > base_hi:
        return None
    return _View(bases[0], tuple(t.shape), t.stride(), lo - base.storage_offset())


# Bound on the kept launch arguments (:data:`_ready`), process-wide: a training step's
# launches on their usual addresses (one entry each: ResNet-50's ~200) many times over; at
# about 1.5 KB an entry (a TMA launch's with its encoded maps), 12 MB at most. (Read once,
# at import: ``_ready.size`` is the bound in force.)
READY_LAUNCHES = 8192
# A replayed launch's whole argument tuple for Triton's C launcher, by (plan step, device,
# stream, addresses of the tensors it passes): ``(C launcher, arguments)``. A launch
# repeated on tensors at the same addresses (a training loop's, from PyTorch's caching
# allocator) passes the same arguments, TMA descriptors encoded and expanded, so its Python
# is the addresses, one key and one lookup. The oldest entries go first when it is full.
# (The key holds the step, not its id: a step freed with its plan cannot alias a new one.)
_ready = BoundedCache("kept launch arguments", READY_LAUNCHES)


class _Launch:
    """A recorded launch: the kernel's arguments with the tensors left as slots (indices into
    the replay's tensor table), and its compiled kernels by device and pointer alignment
    (the arguments it passed, by its tensors' addresses: :data:`_ready`)."""

    __slots__ = (
        "compiled", "descriptors", "grid", "kernel", "meta", "pointers", "slots", "template",
    )  # fmt: skip

    def __init__(self, kernel, grid, args, meta, slots, descriptors=()):
        self.kernel, self.grid, self.meta = kernel, grid, meta
        # No tensor is kept: a cached plan must not pin the recording call's memory.
        self.template = [
            None if isinstance(a, torch.Tensor) or _is_descriptor(a) else a for a in args
        ]
        self.slots = slots  # [(position in args, index in the table)]
        # [(position in args, index of its base in the table, shape, strides, block, padding)]
        self.descriptors = descriptors
        # the table indices whose addresses a launch's arguments hold
        self.pointers = [index for _, index in slots] + [d[1] for d in descriptors]
        self.compiled: dict = {}

    def _descriptors(self, args: list, table: list, kind) -> None:
        for position, index, *layout in self.descriptors:
            args[position] = kind(table[index], *layout)

    def run(self, table: list, where) -> None:
        """Launch on the tensors of ``table``; ``where``: (device, stream, hooks installed) of
        a compiled launch, None under the interpreter (:meth:`_Plan.run` looks them up once
        for all its launches)."""
        if where is None:
            args = self.template.copy()
            for position, index in self.slots:
                args[position] = table[index]
            self._descriptors(args, table, TensorDescriptor)
            _interpret(self.kernel, self.grid, args, self.meta)
            return
        device, stream, hooked = where
        # the slots' addresses, then the descriptor bases'
        addresses = [table[i].data_ptr() for i in self.pointers]
        ready_key = None
        if not hooked and _direct_triton():  # (the arguments kept: :data:`_ready`)
            ready_key = (self, device, stream, *addresses)
            ready = _ready.get(ready_key)
            if ready is not None:
                ready[0](*ready[1])
                return
        # Triton's C launcher takes an address as an int as it is; a tensor it would ask for
        # its data_ptr (a Python call) and check with the driver (cuPointerGetAttribute), per
        # pointer and launch. The addresses are the tensors' own, on the current device
        # (``autograd.run`` and the engine make it theirs). The compiled kernel depends on
        # which of them are 16-byte aligned (what Triton specialises on).
        args = self.template.copy()
        aligned = 0
        for (position, _), address in zip(self.slots, addresses):  # (slots first)
            args[position] = address
            aligned = aligned + aligned + (address & 15 == 0)
        key = (device, aligned)
        entry = None if hooked else self.compiled.get(key)
        if entry is None or entry[2] is None:  # Triton's own launch path: it takes tensors
            for position, index in self.slots:
                args[position] = table[index]
            self._descriptors(args, table, TensorDescriptor)
            if entry is None:
                if self.descriptors:
                    bind_cuda_context(device)  # (Triton's encoding of them comes first)
                entry = _entry(
                    self.kernel[self.grid](*args, **self.meta), self.kernel, args, self.meta
                )
                if entry is not None and not hooked and len(self.compiled) < 16:
                    self.compiled[key] = entry
                return
            _run_compiled(entry, self.grid, stream, args)
            return
        self._descriptors(args, table, _Descriptor)  # (bases 16-byte aligned: the plan's check)
        _, tail, direct = entry
        grid = (*self.grid, 1, 1)[:3]
        ready = (direct.c_launch, direct.arguments(grid, stream, (*args, *tail)))
        # kept unless descriptors stay unexpanded (Triton's descriptor wrapper in a form
        # :func:`_unwrap_descriptors` does not take): their objects hold the tensors
        if ready_key is not None and (direct.expands or not self.descriptors):
            _ready.put(ready_key, ready)
        _launch_kept(self, ready)


def _launch_kept(step: _Launch, ready: tuple) -> None:
    """A replay's first launch of the argument tuple it keeps (later ones call it from
    :data:`_ready` directly). One function, so that ``bench.host.launches_replaced`` reaches
    these launches too."""
    ready[0](*ready[1])


class _Plan:
    """What a planned function did for one signature: allocations and launches in order, and
    which tensors of the table it returned."""

    __slots__ = ("aligned", "launches", "lean_steps", "result", "steps", "unplanned")

    def __init__(self, steps, result, aligned=()):
        self.steps, self.result = steps, result
        self.launches = any(isinstance(s, _Launch) for s in steps)
        # the steps of a replay whose caller drops the placeholders it returns
        self.lean_steps = [_Absent() if isinstance(s, _Placeholder) else s for s in steps]
        # (argument index, byte offset): addresses a launch needs 16-byte aligned
        self.aligned = aligned
        self.unplanned = None  # the planned function on a replay's tensors, unrecorded

    def run(self, tensors: list, placeholders: bool = True):
        """Replay on ``tensors`` (the planned function's tensor arguments, in order); with
        ``placeholders=False`` each :func:`placeholder` it would return is None instead.

        A plan whose launches need 16-byte aligned addresses (:func:`needs_aligned`) that were
        aligned when it was recorded runs the function itself, unrecorded, on tensors where
        one is not: the function chooses its kernels by alignment, the plan's keys do not."""
        for index, offset in self.aligned:
            if (tensors[index].data_ptr() + offset) & 15 and self.unplanned is not None:
                return self.unplanned(tensors)  # (its placeholders: callers drop them)
        table = tensors.copy()
        where = None
        if self.launches and not INTERPRETER:  # once per replay, not per launch
            device = current_device()
            where = (device, torch._C._cuda_getCurrentRawStream(device), _hooks_installed())
        for step in self.steps if placeholders else self.lean_steps:
            step.run(table, where)
        result = self.result
        if result is None:
            return None
        if isinstance(result, int):
            return table[result]
        return tuple(table[i] for i in result)


def _index(table: list, t) -> int | None:
    return next((i for i, u in enumerate(table) if u is t), None)


# What a plan cache holds for a signature whose calls cannot be replayed (a launch reads a
# tensor some other op made, or the function returns a view or such a tensor): later calls
# run the function without recording it, so the planned functions it calls replay their own.
UNPLANNABLE = object()


def _build_plan(events, tensors: list, result) -> _Plan | None:
    """The recorded events as a plan over ``tensors`` (the function's tensor arguments, then
    what it allocated or a :func:`call` returned, and the views of those its launches and
    calls read: :func:`_view_step`); ``UNPLANNABLE`` if a launch or call read, or the function
    returned, a tensor that is none of these (made by some other op: the function cannot be
    replayed); None if one tensor came as two arguments (this call only: a later call may pass
    two distinct ones)."""
    table = list(tensors)
    if len({id(t) for t in table}) != len(table):
        return None
    roots = list(range(len(table)))  # arguments, allocations, new results: what views are of
    steps = []
    aligned = set()  # (argument index, byte offset) a launch needs 16-byte aligned
    views = {}  # table index: the view step that makes it
    allocated = {}  # table index: its allocation step

    def slot(arg: torch.Tensor) -> int | None:
        """The table index of a tensor a launch or call reads (a view step added for a view)."""
        index = _index(table, arg)
        if index is not None and isinstance(allocated.get(index), _Placeholder):
            raise AssertionError("a placeholder is never launched on")
        if index is None:
            view = _view_step(table, roots, arg)
            if view is None:
                return None
            steps.append(view)
            table.append(arg)
            index = len(table) - 1
            views[index] = view
        return index

    def slots_of(named) -> list | None:
        """(position or keyword, table index) of each tensor among ``named``'s (key, value)
        pairs; None if one is not in the table nor a view of a tensor there."""
        slots = []
        for key, arg in named:
            if isinstance(arg, torch.Tensor):
                index = slot(arg)
                if index is None:
                    return None
                slots.append((key, index))
        return slots

    for event in events:
        if isinstance(event, _Alloc):
            allocated[len(table)] = event
            roots.append(len(table))
            table.append(event.tensor)
            event.tensor = None
            steps.append(event)
            continue
        if isinstance(event, _CallEvent):
            named = [*enumerate(event.args), *event.kwargs.items()]
            if any(_holds_tensor(a) for _, a in named if not isinstance(a, torch.Tensor)):
                return UNPLANNABLE  # tensors inside a list: not taken apart
            slots = slots_of(named)
            if slots is None:
                return UNPLANNABLE
            out = event.result
            if out is not None and not isinstance(out, torch.Tensor):
                return UNPLANNABLE
            appends = out is not None and _index(table, out) is None
            steps.append(_Call(event.fn, event.args, event.kwargs, slots, appends))
            if appends:
                if _view_step(table, roots, out) is None:  # its own storage: a new root
                    roots.append(len(table))
                table.append(out)
            event.result = None
            continue
        kernel, grid, args, meta = event
        slots = slots_of(enumerate(args))
        bases = slots_of((i, a.base) for i, a in enumerate(args) if _is_descriptor(a))
        if slots is None or bases is None:
            return UNPLANNABLE
        descriptors = [  # (tuples: a replay's descriptor cache keys on them as they are)
            (i, index, tuple(d.shape), tuple(d.strides), tuple(d.block_shape), d.padding)
            for i, index in bases
            for d in (args[i],)
        ]
        steps.append(_Launch(kernel, grid, args, meta, slots, descriptors))
        names = getattr(kernel, "aligned_pointers", ())
        for position, index in (*slots, *bases) if names else ():
            if kernel.arg_names[position] not in names:
                continue
            view = views.get(index)
            root, offset = (index, 0) if view is None else (view.base, view.offset)
            if root < len(tensors):  # an argument's address (allocations are aligned)
                aligned.add((root, offset * table[index].element_size()))
    # what it returns: arguments, allocations or calls' results of their own storage (a view
    # of one of those, made by a call or for a launch, is refused like any other view)
    if result is None:
        indices = None
    elif isinstance(result, torch.Tensor):
        indices = _index(table, result)
        if indices not in roots:
            return UNPLANNABLE
    else:
        indices = tuple(_index(table, t) for t in result)
        if any(i not in roots for i in indices):
            return UNPLANNABLE
    return _Plan(steps, indices, tuple(sorted(aligned)))


def _holds_tensor(value) -> bool:
    return isinstance(value, (list, tuple)) and any(
        isinstance(v, torch.Tensor) or _holds_tensor(v) for v in value
    )


def _signature_key(args) -> tuple:
    key = [
        (a.shape, a.stride(), a.dtype, a.device)
        if isinstance(a, torch.Tensor)
        else tuple(a)
        if type(a) is list
        else a
        for a in args
    ]
    key.append(dot_precision(torch.float32))  # (a recorded launch fixes the dots' precision)
    return tuple(key)


def _unplanned(fn, template: tuple, tensors: list):
    """``fn`` on its recorded arguments (``template``: the tensors' places marked
    :data:`_TENSOR`) with ``tensors`` in those places, in order, unrecorded."""
    given = iter(tensors)
    return fn(*(next(given) if a is _TENSOR else a for a in template))


# A tensor argument's place in a plan's template of its function's arguments (no tensor is
# kept: a cached plan must not pin the recording call's memory).
_TENSOR = object()


def needs_aligned(kernel, *names: str):
    """Mark ``kernel``'s pointer or TMA descriptor parameters ``names`` as needing 16-byte
    aligned addresses: a launcher that launches it only where they are aligned must not have
    its launch plans replayed where they are not (:meth:`_Plan.run`). Returns ``kernel``."""
    kernel.aligned_pointers = names
    return kernel


def launch_plan(fn):
    """Decorator: record what ``fn`` does once per argument signature and replay it (module
    docstring). ``fn`` may only allocate through :func:`allocate`, launch through
    :func:`launch` and run PyTorch operations through :func:`call` (any other tensor operation
    would be skipped by the replay), must decide all three from its arguments' signature alone
    (and fp32's dot precision, :func:`precision.dot_precision`, which keys it too), and returns
    None, one tensor or a tuple of tensors it was given, allocated or had a call return (not
    a view of one). Positional arguments: tensors, None, lists or hashable values (keywords
    are bound to positions). Calls nested in another planned function's recording run
    unplanned, so the outer recording sees their launches."""
    plans = BoundedCache(f"launch plans of {fn.__qualname__}", LAUNCH_CACHE_SIZE)
    signature = inspect.signature(fn)

    @functools.wraps(fn)
    def planned(*args, **kwargs):
        if kwargs:
            args = signature.bind(*args, **kwargs).args
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        if tracing(*tensors) or getattr(_recorder, "events", None) is not None:
            return fn(*args)
        try:
            key = _signature_key(args)
            plan = plans.get(key)
        except TypeError:  # an unhashable argument
            return fn(*args)
        if plan is UNPLANNABLE:
            return fn(*args)
        if plan is not None:
            return plan.run(tensors)
        _recorder.events = events = []
        try:
            result = fn(*args)
        finally:
            _recorder.events = None
        plan = _build_plan(events, tensors, result)
        if plan is not None:
            if plan is not UNPLANNABLE and plan.aligned:
                template = tuple(_TENSOR if isinstance(a, torch.Tensor) else a for a in args)
                plan.unplanned = functools.partial(_unplanned, fn, template)
            plans.put(key, plan)
        return result

    def plan_of(*args) -> _Plan | None:
        """The recorded plan of these arguments' signature, if there is one."""
        try:
            plan = plans.get(_signature_key(args))
        except TypeError:
            return None
        return None if plan is UNPLANNABLE else plan

    planned.plans = plans
    planned.plan_of = plan_of
    return planned
