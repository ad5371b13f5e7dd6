#!/usr/bin/env bash
# What the 8th weight bit buys on the shipped policies (docs/quantize.md, "7 or 8 weight bits"): each shipped
# int8 file (u8s7: weights in [-64, 64]) against the same recipe with full-range weights in the s8s8 scheme
# (int8 activations x int8 weights in [-127, 127]: exact on every CPU). Run from the repo root:
#   bash scripts/weight_bits.sh [POLICY ...]     # default: all five shipped policies; ~25 min on 2 cores
# Writes out/weight-bits/: the s8s8 files, evaluations (1000 paired episodes per level, u8s7 first so every
# paired difference is against it), a benchmark per policy and weight_bits.md (the table, from those files).
set -euo pipefail
OUT=out/weight-bits
mkdir -p "$OUT"
source "$(dirname "$0")/int8_recipe.sh"  # PY, PTQ, shipped_flags

POLICIES="${*:-policy1 policy1_hard policy2 policy2_hard policy3}"
for P in $POLICIES; do
  SRC=models/${P}_fp32.onnx
  $PY -m quantize ptq $SRC --to int8 --scheme s8s8 $(shipped_flags $P) -o $OUT/${P}_s8s8.onnx $PTQ
  for L in default hard; do
    $PY -m policies.evaluate models/${P}_int8.onnx $SRC $OUT/${P}_s8s8.onnx \
      --episodes 1000 --level $L --seed 0 --out $OUT --name ${P}_$L
  done
  CALLS=3000; [ $P = policy3 ] && CALLS=1000
  $PY -m quantize bench $SRC models/${P}_int8.onnx $OUT/${P}_s8s8.onnx --calls $CALLS --json $OUT/${P}_bench.json
done
$PY scripts/weight_bits_table.py $OUT $POLICIES > $OUT/weight_bits.md.tmp && mv $OUT/weight_bits.md.tmp $OUT/weight_bits.md
cat $OUT/weight_bits.md
