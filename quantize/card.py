"""``python -m quantize card MODEL.onnx [--eval REPORT.json ...] [--bench BENCH.json] -o MODEL.md``:
a model card for a quantized artifact, from its metadata, policies.evaluate reports (paired against
the fp32 source) and quantize bench rows. Every figure in it comes from those files."""

from __future__ import annotations

import json
from pathlib import Path

from airq_cli import MISSING, shown, write_atomic
from firmware_bridge.device import format_versions, package_versions
from nav_env.backends import Backend, backend_named
from quantize.errors import QuantizeError
from quantize.model_io import QUANT_PREFIX, load_policy


def _find(report: dict, path: Path) -> tuple[str, dict] | None:
    for name, entry in report.get("policies", {}).items():
        if Path(entry.get("source", "")).resolve() == path.resolve():
            return name, entry
    return None


def build_card(model: str | Path, evals: list[str], bench: str | None, command: str | None) -> str:
    pm = load_policy(model)
    meta = pm.metadata
    q = {k[len(QUANT_PREFIX) :]: v for k, v in meta.items() if k.startswith(QUANT_PREFIX)}
    lines = [
        f"# {pm.path.name}",
        "",
        f"{meta.get('airq.preset', '?')} ({meta.get('airq.algorithm', '?')}, trained on `{meta.get('airq.level', '?')}`"
        + (
            ""
            if (trained_in := _backend(meta.get("airq.backend"))).is_default
            else f" in the {trained_in.name} backend"
        )
        + ", "
        + f"{meta.get('airq.train_steps', '?')} steps), precision **{meta.get('airq.precision', 'fp32')}**.",
        "",
        "| | |",
        "|---|---|",
        f"| file | `{pm.path.name}`, {len(pm.data):,} bytes, sha256 `{pm.sha256}` |",
    ]
    if q:
        src_size = int(q.get("source_size_bytes", 0) or 0)
        ratio = f" ({src_size / len(pm.data):.2f}x smaller)" if src_size else ""
        lines += [
            f"| source | `{q.get('source_file', q.get('source_checkpoint', '?'))}`, sha256 `{q.get('source_sha256', '?')}`"
            f"{f', {src_size:,} bytes' if src_size else ''}{ratio} |",
            f"| method | {q.get('method', '?')} |",
        ]
        if q.get("calibration_episodes", "0") not in ("0", ""):
            lines.append(
                f"| calibration | {q['calibration_episodes']} episodes of the fp32 policy on `{q.get('levels', q.get('level'))}`"
                + (f" ({q['backend']} backend)" if "backend" in q else "")
                + ", "
                + f"seeds {q.get('calibration_seed')}.., {q.get('calibration_samples')} observations |"
            )
        if "distill" in q:
            d = json.loads(q["distill"])
            dagger = (
                f", + {d['rounds'] - 1} DAgger round(s) of {d['dagger_episodes']} int8 episodes (seeds {d['dagger_seed']}..)"
                if d.get("rounds", 1) > 1
                else ""
            )
            lines.append(
                f"| distillation | integer codes trained toward the fp32 logits on {d['samples']} observations from {d['episodes']} "
                f"fp32 episodes (seeds {d['seed_first_episode']}..){dagger}; {d['steps']} Adam steps per round, lr {d['lr_codes']} codes, "
                f"margin {d['margin']}, torch seed {d['torch_seed']}; weight codes changed {d['weight_codes_changed']} |"
            )
        if "heldout_agreement" in q:
            by_level = json.loads(q["heldout_agreement_by_level"]) if "heldout_agreement_by_level" in q else {}
            detail = f" ({', '.join(f'{k} {v:.2%}' for k, v in by_level.items())})" if by_level else ""
            lines.append(
                f"| action agreement vs fp32 | {float(q['heldout_agreement']):.2%}{detail} on {q['heldout_samples']} observations "
                f"from {q['heldout_episodes']} held-out episodes (seeds {q['heldout_seed']}..) |"
            )
    lines += [
        "| interface | input `obs` float32 [batch, "
        f"{pm.obs_dim}]; outputs `action` int64 [batch], `logits` float32 [batch, {pm.n_actions}] |",
        "",
    ]
    if evals:
        lines += [
            "## Success rate (policies.evaluate, paired seeded episodes)",
            "",
            "| level | episodes | this model | 95% CI | fp32 source | paired diff (95% CI) | McNemar p |",
            "|---|---|---|---|---|---|---|",
        ]
        for e in evals:
            report = json.loads(Path(e).read_text())
            found = _find(report, pm.path)
            if found is None:
                raise QuantizeError(f"{e}: does not contain {pm.path}")
            name, entry = found
            s = entry["summary"]
            first = next(iter(report["policies"]))
            fs = report["policies"][first]["summary"]
            d = report.get("paired_vs_first", {}).get(name)
            diff = f"{d['diff']:+.1%} ({d['low']:+.1%}, {d['high']:+.1%})" if d else MISSING
            p = shown(d["mcnemar_p"] if d else None, ".3g")
            backend = _backend(report.get("backend"))
            level = report["level"] + ("" if backend.is_default else f" ({backend.name})")
            lines.append(
                f"| {level} | {report['episodes']} (seeds {report['seed']}..) | {s['success_rate']:.1%} | "
                f"{s['success_ci95'][0]:.1%}-{s['success_ci95'][1]:.1%} | {fs['success_rate']:.1%} | {diff} | {p} |"
            )
        lines.append("")
    if bench:
        rows = json.loads(Path(bench).read_text())
        base = next((r for r in rows if r["precision"] == "fp32"), rows[0])
        lines += [
            "## Latency (quantize bench: onnxruntime, batch 1, 1 thread, interleaved)",
            "",
            *([f"Measured on {rows[0]['host']}.", ""] if rows[0].get("host") else []),
            "| model | precision | p50 us | p99 us | speedup p50 |",
            "|---|---|---|---|---|",
        ]
        for r in rows:
            lines.append(
                f"| {Path(r['path']).name} | {r['precision']} | {r['p50_us']:.1f} | {r['p99_us']:.1f} | "
                f"{base['p50_us'] / r['p50_us']:.2f}x |"
            )
        lines.append("")
    if command:
        lines += ["## Made with", "", "```", command, "```", ""]
    lines += ["## Versions", "", f"Installed when this card was written: {format_versions(package_versions())}.", ""]
    return "\n".join(lines)


def write_card(model: str, evals: list[str], bench: str | None, command: str | None, out: str) -> Path:
    return write_atomic(out, build_card(model, evals, bench, command).encode())


def _backend(name: str | None) -> Backend:
    """The backend a model's metadata or an evaluation names (none named: the default)."""
    try:
        return backend_named(name)
    except ValueError as e:
        raise QuantizeError(str(e)) from None
