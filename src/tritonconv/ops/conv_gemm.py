"""Convolution by im2col + GEMM: forward, input gradient and weight gradient (2-D).

For one chunk of output positions (a run of ``pos = n*OH*OW + oh*OW + ow``)::

    cols   = im2col(x)                      (G, K, P)   K = C_in/G * KH * KW
    y      = W @ cols                       (G, M, P)   M = C_out/G   one bmm over groups
    out    = relayout(y) + bias             (N, C_out, OH, OW), any memory format, one pass

    dy_mat = relayout(grad_out)             (G, M, P)
    dW    += dy_mat @ cols^T                (G, M, K)   fixed chunk order: deterministic
    dx     = col2im(W^T @ dy_mat)           gather, no atomics

The GEMMs are ``torch.matmul`` (cuBLAS on the GPU, batched over groups in one call). The column
buffer is bounded by a *workspace limit*: positions are processed in chunks of whole samples
when a sample fits, else in chunks of one sample's rows (col2im then accumulates). A 1x1,
stride-1, unpadded convolution skips im2col: the input already is the column matrix.

Inputs arrive validated; integer dtypes are not served here (cuBLAS has no integer GEMM).
Every allocation goes through :func:`~tritonconv.launch.allocate` and every PyTorch operation
(the GEMMs, a bias add, a copy) through :func:`~tritonconv.launch.call`, so the ops replay from
launch plans like the Triton-only ones: a repeated call runs none of this module's Python.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..geometry import Geometry, check_workspace_limit
from ..launch import allocate, call
from .common import empty_like_format, is_channels_last
from .im2col import (
    col2im,
    gemm_layout,
    im2col,
    matrix_address,
    relayout,
    tensor_address,
)

DEFAULT_WORKSPACE_LIMIT = 1 << 30  # bytes: 1 GiB
_workspace_limit = DEFAULT_WORKSPACE_LIMIT


def set_workspace_limit(limit_bytes: int) -> None:
    """Set the process-wide cap on the column buffer of im2col+GEMM convolution, in bytes."""
    global _workspace_limit
    _workspace_limit = check_workspace_limit(limit_bytes)


def get_workspace_limit() -> int:
    """The process-wide cap on the column buffer, in bytes (default 1 GiB)."""
    return _workspace_limit


@dataclass(frozen=True)
class WorkspacePlan:
    """How a convolution's output positions are split so its column buffer stays bounded.

    ``bytes`` is the column buffer's size (0 when im2col is skipped); ``chunk_positions`` output
    positions are processed per GEMM, ``chunks`` times.
    """

    bytes: int
    chunk_positions: int
    chunks: int
    whole_samples: bool
    skips_im2col: bool


def is_pointwise(geometry: Geometry) -> bool:
    """1x1 kernel, stride 1, no padding: the input is its own column matrix."""
    return (
        all(k == 1 for k in geometry.kernel)
        and all(s == 1 for s in geometry.stride)
        and not any(geometry.pad_before)
        and not any(geometry.pad_after)
    )


def plan_workspace(
    batch: int, in_channels: int, geometry: Geometry, itemsize: int, limit: int
) -> WorkspacePlan:
    """Chunking of ``batch * OH * OW`` positions under ``limit`` bytes of columns."""
    L = geometry.output_numel
    total = batch * L
    if is_pointwise(geometry):
        return WorkspacePlan(0, total, 1 if total else 0, True, True)
    bytes_per_position = in_channels * geometry.kernel_numel * itemsize
    fit = max(1, limit // max(1, bytes_per_position))
    if fit >= L:
        chunk = min(total, (fit // L) * L)
        chunks = math.ceil(total / chunk) if total else 0
        whole = True
    else:  # chunks of one sample's positions; none straddles two samples
        chunk = fit
        chunks = batch * math.ceil(L / chunk)
        whole = False
    return WorkspacePlan(chunk * bytes_per_position if total else 0, chunk, chunks, whole, False)


def _chunks(plan: WorkspacePlan, L: int, total: int):
    """(start, count) of each chunk; sub-sample chunks never straddle two samples."""
    start = 0
    while start < total:
        end = min(start + plan.chunk_positions, total)
        if not plan.whole_samples:
            end = min(end, (start // L + 1) * L)
        yield start, end - start
        start = end


def conv2d_forward(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    geometry: Geometry,
    groups: int,
    workspace_limit: int,
) -> torch.Tensor:
    """y = conv2d(x, weight, bias) for a batched (N, C, H, W) input."""
    N, C = x.shape[:2]
    C_out = weight.shape[0]
    G, M = groups, C_out // groups
    L = geometry.output_numel
    out = empty_like_format((N, C_out, *geometry.output), x)
    if G == 1 and N * L * C_out and is_pointwise(geometry) and is_channels_last(x):
        # channels-last 1x1: one GEMM over (N*H*W, C) rows writes the channels-last output
        # in place (the op returns a tensor of its own, not a view: autograd forbids in-place
        # changes to a view a custom Function returns, e.g. an in-place SiLU after the conv)
        rows = x.permute(0, 2, 3, 1).view(-1, C)  # (channels-last: dense (N, H, W, C))
        out_rows = out.permute(0, 2, 3, 1).view(-1, C_out)
        w = weight.view(C_out, C).t()
        if bias is None:
            call(torch.mm, rows, w, out=out_rows)
        else:
            call(torch.addmm, bias, rows, w, out=out_rows)
        return out
    if out.numel() == 0:
        return out
    w = call(torch.reshape, weight, (G, M, -1))
    plan = plan_workspace(N, C, geometry, x.element_size(), workspace_limit)

    if plan.skips_im2col:
        return _pointwise_forward(x, w, bias, out, G)

    K = w.shape[2]
    col = allocate((G * K * plan.chunk_positions,), x.dtype, x.device)
    gemm_out = None
    for start, count in _chunks(plan, L, N * L):
        cols = col[: G * K * count].view(G, K, count)
        im2col(x, cols, gemm_layout(K, start, count, L), geometry, K, start, count)
        n = start // L
        if count == L and bias is None and out.is_contiguous():
            # One whole sample in NCHW: the GEMM writes the output in place, no relayout.
            call(torch.matmul, w, cols, out=out[n].view(G, M, L))
            continue
        if gemm_out is None:
            gemm_out = allocate((G * M * plan.chunk_positions,), x.dtype, x.device)
        y = call(torch.matmul, w, cols, out=gemm_out[: G * M * count].view(G, M, count))
        relayout(
            y,
            matrix_address(count, start, geometry),
            out,
            tensor_address(out),
            C_out,
            geometry,
            start,
            count,
            bias,
        )
    return out


def _pointwise_forward(x, w, bias, out, G):
    """1x1 / stride 1 / no padding: one GEMM on the input as it lies in memory."""
    N, C = x.shape[:2]
    C_out = out.shape[1]
    if out.is_contiguous():  # NCHW: out[n] = W @ x[n], batched over samples and groups
        xs = call(torch.Tensor.contiguous, x).view(N, G, C // G, -1)
        call(torch.matmul, w.unsqueeze(0), xs, out=out.view(N, G, C_out // G, -1))
        if bias is not None:
            call(torch.Tensor.add_, out, bias.view(1, -1, 1, 1))
        return out
    # channels-last, grouped (groups == 1 never gets here): one GEMM batched over groups
    rows = call(torch.reshape, x.permute(0, 2, 3, 1), (-1, C))
    out_rows = out.permute(0, 2, 3, 1).view(-1, C_out)
    per_group = call(torch.matmul, rows.view(-1, G, C // G).transpose(0, 1), w.transpose(1, 2))
    call(torch.Tensor.copy_, out_rows.view(-1, G, C_out // G), per_group.transpose(0, 1))
    if bias is not None:
        call(torch.Tensor.add_, out_rows, bias)
    return out


def _grad_buffer(grad_out, plan: WorkspacePlan, L: int, channels: int):
    """Room for the output gradient as matrices, unless every chunk can view it in place."""
    if plan.whole_samples and plan.chunk_positions == L and grad_out.is_contiguous():
        return None
    return allocate((channels * plan.chunk_positions,), grad_out.dtype, grad_out.device)


def _grad_matrix(grad_out, start, count, geometry, G, M, buffer):
    """The output gradient of one chunk as a (G, M, count) matrix (a view when possible)."""
    L = geometry.output_numel
    if count == L and grad_out.is_contiguous():
        return grad_out[start // L].view(G, M, L)
    mat = buffer[: G * M * count].view(G, M, count)
    relayout(
        grad_out,
        tensor_address(grad_out),
        mat,
        matrix_address(count, start, geometry),
        G * M,
        geometry,
        start,
        count,
    )
    return mat


def conv2d_backward(
    grad_out: torch.Tensor,
    x: torch.Tensor,
    weight: torch.Tensor,
    geometry: Geometry,
    groups: int,
    workspace_limit: int,
    need_input: bool,
    need_weight: bool,
    input_shape=None,
):
    """(dx, dW), either None when not needed. Per chunk the output gradient is relaid once and
    shared: ``dW += dy @ cols^T`` (cols = im2col(x)), then ``dx = col2im(W^T @ dy)`` reusing the
    column buffer. Chunks run in a fixed order, so both are bitwise reproducible.
    ``input_shape``: dx's shape when ``x`` only gives dtype and layout (a transposed
    convolution's output; dW is then not asked for)."""
    input_shape = tuple(x.shape) if input_shape is None else tuple(input_shape)
    N, C = input_shape[:2]
    C_out = weight.shape[0]
    G, M = groups, C_out // groups
    L = geometry.output_numel
    K = C // G * geometry.kernel_numel
    empty = N * L == 0
    grad_in = empty_like_format(input_shape, x, zero=empty) if need_input else None
    # dW in the weight's shape (dense): what is returned is an allocation, not a view of one
    grad_weight = allocate(weight.shape, x.dtype, x.device, zero=empty) if need_weight else None
    if empty:
        return grad_in, grad_weight
    grad_w = grad_weight.view(G, M, K) if need_weight else None
    w = call(torch.reshape, weight, (G, M, K))
    plan = plan_workspace(N, C, geometry, x.element_size(), workspace_limit)
    if plan.skips_im2col:
        if need_input:
            _pointwise_grad_input(grad_out, w, grad_in, G)
        if need_weight:
            _pointwise_grad_weight(grad_out, x, grad_w, G)
        return grad_in, grad_weight

    col = allocate((G * K * plan.chunk_positions,), x.dtype, x.device)
    buffer = _grad_buffer(grad_out, plan, L, G * M)
    for index, (start, count) in enumerate(_chunks(plan, L, N * L)):
        cols = col[: G * K * count].view(G, K, count)
        layout = gemm_layout(K, start, count, L)
        dy = _grad_matrix(grad_out, start, count, geometry, G, M, buffer)
        if need_weight:
            im2col(x, cols, layout, geometry, K, start, count)
            if index == 0:
                call(torch.matmul, dy, cols.transpose(1, 2), out=grad_w)
            else:
                call(torch.Tensor.baddbmm_, grad_w, dy, cols.transpose(1, 2))
        if need_input:
            call(torch.matmul, w.transpose(1, 2), dy, out=cols)
            first_of_sample = start % L == 0
            col2im(cols, layout, grad_in, geometry, K, start, count, not first_of_sample)
    return grad_in, grad_weight


