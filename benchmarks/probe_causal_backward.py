"""The causal conv1d's kernels on issue 12's Mamba shape (batch 8, dim 2048, seqlen 4096,
width 4, SiLU, bf16): GPU time (``timing.device_ms``), achieved bandwidth (forward: x read, y
written; backward: x and dy read, dx written, each once), and each form's largest distance
from the first form's results and from float64's.

Forms are ``ops.causal``'s switches and tiles, as specs:

- ``tile:DxL:warps`` channel-first x on the 2-D tile kernels (``FORWARD_SEGMENTS`` /
  ``BACKWARD_SEGMENTS`` off; the backward with g once a block, ``_BACKWARD_TILES``,
  ``BACKWARD_WARPS``; the forward ignores the tile and takes ``X_ONCE``), ``tile-per-tap``
  the forward's per-tap loads (``X_ONCE`` off);
- ``segments:DxS:warps:per_sm[:stages]`` channel-first x on the segment kernels
  (``SEGMENTS_TILE`` and ``BACKWARD_SEGMENTS_TILE`` ``D`` channels x ``S`` 8-position
  segments, ``SEGMENTS_WARPS``, ``SEGMENTS_PROGRAMS_PER_SM``, the backward's
  ``BACKWARD_SEGMENTS_STAGES``, default 1);
- ``cl:DxL:warps[:once]`` channel-last x on the backward's tile kernel (g once with
  ``:once``), ``rows:DxL:warps:per_sm`` on its rows kernel (``ROWS_TILE``, ...); the forward
  takes channel-last x as ``cl`` (the tile kernel); ``cl-segments[:DxS:warps]`` runs either
  direction on the segment kernels with rows channels-fastest (``FORWARD_SEGMENTS_CHANNEL_LAST``,
  ``BACKWARD_SEGMENTS_CHANNEL_LAST``, ``SEGMENTS_TILE_CHANNEL_LAST``,
  ``SEGMENTS_WARPS_CHANNEL_LAST``).

    PYTHONPATH=src python3 benchmarks/probe_causal_backward.py [--forward] [SPEC ...]
        [--json PATH]
"""

from __future__ import annotations

import argparse
import json

import torch
import torch.nn.functional as F

import tritonconv
from tritonconv import library
from tritonconv.ops import causal
from tritonconv.timing import device_ms

SHAPE = (8, 2048, 4096)
WIDTH = 4
KNOBS = ("FORWARD_SEGMENTS", "BACKWARD_SEGMENTS", "X_ONCE", "SEGMENTS_TILE",
         "BACKWARD_SEGMENTS_TILE", "SEGMENTS_WARPS",
         "SEGMENTS_PROGRAMS_PER_SM", "BACKWARD_WARPS", "G_ONCE_CHANNEL_LAST", "BACKWARD_ROWS",
         "ROWS_TILE", "ROWS_WARPS", "ROWS_PROGRAMS_PER_SM", "FORWARD_SEGMENTS_CHANNEL_LAST",
         "SEGMENTS_TILE_CHANNEL_LAST", "BACKWARD_SEGMENTS_CHANNEL_LAST",
         "SEGMENTS_WARPS_CHANNEL_LAST", "BACKWARD_SEGMENTS_STAGES")  # fmt: skip
DEFAULT_FORWARD = ["tile:16x256:4", "segments:8x32:4:16", "cl", "cl-segments"]
DEFAULT_BACKWARD = ["tile:16x256:8", "segments:4x32:4:16", "rows:256x8:2:16"]


