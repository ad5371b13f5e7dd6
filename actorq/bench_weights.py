"""The cost of one weight version for ActorQ's actors: template path vs full re-export + quantize_static.

    python -m actorq.bench_weights [--networks policy3 actorq] [--versions 3] [--out out/actorq/bench_weights.json]

For each network: an int8 and an fp32 template are built once (``actorq.weights``), then for each of
``--versions`` new weight versions (the previous one plus Gaussian noise of ``--step`` times each tensor's
standard deviation, as a learner's updates would move it), interleaved in one process so a shared CPU's
drift hits all paths alike:

* int8 template: re-quantize (numpy) + serialize + onnxruntime session;
* fp32 template: copy the weights in + serialize + session;
* full: the weights into the torch network, ``policies.export`` to ONNX, ``quantize_static`` with the
  same recipe and calibration observations, serialize, session: what a broadcaster without a template
  would do for every version.

It reports medians over the versions and ratios (full / template) measured in the same run, and on
held-out observations how often each int8 model picks the fp32 network's action and its logit error.
Networks: ``policy3`` (1032-4096-512-1024-25) with the trained weights of ``--policy3-weights`` when that
file exists (the shipped Policy III), else torch's initialisation; ``actorq`` (1032-4096x3-25, the ActorQ study's
ActorQ network) and ``policy1``/``policy2`` with torch's initialisation (seed ``--seed``). Observations come
from ``nav_env``'s scripted heuristic flying ``default`` (calibration seeds 2,000,000+, held-out 3,000,000+).
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from actorq.tasks import heuristic_observations
from airq_cli import ArgumentParser, output_file, run, write_json
from airq_cli.contract import UserError
from firmware_bridge.device import cpu_model, format_versions, package_versions
from firmware_bridge.int8_kernels import int8_kernels

if TYPE_CHECKING:
    from actorq.holder import VersionTiming
    from actorq.weights import TemplateInfo

NETWORK_CHOICES = ("policy1", "policy2", "policy3", "actorq")


@dataclass(frozen=True)
class FullTiming:
    """The full path for one version: seconds per step."""

    export_s: float
    quantize_s: float  # quantize_static, calibration included
    serialize_s: float
    session_s: float

    @property
    def total_s(self) -> float:
        return self.export_s + self.quantize_s + self.serialize_s + self.session_s


@dataclass(frozen=True)
class Accuracy:
    """One version's int8 models against its fp32 network on held-out observations."""

    template_agreement: float  # share of observations where the int8 template picks the fp32 action
    fresh_agreement: float  # the same for a fresh quantize_static of the same weights
    template_vs_fresh: float  # the two int8 models agree
    template_logit_rmse: float  # root mean square of (int8 - fp32) logits
    fresh_logit_rmse: float


@dataclass(frozen=True)
class VersionRow:
    version: int
    int8: VersionTiming
    fp32: VersionTiming
    full: FullTiming
    accuracy: Accuracy


@dataclass
class NetworkBench:
    network: str
    layers: list[int]
    parameters: int
    weights: str  # where version 0 came from
    int8_template: TemplateInfo
    fp32_template: TemplateInfo
    rows: list[VersionRow] = field(default_factory=list)
    ratios: dict[str, float] = field(default_factory=dict)  # full / template: medians of per-version ratios
    medians: dict[str, dict[str, float]] = field(default_factory=dict)  # path -> step -> seconds

    def median(self, path: str, step: str) -> float:
        return statistics.median(getattr(getattr(r, path), step) for r in self.rows)

    def summarize(self) -> None:
        """Fill ratios and medians from the rows (each ratio compares paths on the same version)."""
        steps = {
            "int8": ("requantize_s", "serialize_s", "session_s", "total_s"),
            "fp32": ("requantize_s", "serialize_s", "session_s", "total_s"),
            "full": ("export_s", "quantize_s", "serialize_s", "session_s", "total_s"),
        }
        self.medians = {path: {step: self.median(path, step) for step in names} for path, names in steps.items()}
        self.ratios = {
            "full_over_int8_template": statistics.median(r.full.total_s / r.int8.total_s for r in self.rows),
            "full_over_fp32_template": statistics.median(r.full.total_s / r.fp32.total_s for r in self.rows),
            "int8_template_over_fp32_template": statistics.median(r.int8.total_s / r.fp32.total_s for r in self.rows),
        }


@dataclass
class BenchResult:
    command: str
    machine: dict[str, str]
    settings: dict[str, float | int | str]
    networks: list[NetworkBench]


def _network(name: str, policy3_weights: Path, seed: int):
    # deferred: torch (via actorq.nets): seconds to import
    from actorq.nets import actor_from_onnx, network_actor

    if name == "policy3" and policy3_weights.is_file():
        return actor_from_onnx(policy3_weights), str(policy3_weights)
    return network_actor(name, seed=seed), f"torch default initialisation, seed {seed}"


