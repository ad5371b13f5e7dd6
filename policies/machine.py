"""Machine description for model cards and benchmarks."""

from __future__ import annotations

import os
import platform

import numpy

from firmware_bridge.device import cpu_model  # the one description of a CPU, the device's and the host's


def machine_info() -> dict:
    # deferred: torch: seconds to import
    import torch

    return {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": numpy.__version__,
    }
