"""Sweep the implicit GEMM's backward kernels over the dense layers (a GPU diagnostic, issue 11).

For every case of the ``dense`` bench suite (or the ones named), bf16 channels-last, kernel time
by CUDA-graph replay (``bench.kernel_ms``):

* cuDNN's input gradient and weight gradient alone (``aten.convolution_backward`` asked for one);
* our input gradient with the heuristic's tiles and each candidate tile;
* our weight gradient with each candidate tile x split policy (programs per SM the split count
  aims for) x width taps a program owns, and, for the heuristic's, the ``sum_partials`` pass
  alone, so one run says whether tiles, splits or the reduction of partials hold it back.

Prints the best of each next to cuDNN and writes every timing to ``--json``.

    PYTHONPATH=src python benchmarks/sweep_backward.py [--json FILE] [case ...]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math

import torch

from tritonconv.bench import Options, kernel_ms, overridden
from tritonconv.bench.dense import CASES
from tritonconv.geometry import make_geometry
from tritonconv.ops import common
from tritonconv.ops import implicit_gemm as ig

C = ig.Config
DGRAD_CONFIGS = [
    C(128, 128, 64, 8, 3), C(128, 64, 64, 4, 4), C(64, 128, 64, 4, 4), C(256, 128, 64, 8, 3),
    C(64, 64, 64, 4, 4), C(128, 128, 32, 8, 4), C(64, 64, 128, 4, 3), C(128, 64, 32, 4, 5),
]  # fmt: skip
WGRAD_CONFIGS = [
    C(64, 64, 128, 4, 3), C(64, 64, 64, 4, 4), C(128, 128, 64, 8, 3), C(128, 64, 64, 4, 4),
    C(64, 128, 64, 4, 4), C(128, 128, 32, 8, 4), C(128, 256, 64, 8, 3), C(128, 128, 128, 8, 2),
]  # fmt: skip
PROGRAMS_PER_SM = (1, 2, 4, 8)


def wgrad_policy(programs_per_sm: int, tap_groups: bool):
    values = dict(WGRAD_PROGRAMS_PER_SM=programs_per_sm)
    if tap_groups:
        values.update(WGRAD_TAP_GROUP_BELOW=1 << 30)
    return overridden(ig, **values)


@contextlib.contextmanager
def _old_sum_partials_tiles():
    """``sum_partials`` with session 8's tiles: about 128 programs, 4 warps, tiles of up to
    4096 values."""
    saved = common.sum_partials_tiles

    def before(numel, splits, programs):
        block = min(1024, max(32, common.next_power_of_2(common.cdiv(numel, 128))))
        return block, min(max(1, 4096 // block), common.next_power_of_2(splits)), 4

    common.sum_partials_tiles = before
    try:
        yield
    finally:
        common.sum_partials_tiles = saved


def _fits(config: ig.Config, m_channels: int, n_channels: int) -> bool:
    """Skip tiles far wider than the problem (pure masking)."""
    return config.block_m <= max(16, 2 * m_channels) and config.block_n <= max(16, 2 * n_channels)


def _timed(fn, opts):
    try:
        return kernel_ms(fn, 1, opts)
    except Exception as exc:  # out of shared memory and the like
        print("    skip:", type(exc).__name__, str(exc)[:100])
        return None


def measure(case, opts) -> dict:
    cl = torch.channels_last
    x = torch.randn(case.input, device="cuda", dtype=torch.bfloat16).to(memory_format=cl)
    w = (torch.randn(case.weight, device="cuda") * 0.05).to(torch.bfloat16)
    w = w.to(memory_format=cl)
    s, p, d, g = (case.stride,) * 2, (case.padding,) * 2, (case.dilation,) * 2, case.groups
    geometry = make_geometry(case.input[2:], case.weight[2:], s, p, p, d)
    dy = torch.randn((case.input[0], case.weight[0], *geometry.output), device="cuda")
    dy = dy.to(x.dtype).to(memory_format=cl)
    cin, cout = case.input[1] // g, case.weight[0] // g

    def cudnn(mask):
        return lambda i: torch.ops.aten.convolution_backward(
            dy, x, w, None, s, p, d, False, [0, 0], g, mask
        )

    row = dict(case=case.name, dgrad={}, wgrad={})
    row["cudnn_dgrad"] = kernel_ms(cudnn([True, False, False]), 1, opts)
    row["cudnn_wgrad"] = kernel_ms(cudnn([False, True, False]), 1, opts)
    reference = torch.ops.aten.convolution_backward(
        dy.double(), x.double(), w.double(), None, s, p, d, False, [0, 0], g, [True, True, False]
    )
    row["dgrad"]["heuristic"] = kernel_ms(
        lambda i: ig.conv_grad_input(dy, w, x, geometry, g), 1, opts
    )
    for config in DGRAD_CONFIGS:
        if _fits(config, case.input[0] * 4096, cin):
            row["dgrad"][str(config)] = _timed(
                lambda i, c=config: ig.conv_grad_input(dy, w, x, geometry, g, None, None, c), opts
            )
    rows = case.input[0] * geometry.output_numel
    heuristic = ig.wgrad_config(x.dtype, cout, cin, rows, case.weight[-1])
    row["wgrad_heuristic_config"] = str(heuristic)
    row["wgrad"]["heuristic"] = kernel_ms(
        lambda i: ig.conv_grad_weight(dy, x, w.shape, geometry, g), 1, opts
    )
    # the heuristic's reduction of partials alone
    tiles = math.ceil(cout / heuristic.block_m) * math.ceil(cin / heuristic.block_n) * g
    splits = ig._splits(
        rows, tiles * geometry.kernel_numel, math.prod(w.shape), heuristic.block_k, x.device
    )
    partial = torch.randn((splits, *w.shape), device="cuda")
    out = torch.empty(w.shape, device="cuda", dtype=x.dtype)
    row["wgrad_splits"] = splits
    row["sum_partials"] = kernel_ms(lambda i: common.sum_partials(partial, out), 1, opts)
    with _old_sum_partials_tiles():
        row["sum_partials_before"] = kernel_ms(lambda i: common.sum_partials(partial, out), 1, opts)
    # the weight copy the input gradient made before session 9 (reduction channels innermost)
    row["dgrad_weight_copy"] = kernel_ms(lambda i: ig._innermost(w, 0), 1, opts)
    worst = 0.0
    for config in WGRAD_CONFIGS:
        if not _fits(config, cout, cin):
            continue
        for pps in PROGRAMS_PER_SM:
            for taps in (False, True) if case.weight[-1] > 1 else (False,):
                with wgrad_policy(pps, taps):
                    key = f"{config} pps{pps}" + (" taps" if taps else "")
                    fn = lambda i, c=config: ig.conv_grad_weight(dy, x, w.shape, geometry, g, c)  # noqa: E731
                    row["wgrad"][key] = _timed(fn, opts)
                    if row["wgrad"][key] is not None:
                        got = fn(0).double()
                        err = (got - reference[1]).abs().max() / reference[1].abs().max()
                        worst = max(worst, err.item())
    row["wgrad_worst_rel_err"] = worst
    return row


def _best(timings: dict) -> tuple[str, float]:
    done = {k: v for k, v in timings.items() if v is not None}
    key = min(done, key=done.get)
    return key, done[key]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cases", nargs="*")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    opts = Options(reps=20)
    torch.backends.cudnn.benchmark = True
    rows = []
    for case in CASES:
        if args.cases and case.name not in args.cases:
            continue
        row = measure(case, opts)
        rows.append(row)
        dk, dms = _best(row["dgrad"])
        wk, wms = _best(row["wgrad"])
        dh, wh = row["dgrad"]["heuristic"], row["wgrad"]["heuristic"]
        cd, cw = row["cudnn_dgrad"], row["cudnn_wgrad"]
        print(
            f"{case.name:14} dgrad cuDNN {cd:.4f} heur {dh:.4f} ({cd / dh:4.2f}x) best {dms:.4f}"
            f" ({cd / dms:4.2f}x) {dk}\n{'':14} wgrad cuDNN {cw:.4f} heur {wh:.4f}"
            f" ({cw / wh:4.2f}x; {row['wgrad_heuristic_config']}, {row['wgrad_splits']} splits,"
            f" sum {row['sum_partials']:.4f}, before {row['sum_partials_before']:.4f};"
            f" dgrad's former weight copy {row['dgrad_weight_copy']:.4f}) best {wms:.4f} ({cw / wms:4.2f}x) {wk}"
            f"  err {row['wgrad_worst_rel_err']:.1e}",
            flush=True,
        )
        if args.json:  # after every case: a run cut short keeps what it measured
            with open(args.json, "w") as f:
                json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
