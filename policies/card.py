"""Write a model card (markdown + JSON) for a shipped ONNX model from its run directory and a
``policies.evaluate`` report.

    python -m policies.card --run runs/policy1_default --onnx models/policy1_fp32.onnx \
        --eval out/eval/policy1_default.json --command "python -m policies.train ..." -o models/policy1.md
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

from airq_cli import ArgumentParser, output_file, run, write_atomic, write_json
from firmware_bridge.device import format_versions, package_versions
from nav_env.backends import backend_named
from nav_env.rollout import HEADLINE_FIELDS
from policies.errors import UserError


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise UserError(f"{path}: cannot read JSON ({e})") from None


def build_card(run: Path, onnx_path: Path, eval_path: Path, commands: list[str], notes: list[str]) -> dict:
    # deferred: onnx: ~0.2 s to import, paid only where used
    import onnx

    metrics = _read_json(run / "metrics.json")
    report = _read_json(eval_path)
    model = onnx.load(str(onnx_path))
    meta = {p.key: p.value for p in model.metadata_props}
    entry = next((e for e in report["policies"].values() if Path(e["source"]).resolve() == onnx_path.resolve()), None)
    if entry is None:
        raise UserError(f"{eval_path}: no evaluation of {onnx_path}")
    s = entry["summary"]
    try:
        trained_in, evaluated_in = backend_named(meta.get("airq.backend")), backend_named(report.get("backend"))
    except ValueError as e:
        raise UserError(f"{onnx_path} or {eval_path}: {e}") from None
    first_hits = {}
    for target in (0.95, 0.97):
        hit = next((e for e in metrics.get("evals", []) if "timesteps" in e and e["success_rate"] >= target), None)
        first_hits[f"{target:.0%}"] = {"timesteps": hit["timesteps"], "wall_s": hit["wall_s"]} if hit else None
    return {
        "model": onnx_path.name,
        "sha256": hashlib.sha256(onnx_path.read_bytes()).hexdigest(),
        "size_bytes": onnx_path.stat().st_size,
        "preset": meta.get("airq.preset"),
        "algorithm": meta.get("airq.algorithm"),
        "level": meta.get("airq.level"),
        "backend": trained_in.name,  # the simulator it was trained in
        "dynamics": meta.get("airq.dynamics"),  # and its dynamics file, where one was given
        "env_id": meta.get("airq.env_id"),
        "observation": meta.get("airq.observation_layout"),  # what the model reads, value by value
        "precision": meta.get("airq.precision"),
        "seed": int(meta.get("airq.seed", -1)),
        "train_steps_of_checkpoint": int(meta.get("airq.train_steps", 0)),
        "checkpoint": meta.get("airq.checkpoint"),
        "distillation": {
            "method": metrics["method"],
            "teacher": metrics["teacher"],
            "args": metrics.get("distill_args"),
        }
        if "teacher" in metrics
        else None,
        "run_total_steps": metrics.get("timesteps"),
        "train_wall_s": metrics.get("train_wall_s"),
        "train_env_steps_per_s": metrics.get("env_steps_per_s"),
        "first_periodic_eval_at_or_above": first_hits,
        "machine": metrics.get("machine"),
        "versions": package_versions(),  # installed when the card was written (evaluation); training's: machine
        "commands": commands,
        "config": metrics.get("config"),
        "evaluation": {
            "level": report["level"],
            "backend": evaluated_in.name,
            "dynamics": report.get("dynamics"),
            "episodes": report["episodes"],
            "seed": report["seed"],
            "deterministic": True,
            **{k: s[k] for k in HEADLINE_FIELDS},
        },
        "paired_comparisons": [
            {k: d[k] for k in ("first", "second", "n", "diff", "low", "high", "only_first", "only_second", "mcnemar_p")}
            | {
                "second_success_rate": report["policies"][d["second"]]["summary"]["success_rate"],
                "second_success_ci95": report["policies"][d["second"]]["summary"]["success_ci95"],
            }
            for d in report.get("paired_vs_first", {}).values()
        ],
        "periodic_evals": [
            {k: e[k] for k in ("timesteps", "wall_s", "success_rate") if k in e} for e in metrics.get("evals", [])
        ],
        "notes": notes,
    }


def _training_lines(card: dict) -> list[str]:
    d = card["distillation"]
    if d is None:
        return [
            f"- seed {card['seed']}; checkpoint `{card['checkpoint']}` at {card['train_steps_of_checkpoint']:,} env steps "
            f"(best periodic evaluation on held-out seeds 1,000,000+) of a {card['run_total_steps']:,}-step run",
            f"- wall time {card['train_wall_s'] / 60:.1f} min for the whole run including periodic evaluations "
            f"({card['train_env_steps_per_s']:,.0f} env steps/s including updates)",
        ]
    evals = card["periodic_evals"]
    return [
        f"- {d['method']} from the teacher `{d['teacher']['run']}` ({d['teacher']['checkpoint']}); seed {card['seed']}; "
        f"no RL steps; checkpoint `{card['checkpoint']}`",
        f"- {len(evals)} iterations x {d['args']['samples_per_iteration']:,} teacher-labelled observations, "
        f"{d['args']['epochs']} epoch(s) over the aggregate per iteration, batch {d['args']['batch_size']}, "
        f"Adam lr {d['args']['lr']}",
        "- held-out success (200 episodes, seeds 1,000,000+) per iteration: "
        + ", ".join(f"{e['success_rate']:.1%}" for e in evals),
        f"- wall time {card['train_wall_s'] / 60:.1f} min",
    ]


def _comparison_lines(card: dict) -> list[str]:
    lines = []
    for d in card["paired_comparisons"]:
        lo, hi = d["second_success_ci95"]
        lines += [
            "",
            f"Paired on the same {d['n']} episodes, {d['second']} succeeds {d['second_success_rate']:.1%} "
            f"({lo:.1%} - {hi:.1%}): this model minus {d['second']} = {-d['diff']:+.1%} "
            f"(95% CI {-d['high']:+.1%} to {-d['low']:+.1%}; episodes only this model solves {d['only_first']}, "
            f"only {d['second']} {d['only_second']}; McNemar exact p = {d['mcnemar_p']:.2g}).",
        ]
    return lines


def to_markdown(card: dict) -> str:
    ev = card["evaluation"]
    lo, hi = ev["success_ci95"]
    m = card["machine"] or {}
    lines = [
        f"# {card['model']}",
        "",
        f"{card['preset']} ({card['algorithm'].upper()}, ReLU MLP), level `{card['level']}` ({card['env_id']}"
        + (
            ""
            if (trained_in := backend_named(card.get("backend"))).is_default
            else f", trained in the {trained_in.name} backend"
            + (f" with `{card['dynamics']}`" if card.get("dynamics") else "")
        )
        + "), "
        + f"{card['precision']}, {card['size_bytes'] / 1e6:.2f} MB, sha256 `{card['sha256'][:16]}...`",
        "",
        *([f"Observation: {card['observation']}", ""] if card.get("observation") else []),
        "## Evaluation",
        f"`policies.evaluate` over {ev['episodes']} seeded episodes (seeds {ev['seed']}..{ev['seed'] + ev['episodes'] - 1}, "
        f"level `{ev['level']}`, {backend_named(ev.get('backend')).name} simulator"
        + (f" with `{ev['dynamics']}`" if ev.get("dynamics") else "")
        + ", all goal zones, deterministic actions; training "
        "and model selection never saw these seeds):",
        "",
        "| success | Wilson 95% CI | collision | timeout | mean return | mean steps | path / straight |",
        "|---|---|---|---|---|---|---|",
        f"| {ev['success_rate']:.1%} | {lo:.1%} - {hi:.1%} | {ev['collision_rate']:.1%} | {ev['timeout_rate']:.1%} | "
        f"{ev['mean_return']:.2f} | {ev['mean_steps']:.1f} | "
        f"{'-' if ev['path_efficiency'] is None else format(ev['path_efficiency'], '.2f')} |",
        "",
        "Success by goal zone: " + ", ".join(f"zone {z} {v:.1%}" for z, v in ev["success_rate_by_zone"].items()),
        *_comparison_lines(card),
        "",
        "## Training",
        *_training_lines(card),
    ]
    for target, hit in card["first_periodic_eval_at_or_above"].items():
        if hit:
            lines.append(
                f"- first periodic evaluation (200 episodes) at or above {target}: {hit['timesteps']:,} steps, "
                f"{hit['wall_s'] / 60:.1f} min"
            )
    lines += [
        f"- machine: {m.get('cpu')}, {m.get('cores')} cores, torch {m.get('torch')} with {m.get('torch_threads')} thread(s), "
        f"Python {m.get('python')}",
        f"- versions installed when this card was written (after the evaluation): {format_versions(card.get('versions') or {})}",
        "",
        "## Commands",
        "```",
        *card["commands"],
        "```",
    ]
    if card["notes"]:
        lines += ["", "## Notes", *[f"- {n}" for n in card["notes"]]]
    lines += ["", "Full record (config, periodic evaluations): the JSON card next to this file.", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = ArgumentParser(prog="python -m policies.card", description=__doc__.split("\n")[0])
    p.add_argument("--run", required=True)
    p.add_argument("--onnx", required=True)
    p.add_argument("--eval", required=True, help="JSON written by policies.evaluate")
    p.add_argument("--command", action="append", default=[], help="a command that produced the model (repeatable)")
    p.add_argument("--note", action="append", default=[])
    p.add_argument("-o", "--output", required=True, type=output_file, help="markdown path; the JSON goes next to it")
    args = p.parse_args(argv)
    run, onnx_path, eval_path = Path(args.run), Path(args.onnx), Path(args.eval)
    for path in (run / "metrics.json", onnx_path, eval_path):
        if not path.is_file():
            raise UserError(f"not found: {path}")
    card = build_card(run, onnx_path, eval_path, args.command, args.note)
    out = Path(args.output)
    write_atomic(out, to_markdown(card).encode())
    write_json(out.with_suffix(".json"), card)
    print(f"wrote {out} and {out.with_suffix('.json')}")
    return 0


if __name__ == "__main__":
    sys.exit(run(main))
