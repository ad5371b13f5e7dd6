"""The aarch64 bridge (real process under qemu, -cpu cortex-a53/a72/a76) computes the same policy as the native one.

Both bridges get the same recorded nav_env observations one act at a time over TCP through
firmware_bridge.client.BridgeClient, exactly as in the control loop.
"""

from __future__ import annotations

import numpy as np
import pytest
from arm_helpers import FIGURES, RECORDING, run_all

pytestmark = pytest.mark.arm

FP32_LOGIT_TOL = 1e-5
# static int8 in the u8s7 scheme computes the same integers on x86 (AVX2 or VNNI) and Arm (NEON or
# dot-product): identical actions, and logits that differ at most by float rounding in the fp32 logits
# layer. (Full-range u8s8 files differed on 7 of 2051 actions, by up to 0.26, on an AVX2-only host.)
INT8_STATIC_LOGIT_TOL = 1e-4
# dynamic int8 computes its activation scales in float per call: reported, not judged (0.016 measured)
INT8_LOGIT_TOL = 0.05
INT8_MIN_AGREEMENT = 0.995


def test_emulated_bridge_is_aarch64_with_the_same_releases(native_bridge, emulated_bridge, emulated_cpu):
    native, emulated = native_bridge.hello().device, emulated_bridge.hello().device
    assert native is not None and emulated is not None
    assert emulated["machine"] == "aarch64" and native["machine"] != "aarch64"
    assert emulated_cpu.replace("cortex-a", "Cortex-A") in emulated["cpu_model"]
    for key in ("onnxruntime_version", "numpy_version", "pyzmq_version", "msgpack_version", "bridge_version"):
        assert emulated[key] == native[key], key
    FIGURES.append(
        f"emulated device: {emulated['machine']}, {emulated['cpu_model']}, python {emulated['python_version']}, "
        f"onnxruntime {emulated['onnxruntime_version']}, numpy {emulated['numpy_version']}, "
        f"pyzmq {emulated['pyzmq_version']} (native: {native['machine']}, python {native['python_version']})"
    )


def test_same_actions_and_logits(policies, recorded_obs, native_bridge, emulated_bridge, emulated_cpu):
    n = len(recorded_obs)
    recorded = (f"{n} observations recorded from {RECORDING['episodes']} nav_env episodes (level default, seeds "
                f"{RECORDING['seeds']}, flown by {RECORDING['policy']} with 10% random actions)")  # fmt: skip
    if recorded not in FIGURES:
        FIGURES.append(recorded)
    failures = []
    reference = None  # native fp32 actions: how far each other precision is from fp32, natively and emulated
    for p in policies:
        for client in (native_bridge, emulated_bridge):
            info = client.load_policy(p.path)
            assert info.action_space.startswith("discrete:") and info.obs_dim == recorded_obs.shape[1]
        a_nat, l_nat, rtt_nat = run_all(native_bridge, recorded_obs)
        a_emu, l_emu, rtt = run_all(emulated_bridge, recorded_obs)
        if p.precision == "fp32" and reference is None:
            reference = a_nat
        agree = float(np.mean(a_nat == a_emu))
        if l_nat is None or l_emu is None:  # a policy without a logits output: actions only
            max_diff, logit_text = 0.0, "no logits output (actions compared only)"
        else:
            max_diff = float(np.max(np.abs(l_nat - l_emu)))
            spread = float(np.median(l_nat.max(axis=1) - l_nat.min(axis=1)))
            logit_text = f"max |logit diff| {max_diff:.3g} (median logit range {spread:.1f})"
        vs_fp32 = ""
        if p.precision != "fp32" and reference is not None:
            vs_fp32 = f"; same action as fp32: native {np.mean(a_nat == reference):.2%}, emulated {np.mean(a_emu == reference):.2%}"
        FIGURES.append(
            f"{emulated_cpu}: {p.label} [{p.source}] actions identical {agree:.2%} ({int((a_nat != a_emu).sum())}/{n} "
            f"differ), {logit_text}{vs_fp32}; round trip p50 emulated {np.median(rtt) / 1e3:.0f} us, native "
            f"{np.median(rtt_nat) / 1e3:.0f} us"
            + ("" if p.precision in ("fp32", "int8") else " (reported, not judged)")
        )
        if p.precision == "fp32":
            if not (agree == 1.0 and max_diff <= FP32_LOGIT_TOL):
                failures.append(
                    f"{emulated_cpu} {p.label}: fp32 agreement {agree:.4%}, max logit diff {max_diff:.3g} > {FP32_LOGIT_TOL}"
                )
        elif p.precision == "int8" and not (agree == 1.0 and max_diff <= INT8_STATIC_LOGIT_TOL):
            failures.append(
                f"{emulated_cpu} {p.label}: int8 actions identical {agree:.4%} (need 100%), max logit diff "
                f"{max_diff:.3g} (tol {INT8_STATIC_LOGIT_TOL})"
            )
    assert not failures, "; ".join(failures)


