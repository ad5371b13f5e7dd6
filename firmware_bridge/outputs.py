"""Do two machines compute the same actions? Record policies' outputs on one, check them on another.

    # machine A (e.g. the host): observations from seeded flights, then the policies' outputs on them
    python -m quantize observations models/policy1_fp32.onnx --level default -o obs.npy
    python -m firmware_bridge.outputs record models/*.onnx --observations obs.npy -o outputs_a.npz
    # machine B (e.g. a Pi, or a host with another CPU): the same files, the recording copied over
    python -m firmware_bridge.outputs check outputs_a.npz --models models/

``record`` runs each policy the way the bridge does (firmware_bridge.policy: one observation per call,
one thread) and stores, per policy, its sha256, every action and the logits, beside the observations
themselves and the machine (CPU, int8 instructions, onnxruntime version). ``check`` runs the same
policies (found by sha256 among ``--models``) on the stored observations and reports per policy: rows
whose logits are bit-identical, the largest absolute difference, and action agreement. It exits 0 when
every policy was found, whatever the differences (they are the result), and 1 when one is missing.
Part of the device install (numpy and onnxruntime only), so it runs on the Pi itself.
"""

from __future__ import annotations

import io
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from firmware_bridge import __version__
from firmware_bridge.cli import OneLineArgumentParser, UsageError, check_output_file, fail, write_atomic
from firmware_bridge.device import cpu_model
from firmware_bridge.int8_kernels import int8_kernels
from firmware_bridge.protocol import sha256_hex

if TYPE_CHECKING:
    from firmware_bridge.policy import Policy

PROG = "firmware_bridge.outputs"


@dataclass(frozen=True)
class PolicyComparison:
    name: str
    sha256: str
    rows: int
    bit_identical_rows: int  # rows whose logits (or box action) are the same float32 bits
    max_abs_difference: float
    action_agreement: float  # fraction of rows with the same action


@dataclass(frozen=True)
class Check:
    recorded_on: dict[str, str]
    checked_on: dict[str, str]
    policies: list[PolicyComparison]
    missing: list[str]  # names of recorded policies with no file of that sha256 among the models


# onnxruntime loads inside the functions below, so a mistake on the command line is reported at once.


def machine() -> dict[str, str]:
    kernels = int8_kernels()
    return {
        "cpu": cpu_model(),
        "int8": kernels.cpu_features,
        "u8s8_exact": str(kernels.u8s8_exact),
        "s8s8_exact": str(kernels.s8s8_exact),
        "onnxruntime": kernels.onnxruntime,
        "numpy": np.__version__,
        "bridge": __version__,
    }


def run_policy(policy: Policy, observations: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(actions, values) per observation, one call each: values are the logits, or a box policy's action."""
    actions, values = [], []
    for row in observations:
        action, _, logits = policy.act(row[None, :])
        actions.append(action)
        values.append(np.frombuffer(logits, "<f4") if logits is not None else np.asarray(action, np.float32))
    return np.asarray(actions), np.stack(values)


def load_observations(path: Path) -> np.ndarray:
    try:
        observations = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise UsageError(f"cannot read observations {path}: {exc}") from None
    if observations.ndim != 2 or not np.issubdtype(observations.dtype, np.floating):
        raise UsageError(
            f"{path}: expected a float array [rows, obs_dim], got {observations.dtype} {observations.shape}"
        )
    return np.ascontiguousarray(observations, np.float32)


def record(models: list[Path], observations: np.ndarray, out: Path) -> int:
    """Write the recording (an .npz, atomically); returns how many policies it holds."""
    # deferred: onnxruntime (via firmware_bridge.policy): ~0.2 s to import, paid only where used
    from firmware_bridge.policy import load_policy_file

    arrays: dict[str, np.ndarray] = {"observations": observations}
    index = []
    for number, path in enumerate(models):
        policy = load_policy_file(str(path), threads=1, name=path.name)
        actions, values = run_policy(policy, observations)
        arrays[f"actions_{number}"], arrays[f"values_{number}"] = actions, values
        index.append({"name": path.name, "sha256": policy.sha256})
    header = {"machine": machine(), "policies": index}
    arrays["header"] = np.frombuffer(json.dumps(header).encode(), np.uint8)
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **arrays)  # type: ignore[arg-type]
    write_atomic(out, buffer.getvalue())
    return len(index)


