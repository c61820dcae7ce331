#!/usr/bin/env bash
# The GPU check: on a machine with a CUDA GPU, run the test suite on CUDA, the random-geometry
# fuzz against float64 (every algorithm, forward and gradients), the demo, and the benchmarks,
# then print a short summary (last, so a truncated log still shows it).
#
#   scripts/gpu_check.sh                 # everything
#   FUZZ_DRAWS=10000 scripts/gpu_check.sh  # a longer fuzz (default 400 draws; 0: none)
#   FUZZ_SECONDS=300 scripts/gpu_check.sh  # fuzz for a time instead
#   SUITES="conv im2col" scripts/gpu_check.sh
#   SKIP_TESTS=1 scripts/gpu_check.sh    # benchmarks only
#   SKIP_BENCH=1 scripts/gpu_check.sh    # tests and demo only
#   PYTEST_ARGS="-k crop" scripts/gpu_check.sh
#   SUITES=models BENCH_ARGS="--models unet --batch 8" SKIP_TESTS=1 scripts/gpu_check.sh
#                                        # extra arguments for `tritonconv bench`
#   PACK=1 scripts/gpu_check.sh          # everything written packed into one gpu-check.tgz
#                                        # (the device tool returns at most 8 files)
#   PROBES="tma dw causal window" scripts/gpu_check.sh  # also these probes: TMA implicit
#                                        # GEMM (issue 11), NHWC depthwise (13), the causal
#                                        # backward's two versions (12), the depthwise window
#                                        # kernels against what they replace (13); PROBE=1: all
#
# Runs from source (PYTHONPATH=src), so it needs only the machine's torch and triton. Results
# go to $OUT (the device tool's folder) or bench-out/.
set -uo pipefail
cd "$(dirname "$0")/.."
# Wheels carried to a machine without a package index (.whl/, git-ignored: pytest-xdist and
# execnet run the suite on several workers, expecttest the OpInfo tests) are unpacked next to
# the source.
if ls .whl/*.whl > /dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --upgrade --target /tmp/tritonconv-site .whl/*.whl \
        && export PYTHONPATH=/tmp/tritonconv-site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH=src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 COLUMNS=160
OUT_DIR=${OUT:-bench-out}
mkdir -p "$OUT_DIR"
SUITES=${SUITES:-"dense conv im2col direct depthwise crop host more"}
DTYPES=${DTYPES:-"float32 bfloat16"}

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, 'cudnn', torch.backends.cudnn.version())"

status=0
if [ -z "${SKIP_TESTS:-}" ]; then
    # worksteal: idle workers take queued tests from busy ones, so the long fixed-seed fuzz
    # shards do not queue behind each other on one worker (runs of sessions 5-9 always hit
    # the time cap with one worker still running fuzz shards, the rest idle)
    workers=$(python3 -c "import xdist" 2>/dev/null && echo "-n ${PYTEST_WORKERS:-12} --dist worksteal" || echo "")
    # -v: each test's name and outcome as it ends, so a run cut off by the timeout still
    # says which tests failed (the summary below greps them)
    timeout "${PYTEST_TIMEOUT:-3600}" python3 -m pytest -v -rfE $workers -p no:cacheprovider \
        -W ignore::UserWarning ${PYTEST_ARGS:-} > "$OUT_DIR/pytest.log" 2>&1
    status=$?
    tail -n 25 "$OUT_DIR/pytest.log"
fi
fuzz_status=0
fuzz_amount="--draws ${FUZZ_DRAWS:-400}"
[ -n "${FUZZ_SECONDS:-}" ] && fuzz_amount="--seconds $FUZZ_SECONDS"
if [ "${FUZZ_DRAWS:-400}" != "0" ]; then
    python3 -W ignore::UserWarning -m tritonconv.cli verify --fuzz $fuzz_amount --workers "${FUZZ_WORKERS:-8}" \
        --seed "${FUZZ_SEED:-0}" --json "$OUT_DIR/fuzz.json" 2>&1 | tee "$OUT_DIR/fuzz.log" | tail -n 30
    fuzz_status=${PIPESTATUS[0]}
    [ $fuzz_status -ne 0 ] && status=1
fi
python3 -m tritonconv.cli demo 2>&1 | tee "$OUT_DIR/demo.log" | tail -n 25

suite_args=""
for s in $SUITES; do suite_args="$suite_args --suite $s"; done
dtype_args=""
for d in $DTYPES; do dtype_args="$dtype_args --dtype $d"; done
bench_status=0
if [ -z "${SKIP_BENCH:-}" ]; then
    python3 -m tritonconv.cli bench $suite_args $dtype_args ${BENCH_ARGS:-} --out "$OUT_DIR" > "$OUT_DIR/bench.log" 2>&1
    bench_status=$?
fi

PROBES=${PROBES:-}
[ -n "${PROBE:-}" ] && PROBES="tma dw causal window pw"
declare -A PROBE_SCRIPTS=(
    [tma]=probe_tma_igemm.py [dw]=probe_depthwise_nhwc.py [causal]=probe_causal_backward.py
    [window]=probe_depthwise_window.py [pw]=probe_tma_pointwise.py
)
for p in $PROBES; do
    timeout "${PROBE_TIMEOUT:-300}" python3 "benchmarks/${PROBE_SCRIPTS[$p]}" \
        --json "$OUT_DIR/probe_$p.json" > "$OUT_DIR/probe_$p.log" 2>&1 \
        || echo "probe $p FAILED or timed out (see probe_$p.log)"
done

echo "================ summary ================"
if [ -z "${SKIP_TESTS:-}" ]; then
    echo "pytest: $(grep -E '^=+ .*(passed|failed|error)' "$OUT_DIR/pytest.log" | tail -n 1)"
    # one line per failing test, from either form of -v output (with xdist: "[gw3] [ 5%] FAILED
    # tests/...", without: "tests/... FAILED [ 5%]") and from -rfE's summary
    grep -oE '(FAILED|ERROR) tests/[^ ]+|^tests/[^ ]+ (FAILED|ERROR)' "$OUT_DIR/pytest.log" \
        | sed -E 's/^(tests\/[^ ]+) (FAILED|ERROR)$/\2 \1/' | sort -u | head -n 20
fi
[ -f "$OUT_DIR/fuzz.log" ] && grep -E "^fuzz: [0-9]+ draws" "$OUT_DIR/fuzz.log" | tail -n 1
grep -E "ok|MISMATCH" "$OUT_DIR/demo.log" | grep -c ok | sed 's/^/demo checks ok: /'
if [ -n "${SKIP_BENCH:-}" ]; then
    :
elif [ $bench_status -ne 0 ]; then
    echo "bench FAILED:"; tail -n 30 "$OUT_DIR/bench.log"; status=1
    # what was measured before it stopped
    [ -f "$OUT_DIR/bench.partial.json" ] && python3 scripts/bench_table.py "$OUT_DIR/bench.partial.json"
else
    python3 scripts/bench_table.py "$OUT_DIR/bench.json"
fi
[ -f "$OUT_DIR/probe_tma.log" ] && grep -E "^(geomean|check .*BAD)" "$OUT_DIR/probe_tma.log"
[ -f "$OUT_DIR/probe_dw.log" ] && grep -vE "^check .* ok$" "$OUT_DIR/probe_dw.log" | tail -n 14
[ -f "$OUT_DIR/probe_causal.log" ] && tail -n 14 "$OUT_DIR/probe_causal.log"
[ -f "$OUT_DIR/probe_window.log" ] && grep -vE "^\{" "$OUT_DIR/probe_window.log" | tail -n 16
if [ -n "${PACK:-}" ]; then
    pack=$(mktemp --suffix .tgz)
    tar czf "$pack" -C "$OUT_DIR" . && find "$OUT_DIR" -mindepth 1 -delete \
        && mv "$pack" "$OUT_DIR/gpu-check.tgz" && echo "packed into $OUT_DIR/gpu-check.tgz"
fi
exit $status