def _next_version(weights: dict, base_std: dict, step: float, rng) -> dict:
    return {
        k: (v + rng.standard_normal(v.shape, dtype="float32") * (step * base_std[k])).astype("float32")
        for k, v in weights.items()
    }


def _accuracy(fp32_bytes: bytes, int8_bytes: bytes, fresh_bytes: bytes, heldout: np.ndarray) -> Accuracy:
    # deferred: onnxruntime (via quantize.runtime): ~0.2 s to import, paid only where used
    from quantize.runtime import run_logits
    from quantize.runtime import session as build_session

    a32, l32 = run_logits(build_session(fp32_bytes), heldout)
    a8, l8 = run_logits(build_session(int8_bytes), heldout)
    af, lf = run_logits(build_session(fresh_bytes), heldout)
    return Accuracy(
        float(np.mean(a8 == a32)),
        float(np.mean(af == a32)),
        float(np.mean(a8 == af)),
        float(np.sqrt(np.mean((l8 - l32) ** 2))),
        float(np.sqrt(np.mean((lf - l32) ** 2))),
    )


def bench_network(
    name: str,
    versions: int,
    calibration: np.ndarray,
    heldout: np.ndarray,
    step: float,
    seed: int,
    policy3_weights: Path,
) -> NetworkBench:
    # deferred: onnxruntime, torch, onnx (via actorq.holder, actorq.nets, actorq.weights, quantize.runtime): ~0.2 s to import, paid only where used
    from actorq.holder import ActorSession, VersionTiming
    from actorq.nets import actor_weights, load_weights
    from actorq.weights import Fp32Template, Int8Template, fresh_int8
    from quantize.runtime import session as build_session

    actor, source = _network(name, policy3_weights, seed)
    weights = actor_weights(actor)
    int8_t = Int8Template(actor, calibration)
    fp32_t = Fp32Template(actor)
    layers = [actor.obs_dim] + [m.out_features for m in actor.body if hasattr(m, "out_features")]
    layers.append(actor.head.out_features)
    result = NetworkBench(name, layers, int8_t.info.parameters, source, int8_t.info, fp32_t.info)
    holders = {"int8": ActorSession(), "fp32": ActorSession()}
    for holder, template in ((holders["int8"], int8_t), (holders["fp32"], fp32_t)):
        holder.load(template.build(weights, 0))
    rng = np.random.default_rng(seed)
    base_std = {k: float(v.std()) for k, v in weights.items()}
    for version in range(1, versions + 1):
        weights = _next_version(weights, base_std, step, rng)
        timings: dict[str, VersionTiming] = {}
        full: FullTiming | None = None
        fresh_bytes = int8_bytes = fp32_bytes = b""
        paths = ["int8", "fp32", "full"]
        for path in paths[version % 3 :] + paths[: version % 3]:  # rotate the order between versions
            if path == "full":
                load_weights(actor, weights)
                fresh = fresh_int8(actor, calibration)
                t0 = time.perf_counter()
                build_session(fresh.onnx)
                full = FullTiming(fresh.export_s, fresh.quantize_s, fresh.serialize_s, time.perf_counter() - t0)
                fresh_bytes = fresh.onnx
            else:
                template = int8_t if path == "int8" else fp32_t
                model = template.build(weights, version)
                prepared = holders[path].load(model)
                if prepared is None:
                    raise RuntimeError(f"version {version} was not taken")
                timings[path] = VersionTiming.of(model, prepared)
                if path == "int8":
                    int8_bytes = model.onnx
                else:
                    fp32_bytes = model.onnx
        assert full is not None
        accuracy = _accuracy(fp32_bytes, int8_bytes, fresh_bytes, heldout)
        result.rows.append(VersionRow(version, timings["int8"], timings["fp32"], full, accuracy))
    result.summarize()
    return result


def machine() -> dict[str, str]:
    # deferred: torch: seconds to import
    import torch

    return {
        "cpu": cpu_model(),
        "int8_kernels": int8_kernels().describe(),
        "threads": f"torch {torch.get_num_threads()} (export), onnxruntime sessions 1 (actors), quantize_static's calibration onnxruntime's default",
        "versions": format_versions(package_versions()),
        "load_average": " ".join(f"{x:.2f}" for x in os.getloadavg()),
    }


def bench(
    networks: list[str],
    versions: int = 3,
    calibration_obs: int = 1024,
    heldout_obs: int = 2000,
    step: float = 0.01,
    seed: int = 0,
    policy3_weights: Path = Path("models/policy3_fp32.onnx"),
    command: str = "",
) -> BenchResult:
    """The whole benchmark as a typed result (prints nothing)."""
    # deferred: onnxruntime (via quantize.calibration): ~0.2 s to import, paid only where used
    from quantize.calibration import CALIBRATION_SEED, HELDOUT_SEED

    calibration = heuristic_observations(16, CALIBRATION_SEED, calibration_obs)
    heldout = heuristic_observations(16, HELDOUT_SEED, heldout_obs)
    before = machine()
    rows = [bench_network(n, versions, calibration, heldout, step, seed, policy3_weights) for n in networks]
    after = machine()
    after["load_average"] = f"before {before['load_average']}, after {after['load_average']} (1, 5, 15 min)"
    settings: dict[str, float | int | str] = {
        "versions": versions,
        "calibration_obs": len(calibration),
        "heldout_obs": len(heldout),
        "step": step,
        "seed": seed,
    }
    return BenchResult(command, after, settings, rows)


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:,.0f} ms" if seconds >= 0.01 else f"{seconds * 1e3:.1f} ms"


