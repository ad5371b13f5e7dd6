"""The bridge as aarch64 code under qemu (device_emulation.arm) against the native bridge.

Tests marked ``arm`` need qemu-user-static, debootstrap (root, once) and downloads; they are skipped
unless AIRQ_TEST_ARM=1, which ``make test-arm`` sets (it also installs the apt packages). The other
tests here are quick and run with plain ``make test``.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from arm_helpers import (
    ENABLED,
    FIGURES,
    FIRST_SEED,
    MAX_STEPS_PER_EPISODE,
    MIN_OBSERVATIONS,
    RECORDING,
    SHIPPED,
    SHIPPED_EXTRA,
    PolicyUnderTest,
    dynamic_int8,
    static_int8,
    toy_model,
)

from device_emulation.arm import CPUS
from firmware_bridge.client import BridgeClient
from firmware_bridge.launcher import BridgeProcess


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "arm: needs the qemu-emulated aarch64 bridge (run with make test-arm)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if ENABLED:
        return
    skip = pytest.mark.skip(reason="aarch64 emulation tests: run `make test-arm` (sets AIRQ_TEST_ARM=1)")
    here = Path(__file__).parent
    for item in items:
        if item.get_closest_marker("arm") is not None and here in Path(str(item.fspath)).parents:
            item.add_marker(skip)


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    if FIGURES:
        terminalreporter.section("aarch64 emulation figures")
        for line in FIGURES:
            terminalreporter.write_line(line)


# ---------------------------------------------------------------------------------------- policies


def shipped_present() -> bool:
    return all(p.is_file() for p in SHIPPED.values())


@pytest.fixture(scope="session")
def policies(tmp_path_factory: pytest.TempPathFactory, recorded_obs: np.ndarray) -> list[PolicyUnderTest]:
    """The shipped Policy I artifacts when present; otherwise a toy MLP of the same contract
    (1032 -> 256 -> 25) with a static int8 and a dynamic int8 version made here."""
    if shipped_present():
        out = [PolicyUnderTest(f"policy1_{k}", p, k, "shipped") for k, p in SHIPPED.items()]
        out += [
            PolicyUnderTest(f"policy1_{k}", p, precision, "shipped", dynamic="dynamic" in k)
            for k, (p, precision) in SHIPPED_EXTRA.items()
            if p.is_file()
        ]
        return out
    d = tmp_path_factory.mktemp("arm_policies")
    fp32, static, dynamic = d / "toy_fp32.onnx", d / "toy_int8_static.onnx", d / "toy_int8_dynamic.onnx"
    fp32.write_bytes(toy_model())
    static_int8(fp32, static, recorded_obs[::4])
    dynamic_int8(fp32, dynamic)
    reason = "toy MLP 1032-256-25: models/policy1_{fp32,int8}.onnx not found"
    return [
        PolicyUnderTest("toy_fp32", fp32, "fp32", reason),
        PolicyUnderTest("toy_int8_static", static, "int8", reason),
        PolicyUnderTest("toy_int8_dynamic", dynamic, "int8", reason, dynamic=True),
    ]


@pytest.fixture(scope="session")
def recorded_obs() -> np.ndarray:
    """Observations from seeded nav_env rollouts (level default), flown by the shipped fp32 policy
    (the toy one if absent) with 10% random actions mixed in so the episodes differ; float32 [N, 1032]."""
    import onnxruntime as ort

    from nav_env import NavEnv

    model = SHIPPED["fp32"].read_bytes() if shipped_present() else toy_model()
    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    env = NavEnv("default")
    rng = np.random.default_rng(0)
    rows: list[np.ndarray] = []
    seed = FIRST_SEED
    while len(rows) < MIN_OBSERVATIONS:
        obs, _ = env.reset(seed=seed)
        seed += 1
        for _ in range(MAX_STEPS_PER_EPISODE):
            rows.append(np.asarray(obs, dtype=np.float32))
            if rng.random() < 0.1:
                action = int(rng.integers(env.action_space.n))
            else:
                action = int(session.run(["action"], {"obs": rows[-1][None]})[0][0])
            obs, _, terminated, truncated, _ = env.step(action)
            if terminated or truncated:
                break
    env.close()
    flown_by = "policy1_fp32" if shipped_present() else "toy fp32"
    RECORDING.update(episodes=seed - FIRST_SEED, seeds=f"{FIRST_SEED}-{seed - 1}", policy=flown_by)
    return np.stack(rows)


# ---------------------------------------------------------------------------------------- bridges


@pytest.fixture(scope="session")
def arm_stack():
    from device_emulation.arm import prepare

    return prepare()


def _bridge(emulated_cpu: str | None) -> Iterator[BridgeClient]:
    process = BridgeProcess(["--threads", "1", "--actuator", "mock"], startup_timeout_s=120)
    if emulated_cpu:
        from device_emulation.arm import emulated_bridge_command

        assert process.args[0] == sys.executable
        process.args = emulated_bridge_command(process.args[1:], cpu=emulated_cpu)
    with process, BridgeClient(process.endpoint, timeout_s=5.0, load_timeout_s=120) as client:
        yield client


@pytest.fixture(scope="session")
def native_bridge() -> Iterator[BridgeClient]:
    yield from _bridge(None)


@pytest.fixture(scope="session", params=list(CPUS))
def emulated_cpu(request: pytest.FixtureRequest) -> str:
    """cortex-a53 (Raspberry Pi 3) and cortex-a72 (Pi 4): plain NEON int8 kernels; cortex-a76 (Pi 5): dot-product kernels."""
    return request.param


@pytest.fixture(scope="session")
def emulated_bridge(arm_stack, emulated_cpu: str) -> Iterator[BridgeClient]:
    yield from _bridge(emulated_cpu)
