"""Inductor's compile of our kernels, without a GPU: ``torch.compile``'s backend run on fake
CUDA tensors until Triton has compiled each of our kernels from the source Inductor generates
(with Inductor's own signature: ones as constants, its integer widths), for sm_90.

Inductor recompiles every traced Triton kernel from its own copy of the source, with a
signature of its own, so a kernel that compiles when launched eagerly can fail there: session
16 found the implicit GEMM's stride-2 input gradient failing this way (``kstep_*``
parameters, which Inductor types int64), found only on the GPU, where a compiled training
step of ResNet-50 is what shows it. This finds such failures on the development machine.

It stands in for the GPU by patching PyTorch's and Triton's device queries (an H100's
properties), Inductor's pattern-matcher initialisation (which runs real CUDA kernels) and
Triton's active driver, and Inductor loads no compiled kernel onto a device (nothing runs).
All of that is PyTorch-internal and written against torch 2.11 (the GPU machine's; run it
with ``.venv-gpu``): expect to adapt it to another torch. A case passes when Inductor
compiled its graph, every Triton compile in it included. Checked against session 16's bug:
with the kernel before the fix, the four strided input-gradient cases fail, as on the GPU.
Every graph is also checked for a kernel that writes a strided or offset view
(``tritonconv.testing.check_no_view_written``). im2col + GEMM is covered in its 1x1 case (what
``auto`` traces into graphs for 16-bit channels-last 1x1 layers), not with im2col kernels.

    PYTHONPATH=src .venv-gpu/bin/python scripts/inductor_compile_check.py [-k NAME]
"""

from __future__ import annotations

import contextlib
import operator
import os
import sys
import time
import types

os.environ.update(
    TRITON_INTERPRET="0",
    TORCHINDUCTOR_COMPILE_THREADS="1",
    TORCHINDUCTOR_FX_GRAPH_CACHE="0",
    TORCHINDUCTOR_AUTOGRAD_CACHE="0",
)

import torch  # (after the environment it reads)
import triton
from triton.backends.compiler import GPUTarget

PROPERTIES = types.SimpleNamespace(
    name="NVIDIA H100 80GB HBM3",
    multi_processor_count=132,
    major=9,
    minor=0,
    total_memory=80 * 2**30,
    shared_memory_per_block_optin=227 * 1024,
    L2_cache_size=50 * 2**20,
    max_threads_per_multi_processor=2048,
    warp_size=32,
    regs_per_multiprocessor=65536,
    uuid="fake",
    gcnArchName="",
)


class _Sm90:
    """Triton's active driver, as far as compiling needs one."""

    def get_current_target(self):
        return GPUTarget("cuda", 90, 128)

    def get_current_device(self):
        return 0

    def get_current_stream(self, *args):
        return 0

    def get_device_interface(self):
        return torch.cuda


def _fake_cuda() -> None:
    triton.runtime.driver.set_active(_Sm90())
    cuda = torch.cuda
    cuda.is_available = lambda: True
    cuda.get_device_name = lambda *a: PROPERTIES.name
    cuda.get_device_properties = lambda *a: PROPERTIES
    cuda.get_device_capability = lambda *a: (9, 0)
    cuda.current_device = lambda: 0
    cuda.device_count = lambda: 1
    cuda._exchange_device = lambda index: 0
    cuda._maybe_exchange_device = lambda index: 0
    cuda.synchronize = lambda *a: None
    from torch._dynamo import utils as dynamo_utils
    from torch._functorch import aot_autograd
    from torch._inductor import config
    from torch._inductor.fx_passes import joint_graph, post_grad
    from torch._inductor.runtime import triton_helpers as helpers
    from torch._inductor.runtime import triton_heuristics as heuristics
    from torch._subclasses import fake_tensor

    fake_tensor.init_gpu_context = lambda device: None
    dynamo_utils.preserve_rng_state = contextlib.nullcontext
    aot_autograd.preserve_rng_state = contextlib.nullcontext
    config.pattern_matcher = False
    config.compile_threads = 1
    joint_graph.lazy_init = post_grad.lazy_init = lambda *a, **k: None
    helpers.set_driver_to_gpu = lambda *a, **k: None
    if hasattr(heuristics, "set_driver_to_gpu"):
        heuristics.set_driver_to_gpu = helpers.set_driver_to_gpu

    torch.Tensor.__getitem__ = _basic_getitem

    def no_launchers(self, *args, **kwargs):  # (what would load a kernel onto the device)
        self.launchers = []

    heuristics.CachingAutotuner._make_launchers = no_launchers


_getitem = torch.Tensor.__getitem__


