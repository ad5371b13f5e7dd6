"""The table of scripts/weight_bits.sh: 7-bit (u8s7, shipped) against 8-bit (s8s8) weights per shipped policy,
read from the files that script writes (policies.evaluate JSONs, the quantized files' metadata, quantize bench
JSONs). Usage: python scripts/weight_bits_table.py OUT POLICY [POLICY ...] > table.md"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import onnx


def agreement(path: Path) -> str:
    meta = {p.key: p.value for p in onnx.load(str(path), load_external_data=False).metadata_props}
    value = meta.get("airq.quant.heldout_agreement")
    return f"{float(value):.2%}" if value else "-"


def success_cells(report: dict, policy: str, out: Path) -> tuple[str, str]:
    """('fp32 / 7-bit / 8-bit success', '8-bit - 7-bit paired (CI, McNemar p)') of one level's evaluation."""
    names = list(report["policies"])  # shipped int8 first, fp32, s8s8
    rate = {n: report["policies"][n]["summary"]["success_rate"] for n in names}
    seven, fp32, eight = names
    d = report["paired_vs_first"][eight]
    rates = f"{rate[fp32]:.1%} / {rate[seven]:.1%} / {rate[eight]:.1%}"
    paired = f"{d['diff']:+.1%} ({d['low']:+.1%}, {d['high']:+.1%}), p = {d['mcnemar_p']:.2g}"
    return rates, paired


def main(out: Path, policies: list[str]) -> str:
    lines = [
        "| policy | held-out agreement with fp32: 7-bit / 8-bit | default success fp32 / 7-bit / 8-bit "
        "| default 8-bit - 7-bit (95% CI, McNemar p) | hard success fp32 / 7-bit / 8-bit | hard 8-bit - 7-bit "
        "| batch-1 p50 us fp32 / 7-bit / 8-bit |",
        "|---|---|---|---|---|---|---|",
    ]
    host = ""
    for policy in policies:
        cells = [
            policy,
            f"{agreement(Path('models') / f'{policy}_int8.onnx')} / {agreement(out / f'{policy}_s8s8.onnx')}",
        ]
        for level in ("default", "hard"):
            cells += success_cells(json.loads((out / f"{policy}_{level}.json").read_text()), policy, out)
        bench = json.loads((out / f"{policy}_bench.json").read_text())
        host = bench[0]["host"]
        cells.append(" / ".join(f"{row['p50_us']:.0f}" for row in bench))
        lines.append("| " + " | ".join(cells) + " |")
    episodes = (
        "1000 paired episodes per level (seeds 0..999); held-out agreement on 50 episodes per level (seeds 3000000..)"
    )
    return (
        "\n".join(lines)
        + f"\n\n7-bit: the shipped u8s7 file; 8-bit: s8s8, same recipe. {episodes}.\nMeasured on {host}.\n"
    )


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit("usage: python scripts/weight_bits_table.py OUT POLICY [POLICY ...]")
    print(main(Path(sys.argv[1]), sys.argv[2:]), end="")
