#!/usr/bin/env bash
# Re-quantize the shipped int8 models and measure the int8 schemes against each other
# (docs/quantize.md, "Int8 that computes the same on every CPU"). Run from the repo root:
#   bash scripts/int8_schemes.sh [POLICY ...]      # default: all five shipped policies; ~45 min on 2 cores
# Writes models/*_int8.onnx, *_int8-dynamic.onnx and their cards; candidates, evaluations (1000 paired
# episodes per level) and benchmarks go to out/int8-schemes/.
set -euo pipefail
OUT=out/int8-schemes
mkdir -p "$OUT"
source "$(dirname "$0")/int8_recipe.sh"  # PY, PTQ, shipped_flags

# The previous artifacts' recipe (full-range int8 weights: saturates on x86 without VNNI).
old_flags() {
  case $1 in
    policy1_hard) echo "--scheme u8s8 --no-per-channel --float-split-sum --distill-steps 2000";;
    *) echo "--scheme u8s8 --no-per-channel --no-float-split-sum";;
  esac
}

for P in "${@:-policy1 policy1_hard policy2 policy2_hard policy3}"; do
  for P in $P; do
    SRC=models/${P}_fp32.onnx
    $PY -m quantize ptq $SRC --to int8 $(shipped_flags $P) -o models/${P}_int8.onnx $PTQ
    $PY -m quantize ptq $SRC --to int8-dynamic -o models/${P}_int8-dynamic.onnx $PTQ
    # candidates
    $PY -m quantize ptq $SRC --to int8 $(old_flags $P) -o $OUT/${P}_u8s8.onnx $PTQ
    $PY -m quantize ptq $SRC --to int8 --scheme u8u8 --no-per-channel --no-float-split-sum -o $OUT/${P}_u8u8.onnx $PTQ
    CANDIDATES="$OUT/${P}_u8s8.onnx $OUT/${P}_u8u8.onnx"
    if [ -z "$(shipped_flags $P)" ]; then
      $PY -m quantize ptq $SRC --to int8 --no-per-channel --no-float-split-sum -o $OUT/${P}_u8s7-pertensor.onnx $PTQ
      CANDIDATES="$CANDIDATES $OUT/${P}_u8s7-pertensor.onnx"
    else
      $PY -m quantize ptq $SRC --to int8 -o $OUT/${P}_u8s7-perchannel.onnx $PTQ
      CANDIDATES="$CANDIDATES $OUT/${P}_u8s7-perchannel.onnx"
    fi
    case $P in policy1|policy2)  # S8S8 QOperator: exact but without an AVX2 kernel (slow); III would take hours
      $PY -m quantize ptq $SRC --to int8 --scheme s8s8 --no-per-channel --no-float-split-sum -o $OUT/${P}_s8s8.onnx $PTQ
      CANDIDATES="$CANDIDATES $OUT/${P}_s8s8.onnx";;
    esac
    FP16=models/${P}_fp16.onnx; [ -f $FP16 ] || FP16=
    for L in default hard; do
      $PY -m policies.evaluate $SRC models/${P}_int8.onnx models/${P}_int8-dynamic.onnx $FP16 $CANDIDATES \
        --episodes 1000 --level $L --seed 0 --out $OUT --name ${P}_$L
    done
    CALLS=3000; [ $P = policy3 ] && CALLS=2000
    $PY -m quantize bench $SRC $FP16 models/${P}_int8-dynamic.onnx models/${P}_int8.onnx $CANDIDATES --calls $CALLS \
      --json $OUT/${P}_bench.json
    for t in int8 int8-dynamic fp16; do
      [ -f models/${P}_$t.onnx ] || continue
      FLAGS=""; [ $t = int8 ] && FLAGS=" $(shipped_flags $P)"
      MADE="python -m quantize ptq $SRC --to $t$FLAGS -o models/${P}_$t.onnx $PTQ"
      [ $t = fp16 ] && MADE="python -m quantize ptq $SRC --to fp16 -o models/${P}_fp16.onnx $PTQ   # not re-made by this script"
      $PY -m quantize card models/${P}_$t.onnx --eval $OUT/${P}_default.json $OUT/${P}_hard.json --bench $OUT/${P}_bench.json \
        --made-with "$MADE
bash scripts/int8_schemes.sh $P   # evaluations (1000 paired episodes per level) and benchmark" -o models/${P}_$t.md
    done
  done
done