def _channel_last(t: torch.Tensor) -> torch.Tensor:
    """A copy of ``(batch, dim, L)`` ``t`` with dim innermost, the same shape."""
    return t.transpose(1, 2).contiguous().transpose(1, 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("specs", nargs="*", help="forms (module docstring); default: a set")
    parser.add_argument("--json")
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--forward", action="store_true", help="the forward, not the backward")
    opts = parser.parse_args()
    specs = opts.specs or (DEFAULT_FORWARD if opts.forward else DEFAULT_BACKWARD)
    try:
        rows = run(specs, opts.forward, opts.reps)
    finally:
        _defaults()
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump(rows, f, indent=1)


# ``ops.causal``'s knobs as the library sets them: each spec starts from these
_DEFAULTS = {name: getattr(causal, name) for name in KNOBS}
_DEFAULT_TILES = dict(causal._BACKWARD_TILES)


def _defaults() -> None:
    for name, value in _DEFAULTS.items():
        setattr(causal, name, value)
    causal._BACKWARD_TILES.update(_DEFAULT_TILES)


def _configure(spec: str) -> str:
    """Set ``ops.causal``'s knobs for ``spec`` (the rest as the library sets them); the layout
    of x it runs on."""
    _defaults()
    kind, *fields = spec.split(":")
    causal.FORWARD_SEGMENTS = causal.BACKWARD_SEGMENTS = kind == "segments"
    causal.X_ONCE = kind != "tile-per-tap"
    causal.BACKWARD_ROWS = kind == "rows"
    causal.FORWARD_SEGMENTS_CHANNEL_LAST = kind == "cl-segments"
    causal.BACKWARD_SEGMENTS_CHANNEL_LAST = kind == "cl-segments"
    if kind == "cl-segments" and fields:
        causal.SEGMENTS_TILE_CHANNEL_LAST = tuple(int(v) for v in fields[0].split("x"))
        if len(fields) > 1:
            causal.SEGMENTS_WARPS_CHANNEL_LAST = int(fields[1])
    if kind == "segments":
        tile = tuple(int(v) for v in fields[0].split("x"))
        causal.SEGMENTS_TILE = causal.BACKWARD_SEGMENTS_TILE = tile
        causal.SEGMENTS_WARPS, causal.SEGMENTS_PROGRAMS_PER_SM = int(fields[1]), int(fields[2])
        causal.BACKWARD_SEGMENTS_STAGES = int(fields[3]) if len(fields) > 3 else 1
    elif kind == "rows":
        causal.ROWS_TILE = tuple(int(v) for v in fields[0].split("x"))
        causal.ROWS_WARPS, causal.ROWS_PROGRAMS_PER_SM = int(fields[1]), int(fields[2])
    elif kind in ("tile", "cl") and fields:
        layout = "channel_last" if kind == "cl" else "channel_first"
        causal._BACKWARD_TILES[layout] = tuple(int(v) for v in fields[0].split("x"))
        causal.BACKWARD_WARPS = int(fields[1])
        causal.G_ONCE_CHANNEL_LAST = fields[2:] == ["once"]
    tritonconv.clear_caches()
    return "channel_last" if kind in ("cl", "rows", "cl-segments") else "channel_first"


def run(specs: list[str], forward: bool, reps: int) -> list:
    torch.manual_seed(0)
    x = torch.randn(SHAPE, device="cuda", dtype=torch.bfloat16)
    w = (torch.randn(SHAPE[1], WIDTH, device="cuda") * 0.5).to(torch.bfloat16)
    b = torch.randn(SHAPE[1], device="cuda", dtype=torch.bfloat16)
    dy = torch.randn_like(x)
    inputs = {"channel_first": (dy, x), "channel_last": (_channel_last(dy), _channel_last(x))}
    # float64's results on the GPU (cuDNN's float64 convolution), to measure each form against
    xd, wd, bd, dyd = (t.double().requires_grad_() for t in (x, w, b, dy))
    want = F.silu(
        F.conv1d(xd, wd[:, None], bd, padding=WIDTH - 1, groups=SHAPE[1])[..., : SHAPE[2]]
    )
    if not forward:
        want = torch.autograd.grad(want, (xd, wd, bd), dyd)
    want = [want.detach()] if forward else list(want)
    rows, first = [], None
    for spec in specs:
        layout = _configure(spec)
        grad, data = inputs[layout]

        def call(_, args=(grad, data, w, b)):
            if forward:
                return [library.causal_conv1d(*args[1:], WIDTH - 1, True)]
            return library.causal_conv1d_backward(*args, WIDTH - 1, True, [True] * 3)

        ms = device_ms(call, reps)
        moved = (2 if forward else 3) * x.numel() * x.element_size()
        got = call(0)
        first = first or got
        apart = max((g.double() - f.double()).abs().max().item() for g, f in zip(got, first))
        error = max((g.double() - t).abs().max().item() for g, t in zip(got, want))
        row = dict(spec=spec, forward=forward, ms=ms, gb_s=moved / (ms * 1e-3) / 1e9,
                   apart=apart, error=error)  # fmt: skip
        rows.append(row)
        print(f"{'forward' if forward else 'backward'} {spec:20s} {ms:8.4f} ms "
              f"{row['gb_s']:7.0f} GB/s  from {specs[0]}: {apart:.3g}  from float64: {error:.3g}",
              flush=True)  # fmt: skip
    return rows


if __name__ == "__main__":
    main()
