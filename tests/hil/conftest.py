"""What the hil tests fly: two toy policies of the default level's observation size, a small and a bigger one."""

import pytest

from firmware_bridge.toy_policy import build_mlp_policy


@pytest.fixture(scope="module")
def toy_policies(tmp_path_factory):
    d = tmp_path_factory.mktemp("policies")
    small, big = d / "small.onnx", d / "big.onnx"
    small.write_bytes(build_mlp_policy(1032, 32, seed=1))
    big.write_bytes(build_mlp_policy(1032, 256, seed=2))
    return small, big
