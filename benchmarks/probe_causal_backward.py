"""The causal conv1d backward, g once per block (``ops.causal.G_ONCE``) against the first
version (g recomputed for every shifted set), on issue 12's Mamba shape (batch 8, dim 2048,
seqlen 4096, width 4, SiLU, bf16), both layouts: GPU time (``timing.device_ms``), achieved
bandwidth (x and dy read, dx written once), and the results of the two compared.
``--forward``: the forward, x loaded once a block (``ops.causal.X_ONCE``) against each tap's
own loads (x read, y written once; channel-first, the layout ``X_ONCE`` serves), results
compared (bf16 outputs: bitwise equal on the H200, session 44). ``--tiles 16x256:8
cl:64x16:8:once``: the backward again with these tiles (``BLOCK_D x BLOCK_L``) and warps
(``ops.causal._BACKWARD_TILES``, ``BACKWARD_WARPS``), channel-first x (g once), or
channel-last (``cl:``) with g once (``:once``, ``G_ONCE_CHANNEL_LAST``) or recomputed;
``rows:256x8:1:16``: channel-last x on the rows kernel (``BACKWARD_ROWS``) with
``ROWS_TILE`` 256 x 8, ``ROWS_WARPS`` 1, ``ROWS_PROGRAMS_PER_SM`` 16 (``cl:`` tiles run the
tile kernel). Without ``--tiles`` the channel-last rows above are the rows kernel's.

    PYTHONPATH=src python3 benchmarks/probe_causal_backward.py [--forward] [--tiles T ...]
        [--json PATH]
"""

from __future__ import annotations

import argparse
import json

import torch

import tritonconv
from tritonconv import library
from tritonconv.ops import causal
from tritonconv.timing import device_ms

SHAPE = (8, 2048, 4096)
WIDTH = 4


