#!/usr/bin/env bash
# Evaluate the quadrotor-trained policies (models/POLICY_quadrotor[_hard]_*.onnx) on the mujoco backend, 1000 paired
# seeded episodes per run (docs/results.md, "Policies for the airframe"). Run from the repo root:
#   bash scripts/quadrotor_eval.sh policy1 default     # POLICY LEVEL; ~2-10 min per call on 2 cores
# For each model, fp32 beside its int8 (u8s7), its s8s8, its fp16, the kinematic-trained model of the same preset and level and,
# where there is one, the model trained on the nominal quadrotor without randomization (models/POLICY_mujoco_fp32.onnx):
#   nominal:  the Iris of nav_env/dynamics/iris.toml
#   held-out: the X500 of configs/dynamics/x500.toml (an airframe no policy trained on)
#   delay:    each model alone with every action landing its predicted Pi 3B time late (device_emulation's roofline)
# Writes out/quadrotor/POLICY_LEVEL_{nominal,x500,pi3b_fp32,pi3b_int8,lockstep_fp32,lockstep_int8}.json (+ csv, png);
# scripts/quadrotor_table.py turns them into the table.
set -euo pipefail
PY=${PY:-.venv/bin/python}
P=$1 LEVEL=$2
OUT=out/quadrotor
SUFFIX=$([ "$LEVEL" = default ] && echo "" || echo "_$LEVEL")
Q=models/${P}_quadrotor${SUFFIX}
KINEMATIC=models/${P}${SUFFIX}_fp32.onnx
[ -f "$KINEMATIC" ] || KINEMATIC=models/${P}_fp32.onnx  # a preset with no model of its own for the level
NOMINAL_TRAINED=models/${P}_mujoco${SUFFIX}_fp32.onnx
[ -f "$NOMINAL_TRAINED" ] || NOMINAL_TRAINED=
EVAL="$PY -m policies.evaluate --backend mujoco --episodes ${EPISODES:-1000} --level $LEVEL --seed 0 --out $OUT"
S8S8=${Q}_s8s8.onnx
[ -f "$S8S8" ] || S8S8=  # Policy III has none: scripts/quadrotor_models.sh says why
$EVAL ${Q}_fp32.onnx ${Q}_int8.onnx $S8S8 ${Q}_fp16.onnx $KINEMATIC $NOMINAL_TRAINED --name ${P}_${LEVEL}_nominal
$EVAL ${Q}_fp32.onnx ${Q}_int8.onnx $S8S8 ${Q}_fp16.onnx $KINEMATIC $NOMINAL_TRAINED --dynamics configs/dynamics/x500.toml --name ${P}_${LEVEL}_x500
for PREC in fp32 int8; do
  MS=$($PY -c "from device_emulation.profiles import get_profile; from device_emulation.roofline import model_cost, predict_device
print(f'{predict_device(model_cost(\"${Q}_${PREC}.onnx\"), get_profile(\"pi3b\")).predicted_s * 1e3:.4f}')")
  $EVAL ${Q}_${PREC}.onnx --latency fixed:$MS --name ${P}_${LEVEL}_pi3b_${PREC}
done
