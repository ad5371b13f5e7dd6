#!/usr/bin/env bash
# The observation experiment (docs/results.md, "Attitude and body rates in the observation"): does Policy I on the
# quadrotor fly better when its observation adds the airframe's roll, pitch and body rates? Two arms per level, the
# same warm start (models/policy1_mujoco_fp32.onnx; the new inputs start at zero weight), the same randomized
# physics, seeds, steps and hyperparameters; only the observation differs. Run from the repo root:
#   bash scripts/observation_experiment.sh                 # training seed 0 on both levels: ~1 h on 2 cores
#   SEEDS=1 LEVELS=hard bash scripts/observation_experiment.sh   # a second training seed where the arms differed
# A rerun resumes unfinished training runs and keeps finished evaluations. Trains runs/obs/LEVEL_{v1,attitude}_sSEED
# (1.5 M env steps each; `hard` cut from its config's 4 M to 1.5 M in both arms), evaluates each best checkpoint on
# 1,000 seeded episodes (seeds 0-999) on the nominal Iris and on the held-out X500 into out/observation/, then prints
# the table of every finished evaluation (scripts/observation_table.py).
set -euo pipefail
PY=${PY:-.venv/bin/python}
OUT=out/observation
SEEDS=${SEEDS:-0} LEVELS=${LEVELS:-default hard}
mkdir -p runs/obs $OUT
for SEED in $SEEDS; do for LEVEL in $LEVELS; do
  SUFFIX=$([ "$LEVEL" = default ] && echo "" || echo "_$LEVEL")
  for ARM in v1 attitude; do
    CONFIG=configs/train/policy1_quadrotor${SUFFIX}$([ $ARM = attitude ] && echo _attitude || echo "").toml
    RUN=runs/obs/${LEVEL}_${ARM}_s$SEED
    if [ -f $RUN/final_model.zip ]; then echo "trained: $RUN"
    elif [ -f $RUN/state.json ]; then $PY -m policies.train --out $RUN --resume
    else $PY -m policies.train --config $CONFIG --steps 1500000 --seed $SEED --out $RUN; fi
  done
done; done
for SEED in $SEEDS; do for LEVEL in $LEVELS; do
  for ARM in v1 attitude; do
    ENV_LEVEL=$([ $ARM = attitude ] && echo configs/levels/${LEVEL}_attitude.toml || echo $LEVEL)
    EVAL="$PY -m policies.evaluate runs/obs/${LEVEL}_${ARM}_s$SEED --backend mujoco --level $ENV_LEVEL --episodes 1000 --seed 0"
    for AIRFRAME in nominal x500; do
      NAME=${LEVEL}_${ARM}_s${SEED}_$AIRFRAME
      DYN=$([ $AIRFRAME = x500 ] && echo "--dynamics configs/dynamics/x500.toml" || echo "")
      [ -f $OUT/$NAME.json ] && echo "evaluated: $NAME" || $EVAL $DYN --out $OUT --name $NAME
    done
  done
done; done
$PY scripts/observation_table.py --dir $OUT
