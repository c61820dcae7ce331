"""Probe (issue 11, branch ``wgrad-tf32-channels-first``): does TMA load a box whose
innermost coordinate is not 16-byte aligned?

The channels-first TF32 weight gradient (``WGRAD_TMA_TF32``) reads row boxes of contiguous
fp32 images starting at each tap's width shift: innermost coordinates such as -1, 1, 3. Triton's
interpreter refuses them (it asserts 16-byte aligned innermost offsets); the hardware's
rules (CUDA's tensor-map requirements) name the global address, the strides and the box's
inner extent, not the coordinates. This loads boxes of a ``[rows, 64]`` fp32 tensor at inner
coordinates -3 .. 5 with a device-side descriptor, compares each with the same slice taken by
PyTorch (zeros outside), and prints one line a coordinate. Run it first on a GPU before
measuring the knob: a mismatch means the knob's kernel cannot be used as built.

    PYTHONPATH=src python benchmarks/probe_tma_unaligned.py

Session 42 (H200, Triton 3.6): the first box, at inner coordinate -3 (before this version
put the aligned ones first), ended in "an illegal instruction was encountered".
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _load_box(src, dst, rows, cols, r0, c0, BR: tl.constexpr, BC: tl.constexpr):
    desc = tl.make_tensor_descriptor(src, [rows, cols], [cols, 1], [BR, BC])
    box = desc.load([r0, c0])
    r = tl.arange(0, BR)[:, None]
    c = tl.arange(0, BC)[None, :]
    tl.store(dst + r * BC + c, box)


def main() -> None:
    if not torch.cuda.is_available():
        raise SystemExit("needs a GPU with TMA (Hopper)")

    def alloc(size: int, alignment: int, stream):
        return torch.empty(size, device="cuda", dtype=torch.int8)

    triton.set_allocator(alloc)
    rows, cols, br, bc = 8, 64, 4, 32
    src = torch.arange(rows * cols, device="cuda", dtype=torch.float32).reshape(rows, cols)
    padded = torch.zeros(rows + 2 * br, cols + 2 * bc, device="cuda")
    padded[br : br + rows, bc : bc + cols] = src
    bad = 0
    # aligned coordinates first: a crash on an unaligned one (it ends the CUDA context) then
    # still shows that the aligned boxes work
    for c0 in (0, 4, -4, *range(-3, 0), *range(1, 4), 5):
        for r0 in (0, 3):
            dst = torch.full((br, bc), float("nan"), device="cuda")
            _load_box[(1,)](src, dst, rows, cols, r0, c0, BR=br, BC=bc)
            want = padded[br + r0 : 2 * br + r0, bc + c0 : 2 * bc + c0]
            ok = torch.equal(dst, want)
            bad += not ok
            print(f"inner coordinate {c0:+d}, row {r0}: {'ok' if ok else 'MISMATCH'}", flush=True)
    print(
        "TMA boxes, aligned and not:",
        "all equal to PyTorch's slices" if not bad else f"{bad} wrong",
    )


if __name__ == "__main__":
    main()