def _pointwise_grad_input(grad_out, w, grad_in, G):
    """dx = W^T @ dy for a 1x1 / stride-1 / unpadded convolution, in grad_in's layout."""
    N, C = grad_in.shape[:2]
    M = w.shape[1]
    w_t = w.transpose(1, 2)  # (G, C/G, M)
    if grad_in.is_contiguous():
        dy = call(torch.Tensor.contiguous, grad_out).view(N, G, M, -1)
        call(torch.matmul, w_t.unsqueeze(0), dy, out=grad_in.view(N, G, C // G, -1))
    else:
        dy = call(torch.reshape, grad_out.permute(0, 2, 3, 1), (-1, G, M)).transpose(0, 1)
        rows = grad_in.permute(0, 2, 3, 1).view(-1, G, C // G)
        if G == 1 and rows.is_contiguous():  # channels-last: the GEMM writes dx in place
            call(torch.mm, dy[0], w[0], out=rows.view(-1, C))
        else:  # (G, N*H*W, C/G) first
            call(torch.Tensor.copy_, rows, call(torch.matmul, dy, w).transpose(0, 1))


def _pointwise_grad_weight(grad_out, x, grad_w, G):
    """dW = sum over samples and pixels of dy x^T for a pointwise convolution."""
    N = x.shape[0]
    M, K = grad_w.shape[1:]
    if x.is_contiguous() and grad_out.is_contiguous():
        xs = x.view(N, G, K, -1).transpose(-1, -2)
        products = call(torch.matmul, grad_out.view(N, G, M, -1), xs)
        call(torch.sum, products, dim=0, out=grad_w)
    else:
        dy = call(torch.reshape, grad_out.permute(0, 2, 3, 1), (-1, G, M)).permute(1, 2, 0)
        xs = call(torch.reshape, x.permute(0, 2, 3, 1), (-1, G, K)).transpose(0, 1)
        if G == 1:  # one 2-D GEMM (a batched one of one asks the driver even on fake tensors)
            call(torch.mm, dy[0], xs[0], out=grad_w.view(M, K))
        else:
            call(torch.matmul, dy, xs, out=grad_w)
