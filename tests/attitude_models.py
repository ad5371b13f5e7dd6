"""A policy on the versioned observation that acts exactly as a plain one: the plain policy's first layer with zero
weights for the five attitude values, and the attitude recorded in its metadata as an export records it. Flown on
the same seeds, the two must fly the same episodes, whichever tool builds the env."""

from __future__ import annotations

import json

import numpy as np
import onnx
from onnx import numpy_helper

from firmware_bridge.toy_policy import build_mlp_policy
from nav_env.config import N_ATTITUDE_FEATURES, load_level


def plain_and_attitude_policies(level: str = "default", hidden: int = 32, seed: int = 3) -> tuple[bytes, bytes]:
    """(plain, attitude): two ONNX models that choose the same action from the same 1032 values; the second takes
    the 5 attitude values after them (zero weights) and says so in ``airq.env_config``."""
    plain_cfg, attitude_cfg = load_level(level), load_level(level, {"observation.attitude": True})
    plain = build_mlp_policy(
        plain_cfg.obs_dim,
        hidden,
        seed=seed,
        extra_metadata={"airq.env_config": json.dumps(plain_cfg.to_dict())},
    )
    model = onnx.load_from_string(plain)
    gemm = next(n for n in model.graph.node if n.op_type == "Gemm")
    init = next(i for i in model.graph.initializer if i.name == gemm.input[1])
    w = numpy_helper.to_array(init)  # [obs_dim, hidden]: the toy policy's Gemm multiplies obs @ W
    assert w.shape[0] == plain_cfg.obs_dim, w.shape
    padded = np.concatenate([w, np.zeros((N_ATTITUDE_FEATURES, w.shape[1]), w.dtype)])
    init.CopyFrom(numpy_helper.from_array(padded, init.name))
    model.graph.input[0].type.tensor_type.shape.dim[1].dim_value = attitude_cfg.obs_dim
    for prop in model.metadata_props:
        if prop.key == "airq.env_config":
            prop.value = json.dumps(attitude_cfg.to_dict())
        elif prop.key == "airq.obs_dim":
            prop.value = str(attitude_cfg.obs_dim)
    onnx.checker.check_model(model)
    return plain, model.SerializeToString()
