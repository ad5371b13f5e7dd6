#!/usr/bin/env bash
# The observation experiment (docs/results.md, "Attitude and body rates in the observation"): does Policy I on the
# quadrotor fly better when its observation adds the airframe's roll, pitch and body rates? Two arms per level, the
# same warm start (models/policy1_mujoco_fp32.onnx; the new inputs start at zero weight), the same randomized
# physics, seeds, steps and hyperparameters; only the observation differs. Run from the repo root:
#   bash scripts/observation_experiment.sh        # ~1 h on 2 cores; a rerun resumes unfinished training runs
# Trains runs/obs/LEVEL_{v1,attitude} (1.5 M env steps each; `hard` cut from its config's 4 M to 1.5 M in both arms),
# evaluates each best checkpoint on 1,000 seeded episodes (seeds 0-999) on the nominal Iris and on the held-out X500
# into out/observation/, then prints the table (scripts/observation_table.py).
set -euo pipefail
PY=${PY:-.venv/bin/python}
OUT=out/observation
mkdir -p runs/obs $OUT
for LEVEL in default hard; do
  SUFFIX=$([ "$LEVEL" = default ] && echo "" || echo "_$LEVEL")
  for ARM in v1 attitude; do
    CONFIG=configs/train/policy1_quadrotor${SUFFIX}$([ $ARM = attitude ] && echo _attitude || echo "").toml
    RUN=runs/obs/${LEVEL}_$ARM
    if [ -f $RUN/final_model.zip ]; then echo "trained: $RUN"
    elif [ -f $RUN/state.json ]; then $PY -m policies.train --out $RUN --resume
    else $PY -m policies.train --config $CONFIG --steps 1500000 --out $RUN; fi
  done
done
for LEVEL in default hard; do
  for ARM in v1 attitude; do
    ENV_LEVEL=$([ $ARM = attitude ] && echo configs/levels/${LEVEL}_attitude.toml || echo $LEVEL)
    EVAL="$PY -m policies.evaluate runs/obs/${LEVEL}_$ARM --backend mujoco --level $ENV_LEVEL --episodes 1000 --seed 0"
    $EVAL --out $OUT --name ${LEVEL}_${ARM}_nominal
    $EVAL --dynamics configs/dynamics/x500.toml --out $OUT --name ${LEVEL}_${ARM}_x500
  done
done
$PY scripts/observation_table.py --dir $OUT
