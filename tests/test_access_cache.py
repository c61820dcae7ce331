"""access_cache: PyTorch's access analysis of our kernels runs once per specialisation, and its
memoised answer is the one PyTorch's own analysis gives for every call the key lumps together.

The analysis generates compiled-kernel IR, which the interpreter's kernels cannot give, so
these run in a subprocess with the interpreter off and an sm_90 target (no GPU is needed to
generate Triton IR), on fake tensors as torch.compile's tracing has them."""

import os
import subprocess
import sys
import textwrap

SETUP = """
import os
import torch, triton
from triton.backends.compiler import GPUTarget
from torch._subclasses.fake_tensor import FakeTensorMode
from torch._higher_order_ops import triton_kernel_wrap as wrap


class Sm90:
    def get_current_target(self):
        return GPUTarget("cuda", 90, 32)


triton.runtime.driver.set_active(Sm90())
from tritonconv import access_cache
from tritonconv.kernels.reduce import sum_partials_kernel

# torch 2.12 on: identify_accessed_tensors (reads and writes); torch 2.11: identify_mutated_tensors
NAME = next(n for n in access_cache._NAMES if hasattr(wrap, n))
uncached = getattr(wrap, NAME)
calls = []


def analyse(*args):
    return getattr(wrap, NAME)(*args)


def names(result):  # (reads, writes) by name; reads None where only writes are reported
    if not hasattr(result, "read_writes"):
        return None, sorted(result)
    rw = result.read_writes
    return sorted(d.name for d in rw.reads), sorted(d.name for d in rw.writes)


with FakeTensorMode():
    fp32 = torch.empty(8, dtype=torch.float32)
    bf16 = torch.empty(8, dtype=torch.bfloat16)


def kwargs(splits=3, numel=1000, two=True, out=bf16):
    return dict(partial_ptr=fp32, out_ptr=out, out2_ptr=out, splits=splits, numel=numel,
                split_at=7, taps=9, channels=40, BLOCK=1024, SPLIT_BLOCK=4, TWO_OUTPUTS=two,
                CHANNELS_TO_TAPS=False, INDEX_64=False)
"""


def _run(tmp_path, body: str, **env) -> str:
    script = tmp_path / "analysis.py"  # a file: Triton reads a kernel's source from its file
    script.write_text(SETUP + textwrap.dedent(body))
    environment = dict(os.environ, TRITON_INTERPRET="0", TRITON_DEFAULT_FP_FUSION="1", **env)
    done = subprocess.run(
        [sys.executable, str(script)], env=environment, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_memoised_answers_are_pytorchs(tmp_path):
    """Calls the key lumps together (integers of one specialisation class, other fake tensors
    of the dtype) get one analysis, equal to PyTorch's own for each of them; calls it tells
    apart (an integer equal to 1 or a multiple of 16, another dtype, another constexpr) get
    their own."""
    out = _run(
        tmp_path,
        """
        assert access_cache.install() and access_cache.name == NAME
        assert getattr(wrap, NAME) is not uncached
        original = access_cache.original
        access_cache.original = lambda *a: calls.append(1) or original(*a)
        with FakeTensorMode():
            other = torch.empty(3, dtype=torch.bfloat16)
        same = [kwargs(splits=5, numel=1001), kwargs(splits=3, out=other), kwargs()]
        new = [kwargs(splits=1), kwargs(numel=1024), kwargs(two=False), kwargs(out=fp32)]
        got = [names(analyse(sum_partials_kernel, kwargs(), {}))]
        for count, cases in ((1, same), (1 + len(new), new)):
            for case in cases:
                got.append(names(analyse(sum_partials_kernel, case, {})))
                assert got[-1] == names(uncached(sum_partials_kernel, case, {})), case
            assert len(calls) == count, (count, calls)
        assert got[-2][1] == ["out_ptr"]  # TWO_OUTPUTS=False writes one
        assert got[-2][0] in (None, ["partial_ptr"])
        print(got)
        """,
    )
    assert "out2_ptr" in out


def test_launches_with_options_are_memoised(tmp_path):
    """A traced launch with options (``num_warps``...) reaches the analysis as a new one-config
    ``Autotuner`` around the kernel each time, as PyTorch wraps it (every launch of ours): one
    analysis for all of them, PyTorch's answer for each; a config's own arguments count."""
    _run(
        tmp_path,
        """
        access_cache.install()
        original = access_cache.original
        access_cache.original = lambda *a: calls.append(1) or original(*a)

        def wrapped(warps, **config):  # (what PyTorch's call_triton_kernel makes)
            return triton.autotune([triton.Config(config, num_warps=warps)], key=[])(
                sum_partials_kernel
            )

        args = kwargs()
        for warps in (4, 8, 4):
            assert names(analyse(wrapped(warps), args, {})) == names(
                uncached(wrapped(warps), args, {})
            )
        assert len(calls) == 1, calls
        assert access_cache.access_key(wrapped(4), args, {}) == access_cache.access_key(
            sum_partials_kernel, args, {}
        )
        del args["TWO_OUTPUTS"]
        one = names(analyse(wrapped(4, TWO_OUTPUTS=False), args, {}))
        assert len(calls) == 2 and one[1] == ["out_ptr"], (calls, one)
        """,
    )


def test_other_kernels_real_tensors_and_descriptors_are_not_memoised(tmp_path):
    _run(
        tmp_path,
        """
        access_cache.install()
        original = access_cache.original
        access_cache.original = lambda *a: calls.append(1) or original(*a)

        @triton.jit
        def theirs(x_ptr, n):
            triton.language.store(x_ptr, n)

        real = kwargs(out=torch.empty(8, dtype=torch.bfloat16))
        for _ in range(2):
            analyse(theirs, dict(x_ptr=fp32, n=3), {})
            analyse(sum_partials_kernel, real, {})
        assert len(calls) == 4, calls
        assert access_cache.access_key(sum_partials_kernel, kwargs(), {"out_ptr": ("x",)}) is None
        assert access_cache.access_key(sum_partials_kernel, kwargs(), {}) is not None
        """,
    )


def test_switched_off_leaves_pytorch_alone(tmp_path):
    _run(
        tmp_path,
        """
        assert not access_cache.install()
        assert getattr(wrap, NAME) is uncached
        """,
        TRITONCONV_ACCESS_CACHE="0",
    )