def test_unpinned_cpu_model_is_caught(policies, recorded_obs, native_bridge, arm_stack):
    """Control: under qemu's default CPU model (`max`: SVE, i8mm) onnxruntime's dynamic-int8 kernels
    return wrong logits (qemu 7.2). The comparison above must see that, or it proves nothing; this is
    why device_emulation.arm always pins -cpu cortex-a72. Skips if this qemu no longer shows the fault."""
    import dataclasses

    from firmware_bridge.client import BridgeClient
    from firmware_bridge.launcher import BridgeProcess

    p = next(p for p in policies if p.dynamic)
    obs = recorded_obs[::8]
    native_bridge.load_policy(p.path)
    a_nat, l_nat, _ = run_all(native_bridge, obs)
    process = BridgeProcess(["--threads", "1", "--actuator", "mock"], startup_timeout_s=120)
    process.args = dataclasses.replace(arm_stack, cpu="max").python_command(process.args[1:])
    with process, BridgeClient(process.endpoint, timeout_s=5.0, load_timeout_s=120) as client:
        client.load_policy(p.path)
        a_max, l_max, _ = run_all(client, obs)
    agree, max_diff = float(np.mean(a_nat == a_max)), float(np.max(np.abs(l_nat - l_max)))
    caught = not (agree >= INT8_MIN_AGREEMENT and max_diff <= INT8_LOGIT_TOL)
    FIGURES.append(
        f"control, -cpu max (qemu's default, never used by device_emulation.arm): {p.label} actions identical {agree:.2%}, "
        f"max |logit diff| {max_diff:.2f}: " + ("caught by the comparison" if caught else "not reproduced")
    )
    if not caught:
        pytest.skip(f"this qemu computes dynamic int8 correctly under -cpu max (max diff {max_diff:.2g})")
    assert caught


HWCAP_CODE = """
import ctypes, json
libc = ctypes.CDLL(None)
libc.getauxval.restype = ctypes.c_ulong
hwcap, hwcap2 = libc.getauxval(16), libc.getauxval(26)  # AT_HWCAP, AT_HWCAP2
print(json.dumps({"asimd": bool(hwcap >> 1 & 1), "asimddp": bool(hwcap >> 20 & 1), "sve": bool(hwcap >> 22 & 1),
                  "i8mm": bool(hwcap2 >> 13 & 1)}))
"""


@pytest.mark.parametrize(("cpu", "dotprod"), [("cortex-a53", False), ("cortex-a72", False), ("cortex-a76", True)])
def test_guest_sees_the_pi_cores_features(arm_stack, cpu, dotprod):
    """onnxruntime picks its Arm kernels from these bits (getauxval): the Pi 4's core has no
    dot-product instructions, the Pi 5's has; none has SVE or i8mm (qemu's `max` has both)."""
    import json
    import subprocess

    from device_emulation.arm import prepare

    r = subprocess.run(prepare(cpu=cpu).python_command(["-c", HWCAP_CODE]), capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    caps = json.loads(r.stdout)
    assert caps == {"asimd": True, "asimddp": dotprod, "sve": False, "i8mm": False}
    FIGURES.append(f"{cpu}: guest CPU features {caps}")


@pytest.mark.parametrize("cpu", ["cortex-a53", "cortex-a72", "cortex-a76"])
def test_s8s8_is_exact_on_the_pi_cores(arm_stack, policies, recorded_obs, tmp_path_factory, cpu):
    """The 8-bit-weight scheme (s8s8: int8 activations x int8 weights in [-127, 127]) on each Pi core: the
    probe says every scheme exact, and Policy I in s8s8 takes the native host's actions on every recorded
    observation, its logits within the fp32 logits layer's float rounding (firmware_bridge.outputs check)."""
    import json
    import subprocess

    from device_emulation.arm import prepare
    from firmware_bridge.outputs import record
    from quantize.options import StaticInt8Options
    from quantize.ptq import quantize_file

    source = next((p.path for p in policies if p.precision == "fp32"), None)
    out = tmp_path_factory.mktemp(f"s8s8_{cpu}")
    model = out / "models" / "policy_s8s8.onnx"
    quantize_file(
        source, "int8", model, calibration_episodes=10, heldout_episodes=0, options=StaticInt8Options(scheme="s8s8")
    )
    record([model], recorded_obs[:500], out / "native.npz")
    stack = prepare(cpu=cpu)
    probe_code = (
        "import json; from firmware_bridge.int8_kernels import run_probe; print(json.dumps(run_probe().as_dict()))"
    )
    r = subprocess.run(stack.python_command(["-c", probe_code]), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    probe = json.loads(r.stdout)
    assert (probe["u8s8_exact"], probe["u8s7_exact"], probe["s8s8_exact"], probe["kind"]) == (True, True, True, "exact")
    argv = ["-m", "firmware_bridge.outputs", "check", str(out / "native.npz"), "--models", str(model.parent), "--json"]
    r = subprocess.run(stack.python_command(argv), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    (got,) = json.loads(r.stdout)["policies"]
    FIGURES.append(
        f"{cpu}: s8s8 {source.name} quantized here: actions identical {got['action_agreement']:.2%} on {got['rows']} "
        f"observations, logits bit-identical in {got['bit_identical_rows']}, max |diff| {got['max_abs_difference']:.3g}"
    )
    assert got["action_agreement"] == 1.0 and got["max_abs_difference"] <= INT8_STATIC_LOGIT_TOL, got