def check(recording: Path, model_paths: list[Path]) -> Check:
    """Run the recorded policies (found by sha256 among ``model_paths``) on the recorded observations."""
    # deferred: onnxruntime (via firmware_bridge.policy): ~0.2 s to import, paid only where used
    from firmware_bridge.policy import load_policy_file

    try:
        with np.load(recording, allow_pickle=False) as data:
            stored = {key: data[key] for key in data.files}
        header = json.loads(bytes(stored["header"]).decode())
    except (OSError, ValueError, KeyError) as exc:
        raise UsageError(f"{recording} is not a recording of {PROG} record: {exc}") from None
    by_sha: dict[str, Path] = {}
    for path in model_paths:
        by_sha.setdefault(sha256_hex(path.read_bytes()), path)
    observations = stored["observations"]
    comparisons: list[PolicyComparison] = []
    missing: list[str] = []
    for number, entry in enumerate(header["policies"]):
        found = by_sha.get(entry["sha256"])
        if found is None:
            missing.append(entry["name"])
            continue
        actions, values = run_policy(load_policy_file(str(found), threads=1, name=found.name), observations)
        recorded_values = stored[f"values_{number}"]
        same_bits = np.all(values.view(np.uint32) == recorded_values.view(np.uint32), axis=1)
        same_action = np.all(
            actions.reshape(len(actions), -1) == stored[f"actions_{number}"].reshape(len(actions), -1), 1
        )
        comparisons.append(
            PolicyComparison(
                name=entry["name"],
                sha256=entry["sha256"],
                rows=len(observations),
                bit_identical_rows=int(same_bits.sum()),
                max_abs_difference=float(np.max(np.abs(values - recorded_values))),
                action_agreement=float(same_action.mean()),
            )
        )
    return Check(header["machine"], machine(), comparisons, missing)


def _model_files(paths: list[str]) -> list[Path]:
    files: list[Path] = []
    for text in paths:
        path = Path(text)
        if path.is_dir():
            files += sorted(path.glob("*.onnx"))
        elif path.is_file():
            files.append(path)
        else:
            raise UsageError(f"{path}: no such model file or folder")
    if not files:
        raise UsageError(f"no .onnx files in {' '.join(paths)}")
    return files


def _describe(machine_info: dict[str, str]) -> str:
    return f"{machine_info['cpu']} ({machine_info['int8']}), onnxruntime {machine_info['onnxruntime']}"


def main(argv: list[str] | None = None) -> int:
    parser = OneLineArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    rec = commands.add_parser("record", help="run policies on observations, write their outputs")
    rec.add_argument("models", nargs="+", help="ONNX policy files, or folders of them")
    rec.add_argument("--observations", required=True, help="float32 .npy [rows, obs_dim] (quantize observations)")
    rec.add_argument("-o", "--out", required=True, help="the recording (.npz) to write")
    chk = commands.add_parser("check", help="run the recorded policies here and compare")
    chk.add_argument("recording", help="an .npz written by record (on any machine)")
    chk.add_argument("--models", nargs="+", default=["models"], help="ONNX files or folders holding the policies")
    chk.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args(argv)
    try:
        if args.command == "record":
            out = check_output_file(args.out, "--out")
            observations = load_observations(Path(args.observations))
            recorded = record(_model_files(args.models), observations, out)
            print(f"recorded {recorded} policies on {len(observations)} observations to {out}")
            return 0
        result = check(Path(args.recording), _model_files(args.models))
    except UsageError as exc:
        fail(str(exc), prog=PROG)
    if args.json:
        print(json.dumps(asdict(result), indent=2))
    else:
        print(f"recorded on: {_describe(result.recorded_on)}")
        print(f"checked on:  {_describe(result.checked_on)}")
        print(f"{'policy':<36} {'bit-identical rows':>20} {'max |diff|':>12} {'same action':>12}")
        for p in result.policies:
            print(
                f"{p.name:<36} {p.bit_identical_rows:>9} of {p.rows:<8} {p.max_abs_difference:>12.3g} "
                f"{100 * p.action_agreement:>11.2f}%"
            )
        for name in result.missing:
            print(f"{name:<36} not found among --models (by sha256)")
    if result.missing:
        print(f"error: {len(result.missing)} recorded policies not found among --models", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
