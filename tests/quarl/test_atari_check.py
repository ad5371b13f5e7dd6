"""python -m quarl atari-check at its smallest: a real PPO on Pong (AtariWrapper, 4-frame stack, Nature CNN), its
export, static and dynamic int8 on real frames, and the record it writes, checked against the saved ONNX files on
frames this test records itself; and its bad input, one line and exit 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx

from quarl.atari_check import record_frames
from quarl.pipeline import CALIBRATION_SEED, onnx_policy

REPO = Path(__file__).resolve().parents[2]
FRAMES = 60


def _quarl(*args: str) -> subprocess.CompletedProcess:
    env = os.environ | {"PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "quarl", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=600
    )


def test_atari_check_quantizes_every_conv_and_its_agreement_is_reproducible(tmp_path):
    out = tmp_path / "atari"
    done = _quarl("atari-check", "--steps", "512", "--frames", str(FRAMES), "--out", str(out))
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"wrote {out / 'atari_check.json'}" in done.stdout
    check = json.loads((out / "atari_check.json").read_text())
    assert (check["env_id"], check["algo"], check["train_steps"]) == ("PongNoFrameskip-v4", "ppo", 512)
    assert check["float_convs_left"] == 0 and check["float_gemms_left"] == 1  # only the logits layer in float
    static = check["ops"]["int8"]
    assert static["QLinearConv"] == 3 and static["QGemm"] == 1 and "Conv" not in static, static  # Nature CNN
    dynamic = check["ops"]["int8-dynamic"]  # the seed's dynamic int8: MatMul weights only, convolutions in float
    assert check["ops"]["fp32"]["Conv"] == 3 and dynamic["MatMulInteger"] == 2 and dynamic["Conv"] == 3, dynamic
    files = {name: out / f"{name}.onnx" for name in ("fp32", "int8", "int8-dynamic")}
    for name, path in files.items():  # the record describes the files on disk
        assert check["bytes"][name] == path.stat().st_size
        counted: dict[str, int] = {}
        for node in onnx.load(str(path)).graph.node:
            counted[node.op_type] = counted.get(node.op_type, 0) + 1
        assert counted == check["ops"][name], name
    assert check["bytes"]["int8"] < 0.35 * check["bytes"]["fp32"]
    assert set(check["latency_p50_us"]) == set(files) and all(v > 0 for v in check["latency_p50_us"].values())
    assert check["frames_calibration"] + check["frames_heldout"] == FRAMES

    # the held-out half of the same real frames, recorded again: the same seeds and the same fp32 policy
    frames = record_frames(onnx_policy(files["fp32"]), "PongNoFrameskip-v4", 4, FRAMES, CALIBRATION_SEED)
    assert frames.shape == (FRAMES, 4 * 84 * 84)
    assert len({f.tobytes() for f in frames}) > 1  # real, changing frames
    heldout = frames[FRAMES // 2 :]
    assert len(heldout) == check["frames_heldout"]
    reference = onnx_policy(files["fp32"])(heldout)
    for name in ("int8", "int8-dynamic"):
        agreement = check["agreement_vs_fp32"][name]
        assert 0.0 <= agreement <= 1.0
        assert agreement == float(np.mean(onnx_policy(files[name])(heldout) == reference)), name
        assert check["fp32_distinct_actions"] == len(np.unique(reference))
        assert 15.0 < check["logits_sqnr_db"][name] < 120.0, name  # int8 tracks fp32's logits, not exactly
    assert check["machine"]["int8_instructions"] and check["machine"]["cpu"]


def test_a_non_atari_env_is_one_line_exit_2(tmp_path):
    out = tmp_path / "never-written"
    done = _quarl("atari-check", "--env", "CartPole-v1", "--out", str(out))
    assert done.returncode == 2, done.stderr[-3000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and "CartPole-v1" in lines[0], done.stderr[-3000:]
    assert "training" not in done.stdout and not out.exists()  # refused before any work
