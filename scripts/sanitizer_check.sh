#!/usr/bin/env bash
# Memory safety under NVIDIA's compute-sanitizer, on a machine with a CUDA GPU:
#
#   huge       memcheck: every kernel family on real tensors of more than 2**31 elements
#              (int64 indexing: crop, unfold/fold, direct, depthwise, im2col+GEMM and the
#              implicit GEMM, forward and gradients), each result checked
#   racecheck  racecheck: small convolutions through every kernel that uses shared memory
#              (tl.dot: implicit GEMM, direct, depthwise band; tl.sum across warps: weight
#              gradients, split-K partial sums; layout conversions), fp32, bf16, int8, 2-D/3-D,
#              transposed, causal conv1d, unfold/fold, each result checked on the CPU in float64
#   fuzz       memcheck: `tritonconv verify --fuzz --draws $FUZZ_DRAWS --workers 1`
#   pytest     memcheck (or PYTEST_TOOL): a subset of the test suite that reaches every kernel
#              family, the forced-int64-indexing tests first (the suite's stand-ins for > 2**31
#              elements)
#
# then a summary, last: "memcheck: N errors" and "racecheck: N hazards". 0 is the only
# acceptable result: the script exits 1 on any error or hazard, 2 when a stage did not finish
# (timeout, a failing test, no sanitizer summary: then nothing is proven for it), 3 when
# compute-sanitizer is missing or refuses the device.
#
#   scripts/sanitizer_check.sh                      # every stage, ~8 minutes in all
#   SANITIZER_BUDGET=570 scripts/sanitizer_check.sh # the whole budget, in seconds (default 480)
#   STAGES="huge racecheck" scripts/sanitizer_check.sh
#   STAGES=pytest SANITIZER_BUDGET=570 scripts/sanitizer_check.sh   # the tests alone
#   FUZZ_DRAWS=100 FUZZ_SEED=3 STAGES=fuzz scripts/sanitizer_check.sh
#   PYTEST_K="implicit_gemm" STAGES=pytest scripts/sanitizer_check.sh   # another selection
#   PYTEST_TOOL=racecheck STAGES=pytest PYTEST_K=... scripts/sanitizer_check.sh  # tests, racecheck
#   PYTEST_SHARD=2/2 STAGES=pytest scripts/sanitizer_check.sh  # the subset's second half only
#   SANITIZER_API_ERRORS=no ...   # do not count failed CUDA API calls (default: counted)
#   WARM=0 ...                    # no warm-up of Triton's cache outside the sanitizer first
#   WARM_WORKERS=8 ...            # xdist workers of the test subset's warm-up (default 8)
#
# Each stage runs under `timeout` within its share of the time left (weights: huge 15,
# racecheck 25, fuzz 15, pytest 45, over the stages still to run). PyTorch's caching allocator
# hides out-of-bounds accesses inside its blocks, so it is off (PYTORCH_NO_CUDA_MEMORY_CACHING=1);
# the sanitizer follows child processes (--target-processes all: Triton's compiler, pytest's
# xdist workers). Runs from source (PYTHONPATH=src). Logs go to $OUT (the device tool's folder)
# or sanitizer-out/; the workload script is written there too.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 COLUMNS=160
export PYTORCH_NO_CUDA_MEMORY_CACHING=1
OUT_DIR=${OUT:-sanitizer-out}
mkdir -p "$OUT_DIR"
BUDGET=${SANITIZER_BUDGET:-480}
STAGES=${STAGES:-"huge racecheck fuzz pytest"}
for s in $STAGES; do
    case $s in huge | racecheck | fuzz | pytest) ;; *) echo "unknown stage $s (huge, racecheck, fuzz, pytest)"; exit 2 ;; esac
done
PYTEST_SHARD=${PYTEST_SHARD:-}
if [ -n "$PYTEST_SHARD" ]; then
    shard_i=${PYTEST_SHARD%/*} shard_n=${PYTEST_SHARD#*/}
    if ! [[ "$PYTEST_SHARD" =~ ^[0-9]+/[0-9]+$ ]] || [ "$shard_i" -lt 1 ] || [ "$shard_i" -gt "$shard_n" ]; then
        echo "PYTEST_SHARD=$PYTEST_SHARD: expected i/n with 1 <= i <= n"; exit 2
    fi
