"""``reading.md`` of ``python -m quarl report`` (quarl.report): statements computed from the report's numbers,
each with its numbers, against the seed's claims (int8 and fp16 error, reward vs bits, QAT vs PTQ, weight
ranges vs int8 error)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from quarl.published import SEED_MEAN_ERRORS
from quarl.report_records import AlgoMean, CellReport, CellWidth, PairedDiff, Skipped, Stat, WeightBitsDiff
from quarl.report_tables import interval, num, pct, skipped_lines

HOLD_ERROR_PCT = 10.0  # an n-bit policy "holds" its reward when its error vs fp32 is at most this
SEED_HOLD_BITS = (5, 6)  # the seed's QAT claim: reward holds down to 5-6 bits...
SEED_DROP_BITS = (2, 3, 4)  # ...and drops at 2-4 bits


def reading_int8(cells: list[CellReport], means: list[AlgoMean]) -> list[str]:
    out = []
    ranked = sorted((m for m in means if not math.isnan(m.errors["int8"])), key=lambda m: -m.errors["int8"])
    if not ranked:
        return ["- int8: no cell passed its baseline with an int8 policy; nothing to compare with the seed."]

    def cells_of(m: AlgoMean) -> str:
        parts = [
            f"{c.env_id} {pct(c.errors['int8'].mean)}"
            for c in cells
            if c.algo == m.algo and c.counted and not math.isnan(c.errors["int8"].mean)
        ]
        return ", ".join(parts)

    order = " > ".join(f"{m.algo.upper()} {pct(m.errors['int8'])}" for m in ranked)
    top = ranked[0]
    out.append(
        f"- int8 (static) loses most here with {top.algo.upper()}: mean error {pct(top.errors['int8'])} over "
        f"{len(top.cells)} cell(s) ({cells_of(top)}). Order here: {order}."
    )
    ours = [m.algo for m in ranked]
    seed_ranked = sorted((a for a in ours if a in SEED_MEAN_ERRORS), key=lambda a: -SEED_MEAN_ERRORS[a][1])
    if seed_ranked:
        seed_order = " > ".join(f"{a.upper()} {pct(SEED_MEAN_ERRORS[a][1])}" for a in seed_ranked)
        same = seed_ranked[0] == top.algo
        out.append(
            f"- The seed's order over the same algorithms: {seed_order}; its largest int8 loss is "
            f"{seed_ranked[0].upper()}, {'the same' if same else 'not the same'} as here ({top.algo.upper()})."
        )
    for m in ranked:
        if m.seed_errors is None:
            continue
        diff = m.errors["int8"] - m.seed_errors[1]
        same_envs = (
            f"; the seed's mean over the same {m.seed_same_envs_n} env(s): {pct(m.seed_same_envs['int8'])}"
            if m.seed_same_envs_n
            else ""
        )
        out.append(
            f"- {m.algo.upper()} int8: {pct(m.errors['int8'])} here vs {pct(m.seed_errors[1])} in the seed "
            f"({'+' if diff >= 0 else '-'}{abs(diff):.2f} points){same_envs}; fp16: {pct(m.errors['fp16'])} "
            f"vs {pct(m.seed_errors[0])}."
        )
    return out


def reading_weight_bits(means: list[AlgoMean], diffs: list[WeightBitsDiff]) -> list[str]:
    """What the 8th weight bit changes: each algorithm's mean int8 error at 8 and 7 bits beside the seed's,
    and the cells where the paired test finds a difference."""
    counted = [d for d in diffs if d.counted]
    if not counted:
        return [
            "- No counted cell has int8 with both 8-bit and 7-bit weights (`python -m quarl requantize` adds them)."
        ]
    out = []
    for m in means:
        if math.isnan(m.errors.get("int8-w7", math.nan)) or math.isnan(m.errors["int8"]):
            continue
        seed = f"; the seed's int8 {pct(m.seed_errors[1])}" if m.seed_errors else ""
        out.append(
            f"- {m.algo.upper()}: mean int8 error {pct(m.errors['int8'])} with 8-bit weights, {pct(m.errors['int8-w7'])} "
            f"with 7-bit ({len(m.cells)} cell(s)){seed}."
        )
    decided = [d for d in counted if d.episodes_differ and d.wilcoxon_p < 0.05]
    if decided:
        out += [
            f"- {d.env_id} {d.algo.upper()}: error {pct(d.error8.mean)} at 8 bits vs {pct(d.error7.mean)} at 7; {d.verdict}."
            for d in decided
        ]
    out.append(
        f"- Paired per cell: {len(decided)} of {len(counted)} counted cell(s) differ between 7- and 8-bit weights "
        f"(Wilcoxon p < 0.05 over their paired episodes); in "
        f"{sum(d.episodes_differ == 0 for d in counted)} every episode's return is the same."
    )
    return out


def bits_claim(errors: dict[int, Stat], hold: float) -> tuple[str, int | None]:
    """(classification against the seed's claim, the lowest width down to which every width holds)."""
    measured = {b: s.mean for b, s in errors.items() if s.n and not math.isnan(s.mean)}
    if not measured:
        return "no n-bit results", None
    lowest = None
    for b in sorted(measured, reverse=True):
        if measured[b] <= hold:
            lowest = b
        else:
            break
    high = [b for b in SEED_HOLD_BITS if b in measured]
    low = [b for b in SEED_DROP_BITS if b in measured]
    if not high or not low:
        return "not enough widths to test the seed's claim (needs one of 5-6 and one of 2-4 bits)", lowest
    holds = all(measured[b] <= hold for b in high)
    drops = any(measured[b] > hold for b in low)
    if holds and drops:
        return "as the seed: holds at 5-6 bits, drops at 2-4", lowest
    if holds:
        return "more robust than the seed's claim: holds even at 2-4 bits", lowest
    return "less robust than the seed's claim: already drops at 5-6 bits", lowest


def reading_bits(cells: list[CellReport], hold: float) -> list[str]:
    out = []
    for c in cells:
        if not c.counted:
            continue
        for name, errors in (("QAT", c.qat_errors), ("PTQ", c.ptq_errors)):
            if not errors:
                continue
            verdict, lowest = bits_claim(errors, hold)
            detail = ", ".join(f"{b}b {pct(s.mean)}" for b, s in sorted(errors.items(), reverse=True))
            held = f"holds (error ≤ {hold:g}%) down to {lowest} bits" if lowest else f"no width holds (≤ {hold:g}%)"
            out.append(f"- {c.label} {name}: {held}; {verdict}. Error vs fp32: {detail}.")
    return out or ["- No counted cell has n-bit PTQ/QAT results."]


def reading_qat(diffs: list[PairedDiff]) -> list[str]:
    counted = [d for d in diffs if d.counted]
    if not counted:
        return ["- No counted cell has QAT and PTQ at the compared widths."]
    out = []
    for d in counted:
        s = d.seeds
        out.append(
            f"- {d.env_id} {d.algo.upper()} {d.bits}-bit: QAT - PTQ {num(s.mean)} "
            f"(95% t over {s.n} seed(s) {interval(s, num)}): {d.verdict}."
        )
    better = sum(d.verdict.startswith("QAT better") for d in counted)
    worse = sum(d.verdict.startswith("PTQ better") for d in counted)
    out.append(
        f"- Overall: QAT beats PTQ (interval above 0) in {better} of {len(counted)} comparison(s), "
        f"PTQ beats QAT in {worse}, no clear difference or undecided in {len(counted) - better - worse}."
    )
    return out


def reading_widths(widths: list[CellWidth]) -> list[str]:
    counted = [w for w in widths if w.counted and not math.isnan(w.widest_range.mean)]
    if not counted:
        return ["- No counted cell has an fp32.onnx to measure."]
    out = []
    by_env: dict[str, list[CellWidth]] = {}
    for w in counted:
        by_env.setdefault(w.env_id, []).append(w)
    matches = total = 0
    for env, ws in sorted(by_env.items()):
        ws = [w for w in ws if not math.isnan(w.int8_error)]
        if len(ws) < 2:
            continue
        widest = max(ws, key=lambda w: w.widest_range.mean)
        worst = max(ws, key=lambda w: w.int8_error)
        same = widest is worst
        matches += same
        total += 1
        values = ", ".join(f"{w.algo.upper()} range {num(w.widest_range.mean)} / int8 {pct(w.int8_error)}" for w in ws)
        out.append(
            f"- {env}: widest weights {widest.algo.upper()}, largest int8 error {worst.algo.upper()}: "
            f"{'they coincide' if same else 'they differ'} ({values})."
        )
    if total:
        out.append(f"- Widest weights = largest int8 error in {matches} of {total} environment(s) with 2+ algorithms.")
    pts = [(w.widest_range.mean, w.int8_error) for w in counted if not math.isnan(w.int8_error)]
    if len(pts) >= 3 and len({p[0] for p in pts}) > 1 and len({p[1] for p in pts}) > 1:
        # deferred: scipy: over a second to import
        from scipy.stats import spearmanr

        rho, p = spearmanr([a for a, _ in pts], [b for _, b in pts])
        out.append(
            f"- Across all {len(pts)} counted cells, Spearman rank correlation of widest layer range with int8 "
            f"error: {float(rho):+.2f} (p = {float(p):.2g})."
        )
    elif len(pts) < 3:
        out.append(f"- Too few counted cells ({len(pts)}) for a rank correlation of range with int8 error.")
    return out or ["- No environment has two counted algorithms to compare weight ranges."]


def reading_markdown(
    cells: list[CellReport],
    means: list[AlgoMean],
    diffs: list[PairedDiff],
    widths: list[CellWidth],
    skipped: list[Skipped],
    hold: float,
    weight_bits: Sequence[WeightBitsDiff] = (),
) -> tuple[str, list[str]]:
    failed = [c.label for c in cells if not c.counted]
    statements: list[str] = []
    head = [
        "# Reading",
        "",
        f"Computed from {sum(len(c.seeds) for c in cells)} trial(s) in {len(cells)} cell(s); "
        f"{sum(c.counted for c in cells)} cell(s) passed their baseline and are used below.",
    ]
    if failed:
        head.append(f"Baseline failed (shown in the tables, not used here): {', '.join(failed)}.")
    sections = [
        ("## int8 and fp16 error vs the seed (int8: 8-bit weights, as the seed's)", reading_int8(cells, means)),
        ("## 7 vs 8 weight bits (static int8)", reading_weight_bits(means, list(weight_bits))),
        (
            f"## Reward vs bits (the seed's QAT claim: holds to 5-6 bits, drops at 2-4; hold = error ≤ {hold:g}%)",
            reading_bits(cells, hold),
        ),
        ("## QAT vs PTQ", reading_qat(diffs)),
        ("## Weight ranges vs int8 error (the seed: DQN's weights widest, quantize worst)", reading_widths(widths)),
    ]
    lines = head
    for title, body in sections:
        lines += ["", title, "", *body]
        statements += body
    lines += skipped_lines(skipped)
    return "\n".join(lines) + "\n", statements
