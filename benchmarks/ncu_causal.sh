#!/usr/bin/env bash
# Nsight Compute on one causal conv1d kernel at issue 12's Mamba shape (batch 8, dim 2048,
# seqlen 4096, width 4, SiLU, bf16; the form a spec of probe_causal_backward.py names): the
# full set of sections, then the per-SASS-instruction source page (warp-stall samples by
# instruction: which loads, shuffles or arithmetic the warps wait on).
#
#   benchmarks/ncu_causal.sh                               # the segments backward
#   SPEC=rows:256x8:2:16 KERNEL=causal_conv1d_backward_rows_kernel benchmarks/ncu_causal.sh
#   FORWARD=--forward SPEC=segments:8x32:4:16 KERNEL=causal_conv1d_segments_kernel \
#       benchmarks/ncu_causal.sh
#
# Writes ncu-causal.ncu-rep, ncu-causal-details.txt and ncu-causal-sass.csv to $OUT (the
# device tool's folder) or bench-out/. ncu locks the clocks: durations run longer than the
# probe's.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=src${PYTHONPATH:+:$PYTHONPATH}
OUT_DIR=${OUT:-bench-out}
mkdir -p "$OUT_DIR"
SPEC=${SPEC:-segments:4x32:4:16}
KERNEL=${KERNEL:-causal_conv1d_backward_segments_kernel}
report="$OUT_DIR/ncu-causal"
ncu --kernel-name "regex:$KERNEL" --launch-count 1 --set full --import-source yes -f -o "$report" \
    python3 benchmarks/probe_causal_backward.py --reps 1 ${FORWARD:-} "$SPEC" \
    > "$OUT_DIR/ncu-causal.log" 2>&1 || { tail -n 20 "$OUT_DIR/ncu-causal.log"; exit 1; }
ncu --import "$report.ncu-rep" --page details > "$OUT_DIR/ncu-causal-details.txt"
ncu --import "$report.ncu-rep" --page source --print-source sass --csv \
    > "$OUT_DIR/ncu-causal-sass.csv" 2> "$OUT_DIR/ncu-causal-sass.err" \
    || tail -n 5 "$OUT_DIR/ncu-causal-sass.err"
grep -E "Duration|Throughput|Warp Cycles Per Issued|Achieved Occupancy|Registers Per|Stall" \
    "$OUT_DIR/ncu-causal-details.txt" | head -n 40