fi
FUZZ_DRAWS=${FUZZ_DRAWS:-30}
FUZZ_SEED=${FUZZ_SEED:-0}
START=$(date +%s)

sanitizer=${COMPUTE_SANITIZER:-$(command -v compute-sanitizer || true)}
if [ -z "$sanitizer" ]; then
    for candidate in /usr/local/cuda/bin/compute-sanitizer /usr/local/cuda-*/bin/compute-sanitizer \
        /opt/nvidia/compute-sanitizer/compute-sanitizer /usr/local/cuda/compute-sanitizer/compute-sanitizer; do
        [ -x "$candidate" ] && sanitizer=$candidate
    done
fi
if [ -z "$sanitizer" ]; then
    echo "compute-sanitizer not found (PATH, /usr/local/cuda*/bin; or set COMPUTE_SANITIZER)"
    echo "memcheck: not run"; echo "racecheck: not run"
    exit 3
fi

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
"$sanitizer" --version | tail -n 1
echo "budget ${BUDGET} s, stages: $STAGES, logs in $OUT_DIR"

# --------------------------------------------------------------------------------------------
# the workloads of the huge and racecheck stages
# --------------------------------------------------------------------------------------------
WORKLOAD=$OUT_DIR/sanitizer_workload.py
cat > "$WORKLOAD" <<'PY'
"""Workloads for scripts/sanitizer_check.sh: `huge` (> 2**31 elements, memcheck) and `shared`
(small, every kernel that uses shared memory, racecheck). Each case checks its result and prints
one line; the last line is "workload <mode>: N cases, F failed, S skipped"."""

import sys
import time

import torch
import torch.nn.functional as F

import tritonconv as tc

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
DEV = "cuda"
LIMIT = 2**31
results = {"ok": 0, "failed": 0, "skipped": 0}


def case(name, fn):
    t0 = time.perf_counter()
    try:
        fn()
    except _Skip as why:
        results["skipped"] += 1
        print(f"SKIP {name}: {why}", flush=True)
        return
    except Exception as exc:  # report, go on with the others
        results["failed"] += 1
        print(f"FAIL {name}: {type(exc).__name__}: {exc}", flush=True)
        describe_last_launch()
        return
    results["ok"] += 1
    print(f"ok   {name} ({time.perf_counter() - t0:.1f} s)", flush=True)


class _Skip(Exception):
    pass


LAST_LAUNCH = {}


def log_launches():
    """Remember the name of each kernel Triton launches (its launch hook; tritonconv's lean
    launches step aside while a hook is installed), for :func:`describe_last_launch`."""
    from triton import knobs

    def enter(metadata):
        LAST_LAUNCH["name"] = metadata.get().get("name") if metadata is not None else None

    knobs.runtime.launch_enter_hook = enter


def describe_last_launch():
    """After a failed case: the last launched kernel's compiled resources (with
    CUDA_LAUNCH_BLOCKING=1 that is the launch that failed)."""
    import gc

    from triton.compiler import CompiledKernel

    name = LAST_LAUNCH.get("name")
    if name is None:
        return
    for k in gc.get_objects():
        if isinstance(k, CompiledKernel) and k.name == name:
            md = k.metadata
            print(f"    last launch {name}: num_warps {md.num_warps}, num_stages "
                  f"{md.num_stages}, shared {md.shared} B, registers {k.n_regs}, spills "
                  f"{k.n_spills}, global scratch {getattr(md, 'global_scratch_size', '?')}, "
                  f"cluster {getattr(md, 'cluster_dims', '?')}", flush=True)  # fmt: skip


def need_gib(gib):
    free, _ = torch.cuda.mem_get_info()
    if free < gib * 2**30:
        raise _Skip(f"needs {gib} GiB of GPU memory, {free / 2**30:.0f} free")


