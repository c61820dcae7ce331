"""Small-group 3x3 layers under ``algo="auto"``'s heuristic against the direct kernel (the
heuristic's choice for groups of 8 or fewer output channels until session 44) and cuDNN:
forward and forward + backward kernel time (``timing.device_ms``), bf16 channels-last and
fp32 (TF32 allowed, PyTorch's default) channels-last and NCHW, and the forward's error
against float64.

    PYTHONPATH=src python3 benchmarks/probe_grouped_auto.py
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

import tritonconv as tc
from tritonconv.timing import device_ms

# name: (input shape, weight shape, groups)
CASES = {
    "grp32 8ch 28² N32": ((32, 256, 28, 28), (256, 8, 3, 3), 32),
    "ResNeXt 4ch 56² N32": ((32, 128, 56, 56), (128, 4, 3, 3), 32),
}
CONVS = {
    "cuDNN": F.conv2d,
    "auto": tc.conv2d,
    "direct": lambda *a, **k: tc.conv2d(*a, algo="direct", **k),
}


def probe(name, x_shape, w_shape, groups, dtype, layout) -> None:
    x = torch.randn(x_shape, device="cuda", dtype=dtype)
    w = (torch.randn(w_shape, device="cuda") * 0.1).to(dtype)
    if layout == "channels-last":
        x, w = (t.to(memory_format=torch.channels_last) for t in (x, w))
    xg, wg = x.clone().requires_grad_(), w.clone().requires_grad_()
    kw = dict(padding=1, groups=groups)
    dy = torch.randn_like(F.conv2d(x, w, **kw))

    def forward(conv):
        return lambda _: conv(x, w, **kw)

    def training(conv):
        return lambda _: torch.autograd.grad(conv(xg, wg, **kw), (xg, wg), dy)

    t = {k: (device_ms(forward(c), 20), device_ms(training(c), 10)) for k, c in CONVS.items()}
    want = F.conv2d(x.double(), w.double(), **kw)
    err = ((tc.conv2d(x, w, **kw).double() - want).abs().max() / want.abs().max()).item()
    us = {k: (f * 1e3, b * 1e3) for k, (f, b) in t.items()}
    print(
        f"{name} {str(dtype)[6:]} {layout}: auto={tc.explain(x, w, **kw).algo} err {err:.1e}"
        " | fwd µs "
        + " ".join(f"{k} {v[0]:.1f}" for k, v in us.items())
        + " | fwd+bwd µs "
        + " ".join(f"{k} {v[1]:.1f}" for k, v in us.items())
        + f" | auto/cuDNN fwd {us['cuDNN'][0] / us['auto'][0]:.2f}x"
        f" fwd+bwd {us['cuDNN'][1] / us['auto'][1]:.2f}x",
        flush=True,
    )


def main() -> None:
    torch.backends.cudnn.allow_tf32 = True
    for name, (x_shape, w_shape, groups) in CASES.items():
        for dtype, layout in ((torch.bfloat16, "channels-last"), (torch.float32, "channels-last"),
                              (torch.float32, "NCHW")):  # fmt: skip
            probe(name, x_shape, w_shape, groups, dtype, layout)


if __name__ == "__main__":
    main()
