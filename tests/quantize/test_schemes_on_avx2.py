"""The int8 schemes on an x86 CPU with AVX2 and without VNNI, emulated: ``qemu-x86_64-static -cpu Haswell``
runs this venv's Python, so onnxruntime takes its AVX2 kernels whatever CPU the tests run on.

One real policy (models/policy1_fp32.onnx) quantized in u8s7, u8s8 and s8s8, recorded natively with
``firmware_bridge.outputs record`` and checked under the emulated CPU with ``check``: the probe there must
say u8s8 saturates while u8s7 and s8s8 are exact, and the files must behave as it says: s8s8 (8-bit
weights) and u8s7 bit-identical to the native outputs, u8s8 not (when the native host is exact). On a
native host that saturates too, u8s8 is the same on both and s8s8 then differs from u8s8 natively.

Needs qemu-x86_64-static (Debian's qemu-user-static) on an x86_64 host: skipped with the reason without it,
a failure with AIRQ_REQUIRE_QEMU_X86=1 (.ci/run sets it).
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from firmware_bridge.int8_kernels import int8_kernels
from quantize.options import StaticInt8Options

ROOT = Path(__file__).resolve().parents[2]
SCHEMES = ("u8s7", "u8s8", "s8s8")


def _qemu() -> str:
    qemu = shutil.which("qemu-x86_64-static")
    reason = None
    if platform.machine() != "x86_64":
        reason = f"the emulated AVX2 CPU needs an x86_64 host, this is {platform.machine()}"
    elif qemu is None:
        reason = "qemu-x86_64-static is not installed (apt-get install qemu-user-static)"
    if reason:
        if os.environ.get("AIRQ_REQUIRE_QEMU_X86") == "1":
            pytest.fail(f"AIRQ_REQUIRE_QEMU_X86=1 but {reason}")
        pytest.skip(reason)
    return qemu


def _haswell(qemu: str, *args: str) -> str:
    r = subprocess.run(
        [qemu, "-cpu", "Haswell", sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout


@pytest.fixture(scope="module")
def scheme_files(tmp_path_factory) -> tuple[Path, Path, Path]:
    """(models dir, observations .npy, native recording .npz) for Policy I in every scheme."""
    from firmware_bridge.outputs import record
    from nav_env.config import load_level
    from quantize.calibration import HELDOUT_SEED, collect_observations
    from quantize.ptq import quantize_file
    from quantize.runtime import policy_fn, session

    out = tmp_path_factory.mktemp("schemes")
    models = out / "models"
    src = ROOT / "models" / "policy1_fp32.onnx"
    for scheme in SCHEMES:
        quantize_file(
            src,
            "int8",
            models / f"policy1_{scheme}.onnx",
            calibration_episodes=20,
            heldout_episodes=0,
            options=StaticInt8Options(scheme=scheme),
        )
    obs = collect_observations(policy_fn(session(src)), load_level("default"), 8, HELDOUT_SEED, 500)
    np.save(out / "obs.npy", obs)
    record(sorted(models.glob("*.onnx")), obs, out / "native.npz")
    return models, out / "obs.npy", out / "native.npz"


def test_emulated_avx2_computes_the_schemes_as_its_probe_says(scheme_files):
    qemu = _qemu()
    models, _, recording = scheme_files
    probe = json.loads(
        _haswell(
            qemu,
            "-c",
            "import json; from firmware_bridge.int8_kernels import run_probe; print(json.dumps(run_probe().as_dict()))",
        )
    )
    assert probe["error"] is None
    assert (probe["u8s8_exact"], probe["u8s7_exact"], probe["s8s8_exact"]) == (False, True, True), probe
    assert probe["kind"] == "saturating U8S8"

    check = json.loads(
        _haswell(qemu, "-m", "firmware_bridge.outputs", "check", str(recording), "--models", str(models), "--json")
    )
    assert not check["missing"]
    got = {p["name"].removeprefix("policy1_").removesuffix(".onnx"): p for p in check["policies"]}
    assert set(got) == set(SCHEMES)
    for scheme in ("u8s7", "s8s8"):  # exact on both CPUs: the same float32 bits in every row
        assert got[scheme]["bit_identical_rows"] == got[scheme]["rows"], (scheme, got[scheme])
    native_exact = int8_kernels().u8s8_exact
    u8s8 = got["u8s8"]
    if native_exact:  # the saturating kernel computes other logits than the exact one, and other actions
        assert u8s8["bit_identical_rows"] < u8s8["rows"] // 2, u8s8
        assert u8s8["action_agreement"] < 1.0, u8s8
    else:  # this host saturates the same way the emulated one does
        assert u8s8["bit_identical_rows"] == u8s8["rows"], u8s8


def test_s8s8_computes_u8s8s_integers_where_u8s8_is_exact(scheme_files):
    """s8s8 is u8s8 on a grid shifted by 128: natively, where U8S8 is exact, the two give the same float32
    logits on every row; where U8S8 saturates, they differ (and s8s8 is the exact one, test above)."""
    from firmware_bridge.outputs import run_policy
    from firmware_bridge.policy import load_policy_file

    models, obs_path, _ = scheme_files
    obs = np.load(obs_path)
    values = {s: run_policy(load_policy_file(str(models / f"policy1_{s}.onnx"), threads=1), obs)[1] for s in SCHEMES}
    same = np.all(values["u8s8"].view(np.uint32) == values["s8s8"].view(np.uint32), axis=1)
    if int8_kernels().u8s8_exact:
        assert same.all(), f"{(~same).sum()} of {len(same)} rows differ"
    else:
        assert not same.all()
    assert not np.array_equal(values["u8s7"], values["u8s8"])  # 7-bit weights are another model