def close(actual, expected, tol, what):
    a, e = actual.detach().double().cpu(), expected.detach().double().cpu()
    err = (a - e).abs().max().item() if a.numel() else 0.0
    scale = max(e.abs().max().item() if e.numel() else 0.0, 1.0)
    if not err <= tol * scale:
        raise AssertionError(f"{what}: max error {err:.3g} > {tol:g} x {scale:.3g}")


# ---------------------------------------------------------------------------------- huge ---


def window_grid(size, kernel, stride):
    """Indices of every window's taps along one axis (windows disjoint: stride >= kernel)."""
    out = (size - kernel) // stride + 1
    return torch.tensor([o * stride + k for o in range(out) for k in range(kernel)], device=DEV)


def huge_conv(algo, shape, weight_shape, stride, groups, dtype, channels_last=False):
    """A convolution over an input of more than 2**31 elements whose strided windows reach its
    last row and column: output, input and weight gradients against the same convolution
    over only the elements the windows read (float64, on the GPU)."""

    def run():
        elements = 1
        for s in shape:
            elements *= s
        assert elements > LIMIT, elements
        need_gib(3.5 * elements * torch.finfo(dtype).bits / 8 / 2**30)
        x = torch.randn(shape, device=DEV, dtype=dtype)
        if channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        w = torch.randn(weight_shape, device=DEV, dtype=dtype).requires_grad_()
        x.requires_grad_()
        kh, kw = weight_shape[2:]
        rows = window_grid(shape[2], kh, stride[0])
        cols = window_grid(shape[3], kw, stride[1])
        assert rows[-1].item() == shape[2] - 1 and cols[-1].item() == shape[3] - 1
        y = tc.conv2d(x, w, None, stride, 0, 1, groups, algo=algo)
        dy = torch.randn(y.shape, device=DEV, dtype=dtype)
        dx, dw = torch.autograd.grad(y, (x, w), dy)
        small = x.detach()[:, :, rows][:, :, :, cols].double().requires_grad_()
        w64 = w.detach().double().requires_grad_()
        ref = F.conv2d(small, w64, None, (kh, kw), 0, 1, groups)
        rdx, rdw = torch.autograd.grad(ref, (small, w64), dy.double())
        tol = 2e-2 if dtype != torch.float32 else 1e-4
        close(y, ref, tol, "output")
        close(dw, rdw, tol, "weight gradient")
        close(dx[:, :, rows][:, :, :, cols], rdx, tol, "input gradient (windows)")
        outside = dx.count_nonzero().item() - dx[:, :, rows][:, :, :, cols].count_nonzero().item()
        assert outside == 0, f"{outside} input-gradient elements outside every window are not 0"

    return run


def huge_crop():
    shape = (2, 1, 32768, 32769)  # int8: 2**31 + 65536 elements
    need_gib(2.5)
    x = torch.randint(-128, 128, shape, device=DEV, dtype=torch.int8)
    y = tc.crop(x, (2, 1, 5, 6), offset=(32763, 32763))
    assert torch.equal(y, x[:, :, 32763:, 32763:]), "crop at the far end"


def huge_crop_gradient():
    shape = (2, 1, 32768, 32769)  # bf16: 4 GiB; the gradient writes every element
    need_gib(9)
    x = torch.zeros(shape, device=DEV, dtype=torch.bfloat16).requires_grad_()
    y = tc.crop(x, (2, 1, 5, 6), offset=(32763, 32763))
    dy = torch.randn(y.shape, device=DEV, dtype=torch.bfloat16)
    (dx,) = torch.autograd.grad(y, x, dy)
    assert torch.equal(dx[:, :, 32763:, 32763:], dy), "crop gradient window"
    assert dx.count_nonzero().item() == dy.count_nonzero().item(), "crop gradient outside"


