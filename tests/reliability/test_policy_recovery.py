"""A bridge that comes back running *another* policy (e.g. systemd restarted it with its --policy):
the host notices on the new connection, re-uploads its own policy (sha256-verified), and never
applies an action of the wrong policy."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import onnxruntime as ort

from firmware_bridge.client import BridgeClient
from firmware_bridge.launcher import BridgeProcess
from firmware_bridge.protocol import sha256_hex
from firmware_bridge.toy_policy import build_mlp_policy
from hil.loop import ControlLink, PolicyUpload

DIM = 32


def test_restarted_bridge_with_another_policy_gets_ours_back(tmp_path: Path) -> None:
    ours, theirs = build_mlp_policy(DIM, 16, seed=1), build_mlp_policy(DIM, 16, seed=2)
    (tmp_path / "theirs.onnx").write_bytes(theirs)
    session = ort.InferenceSession(ours, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    events: list[dict] = []
    with (
        BridgeProcess(["--policy", str(tmp_path / "theirs.onnx")]) as bridge,
        BridgeClient(bridge.endpoint, timeout_s=2.0, retries=1) as client,
    ):
        assert client.load_policy(ours).sha256 == sha256_hex(ours)
        link = ControlLink(client, deadline_s=0.5, policy=PolicyUpload(ours, "ours.onnx"), on_event=events.append)
        link.free_running = False
        applied = misses = 0
        for step in range(300):  # paced at 50 Hz below: at most 6 s
            time.sleep(0.02)
            if step == 20:
                bridge.restart()  # same port, boots with --policy theirs.onnx again
            obs = rng.standard_normal(DIM).astype(np.float32)
            result = link.act(obs)
            if result is None:
                misses += 1
                continue
            applied += 1
            assert result.action == int(session.run(["action"], {"obs": obs[None]})[0][0]), (
                f"wrong policy at step {step}"
            )
            if step > 20 and link.stats.policy_uploads:
                break
    reuploads = [e for e in events if e["event"] == "policy_reuploaded"]
    assert len(reuploads) == 1 and "another policy" in reuploads[0]["reason"], events
    assert reuploads[0]["sha256"] == sha256_hex(ours)
    assert applied >= 20 and link.stats.policy_verifications >= 1
