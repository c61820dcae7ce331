"""Probe for issue 9 (direct dX wrong on the GPU): which tiles and which elements go wrong, and
an isolated kernel showing the compiled reduction counting replicated lanes (run on a GPU:
``PYTHONPATH=src python benchmarks/probe_issue9.py``)."""

import itertools

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

import tritonconv as tc
from tritonconv.ops import direct as D

torch.backends.cudnn.allow_tf32 = False
torch.backends.cuda.matmul.allow_tf32 = False
dev = "cuda"
CASES = [
    ((5, 16, 14, 25), (4, 1, 1), (1, 1), (3, 2), (1, 3), 1),
    ((2, 16, 23, 22), (1, 1, 4), (2, 2), (0, 3), (1, 1), 1),
    ((3, 32, 6, 26), (8, 3, 1), (1, 2), (3, 0), (1, 3), 2),
    ((3, 64, 15, 23), (16, 7, 7), (3, 2), (2, 2), (1, 1), 4),
    ((1, 16, 39, 24), (1, 2, 3), (1, 2), (3, 2), (2, 1), 1),
]


def run_case(case, algo, transpose_fwd=False):
    (N, C, H, W), (K, R, S), st, pd, dl, g = case
    x = torch.randn(N, C, H, W, dtype=torch.float64)
    w = torch.randn(K, C // g, R, S, dtype=torch.float64)
    xr = x.clone().requires_grad_()
    wr = w.clone().requires_grad_()
    yr = F.conv2d(xr, wr, None, st, pd, dl, g)
    dy = torch.randn_like(yr)
    yr.backward(dy)
    xg = x.float().to(dev).requires_grad_()
    wg = w.float().to(dev).requires_grad_()
    y = tc.conv2d(xg, wg, None, st, pd, dl, g, algo=algo)
    y.backward(dy.float().to(dev))
    out = {}
    for name, a, e in (("y", y, yr), ("dx", xg.grad, xr.grad), ("dw", wg.grad, wr.grad)):
        a = a.detach().double().cpu()
        e = e.detach()
        bad = (a - e).abs() > 1e-3 + 1e-3 * e.abs()
        ratio = (a[bad] / e[bad]).round(decimals=3)
        out[name] = (int(bad.sum()), a.numel(), sorted(set(ratio.tolist()))[:6], bad)
    return out


for i, case in enumerate(CASES):
    for algo in ("direct", "im2col_gemm"):
        r = run_case(case, algo)
        summary = {k: v[:3] for k, v in r.items()}
        print(i, algo, summary)
        if algo == "direct" and r["dx"][0]:
            bad = r["dx"][3]
            idx = bad.nonzero()
            print(
                "   bad n:",
                sorted(set(idx[:, 0].tolist()))[:10],
                "c:",
                sorted(set(idx[:, 1].tolist()))[:20],
            )
            print(
                "   bad h:",
                sorted(set(idx[:, 2].tolist()))[:30],
                "w:",
                sorted(set(idx[:, 3].tolist()))[:30],
            )

# Force tile configs on case 0 to see which fail.
orig = D._conv_tiles
print("tile sweep on case 0 / 4 (transposed uses these tiles):")
for case_i in (0, 4):
    for bp, bs, bd in itertools.product((16, 32, 64, 128), (1, 2, 4), (4, 8, 16)):
        D._conv_tiles = lambda dtype, s, d, bp=bp, bs=bs, bd=bd: (False, bp, bs, bd)
        try:
            r = run_case(CASES[case_i], "direct")
            print(
                f"  case{case_i} P{bp} S{bs} D{bd}: y {r['y'][0]} dx {r['dx'][0]} ratios {r['dx'][2]}"
            )
        except Exception as e:
            print(f"  case{case_i} P{bp} S{bs} D{bd}: ERROR {type(e).__name__}: {str(e)[:100]}")
D._conv_tiles = orig


@triton.jit
def bcast_reduce(x_ptr, w_ptr, o_ptr, P: tl.constexpr, S: tl.constexpr, D_: tl.constexpr):
    p = tl.arange(0, P)
    s = tl.arange(0, S)
    d = tl.arange(0, D_)
    x = tl.load(x_ptr + p[:, None] * S + s[None, :])
    w = tl.load(w_ptr + s[:, None] * D_ + d[None, :])
    acc = tl.zeros([P, D_], dtype=tl.float32)
    acc += tl.sum(x[:, :, None] * w[None, :, :], 1)
    tl.store(o_ptr + p[:, None] * D_ + d[None, :], acc)


print("isolated broadcast-reduce kernel:")
for P, S, Dd in itertools.product((16, 32, 128), (1, 2, 4, 8), (4, 16)):
    x = torch.randn(P, S, device=dev)
    w = torch.randn(S, Dd, device=dev)
    o = torch.empty(P, Dd, device=dev)
    bcast_reduce[(1,)](x, w, o, P, S, Dd, num_warps=4)
    ref = x.double() @ w.double()
    err = (o.double() - ref).abs().max().item()
    if err > 1e-4:
        print(
            f"  P{P} S{S} D{Dd}: max err {err:.3g} ratio {(o.double() / ref).median().item():.3f}"
        )
print("done")