def report(result: BenchResult) -> str:
    lines = [
        f"machine: {result.machine['cpu']}; {result.machine['int8_kernels']}",
        f"versions: {result.machine['versions']}",
        f"load average: {result.machine['load_average']}",
    ]
    s = result.settings
    lines.append(
        f"{s['versions']} weight versions per network (step {s['step']} x each tensor's std), "
        f"{s['calibration_obs']} calibration and {s['heldout_obs']} held-out observations; medians over versions"
    )
    for nb in result.networks:
        t8 = nb.int8_template
        lines += [
            "",
            f"{nb.network}: {' -> '.join(map(str, nb.layers))}, {nb.parameters / 1e6:.2f}M parameters ({nb.weights})",
            f"  int8 template, once: export {_ms(t8.export_s)}, quantize_static {_ms(t8.quantize_s)}, "
            f"self-check {_ms(t8.verify_s)}",
            f"  {'path':<34}{'weights in':>13}{'serialize':>11}{'session':>11}{'total':>11}",
        ]
        for label, key in (("int8 template: re-quantize", "int8"), ("fp32 template: copy", "fp32")):
            lines.append(
                f"  {label:<34}{_ms(nb.median(key, 'requantize_s')):>13}{_ms(nb.median(key, 'serialize_s')):>11}"
                f"{_ms(nb.median(key, 'session_s')):>11}{_ms(nb.median(key, 'total_s')):>11}"
            )
        lines.append(
            f"  full: export {_ms(nb.median('full', 'export_s'))} + quantize_static {_ms(nb.median('full', 'quantize_s'))}"
            f" + serialize {_ms(nb.median('full', 'serialize_s'))} + session {_ms(nb.median('full', 'session_s'))}"
            f" = {_ms(nb.median('full', 'total_s'))}"
        )
        r = nb.ratios
        lines.append(
            f"  full / int8 template {r['full_over_int8_template']:.1f}x; full / fp32 template "
            f"{r['full_over_fp32_template']:.1f}x; int8 template / fp32 template {r['int8_template_over_fp32_template']:.2f}x"
        )
        acc = [row.accuracy for row in nb.rows]
        lines.append(
            "  held-out agreement with fp32: template "
            + ", ".join(f"{a.template_agreement:.2%}" for a in acc)
            + "; fresh "
            + ", ".join(f"{a.fresh_agreement:.2%}" for a in acc)
            + "; template vs fresh "
            + ", ".join(f"{a.template_vs_fresh:.2%}" for a in acc)
        )
        lines.append(
            "  logit RMS error vs fp32: template "
            + ", ".join(f"{a.template_logit_rmse:.4f}" for a in acc)
            + "; fresh "
            + ", ".join(f"{a.fresh_logit_rmse:.4f}" for a in acc)
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = ArgumentParser(prog="python -m actorq.bench_weights", description=__doc__.split("\n")[0])
    p.add_argument("--networks", nargs="+", choices=NETWORK_CHOICES, default=["policy3", "actorq"])
    p.add_argument("--versions", type=int, default=3, help="new weight versions per network")
    p.add_argument("--calibration-obs", type=int, default=1024, help="observations calibrating the int8 models")
    p.add_argument("--heldout-obs", type=int, default=2000, help="observations for agreement and logit error")
    p.add_argument("--step", type=float, default=0.01, help="noise per version, in units of each tensor's std")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--policy3-weights", type=Path, default=Path("models/policy3_fp32.onnx"))
    p.add_argument("--out", type=output_file, help="write the figures as JSON here")
    args = p.parse_args(argv)
    if args.versions < 1 or args.calibration_obs < 1 or args.heldout_obs < 1:
        raise UserError("--versions, --calibration-obs and --heldout-obs must be >= 1")
    if args.step < 0:
        raise UserError("--step must be >= 0")
    # deferred: torch: seconds to import
    import torch

    torch.set_num_threads(1)
    command = "python -m actorq.bench_weights " + " ".join(sys.argv[1:] if argv is None else argv)
    result = bench(
        args.networks,
        args.versions,
        args.calibration_obs,
        args.heldout_obs,
        args.step,
        args.seed,
        args.policy3_weights,
        command.strip(),
    )
    print(report(result))
    if args.out:
        write_json(args.out, result)
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(run(main))
