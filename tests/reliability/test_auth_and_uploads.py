"""CurveZMQ authentication and corrupt policy uploads, against the real bridge process over TCP.

Auth: a client whose key is not allowed, or with no key at all, gets no answer and changes
nothing; the allowed key works; a host that expects another bridge key never talks to an impostor.
Uploads: truncated, wrong hash, non-ONNX and oversize uploads get a clear error and the previous
policy keeps flying.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from reliability_helpers import RawDealer

from firmware_bridge.client import BridgeClient, BridgeRefused, BridgeUnreachable
from firmware_bridge.keys import ClientCurve, create_key_pair, curve_available, load_public_key
from firmware_bridge.launcher import BridgeProcess
from firmware_bridge.protocol import ErrorCode, sha256_hex
from firmware_bridge.toy_policy import build_mlp_policy

DIM = 16
SILENCE_MS = 1000  # how long an unauthorised client waits for the answer that must not come

if not curve_available() and os.environ.get("AIRQ_REQUIRE_CURVE") == "1":  # .ci/run sets it: no silent skip
    raise RuntimeError("AIRQ_REQUIRE_CURVE=1 but this libzmq has no CURVE support")
pytestmark = pytest.mark.skipif(not curve_available(), reason="libzmq without CURVE support")


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """bridge, host (allowed) and intruder (not allowed) key pairs; clients/ holds the allowed public keys."""
    root = tmp_path_factory.mktemp("keys")
    for name in ("bridge", "host", "intruder", "impostor"):
        create_key_pair(root, name)
    allowed = root / "clients"
    allowed.mkdir()
    (allowed / "host.key").write_bytes((root / "host.key").read_bytes())
    return root


@pytest.fixture(scope="module")
def model() -> bytes:
    return build_mlp_policy(DIM, 16, n_actions=5, seed=8)


@pytest.fixture(scope="module")
def secure_bridge(keys: Path, model: bytes, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BridgeProcess]:
    policy = tmp_path_factory.mktemp("secure") / "policy.onnx"
    policy.write_bytes(model)
    host = ClientCurve.from_files(keys / "host.key_secret", keys / "bridge.key")
    args = [
        "--policy",
        str(policy),
        "--curve-secret",
        str(keys / "bridge.key_secret"),
        "--curve-clients",
        str(keys / "clients"),
    ]
    with BridgeProcess(args, client_curve=host) as bridge:
        yield bridge


def host_client(bridge: BridgeProcess, keys: Path, **kw: object) -> BridgeClient:
    return BridgeClient(
        bridge.endpoint, curve=ClientCurve.from_files(keys / "host.key_secret", keys / "bridge.key"), **kw
    )


def status_of(bridge: BridgeProcess, keys: Path) -> dict:
    with host_client(bridge, keys, timeout_s=5.0) as client:
        return client.status().reply


def test_allowed_key_works(secure_bridge: BridgeProcess, keys: Path, model: bytes) -> None:
    with host_client(secure_bridge, keys, timeout_s=5.0) as client:
        policy = client.hello().policy
        assert policy is not None and policy.sha256 == sha256_hex(model)
        result = client.act(np.zeros(DIM, np.float32))
        assert isinstance(result.action, int)


@pytest.mark.parametrize("who", ["intruder", "no key"])
def test_unknown_or_missing_key_gets_no_answer_and_no_effect(
    secure_bridge: BridgeProcess, keys: Path, who: str
) -> None:
    before = status_of(secure_bridge, keys)
    curve = ClientCurve.from_files(keys / "intruder.key_secret", keys / "bridge.key") if who == "intruder" else None
    dealer = RawDealer(secure_bridge.endpoint, curve=curve)
    hostile = [
        {
            "v": 1,
            "type": "load_policy",
            "seq": 1,
            "onnx": build_mlp_policy(DIM, 8, seed=66),
            "sha256": sha256_hex(build_mlp_policy(DIM, 8, seed=66)),
            "name": "evil",
        },
        {"v": 1, "type": "act", "seq": 2, "obs": np.ones(DIM, "<f4").tobytes(), "shape": [DIM]},
        {"v": 1, "type": "reset", "seq": 3},
    ]
    try:
        for message in hostile:
            assert dealer.call(message, timeout_ms=SILENCE_MS) is None  # no answer at all
    finally:
        dealer.close()
    after = status_of(secure_bridge, keys)
    assert after["policy"]["sha256"] == before["policy"]["sha256"]  # no upload happened
    # Only our own two status requests reached the request loop; nothing of the intruder's.
    assert after["counters"]["requests"] == before["counters"]["requests"] + 1
    assert after["counters"]["resets"] == before["counters"]["resets"]
    assert after["actuator"]["commands_total"] == before["actuator"]["commands_total"]


def test_host_never_talks_to_a_bridge_with_another_key(keys: Path, model: bytes, tmp_path: Path) -> None:
    """An impostor bridge (its own key, and it would even admit our host) gets nothing from us."""
    clients = tmp_path / "clients"
    clients.mkdir()
    (clients / "host.key").write_bytes((keys / "host.key").read_bytes())
    impostor_view = ClientCurve.from_files(keys / "host.key_secret", keys / "impostor.key")
    args = ["--curve-secret", str(keys / "impostor.key_secret"), "--curve-clients", str(clients)]
    with BridgeProcess(args, client_curve=impostor_view) as impostor:
        expecting_real = BridgeClient(
            impostor.endpoint,
            timeout_s=0.5,
            retries=1,
            curve=ClientCurve.from_files(keys / "host.key_secret", keys / "bridge.key"),
        )
        with expecting_real, pytest.raises(BridgeUnreachable) as info:
            expecting_real.load_policy(model)
        assert "CurveZMQ handshake" in str(info.value)
        with BridgeClient(impostor.endpoint, timeout_s=5.0, curve=impostor_view) as knowing:
            assert knowing.status().counters["loads"] == 0  # the upload never arrived


def test_unauthenticated_bridge_says_so_loudly(model: bytes) -> None:
    with BridgeProcess() as open_bridge, BridgeClient(open_bridge.endpoint, timeout_s=5.0) as client:
        client.hello()
        assert "UNAUTHENTICATED" in open_bridge.stderr_text()


def test_key_files_are_checked(keys: Path, tmp_path: Path) -> None:
    assert load_public_key(keys / "bridge.key") == load_public_key(keys / "bridge.key_secret")
    assert (keys / "bridge.key_secret").stat().st_mode & 0o077 == 0  # secret readable by its owner only
    from firmware_bridge.keys import KeyFileError

    with pytest.raises(KeyFileError, match="exists"):
        create_key_pair(keys, "bridge")
    with pytest.raises(KeyFileError, match="no secret key"):
        ClientCurve.from_files(keys / "host.key", keys / "bridge.key")


# ------------------------------------------------------------------ corrupt uploads


@pytest.fixture
def upload_bridge(model: bytes, tmp_path: Path) -> Iterator[BridgeClient]:
    policy = tmp_path / "policy.onnx"
    policy.write_bytes(model)
    with (
        BridgeProcess(["--policy", str(policy), "--max-message-bytes", "65536"]) as bridge,
        BridgeClient(bridge.endpoint, timeout_s=5.0) as client,
    ):
        yield client


def corrupt_uploads(model: bytes) -> dict[str, tuple[dict, str, str]]:
    big = build_mlp_policy(DIM, 1200, seed=1)  # > 64 KiB
    assert len(big) > 65536
    return {
        "truncated": (
            {"onnx": model[: len(model) // 2], "sha256": sha256_hex(model[: len(model) // 2])},
            ErrorCode.BAD_POLICY,
            "not a valid ONNX",
        ),
        "wrong hash": ({"onnx": model, "sha256": sha256_hex(model + b"x")}, ErrorCode.HASH_MISMATCH, "sha256"),
        "not onnx": (
            {"onnx": b"MZ\x90\x00 definitely not a model" * 20, "sha256": None},
            ErrorCode.BAD_POLICY,
            "not a valid ONNX",
        ),
        "oversize": (
            {"onnx": big[: 65536 + 1000], "sha256": sha256_hex(big[: 65536 + 1000])},
            ErrorCode.TOO_LARGE,
            "limit",
        ),
    }


@pytest.mark.parametrize("case", ["truncated", "wrong hash", "not onnx", "oversize"])
def test_corrupt_upload_is_refused_and_previous_policy_keeps_flying(
    upload_bridge: BridgeClient, model: bytes, case: str
) -> None:
    client = upload_bridge
    obs = np.random.default_rng(2).standard_normal(DIM).astype(np.float32)
    before = client.act(obs)
    fields, code, words = corrupt_uploads(model)[case]
    if fields["sha256"] is None:
        fields["sha256"] = sha256_hex(fields["onnx"])
    # Raw request: BridgeClient.load_policy would refuse the oversize one before sending it.
    with pytest.raises(BridgeRefused) as info:
        client._call("load_policy", 10.0, name=case, **fields)
    assert info.value.code == code and words in info.value.detail, info.value
    assert "\n" not in str(info.value)
    status = client.status()
    assert status.reply["policy"]["sha256"] == sha256_hex(model) and status.counters["loads"] == 1
    after = client.act(obs)
    assert after.action == before.action and after.setpoint == before.setpoint