def huge_unfold_fold():
    n, c, h, w = 1, 1, 32768, 65538  # int8: 2**31 + 65536 elements
    need_gib(6.5)
    x = torch.randint(-128, 128, (n, c, h, w), device=DEV, dtype=torch.int8)
    cols = tc.unfold(x, (1, 2), stride=(1, 2))
    expected = x.view(n, c, h, w // 2, 2).permute(0, 1, 4, 2, 3).reshape(n, 2 * c, -1)
    assert torch.equal(cols, expected), "unfold"
    del expected
    back = tc.fold(cols, (h, w), (1, 2), stride=(1, 2))
    assert torch.equal(back, x), "fold"


def huge_cases():
    # (name, algo, input shape, weight shape, stride, groups, dtype, channels_last)
    convs = [
        ("direct fp16", "direct", (1, 1, 46341, 46341), (1, 1, 3, 3), (23169, 23169), 1,
         torch.float16, False),
        ("im2col_gemm fp16", "im2col_gemm", (1, 1, 46341, 46341), (4, 1, 3, 3), (23169, 23169),
         1, torch.float16, False),
        ("depthwise fp16", "depthwise", (1, 2, 32768, 32769), (2, 1, 3, 3), (32765, 16383), 2,
         torch.float16, False),
        ("implicit_gemm bf16 channels-last", "implicit_gemm", (1, 16, 11586, 11586),
         (16, 16, 2, 2), (5792, 5792), 1, torch.bfloat16, True),
        ("implicit_gemm fp32", "implicit_gemm", (1, 16, 11586, 11586), (16, 16, 2, 2),
         (5792, 5792), 1, torch.float32, False),
    ]  # fmt: skip
    case("crop int8 (> 2**31 elements)", huge_crop)
    case("crop gradient bf16 (> 2**31 elements)", huge_crop_gradient)
    case("unfold + fold int8 (> 2**31 elements)", huge_unfold_fold)
    for name, *spec in convs:
        case(f"conv2d {name} (> 2**31 elements), forward and gradients", huge_conv(*spec))


# -------------------------------------------------------------------------------- shared ---


def cpu_ref(fn, inputs, dy):
    """fn over float64 CPU copies of ``inputs``: the output and the gradients (for dy)."""
    leaves = [t.detach().double().cpu().requires_grad_(t.requires_grad) for t in inputs]
    out = fn(*leaves)
    wanted = [t for t in leaves if t.requires_grad]
    grads = torch.autograd.grad(out, wanted, dy.double().cpu()) if wanted else []
    return out, grads


def conv_case(ours, theirs, shapes, dtype, tol, channels_last=False, grads=True):
    def run():
        g = torch.Generator().manual_seed(0)
        tensors = []
        for shape in shapes:
            if dtype.is_floating_point:
                t = torch.randn(shape, generator=g)
            else:
                t = torch.randint(-8, 8, shape, generator=g)
            t = t.to(dtype).to(DEV)
            if channels_last and t.dim() == 4:
                t = t.contiguous(memory_format=torch.channels_last)
            tensors.append(t.requires_grad_(grads))
        y = ours(*tensors)
        dy = torch.randn(y.shape, generator=g).to(y.dtype) if grads else None
        ref, ref_grads = cpu_ref(theirs, tensors, dy if grads else torch.zeros(()))
        close(y, ref, tol, "output")
        if grads:
            got = torch.autograd.grad(y, tensors, dy.to(DEV))
            for i, (a, e) in enumerate(zip(got, ref_grads)):
                close(a, e, tol, f"gradient {i}")

    return run


def shared_cases():
    f32, bf16 = torch.float32, torch.bfloat16
    tol = {f32: 1e-4, bf16: 3e-2, torch.int8: 0}
    x4, w4 = (2, 32, 9, 10), (32, 32, 3, 3)
    for dtype in (f32, bf16):
        for algo in ("implicit_gemm", "direct", "im2col_gemm"):
            case(f"conv2d {algo} {dtype}", conv_case(
                lambda x, w, b, a=algo: tc.conv2d(x, w, b, 2, 1, algo=a),
                lambda x, w, b: F.conv2d(x, w, b, 2, 1), [x4, w4, (32,)], dtype, tol[dtype]))
        case(f"conv2d implicit_gemm {dtype} channels-last 1x1", conv_case(
            lambda x, w: tc.conv2d(x, w, algo="implicit_gemm"), lambda x, w: F.conv2d(x, w),
            [(2, 64, 8, 8), (48, 64, 1, 1)], dtype, tol[dtype], channels_last=True))
        case(f"depthwise 3x3 {dtype}", conv_case(
            lambda x, w: tc.conv2d(x, w, None, 1, 1, 1, 32, algo="depthwise"),
            lambda x, w: F.conv2d(x, w, None, 1, 1, 1, 32), [x4, (32, 1, 3, 3)], dtype,
            tol[dtype]))
        case(f"depthwise 33x33 band {dtype}", conv_case(
            lambda x, w: tc.conv2d(x, w, None, 1, 16, 1, 32, algo="depthwise"),
            lambda x, w: F.conv2d(x, w, None, 1, 16, 1, 32), [(2, 32, 12, 40), (32, 1, 33, 33)],
            dtype, tol[dtype]))
        case(f"depthwise 7x7 window channels-last {dtype}", conv_case(
            lambda x, w: tc.conv2d(x, w, None, 1, 3, 1, 32, algo="depthwise"),
            lambda x, w: F.conv2d(x, w, None, 1, 3, 1, 32), [(2, 32, 12, 40), (32, 1, 7, 7)],
            dtype, tol[dtype], channels_last=True))
        case(f"depthwise 3x3 stride 2 {dtype}", conv_case(
            lambda x, w: tc.conv2d(x, w, None, 2, 1, 1, 32, algo="depthwise"),
            lambda x, w: F.conv2d(x, w, None, 2, 1, 1, 32), [x4, (64, 1, 3, 3)], dtype,
            tol[dtype]))
        for algo in ("implicit_gemm", "direct"):
            case(f"conv_transpose2d {algo} {dtype}", conv_case(
                lambda x, w, a=algo: tc.conv_transpose2d(x, w, None, 2, 1, 1, algo=a),
                lambda x, w: F.conv_transpose2d(x, w, None, 2, 1, 1), [(2, 16, 5, 6),
                (16, 24, 3, 3)], dtype, tol[dtype]))  # fmt: skip
        case(f"conv3d implicit_gemm {dtype}", conv_case(
            lambda x, w: tc.conv3d(x, w, None, 1, 1), lambda x, w: F.conv3d(x, w, None, 1, 1),
            [(1, 16, 4, 5, 6), (16, 16, 3, 3, 3)], dtype, tol[dtype]))
        case(f"causal_conv1d {dtype}", conv_case(
            lambda x, w, b: tc.causal_conv1d(x, w, b, "silu"),
            lambda x, w, b: F.silu(F.conv1d(x, w[:, None], b, padding=3, groups=64)[..., :50]),
            [(2, 64, 50), (64, 4), (64,)], dtype, tol[dtype]))
    case("wgrad split-K (long reduction) fp32", conv_case(
        lambda x, w: tc.conv2d(x, w, None, 1, 1, algo="implicit_gemm"),
        lambda x, w: F.conv2d(x, w, None, 1, 1), [(8, 16, 32, 32), (16, 16, 3, 3)], f32, 1e-4))
    case("conv2d implicit_gemm int8 (outer products)", conv_case(
        lambda x, w: tc.conv2d(x, w, None, 1, 1, algo="implicit_gemm"),
        lambda x, w: F.conv2d(x.long(), w.long(), None, 1, 1).to(torch.int8).long(),
        [x4, w4], torch.int8, 0, grads=False))
    case("conv2d direct int8", conv_case(
        lambda x, w: tc.conv2d(x, w, None, 1, 1, algo="direct"),
        lambda x, w: F.conv2d(x.long(), w.long(), None, 1, 1).to(torch.int8).long(),
        [x4, w4], torch.int8, 0, grads=False))
    case("unfold + fold fp32", conv_case(
        lambda x: tc.fold(tc.unfold(x, 3, 1, 1, 2), (9, 10), 3, 1, 1, 2),
        lambda x: F.fold(F.unfold(x, 3, 1, 1, 2), (9, 10), 3, 1, 1, 2), [x4], f32, 1e-5))
    case("unfold channels-last fp32", conv_case(
        lambda x: tc.unfold(x, 3, 1, 1, 1), lambda x: F.unfold(x, 3, 1, 1, 1), [x4], f32, 1e-5,
        channels_last=True))


if __name__ == "__main__":
    mode = sys.argv[1]
    assert torch.cuda.is_available() and not tc.INTERPRETER, "needs a CUDA GPU"
    if mode == "huge":
        log_launches()
    (huge_cases if mode == "huge" else shared_cases)()
    print(f"workload {mode}: {sum(results.values())} cases, {results['failed']} failed, "
          f"{results['skipped']} skipped", flush=True)  # fmt: skip
    sys.exit(1 if results["failed"] else 0)
PY

# --------------------------------------------------------------------------------------------
# running a stage
# --------------------------------------------------------------------------------------------
SANITIZER_ARGS=(--target-processes all --print-limit 200 --report-api-errors "${SANITIZER_API_ERRORS:-explicit}")
summary_lines=()
memcheck_errors=0
racecheck_hazards=0
incomplete=0

seconds_left() { echo $((BUDGET - ($(date +%s) - START))); }

# count PATTERN LOG: the sum of the numbers in every match of PATTERN (empty: no match), one
# summary per process the sanitizer followed
count() { grep -oE "$1" "$2" | grep -oE "[0-9]+" | head -c 100000 | awk '{s += $1} END {if (NR) print s}'; }

# Each stage's weight; a stage gets the time left times its weight over the weights of the
# stages still to run (time a stage does not use goes to the next ones).
declare -A WEIGHT=([huge]=15 [racecheck]=25 [fuzz]=15 [pytest]=45)
weight_left=0
for s in $STAGES; do weight_left=$((weight_left + ${WEIGHT[$s]:-0})); done

# stage NAME TOOL COMMAND...: run COMMAND under the sanitizer within its share of the time
# left, log to $OUT_DIR/NAME.log, count what the sanitizer found.
stage() {
    local name=$1 tool=$2
    shift 2
    local left limit log=$OUT_DIR/$name.log
    left=$(seconds_left)
    limit=$((left * ${WEIGHT[$name]} / weight_left - 15))
    weight_left=$((weight_left - ${WEIGHT[$name]}))
    if [ "$limit" -lt 30 ]; then
        summary_lines+=("$(printf '%-10s %-9s not run (budget spent)' "$name" "$tool")")
        incomplete=1
        return
    fi
    echo "---- $name: $tool, up to ${limit} s: $*"
    local t0=$(date +%s)
    # The sanitizer runs `timeout`, so a stage that runs out of time ends its program and the
    # sanitizer still prints its summary of what ran; the outer timeout is a last resort.
    timeout --kill-after=10 $((limit + 45)) "$sanitizer" --tool "$tool" "${SANITIZER_ARGS[@]}" \
        timeout --kill-after=10 "$limit" "$@" > "$log" 2>&1
    local rc=$? took=$(($(date +%s) - t0))
    tail -n 15 "$log"
    if grep -q "Device not supported\|Unable to find injection library\|Target application terminated before first instrumented API call" "$log"; then
        echo "compute-sanitizer cannot instrument this machine's GPU:"; grep -m 3 "=========" "$log"
        echo "memcheck: not run"; echo "racecheck: not run"
        exit 3
    fi
    local found detail
    if [ "$tool" = racecheck ]; then
        # "RACECHECK SUMMARY: N hazards displayed (E errors, W warnings)", one per process
        found=$(count "RACECHECK SUMMARY: [0-9]+ hazards? displayed" "$log")
        detail=$(grep -oE "RACECHECK SUMMARY: .*" "$log" | tail -n 1)
        [ -z "$found" ] && found=$(count "ERROR SUMMARY: [0-9]+ errors?" "$log")
    else
        found=$(count "ERROR SUMMARY: [0-9]+ errors?" "$log")
        local api
        api=$(grep -c "Program hit" "$log")
        detail="$api of them failed CUDA API calls"
    fi
    local state="finished"
    if [ -z "$found" ]; then
        state="NO SANITIZER SUMMARY (rc $rc)"; found=0; incomplete=1
    elif [ $took -ge "$limit" ] || [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
        state="TIMED OUT after ${limit} s (errors found so far counted)"; incomplete=1
    elif [ $rc -ne 0 ] && [ "$found" -eq 0 ]; then
        state="program FAILED (rc $rc; see $log)"; incomplete=1
    fi
    if [ "$tool" = racecheck ]; then
        racecheck_hazards=$((racecheck_hazards + found))
    else
        memcheck_errors=$((memcheck_errors + found))
    fi
    local what
    what=$(grep -E "^workload |^fuzz: [0-9]+ draws|[0-9]+ (passed|failed)" "$log" | tail -n 1)
    summary_lines+=("$(printf '%-10s %-9s %3s found, %s in %s s: %s [%s]' "$name" "$tool" "$found" "$state" "$took" "${what:-no result line}" "$detail")")
    # where the findings are: the kernels named in the reports
    if [ "$found" != 0 ]; then
        grep -oE "(in|at) [A-Za-z_][A-Za-z0-9_]*(_kernel|kernel)[A-Za-z0-9_]*" "$log" | sort | uniq -c | sort -rn | head -n 10 \
            | sed "s/^/    $name: /" > "$OUT_DIR/$name.kernels"
    fi
}

# The test subset: a few tests of every kernel family (the TMA kernels' since session 40),
# the forced int64-indexing tests first,
# chosen by -k names (a name no longer there selects nothing instead of failing), in files that
# exist; PYTEST_K replaces it. Over xdist workers (PYTEST_WORKERS, default 4; 0: none), which
# compile Triton kernels in parallel; the sanitizer follows every worker.
PYTEST_FILES=""
for f in im2col unfold3d crop implicit_gemm direct conv_gemm transposed conv3d causal \
    pointwise_tma window_tma wgrad_tma; do
    [ -f "tests/test_$f.py" ] && PYTEST_FILES="$PYTEST_FILES tests/test_$f.py"
done
PYTEST_K=${PYTEST_K:-"int64_indexing or index_64 or huge or 2_31 \
or launcher_writes_every_element or launchers_write_every_element \
or every_output_element_is_written or writes_everything or (fold_matches_torch and not unfold) \
or forward_and_gradients_match_float64 or transposed_matches_float64 \
or exact_dtypes_take_the_outer_product_path or half_precision_channels_last \
or direct_matches_float64 or integer_conv_is_exact or direct_layouts_and_views \
or (test_depthwise and not small_kernels and not geometry and not low_precision) \
or (test_forward_and_gradients and not match) or workspace_chunking \
or conv_transpose2d_every_algorithm or conv3d_matches_float64 \
or conv_transpose3d_matches_float64 or integer_conv3d_is_exact \
or causal_conv1d_update_matches or gradients_match_slicing \
or pointwise_layers_match_float64 or windows_match_float64 or weight_gradient_from_row_boxes \
or rows_exactly_a_box_wide or strided_pointwise_reads or transposed_kernel_equal_to_stride \
or three_taps_into_a_padded_column_tile"}
# PYTEST_SHARD=i/n: only the i-th of n contiguous slices of the subset (in collection
# order), for a subset that does not finish within one call's budget (session 42: 168 of
# its tests in 367 s under memcheck)
PYTEST=(env HYPOTHESIS_PROFILE=ci python3 -m pytest -q -p no:cacheprovider -W ignore::UserWarning
    -o addopts="")
SELECTION=($PYTEST_FILES -k "$PYTEST_K")  # (the files' names split into words)
if [ -n "$PYTEST_SHARD" ]; then
    mapfile -t all_ids < <("${PYTEST[@]}" --collect-only "${SELECTION[@]}" 2>/dev/null | grep "::")
    per=$(((${#all_ids[@]} + shard_n - 1) / shard_n))
    SELECTION=("${all_ids[@]:$(((shard_i - 1) * per)):$per}")
    echo "---- test subset shard $PYTEST_SHARD: ${#SELECTION[@]} of ${#all_ids[@]} tests"
    if [ ${#SELECTION[@]} -eq 0 ]; then echo "shard $PYTEST_SHARD is empty"; exit 2; fi
fi
PYTEST_WORKERS=${PYTEST_WORKERS:-4}
# the tool the test subset runs under: memcheck, or racecheck for the kernels that use shared
# memory (the TMA kernels' tests: their tiles land in shared memory through mbarriers)
PYTEST_TOOL=${PYTEST_TOOL:-memcheck}
XDIST=""
if [ "$PYTEST_WORKERS" != 0 ] && python3 -c "import xdist" 2>/dev/null; then
    XDIST="-n $PYTEST_WORKERS"
fi

# Warm Triton's kernel cache outside the sanitizer first (WARM=0: not): under it, compiling is
# what takes the time (session 41, a fresh machine: the fuzz stage compiled for its whole 62 s
# and checked no draw, the test subset ran 76 tests in 231 s), and the stages then load the
# kernels they launch from the cache. Each stage's workload once, with xdist workers where
# pytest has them, within a quarter of the budget; what it finds is not counted (the stages
# run it again under the sanitizer).
if [ "${WARM:-1}" != 0 ]; then
    warm_start=$(date +%s)
    warm_until=$((warm_start + BUDGET / 4))
    warm_left() { echo $((warm_until - $(date +%s))); }
    warm_xdist=""
    python3 -c "import xdist" 2>/dev/null && warm_xdist="-n ${WARM_WORKERS:-8}"
    for s in $STAGES; do
        [ "$(warm_left)" -lt 10 ] && break
        case $s in
            huge) ;;  # (its tensors of more than 2**31 elements take minutes, not compiles)
            racecheck) timeout "$(warm_left)" python3 "$WORKLOAD" shared ;;
            fuzz) timeout "$(warm_left)" python3 -W ignore::UserWarning -m tritonconv.cli verify \
                --fuzz --draws "$FUZZ_DRAWS" --workers 1 --seed "$FUZZ_SEED" ;;
            pytest) timeout "$(warm_left)" "${PYTEST[@]}" $warm_xdist "${SELECTION[@]}" ;;
        esac > "$OUT_DIR/warm-$s.log" 2>&1
    done
    echo "---- warmed Triton's cache outside the sanitizer in $(($(date +%s) - warm_start)) s"
fi

rm -f "$OUT_DIR"/*.kernels
for s in $STAGES; do
    case $s in
        huge) stage huge memcheck python3 "$WORKLOAD" huge ;;
        racecheck) stage racecheck racecheck python3 "$WORKLOAD" shared ;;
        fuzz) stage fuzz memcheck python3 -W ignore::UserWarning -m tritonconv.cli verify --fuzz \
            --draws "$FUZZ_DRAWS" --workers 1 --seed "$FUZZ_SEED" --json "$OUT_DIR/fuzz-sanitizer.json" ;;
        pytest) stage pytest "$PYTEST_TOOL" "${PYTEST[@]}" -rfE $XDIST "${SELECTION[@]}" ;;
    esac
done

echo "================ sanitizer summary ================"
for line in "${summary_lines[@]}"; do echo "$line"; done
cat "$OUT_DIR"/*.kernels 2>/dev/null
[ $incomplete -ne 0 ] && echo "INCOMPLETE: a stage did not finish cleanly; nothing is proven for what it did not run"
echo "racecheck: $racecheck_hazards hazards"
echo "memcheck: $memcheck_errors errors"
if [ $memcheck_errors -ne 0 ] || [ $racecheck_hazards -ne 0 ]; then
    exit 1
fi
[ $incomplete -ne 0 ] && exit 2
exit 0
