"""Where tritonconv's Triton kernels run: compiled on CUDA, or Triton's interpreter on CPU.

Triton decides between compiling and interpreting when a kernel is *defined* (it reads
``TRITON_INTERPRET`` in ``triton.jit``), so this module is imported by ``tritonconv/__init__``
before any kernel module. The decision is made once per process:

* ``TRITON_INTERPRET`` already set by the user: respected as given.
* otherwise: interpreter when PyTorch sees no CUDA device, compiled kernels when it does.

In interpreter mode kernels take CPU tensors; in compiled mode they take CUDA tensors. A tensor
on the other kind of device gets a clear error from :func:`check_kernel_device`.
"""

from __future__ import annotations

import os

import torch

from .geometry import TritonConvError


def _decide_interpreter() -> bool:
    if "TRITON_INTERPRET" in os.environ:
        return os.environ["TRITON_INTERPRET"] not in ("", "0")
    return not torch.cuda.is_available()


def _reinterpret_triton_language() -> None:
    """Make Triton's own ``@triton.jit`` helpers (``tl.cdiv``, ``tl.sum``...) interpretable.

    They are built when ``triton.language`` is imported, as compiled or interpreted functions
    by ``TRITON_INTERPRET`` at that moment. When Triton was imported before this module set it
    (``import torchvision`` or ``torch._inductor`` first, say), they were built for compilation,
    and an interpreted kernel calling one fails ("Cannot call @triton.jit'd outside of the
    scope of a kernel"). Re-executing the modules that define them rebuilds them interpreted;
    ``triton.language``'s own names are pointed at the new functions."""
    import importlib
    import sys

    language = sys.modules.get("triton.language")
    if language is None:
        return
    from triton.runtime.jit import JITFunction

    if type(language.cdiv) is not JITFunction:  # already interpreted
        return
    for name in ("triton.language.standard", "triton.language.random"):
        module = sys.modules.get(name)
        if module is None:
            continue
        before = dict(vars(module))
        importlib.reload(module)
        for attr, value in list(vars(language).items()):
            if attr in before and value is before[attr]:
                setattr(language, attr, getattr(module, attr))


INTERPRETER: bool = _decide_interpreter()
if INTERPRETER:
    os.environ["TRITON_INTERPRET"] = "1"
    _reinterpret_triton_language()


def kernel_device_type() -> str:
    """The device type whose tensors the Triton kernels accept in this process."""
    return "cpu" if INTERPRETER else "cuda"


def check_kernel_device(tensor: torch.Tensor, name: str) -> None:
    """Raise unless ``tensor`` lives where this process's Triton kernels can read it."""
    expected = kernel_device_type()
    if tensor.device.type == expected:
        return
    if INTERPRETER:
        raise TritonConvError(
            f"{name} is on {tensor.device}, but tritonconv runs its kernels through Triton's "
            "interpreter in this process (no CUDA device was visible, or TRITON_INTERPRET=1), "
            "which needs CPU tensors"
        )
    raise TritonConvError(
        f"{name} is on {tensor.device}, but tritonconv's compiled kernels need CUDA tensors; "
        "to run on CPU tensors start the process with TRITON_INTERPRET=1 (Triton's interpreter)"
    )
