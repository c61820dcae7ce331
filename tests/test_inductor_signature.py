"""Our kernels as Inductor compiles them under torch.compile: it types their integer arguments
its own way, and the kernels must compile with its types too.

Inductor recompiles a traced kernel from its source with a signature of its own: integers that
equal 1 become constants, and an argument whose name starts with ``ks`` is typed int64 (its
name for a dynamic size). ``conv_igemm_kernel``'s ``kstep_h`` and ``kstep_w`` were such
names: the loop in ``_first_tap`` then changed a variable's type from int32 to int64 and the
compile failed, for every compiled stride-2 input gradient (session 16). These compile the
kernels' code for sm_90 with Triton (no GPU needed) in a subprocess with the interpreter off.
"""

import importlib
import inspect
import os
import pkgutil
import subprocess
import sys
import textwrap

import pytest

from tritonconv import kernels


def _kernels():
    """(name, function) of every kernel in ``tritonconv.kernels``' modules."""
    for info in pkgutil.iter_modules(kernels.__path__):
        module = importlib.import_module(f"{kernels.__name__}.{info.name}")
        for name, value in vars(module).items():
            fn = getattr(value, "fn", None)
            if callable(fn) and fn.__module__ == module.__name__ and not name.startswith("_"):
                yield name, fn


def test_no_kernel_parameter_is_named_like_an_inductor_size():
    found = list(_kernels())
    assert len(found) > 10, [n for n, _ in found]
    assert "conv_igemm_kernel" in [n for n, _ in found]
    for name, fn in found:
        named = [p for p in inspect.signature(fn).parameters if p.startswith("ks")]
        assert not named, f"{name}: {named} (Inductor would type them int64)"


SCRIPT = """
import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from tritonconv.kernels.implicit_gemm import _first_tap


@triton.jit
def first_tap_kernel(out_ptr, r, pad, dil, stride, kstep, K):
    tl.store(out_ptr, _first_tap(r, pad, dil, stride, kstep, K))


for kstep, K in (("i64", "i32"), ("i32", "i64"), ("i32", "i32")):
    signature = dict(out_ptr="*i64", r="i32", pad="i32", dil="i32", stride="i32", kstep=kstep, K=K)
    triton.compile(ASTSource(first_tap_kernel, signature, {}), target=GPUTarget("cuda", 90, 128))
signature = dict(out_ptr="*i64", r="i32", pad="constexpr", dil="constexpr", stride="i32",
                 kstep="i64", K="i32")
triton.compile(ASTSource(first_tap_kernel, signature, {"pad": 1, "dil": 1}),
               target=GPUTarget("cuda", 90, 128))
print("compiled")
"""


def test_first_tap_compiles_with_mixed_integer_widths(tmp_path):
    """``_first_tap`` with the tap step and the kernel size of different widths, and with the
    constants Inductor makes of ones: it compiles (its loop-carried value keeps one type)."""
    script = tmp_path / "first_tap.py"  # (a file: Triton reads a kernel's source from it)
    script.write_text(textwrap.dedent(SCRIPT))
    env = dict(os.environ, TRITON_INTERPRET="0")
    done = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0 and "compiled" in done.stdout, done.stderr[-3000:]


COPIES = """
import builtins
import dis
import importlib.util
import sys

import torch._inductor.codegen.triton as codegen
from triton.runtime.jit import JITFunction

try:  # (Inductor's copy of a user kernel: torch 2.5-2.10 kept these elsewhere or not at all)
    from torch._inductor.codegen.wrapper import (
        user_defined_triton_kernel_transitive_closure_source_code as closure,
    )
except ImportError:
    print("no copy function")
    sys.exit(0)
# the imports Inductor heads its generated kernels with (a function before torch 2.11)
header = getattr(codegen, "gen_common_triton_imports", None)
header = header or codegen.TritonKernel.gen_common_triton_imports

sys.path.insert(0, {tests!r})
from test_inductor_signature import _kernels

unresolved = []
for index, (name, fn) in enumerate(_kernels()):
    kernel = getattr(sys.modules[fn.__module__], name)
    path = {folder!r} + f"/copy_{{index}}.py"  # (Triton reads a kernel's source from its file)
    with open(path, "w") as f:
        f.write(header() + "\\n" + closure(kernel))
    spec = importlib.util.spec_from_file_location(f"copy_{{index}}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for helper in [v for v in vars(module).values() if isinstance(v, JITFunction)]:
        for op in dis.Bytecode(helper.fn):
            if op.opname != "LOAD_GLOBAL":
                continue
            if op.argval not in vars(module) and not hasattr(builtins, op.argval):
                unresolved.append((name, helper.fn.__name__, op.argval))
print("unresolved", sorted(set(unresolved)))
"""


def test_kernels_resolve_as_inductor_copies_them(tmp_path):
    """Under torch.compile Inductor writes each kernel's source, and every ``@triton.jit``
    helper it calls under the helper's own name, into a file of its own with its standard
    imports. Every global a copied kernel or helper reads must resolve there: a helper reached
    through an alias (``_divide = _a if ... else _b``) does not (the causal kernels' first
    fast sigmoid, session 47: the GPU test of the compiled causal conv1d failed)."""
    script = tmp_path / "copies.py"
    script.write_text(
        textwrap.dedent(COPIES.format(tests=os.path.dirname(__file__), folder=str(tmp_path)))
    )
    env = dict(os.environ, TRITON_INTERPRET="0")
    done = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    if "no copy function" in done.stdout:
        pytest.skip("this torch's Inductor has no user_defined_triton_kernel_transitive_closure")
    assert "unresolved []" in done.stdout, done.stdout[-3000:]