def _basic_getitem(tensor, index):
    """Indexing by ints, slices, None and ``...`` as views (select, slice, unsqueeze): PyTorch's
    own indexing of a CUDA tensor asks the CUDA runtime for a device guard, even a fake one."""
    items = index if isinstance(index, tuple) else (index,)
    if not all(i is None or i is Ellipsis or isinstance(i, (int, slice)) for i in items):
        return _getitem(tensor, index)
    out, dim = tensor, 0
    for position, item in enumerate(items):
        if item is None:
            out, dim = out.unsqueeze(dim), dim + 1
        elif item is Ellipsis:
            rest = sum(1 for i in items[position + 1 :] if i is not None and i is not Ellipsis)
            dim = out.dim() - rest
        elif isinstance(item, int):
            out = out.select(dim, item)
        elif item == slice(None):
            dim += 1
        else:  # (as PyTorch's indexing: an open end stays open)
            step = 1 if item.step is None else item.step
            out = torch.ops.aten.slice(out, dim, item.start or 0, item.stop, step)
            dim += 1
    return out


def _cases():
    """(name, function of CUDA tensors returning a tuple of tensors, input shapes, dtype)."""
    import tritonconv as tc

    bf16, f32 = torch.bfloat16, torch.float32

    def forward(conv, **kwargs):
        return lambda x, w: (conv(x, w, **kwargs),)

    def backward(stride, pad, dilation=1, groups=1, op="implicit_gemm", depthwise=False):
        """A convolution's input and weight gradients by its backward op, called as its
        registered autograd calls it (the autograd engine itself needs a real device)."""

        def f(x, w):
            dims = x.dim() - 2
            strides, pads = (list(v) if isinstance(v, tuple) else [v] * dims for v in (stride, pad))
            out = [
                (size + 2 * p - dilation * (k - 1) - 1) // s + 1
                for size, k, s, p in zip(x.shape[2:], w.shape[2:], strides, pads, strict=True)
            ]
            dy = x.new_empty((x.shape[0], w.shape[0], *out))
            dy = dy.to(memory_format=torch.channels_last if dims == 2 else torch.channels_last_3d)
            geometry = (strides, pads, pads, [dilation] * dims, groups)
            if op == "implicit_gemm":
                grads = torch.ops.tritonconv.conv_implicit_gemm_backward(
                    dy, x, w, *geometry, [], [True, True, False]
                )
            elif op == "gemm":
                grads = torch.ops.tritonconv.conv2d_gemm_backward(
                    dy, x, w, *geometry, 1 << 30, [True, True, True]
                )
            else:
                grads = torch.ops.tritonconv.conv2d_direct_backward(
                    dy, x, w, *geometry, depthwise, [True, True, True]
                )
            return tuple(grads[:2])

        return f

    def causal(x, w):
        y = tc.causal_conv1d(x, w, activation="silu")
        return (
            y,
            *torch.ops.tritonconv.causal_conv1d_backward(y, x, w, None, 3, True, [True] * 3)[:2],
        )

    def unfold_fold(x, w):
        cols = tc.unfold(x, 3, padding=1, stride=2)
        return cols, tc.fold(cols, x.shape[2:], 3, padding=1, stride=2)

    def crop(x, w):
        y = tc.crop(x, (1, 2, 5, 5), axis=2, offset=1)
        return (y,)

    conv2d, transposed = tc.conv2d, tc.conv_transpose2d
    igemm = {"algo": "implicit_gemm"}
    return [
        ("igemm fwd 3x3 s1", forward(conv2d, padding=1, **igemm), [(8, 64, 28, 28), (64, 64, 3, 3)], bf16),
        ("igemm fwd 3x3 s2", forward(conv2d, stride=2, padding=1, **igemm), [(8, 256, 28, 28), (256, 256, 3, 3)], bf16),
        ("igemm fwd split 7x7", forward(conv2d, padding=1, **igemm), [(8, 512, 7, 7), (512, 512, 3, 3)], bf16),
        ("igemm fwd fp32", forward(conv2d, padding=1, **igemm), [(4, 64, 14, 14), (64, 64, 3, 3)], f32),
        ("stem 7x7 s2", forward(conv2d, stride=2, padding=3), [(8, 3, 224, 224), (64, 3, 7, 7)], bf16),
        ("igemm bwd 3x3 s1", backward(1, 1), [(8, 64, 28, 28), (64, 64, 3, 3)], bf16),
        ("igemm bwd 3x3 s2", backward(2, 1), [(8, 256, 28, 28), (256, 256, 3, 3)], bf16),
        ("igemm bwd 1x1 s2", backward(2, 0), [(8, 256, 28, 28), (512, 256, 1, 1)], bf16),
        ("1x1 as a GEMM fwd", forward(conv2d), [(8, 256, 28, 28), (64, 256, 1, 1)], bf16),
        ("1x1 as a GEMM bwd", backward(1, 0, op="gemm"), [(8, 256, 28, 28), (64, 256, 1, 1)], bf16),
        ("igemm bwd split 7x7", backward(1, 1), [(8, 512, 7, 7), (512, 512, 3, 3)], bf16),
        ("igemm bwd dilation 2", backward(1, 2, 2), [(2, 64, 20, 20), (64, 64, 3, 3)], bf16),
        ("igemm bwd 3d s2", backward(2, 1), [(2, 32, 8, 12, 12), (32, 32, 3, 3, 3)], bf16),
        ("transposed 3x3 s3", forward(transposed, stride=3, **igemm), [(2, 64, 9, 9), (64, 32, 3, 3)], bf16),
        ("depthwise 3x3 s2", forward(conv2d, stride=2, padding=1, groups=96), [(8, 96, 56, 56), (96, 1, 3, 3)], bf16),
        ("direct 3x3", forward(conv2d, padding=1, algo="direct"), [(2, 8, 12, 12), (8, 8, 3, 3)], f32),
        ("direct bwd 3x3 s2", backward(2, 1, op="direct"), [(2, 8, 12, 12), (8, 8, 3, 3)], f32),
        ("depthwise bwd 7x7", backward(1, 3, groups=96, op="direct", depthwise=True), [(8, 96, 28, 28), (96, 1, 7, 7)], bf16),
        ("depthwise bwd 5x5 s2", backward(2, 2, groups=672, op="direct", depthwise=True), [(32, 672, 14, 14), (672, 1, 5, 5)], bf16),
        ("depthwise bwd 3x3 s2", backward(2, 1, groups=96, op="direct", depthwise=True), [(8, 96, 28, 28), (96, 1, 3, 3)], bf16),
        ("causal conv1d", causal, [(4, 64, 128), (64, 4)], bf16),
        ("unfold fold", unfold_fold, [(2, 8, 12, 12), (1,)], f32),
        ("crop", crop, [(2, 3, 8, 8), (1,)], f32),
        ("grouped 3x3 g4", forward(conv2d, padding=1, groups=4), [(8, 64, 28, 28), (64, 16, 3, 3)], bf16),
        ("int64 direct", forward(conv2d, padding=1), [(1, 3, 16, 16), (4, 3, 3, 3)], torch.int64),
        ("conv3d fwd s2", forward(tc.conv3d, stride=2, padding=1, **igemm), [(2, 32, 8, 12, 12), (32, 32, 3, 3, 3)], bf16),
        ("unet up 2x2 s2", forward(transposed, stride=2), [(8, 128, 64, 64), (128, 64, 2, 2)], bf16),
        ("dcgan 4x4 s2 p1", forward(transposed, stride=2, padding=1), [(8, 256, 16, 16), (256, 128, 4, 4)], bf16),
        ("r2plus1d 1x3x3 s2 fwd", forward(tc.conv3d, stride=(1, 2, 2), padding=(0, 1, 1)), [(2, 64, 8, 28, 28), (144, 64, 1, 3, 3)], bf16),
        ("r2plus1d 1x3x3 s2 bwd", backward((1, 2, 2), (0, 1, 1)), [(2, 64, 8, 28, 28), (144, 64, 1, 3, 3)], bf16),
        ("r2plus1d 3x1x1 921 bwd", backward((2, 1, 1), (1, 0, 0)), [(2, 921, 4, 7, 7), (512, 921, 3, 1, 1)], bf16),
        ("r2plus1d stem 1x7x7", forward(tc.conv3d, stride=(1, 2, 2), padding=(0, 3, 3)), [(2, 3, 8, 56, 56), (45, 3, 1, 7, 7)], bf16),
    ]  # fmt: skip


