"""Suite ``crop``: the Crop layer's forward and backward against PyTorch slicing.

* forward: ``tritonconv.crop`` against ``x[slices].contiguous()``;
* backward: the input-gradient op autograd calls (``tritonconv::crop_backward``) against
  ``torch.zeros_like(x)`` followed by slice assignment.

GB/s counts the bytes one call of ours reads and writes: the forward reads and writes the
output's size, the backward reads the output gradient and writes the whole input gradient.
The anchor case is ``anchors-h100.md``'s crop; ``Options.quick`` shrinks every case (the CPU path).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch

from .. import functional, library
from ..geometry import check_crop
from ..ops.crop import dim_order
from ..testing import DEVICE, random_tensor
from . import Options, Row, input_sets, suite, time_ms


@dataclass(frozen=True)
class CropCase:
    name: str
    input: tuple[int, ...]
    reference: tuple[int, ...]
    axis: int
    offset: tuple[int, ...] | None  # None: centred

    def shape(self) -> str:
        offset = "centred" if self.offset is None else f"offset {self.offset}"
        return f"{tuple(self.input)} → {tuple(self.reference)} axis {self.axis} {offset}"

    def quick(self) -> CropCase:
        """Kept dimensions of at most 2, cropped ones of at most 8 plus the same margin (so the
        same offsets stay valid)."""
        kept = [min(s, 2) for s in self.input[: self.axis]]
        sizes = [min(r, 8) for r in self.reference[self.axis :]]
        margins = [i - r for i, r in zip(self.input[self.axis :], self.reference[self.axis :])]
        return CropCase(
            self.name,
            (*kept, *(s + m for s, m in zip(sizes, margins))),
            (*kept, *sizes),
            self.axis,
            self.offset,
        )


CASES = [
    # anchors-h100.md: x[:, 10:250, 3:60, 5:61].contiguous()
    CropCase("anchor_c256_64x64", (32, 256, 64, 64), (32, 240, 57, 56), 1, (10, 3, 5)),
    # FCN: a score map upsampled past the image, cropped back to it, centred
    CropCase("fcn_score_512", (16, 21, 512, 512), (16, 21, 500, 500), 2, None),
]


def _rows(case: CropCase, name: str, opts: Options) -> Iterator[Row]:
    dtype = getattr(torch, name)
    args = check_crop(
        torch.empty(case.input, device="meta"), case.reference, case.axis, case.offset
    )
    slices = tuple(slice(o, o + s) for o, s in zip(args.offsets, args.sizes))
    xs = input_sets(
        lambda: random_tensor(case.input, dtype, DEVICE),
        torch.Size(case.input).numel() * dtype.itemsize,
    )
    grads = [random_tensor(args.sizes, dtype, DEVICE) for _ in xs]
    input_size, offsets, order = list(case.input), list(args.offsets), dim_order(xs[0])
    element = dtype.itemsize
    out_bytes = torch.Size(args.sizes).numel() * element
    in_bytes = torch.Size(case.input).numel() * element
    common = dict(suite="crop", case=case.name, shape=case.shape(), dtype=name, unit="GB/s")

    def reference_backward(i):
        grad = torch.zeros_like(xs[i])
        grad[slices] = grads[i]

    ours = time_ms(
        lambda i: functional.crop(xs[i], case.reference, case.axis, case.offset), len(xs), opts
    )
    ref = time_ms(lambda i: xs[i][slices].contiguous(), len(xs), opts)
    yield Row(
        **common, op="fwd", ours_ms=ours, ref_ms=ref, ref_name="x[slices].contiguous()",
        work=2 * out_bytes,
    )  # fmt: skip
    ours = time_ms(
        lambda i: library.crop_backward(grads[i], input_size, offsets, order),
        len(xs),
        opts,
    )
    ref = time_ms(reference_backward, len(xs), opts)
    yield Row(
        **common, op="bwd", ours_ms=ours, ref_ms=ref, ref_name="zeros_like(x); g[slices] = dy",
        work=in_bytes + out_bytes,
    )  # fmt: skip


@suite("crop")
def crop_suite(opts: Options) -> Iterator[Row]:
    """Crop forward vs slicing + copy, backward vs zero fill + slice assignment."""
    for name in opts.dtypes:
        for case in CASES:
            if opts.wants(case.name):
                yield from _rows(case.quick() if opts.quick else case, name, opts)
