#!/usr/bin/env bash
# Export, quantize, evaluate and card one quadrotor-trained policy (docs/results.md, "Policies for the airframe"):
#   bash scripts/quadrotor_models.sh POLICY LEVEL RUN_DIR "TRAINING COMMAND" ["NOTE FOR THE CARD"]
#   e.g. bash scripts/quadrotor_models.sh policy1 default runs/policy1_quadrotor \
#            "python -m policies.train --config configs/train/policy1_quadrotor.toml --out runs/policy1_quadrotor"
# Writes models/POLICY_quadrotor[_LEVEL]_{fp32,fp16,int8,s8s8}.onnx with their cards (the fp32's: POLICY_quadrotor
# [_LEVEL].md and .json); int8 is the shipped recipe (u8s7, scripts/int8_recipe.sh), s8s8 the study's 8-bit scheme;
# calibration flies the physics the model trained on (its airq.dynamics). Then scripts/quadrotor_eval.sh's evaluations.
set -euo pipefail
PY=${PY:-.venv/bin/python}
P=$1 LEVEL=$2 RUN=$3 TRAIN=$4 NOTE=${5:-}
source "$(dirname "$0")/int8_recipe.sh"  # PTQ, shipped_flags
SUFFIX=$([ "$LEVEL" = default ] && echo "" || echo "_$LEVEL")
Q=models/${P}_quadrotor${SUFFIX}
OUT=out/quadrotor
mkdir -p $OUT
EXPORT="python -m policies.export $RUN -o ${Q}_fp32.onnx"
INT8="python -m quantize ptq ${Q}_fp32.onnx --to int8 $(shipped_flags $P) -o ${Q}_int8.onnx $PTQ"
S8S8="python -m quantize ptq ${Q}_fp32.onnx --to int8 --scheme s8s8 --no-per-channel --no-float-split-sum -o ${Q}_s8s8.onnx $PTQ"
FP16="python -m quantize ptq ${Q}_fp32.onnx --to fp16 -o ${Q}_fp16.onnx --heldout-episodes 50"
# Policy III gets no s8s8 file: onnxruntime has no fast kernel for int8 x int8 matrix products on x86 (measured on a
# 2-core Xeon with AVX-512 VNNI, quantize bench, batch 1: 22.8 ms per act against 0.30 ms for u8s7 and 0.98 ms for
# fp32), so its 1000-episode evaluations would take hours
[ $P = policy3 ] && S8S8=
# A model file that exists is kept: the shipped ones are committed once, final (Policy III's are 6-27 MB); delete a
# file to make it again. Evaluations and cards are always made again.
for CMD in "$EXPORT" "$INT8" ${S8S8:+"$S8S8"} "$FP16"; do
  TARGET=${CMD##* -o }; TARGET=${TARGET%% *}
  [ -f "$TARGET" ] && echo "keeping $TARGET" || $PY ${CMD#python }
done
bash "$(dirname "$0")/quadrotor_eval.sh" $P $LEVEL
EVAL="bash scripts/quadrotor_eval.sh $P $LEVEL"
$PY -m policies.card --run $RUN --onnx ${Q}_fp32.onnx --eval $OUT/${P}_${LEVEL}_nominal.json \
  --command "$TRAIN" --command "$EXPORT" --command "$EVAL" ${NOTE:+--note "$NOTE"} -o ${Q}.md
$PY -m quantize bench ${Q}_fp32.onnx ${Q}_fp16.onnx ${Q}_int8.onnx ${S8S8:+${Q}_s8s8.onnx} --json $OUT/${P}_${LEVEL}_bench.json
for PREC in int8 ${S8S8:+s8s8} fp16; do
  MADE=$([ $PREC = int8 ] && echo "$INT8" || ([ $PREC = s8s8 ] && echo "$S8S8" || echo "$FP16"))
  $PY -m quantize card ${Q}_$PREC.onnx --eval $OUT/${P}_${LEVEL}_nominal.json --bench $OUT/${P}_${LEVEL}_bench.json \
    --made-with "$MADE" -o ${Q}_$PREC.md
done