def _layout(dims: int) -> torch.memory_format:
    """Channels-last where a tensor has a channels-last layout (what the models run in)."""
    return {4: torch.channels_last, 5: torch.channels_last_3d}.get(dims, torch.contiguous_format)


def _compile(fn, shapes, dtype) -> str | None:
    """None when Inductor compiled every kernel of ``fn``, else the error."""
    from torch._inductor.compile_fx import compile_fx
    from torch._subclasses.fake_tensor import FakeTensorMode

    mode = FakeTensorMode()
    with mode:
        inputs = [
            torch.empty(s, device="cuda", dtype=dtype).to(memory_format=_layout(len(s)))
            for s in shapes
        ]
    try:
        with mode:  # (how many outputs: the graph returns them one by one)
            count = len(fn(*inputs))
    except Exception as e:
        return f"(calling it on fake tensors) {type(e).__name__}: {str(e).strip()[-600:]}"
    graph = torch.fx.Graph()
    nodes = [graph.placeholder(f"x{i}") for i in range(len(inputs))]
    call = graph.call_function(fn, tuple(nodes))
    graph.output(tuple(graph.call_function(operator.getitem, (call, i)) for i in range(count)))
    module = torch.fx.GraphModule(torch.nn.Module(), graph)
    try:
        compile_fx(module, inputs)
    except Exception as e:  # the finding itself
        return f"{type(e).__name__}: {str(e).strip()[-1200:]}"
    return None


def main() -> int:
    _fake_cuda()
    from torch._inductor import config

    from tritonconv.testing import check_no_view_written  # (after the fakes: it loads torch's)

    config.post_grad_custom_pre_pass = check_no_view_written
    wanted = sys.argv[sys.argv.index("-k") + 1] if "-k" in sys.argv else ""
    failed = 0
    for name, fn, shapes, dtype in _cases():
        if wanted not in name:
            continue
        start = time.perf_counter()
        error = _compile(fn, shapes, dtype)
        failed += error is not None
        print(
            f"{'ok  ' if error is None else 'FAIL'} {name:22} {time.perf_counter() - start:5.1f} s"
        )
        if error:
            print("     " + error.replace("\n", "\n     "))
    print(f"{failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