def _channel_last(t: torch.Tensor) -> torch.Tensor:
    """A copy of ``(batch, dim, L)`` ``t`` with dim innermost, the same shape."""
    return t.transpose(1, 2).contiguous().transpose(1, 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json")
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--forward", action="store_true", help="the forward's two forms")
    parser.add_argument("--tiles", nargs="*", default=[], help="backward tiles: DxL:warps")
    opts = parser.parse_args()
    rows = forward(opts.reps) if opts.forward else backward(opts.reps, opts.tiles)
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump(rows, f, indent=1)


def forward(reps: int) -> list:
    x = torch.randn(SHAPE, device="cuda", dtype=torch.bfloat16)
    w = (torch.randn(SHAPE[1], WIDTH, device="cuda") * 0.5).to(torch.bfloat16)
    b = torch.randn(SHAPE[1], device="cuda", dtype=torch.bfloat16)
    rows, results = [], {}
    for x_once in (False, True):
        causal.X_ONCE = x_once
        tritonconv.clear_caches()

        def call(_, args=(x, w, b)):
            return library.causal_conv1d(*args, WIDTH - 1, True)

        ms = device_ms(call, reps)
        floor = 2 * x.numel() * x.element_size()
        rows.append(dict(x_once=x_once, ms=ms, gb_s=floor / (ms * 1e-3) / 1e9))
        print(f"forward x_once={x_once!s:5s} {ms:8.4f} ms {rows[-1]['gb_s']:7.0f} GB/s", flush=True)
        results[x_once] = call(0)
    causal.X_ONCE = True
    apart = (results[True].float() - results[False].float()).abs().max().item()
    print(f"forward: results {'bitwise equal' if apart == 0 else f'{apart:.3g} apart at most'}")
    # channel-last x (dim innermost: each tap's load a vector along the channels; X_ONCE
    # does not apply)
    x_last = _channel_last(x)
    tritonconv.clear_caches()
    ms = device_ms(lambda _: library.causal_conv1d(x_last, w, b, WIDTH - 1, True), reps)
    floor = 2 * x.numel() * x.element_size()
    rows.append(dict(layout="channel_last", ms=ms, gb_s=floor / (ms * 1e-3) / 1e9))
    print(f"forward channel-last  {ms:8.4f} ms {rows[-1]['gb_s']:7.0f} GB/s", flush=True)
    return rows


def backward(reps: int, tiles: list[str]) -> list:
    rows = []
    for layout in ("channel_first", "channel_last"):
        x = torch.randn(SHAPE, device="cuda", dtype=torch.bfloat16)
        if layout == "channel_last":
            x = _channel_last(x)
        w = (torch.randn(SHAPE[1], WIDTH, device="cuda") * 0.5).to(torch.bfloat16)
        b = torch.randn(SHAPE[1], device="cuda", dtype=torch.bfloat16)
        dy = torch.randn_like(x)
        results = {}
        for g_once in (False, True):
            causal.G_ONCE = g_once
            tritonconv.clear_caches()
            for mask_name, mask in (("dx,dw,db", [True, True, True]), ("dx", [True, False, False])):

                def call(_, mask=mask, args=(dy, x, w, b)):
                    return library.causal_conv1d_backward(*args, WIDTH - 1, True, mask)

                ms = device_ms(call, reps)
                floor = 3 * x.numel() * x.element_size()
                row = dict(
                    layout=layout, g_once=g_once, grads=mask_name, ms=ms,
                    gb_s=floor / (ms * 1e-3) / 1e9,
                )  # fmt: skip
                rows.append(row)
                print(
                    f"{layout:14s} g_once={g_once!s:5s} {mask_name:9s} {ms:8.4f} ms "
                    f"{row['gb_s']:7.0f} GB/s",
                    flush=True,
                )
            results[g_once] = call(0, [True, True, True])
        for name, old, new in zip(("dx", "dw", "db"), results[False], results[True], strict=True):
            diff = (old.float() - new.float()).abs().max().item()
            scale = old.float().abs().max().item()
            print(f"{layout:14s} {name}: max |old - new| {diff:.3g} (max |old| {scale:.3g})")
    causal.G_ONCE = True
    rows += backward_tiles(reps, tiles)
    return rows


def backward_tiles(reps: int, tiles: list[str]) -> list:
    """The backward (dx, dW, db) with each ``[cl:]DxL:warps[:once]`` tile: channel-first x
    (g once), or with ``cl:`` channel-last x, g once with ``:once`` (else recomputed); or
    ``rows:DxL:warps:programs_per_sm``: channel-last x on the rows kernel."""
    rows, results = [], {}
    x = torch.randn(SHAPE, device="cuda", dtype=torch.bfloat16)
    w = (torch.randn(SHAPE[1], WIDTH, device="cuda") * 0.5).to(torch.bfloat16)
    b = torch.randn(SHAPE[1], device="cuda", dtype=torch.bfloat16)
    dy = torch.randn_like(x)
    # dy laid out as x (session 44's run paired channel-last x with a channel-first dy)
    inputs = {"channel_first": (dy, x), "channel_last": (_channel_last(dy), _channel_last(x))}
    default = (
        dict(causal._BACKWARD_TILES), causal.BACKWARD_WARPS, causal.G_ONCE_CHANNEL_LAST,
        causal.BACKWARD_ROWS, causal.ROWS_TILE, causal.ROWS_WARPS, causal.ROWS_PROGRAMS_PER_SM,
    )  # fmt: skip
    for spec in tiles:
        fields = spec.split(":")
        layout = "channel_last" if fields[0] in ("cl", "rows") else "channel_first"
        causal.BACKWARD_ROWS = fields[0] == "rows"
        if causal.BACKWARD_ROWS:
            causal.ROWS_TILE = tuple(int(v) for v in fields[1].split("x"))
            causal.ROWS_WARPS, causal.ROWS_PROGRAMS_PER_SM = int(fields[2]), int(fields[3])
        else:
            fields = fields[1:] if fields[0] == "cl" else fields
            causal._BACKWARD_TILES[layout] = tuple(int(v) for v in fields[0].split("x"))
            causal.BACKWARD_WARPS = int(fields[1])
            causal.G_ONCE_CHANNEL_LAST = fields[2:] == ["once"]
        tritonconv.clear_caches()

        def call(_, args=(*inputs[layout], w, b)):
            return library.causal_conv1d_backward(*args, WIDTH - 1, True, [True] * 3)

        ms = device_ms(call, reps)
        gb_s = 3 * x.numel() * x.element_size() / (ms * 1e-3) / 1e9
        rows.append(dict(layout=layout, tile=spec, ms=ms, gb_s=gb_s))
        results[spec] = call(0)
        apart = max((r.float() - f.float()).abs().max().item()
                    for r, f in zip(results[spec], results[tiles[0]], strict=True))  # fmt: skip
        print(f"{layout:14s} tile {spec:14s} {ms:8.4f} ms {gb_s:7.0f} GB/s "
              f"(dx, dW, db {apart:.3g} from {tiles[0]}'s at most)", flush=True)  # fmt: skip
    (tiles_before, causal.BACKWARD_WARPS, causal.G_ONCE_CHANNEL_LAST, causal.BACKWARD_ROWS,
     causal.ROWS_TILE, causal.ROWS_WARPS, causal.ROWS_PROGRAMS_PER_SM) = default  # fmt: skip
    causal._BACKWARD_TILES.update(tiles_before)
    return rows


if __name__ == "__main__":
    main()
