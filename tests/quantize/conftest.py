import sys
import warnings
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(scope="session")
def bc_actor():
    import torch
    from helpers import behaviour_cloned_actor

    torch.set_num_threads(1)
    return behaviour_cloned_actor()


@pytest.fixture(scope="session")
def fp32_model(bc_actor, tmp_path_factory) -> Path:
    from helpers import export_onnx

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation notice
        data = export_onnx(bc_actor)
    path = tmp_path_factory.mktemp("models") / "bc_fp32.onnx"
    path.write_bytes(data)
    return path


@pytest.fixture(scope="session")
def quantized_models(fp32_model) -> dict[str, Path]:
    from quantize.ptq import quantize_file

    out = {}
    for target in ("int8", "int8-dynamic", "fp16"):
        path = fp32_model.parent / f"bc_{target}.onnx"
        quantize_file(fp32_model, target, path, calibration_episodes=6, heldout_episodes=0)
        out[target] = path
    return out
