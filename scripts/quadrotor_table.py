"""The table of the quadrotor-trained policies from scripts/quadrotor_eval.sh's evaluations (out/quadrotor/*.json).

    python scripts/quadrotor_table.py [--dir out/quadrotor]

One row per model and level: success on the nominal Iris (fp32; int8 u8s7 and s8s8 as paired differences against
it), on the held-out X500 (paired against the same model on the Iris) and with each action landing its predicted Pi
3B time late (paired against the same model in lockstep), and the kinematic-trained model of the same preset on the
same episodes. Paired differences are Newcombe intervals over the same seeded episodes (nav_env.stats). Each target
of docs/results.md is checked and a miss says by how much. Prints markdown.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from nav_env.stats import paired_difference

TARGETS = {"default": 0.97, "hard": 0.80}  # nominal success of a quadrotor-trained fp32 model
INT8_BOUND = 0.02  # the paired interval of int8 - fp32 inside +-2 points
HELD_OUT_BOUND = 0.05  # X500 within 5 points of the Iris (the point estimate; the interval is shown)
DELAY_BOUND = 0.03  # at the Pi 3B delay within 3 points of lockstep (the point estimate; the interval is shown)


def successes(report: dict, name: str) -> list[bool]:
    return [e["outcome"] == "success" for e in report["policies"][name]["episodes"]]


def pct(x: float) -> str:
    return f"{x:.1%}"


def diff_text(d: dict, bound: float | None = None) -> str:
    """A paired difference in points with its interval; ``bound``: mark an interval that leaves +-bound."""
    text = f"{d['diff'] * 100:+.1f} ({d['low'] * 100:+.1f}..{d['high'] * 100:+.1f})"
    if bound is not None and (d["low"] < -bound or d["high"] > bound):
        text += f" **outside +-{bound * 100:.0f}**"
    return text


def rows(folder: Path) -> list[str]:
    out = [
        "| model | level | Iris fp32 | int8 - fp32 | s8s8 - fp32 | X500 fp32 (- Iris) | X500 int8 (- Iris) | "
        "Pi 3B delay fp32 (- lockstep) | Pi 3B delay int8 (- lockstep) | kinematic-trained on the Iris (on the X500) | "
        "trained on the nominal Iris (on the X500) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for nominal_path in sorted(folder.glob("*_nominal.json")):
        stem = nominal_path.name.removesuffix("_nominal.json")
        policy, level = stem.rsplit("_", 1)
        nominal = json.loads(nominal_path.read_text())
        x500 = json.loads((folder / f"{stem}_x500.json").read_text())
        names = list(nominal["policies"])
        fp32, int8, *others = names  # then s8s8 (not for Policy III), fp16, the kinematic-trained, the nominal-trained
        s8s8 = next((n for n in others if n.endswith("_s8s8.onnx")), None)
        kinematic, *nominal_trained = [n for n in others if "_quadrotor" not in n]
        base = successes(nominal, fp32)
        rate = sum(base) / len(base)
        target = TARGETS[level]
        cells = [
            f"{policy}_quadrotor",
            level,
            pct(rate) + ("" if rate >= target else f" **{(rate - target) * 100:+.1f} vs {target:.0%}**"),
        ]
        cells.append(diff_text(paired_difference(base, successes(nominal, int8)), INT8_BOUND))
        cells.append("-" if s8s8 is None else diff_text(paired_difference(base, successes(nominal, s8s8)), INT8_BOUND))
        for name in (fp32, int8):
            held = successes(x500, name)
            d = paired_difference(successes(nominal, name), held)
            cells.append(
                f"{pct(sum(held) / len(held))}: {diff_text(d, None)}"
                + ("" if d["diff"] >= -HELD_OUT_BOUND else f" **{(d['diff'] + HELD_OUT_BOUND) * 100:+.1f} beyond -5**")
            )
        for precision, name in (("fp32", fp32), ("int8", int8)):
            delayed_report = json.loads((folder / f"{stem}_pi3b_{precision}.json").read_text())
            (delayed_name,) = delayed_report["policies"]
            delayed = successes(delayed_report, delayed_name)
            d = paired_difference(successes(nominal, name), delayed)
            within = abs(d["diff"]) <= DELAY_BOUND
            cells.append(
                f"{pct(sum(delayed) / len(delayed))} at {delayed_report['latency']['source'].removeprefix('fixed:')} ms: "
                f"{diff_text(d)}" + ("" if within else f" **{(abs(d['diff']) - DELAY_BOUND) * 100:.1f} beyond +-3**")
            )
        k_iris, k_x500 = successes(nominal, kinematic), successes(x500, kinematic)
        cells.append(
            f"{kinematic.removesuffix('.onnx')}: {pct(sum(k_iris) / len(k_iris))} ({pct(sum(k_x500) / len(k_x500))})"
        )
        if nominal_trained:
            (name,) = nominal_trained
            n_iris, n_x500 = successes(nominal, name), successes(x500, name)
            cells.append(
                f"{name.removesuffix('.onnx')}: {pct(sum(n_iris) / len(n_iris))} ({pct(sum(n_x500) / len(n_x500))})"
            )
        else:
            cells.append("-")
        out.append("| " + " | ".join(cells) + " |")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python scripts/quadrotor_table.py", description=__doc__.split("\n")[0])
    p.add_argument("--dir", type=Path, default=Path("out/quadrotor"))
    args = p.parse_args(argv)
    if not any(args.dir.glob("*_nominal.json")):
        print(f"error: no evaluations in {args.dir} (run scripts/quadrotor_eval.sh first)", file=sys.stderr)
        return 2
    print("\n".join(rows(args.dir)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
