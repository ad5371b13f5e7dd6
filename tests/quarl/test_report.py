"""quarl.report on small real inputs: TrialResult files with chosen returns and fp32.onnx files exported from tiny
torch models. Table values are checked against hand computation, the reading's statements against data that
flips them, and bad trial files against one-line errors."""

from __future__ import annotations

import csv
import io
import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))

from report_data import export_cnn, export_mlp, make_trial, write_trial  # noqa: E402

from quarl.errors import QuarlError  # noqa: E402
from quarl.published import (  # noqa: E402
    GYM_REWARD_THRESHOLDS,
    SEED_MEAN_ERRORS,
    SEED_TABLE2,
    baseline_gate,
    seed_row,
)
from quarl.report import build_report, load_trial, stat  # noqa: E402
from quarl.results import error_percent  # noqa: E402

BITS = [8, 6, 5, 4, 2]
MINATAR = "MinAtar/Breakout-v1"


def quiet(line: str) -> None:
    pass


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("models")
    return {
        "mlp": export_mlp(d / "mlp.onnx"),
        "wide": export_mlp(d / "wide.onnx", scale=4.0),  # the same net with weights 4x wider
        "cnn": export_cnn(d / "cnn.onnx"),
    }


def write_main_study(study: Path, models: dict[str, Path]) -> None:
    """CartPole PPO (2 seeds), DQN (2 seeds, wide weights), A2C (3 seeds, seed 2 fails its baseline),
    MountainCar DQN (baseline failed), MinAtar Breakout DQN (CNN, one seed); one corrupt trial.json and one
    trial without any."""
    ptq = {8: 498, 6: 480, 5: 460, 4: 300, 2: 50}
    qat = {8: 500, 6: 495, 5: 490, 4: 420, 2: 100}
    for s, (int8, fp32) in enumerate([(490, 500), (480, 500)]):
        t = make_trial("CartPole-v1", "ppo", s, fp32, {"fp16": 500, "int8": int8, "int8-dynamic": 495}, ptq, qat)
        write_trial(study, t, models["mlp"])
    for s, (fp32, int8) in enumerate([(480, 400), (490, 392)]):
        onnx = {"fp16": 480, "int8": int8, "int8-w7": int8 - 50, "int8-dynamic": 470}
        t = make_trial("CartPole-v1", "dqn", s, fp32, onnx, ptq, qat)
        write_trial(study, t, models["wide"])
    for s, fp32 in enumerate([500, 490, 300]):  # seed 2: 300 < 475, left out
        t = make_trial("CartPole-v1", "a2c", s, fp32, {"fp16": 495, "int8": 485, "int8-dynamic": 490}, ptq, qat)
        write_trial(study, t, models["mlp"])
    t = make_trial("MountainCar-v0", "dqn", 0, -200, {"fp16": -200, "int8": -150, "int8-dynamic": -200})
    write_trial(study, t, models["mlp"])
    t = make_trial(
        MINATAR, "dqn", 0, 20, {"fp16": 20, "int8": 15, "int8-dynamic": 18}, {5: 18, 4: 10}, {5: 19, 4: 16}, None, 2.75
    )
    write_trial(study, t, models["cnn"])
    (study / "trials" / "broken_ppo_s9").mkdir(parents=True)
    (study / "trials" / "broken_ppo_s9" / "trial.json").write_text('{"env_id": "CartPole-v1", "algo"')
    (study / "trials" / "unfinished_ppo_s8").mkdir(parents=True)


@pytest.fixture(scope="module")
def main_study(tmp_path_factory, models):
    study = tmp_path_factory.mktemp("study") / "classic"
    write_main_study(study, models)
    warnings: list[str] = []
    report = build_report(study, figures=False, warn=warnings.append)
    return study, report, warnings


# ------------------------------------------------------------------------------------------------ tables


def test_table_values_match_hand_computation(main_study):
    study, report, _ = main_study
    ppo = report.cell("CartPole-v1", "ppo")
    assert ppo.rewards["fp32"].mean == 500 and ppo.rewards["int8"].mean == 485
    assert ppo.rewards["int8"].std == pytest.approx(np.std([490, 480], ddof=1))
    # error per seed on the seed's means, then averaged: (2% + 4%) / 2
    assert ppo.errors["int8"].mean == pytest.approx(3.0)
    assert ppo.errors["fp16"].mean == 0.0
    dqn = report.cell("CartPole-v1", "dqn")
    hand = np.mean([error_percent(480, 400), error_percent(490, 392)])  # 16.67% and 20%
    assert dqn.errors["int8"].mean == pytest.approx(hand)
    assert dqn.errors["int8"].mean != pytest.approx(error_percent(485, 396))  # not the error of the means
    md = (study / "table2.md").read_text()
    assert "| CartPole-v1 | PPO | 0,1 (2) |" in md and "+3.00% ± 1.41%" in md
    assert f"{hand:+.2f}%" in md


def test_failed_baselines_are_shown_but_left_out(main_study):
    study, report, _ = main_study
    a2c = report.cell("CartPole-v1", "a2c")
    assert a2c.used_seeds == [0, 1] and a2c.counted and "seed(s) 2" in a2c.status
    assert a2c.rewards["fp32"].mean == 495  # (500 + 490) / 2, seed 2's 300 left out
    mc = report.cell("MountainCar-v0", "dqn")
    assert not mc.counted and mc.status == "baseline failed"
    assert mc.errors["int8"].mean == pytest.approx(-25.0)  # shown: (-200 - -150) / |-200|
    dqn = next(m for m in report.algo_means if m.algo == "dqn")
    assert dqn.cells == ["CartPole-v1", MINATAR]  # MountainCar's 25% is not in the mean
    minatar = error_percent(20, 15)
    assert dqn.errors["int8"] == pytest.approx(
        np.mean([report.cell("CartPole-v1", "dqn").errors["int8"].mean, minatar])
    )
    md = (study / "table2.md").read_text()
    assert "**baseline failed** (fp32 -200.0 < -110.0)" in md
    assert (
        "Baseline failed (shown in the tables, not used here): MountainCar-v0 DQN."
        in (study / "reading.md").read_text()
    )


def test_seed_numbers_beside_ours(main_study):
    study, report, _ = main_study
    rows = {(r["env_id"], r["algo"]): r for r in csv.DictReader((study / "table2.csv").open())}
    assert len(rows) == 5
    cp = rows[("CartPole-v1", "ppo")]
    assert float(cp["seed_fp32"]) == 500 and float(cp["seed_err_int8_pct"]) == 0.0
    assert float(cp["err_int8_pct_mean"]) == pytest.approx(3.0)
    assert float(cp["fp32_mean"]) == 500 and int(cp["counted"]) == 1
    assert rows[(MINATAR, "dqn")]["seed_fp32"] == ""  # MinAtar is not the seed's Atari game
    assert rows[("MountainCar-v0", "dqn")]["counted"] == "0"
    md = (study / "table2.md").read_text()
    minatar_line = next(line for line in md.splitlines() if line.startswith(f"| {MINATAR} "))
    assert minatar_line.rstrip(" |").endswith("— | —")
    means = {r["algo"]: r for r in csv.DictReader((study / "table2_means.csv").open())}
    assert float(means["dqn"]["seed_err_int8_pct"]) == 8.60 and float(means["ppo"]["seed_err_int8_pct"]) == 0.54
    assert float(means["a2c"]["seed_err_int8_pct"]) == 2.31
    assert "| DQN | 2 |" in md and "+8.60%" in md


def test_qat_vs_ptq_paired_by_seed(tmp_path, models):
    from scipy import stats

    study = tmp_path / "s"
    diffs = [30.0, 50.0, 40.0]
    for s, d in enumerate(diffs):
        t = make_trial("CartPole-v1", "ppo", s, 500, {"int8": 500}, {4: 400, 5: 480}, {4: 400 + d, 5: 480 - d / 10})
        write_trial(study, t)
    report = build_report(study, figures=False, warn=quiet)
    d4 = next(d for d in report.qat_vs_ptq if d.bits == 4)
    half = stats.t.ppf(0.975, 2) * np.std(diffs, ddof=1) / math.sqrt(3)
    assert d4.seeds.mean == pytest.approx(40.0)
    assert (d4.seeds.low, d4.seeds.high) == pytest.approx((40 - half, 40 + half))
    assert d4.verdict.startswith("QAT better") and set(d4.per_seed) == {0, 1, 2}
    assert d4.per_seed[1].mean == pytest.approx(50.0)
    d5 = next(d for d in report.qat_vs_ptq if d.bits == 5)
    assert d5.verdict.startswith("PTQ better")
    md = (study / "qat_vs_ptq.md").read_text()
    assert f"[{40 - half:.2f}, {40 + half:.2f}]" in md
    rows = list(csv.DictReader((study / "qat_vs_ptq.csv").open()))
    assert [int(r["bits"]) for r in rows] == [4, 5] and json.loads(rows[0]["per_seed"])["0"]["n"] == 4


def test_one_seed_uses_the_paired_episodes(tmp_path):
    study = tmp_path / "s"
    ptq = [10.0, 12.0, 11.0, 9.0]
    qat = [13.0, 14.0, 15.0, 12.0]  # every episode higher: interval above 0 over episodes
    t = make_trial("CartPole-v1", "ppo", 0, 500, {}, {4: 0}, {4: 0}, episode_returns={"ptq-4bit": ptq, "qat-4bit": qat})
    write_trial(study, t)
    report = build_report(study, figures=False, warn=quiet)
    (d,) = report.qat_vs_ptq
    assert d.seeds.n == 1 and math.isnan(d.seeds.low)
    assert d.per_seed[0].mean == pytest.approx(3.0)
    assert "one seed: 95% t interval over 4 paired episodes" in d.verdict and d.verdict.startswith("QAT better")


# ------------------------------------------------------------------------------------------------ reading


def reading_of(study: Path) -> str:
    build_report(study, figures=False, warn=quiet)
    return (study / "reading.md").read_text()


def two_cell_study(study: Path, models: dict[str, Path], qat4: float, dqn_int8: float, ppo_int8: float) -> None:
    for s in (0, 1, 2):
        ptq = {8: 500, 6: 495, 5: 480, 4: 300, 2: 20}
        qat = {8: 500, 6: 498, 5: 480 + 5 * (s - 1), 4: qat4 + s, 2: 40}  # 5 bits: QAT - PTQ -5, 0, 5
        write_trial(
            study,
            make_trial("CartPole-v1", "dqn", s, 500, {"fp16": 500, "int8": dqn_int8 - s}, ptq, qat),
            models["wide"],
        )
        write_trial(
            study,
            make_trial("CartPole-v1", "ppo", s, 500, {"fp16": 500, "int8": ppo_int8 - s}, ptq, qat),
            models["mlp"],
        )


def test_reading_statements_follow_the_data(tmp_path, models):
    study = tmp_path / "a"
    two_cell_study(study, models, qat4=440, dqn_int8=400, ppo_int8=495)
    text = reading_of(study)
    assert "int8 (static) loses most here with DQN: mean error +20.20%" in text
    assert "its largest int8 loss is DQN, the same as here (DQN)" in text
    assert "CartPole-v1 DQN 4-bit: QAT - PTQ 141.0 " in text and "QAT better (95% t interval over 3 seeds" in text
    assert "QAT beats PTQ (interval above 0) in 2 of 4" in text
    assert "widest weights DQN, largest int8 error DQN: they coincide" in text
    assert "CartPole-v1 PPO QAT: holds (error ≤ 10%) down to 5 bits; as the seed: holds at 5-6 bits, drops at 2-4" in (
        text
    )

    # QAT worse than PTQ at 4 bits, PPO losing more at int8 than DQN: the statements flip
    flipped = tmp_path / "b"
    two_cell_study(flipped, models, qat4=250, dqn_int8=495, ppo_int8=400)
    text = reading_of(flipped)
    assert "int8 (static) loses most here with PPO" in text
    assert "its largest int8 loss is DQN, not the same as here (PPO)" in text
    assert "CartPole-v1 DQN 4-bit: QAT - PTQ -49.00" in text and "PTQ better (95% t interval over 3 seeds" in text
    assert "QAT beats PTQ (interval above 0) in 0 of 4" in text and "PTQ beats QAT in 2" in text
    assert "widest weights DQN, largest int8 error PPO: they differ" in text


def test_reading_bits_claim_flips(tmp_path):
    study = tmp_path / "s"
    write_trial(study, make_trial("CartPole-v1", "ppo", 0, 500, {}, None, {6: 498, 5: 490, 4: 480, 2: 470}))
    assert "more robust than the seed's claim: holds even at 2-4 bits" in reading_of(study)
    write_trial(study, make_trial("CartPole-v1", "ppo", 0, 500, {}, None, {6: 300, 5: 490, 4: 480, 2: 470}))
    text = reading_of(study)
    assert "no width holds" in text and "less robust than the seed's claim: already drops at 5-6 bits" in text


# ------------------------------------------------------------------------------------------------ bad input


def test_corrupt_trial_is_skipped_and_listed(main_study):
    study, report, warnings = main_study
    broken = str(study / "trials" / "broken_ppo_s9" / "trial.json")
    assert {s.path for s in report.skipped} == {broken, str(study / "trials" / "unfinished_ppo_s8" / "trial.json")}
    assert any(w.startswith(f"warning: skipped {broken}: not a valid trial.json (corrupt JSON") for w in warnings)
    assert all("\n" not in w for w in warnings)
    for name in ("table2.md", "qat_vs_ptq.md", "weights.md", "reading.md"):
        text = (study / name).read_text()
        assert f"- `{broken}`: not a valid trial.json" in text and "unfinished_ppo_s8" in text, name


def test_corrupt_trial_strict_is_one_line_error_naming_the_file(main_study, tmp_path):
    study, _, _ = main_study
    with pytest.raises(QuarlError) as e:
        build_report(study, tmp_path / "out", strict=True, figures=False, warn=quiet)
    message = str(e.value)
    assert "\n" not in message and message.startswith(str(study / "trials" / "broken_ppo_s9" / "trial.json"))


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"", "corrupt JSON"),
        (b"[1, 2]", "expected a JSON object"),
        (b'{"env_id": "CartPole-v1"}', "missing key 'algo'"),
        (b"\xff\xfe{", "UnicodeDecodeError"),
        (b'{"env_id": "x", "algo": "ppo", "seed": "zero"}', "ValueError"),
    ],
)
def test_load_trial_errors(tmp_path, content, expected):
    path = tmp_path / "trial.json"
    path.write_bytes(content)
    with pytest.raises(QuarlError) as e:
        load_trial(path)
    assert str(e.value).startswith(f"{path}: not a valid trial.json") and expected in str(e.value)
    assert "\n" not in str(e.value)


def test_load_trial_without_fp32_or_with_bad_returns(tmp_path):
    d = json.loads(make_trial("CartPole-v1", "ppo", 0, 500, {"int8": 490}).to_json())
    path = tmp_path / "trial.json"
    path.write_text(json.dumps(d | {"policies": [p for p in d["policies"] if p["name"] != "fp32"]}))
    with pytest.raises(QuarlError, match="no fp32 policy"):
        load_trial(path)
    d["policies"][1]["returns"] = [1.0, "lots"]
    path.write_text(json.dumps(d))
    with pytest.raises(QuarlError, match=r"not a valid trial.json \(ValueError: could not convert"):
        load_trial(path)


def test_study_without_trials(tmp_path):
    with pytest.raises(QuarlError, match="no such study directory"):
        build_report(tmp_path / "nope", figures=False, warn=quiet)
    (tmp_path / "s" / "trials" / "x").mkdir(parents=True)
    with pytest.raises(QuarlError, match="no readable trials"):
        build_report(tmp_path / "s", figures=False, warn=quiet)


# ------------------------------------------------------------------------------------------------ figures


@pytest.fixture(scope="module")
def figures_report(tmp_path_factory, models) -> tuple[Path, Path, str]:
    """Two cells (an MLP and a MinAtar CNN), with figures, through the sub-command as quarl.cli will call it:
    (the study, the report's folder, what it printed)."""
    import contextlib
    import io

    from airq_cli import ArgumentParser
    from quarl.report import add_report_parser

    tmp_path = tmp_path_factory.mktemp("figures")
    study = tmp_path / "s"
    for s in (0, 1):
        ptq, qat = {8: 490, 5: 450, 4: 300}, {8: 495, 5: 470, 4: 400}
        t = make_trial("CartPole-v1", "dqn", s, 500, {"fp16": 500, "int8": 480}, ptq, qat)
        write_trial(study, t, models["wide"])
    t = make_trial(MINATAR, "dqn", 0, 20, {"int8": 15}, {5: 18, 4: 10}, {5: 19, 4: 16}, threshold=2.75)
    write_trial(study, t, models["cnn"])

    parser = ArgumentParser(prog="python -m quarl")
    add_report_parser(parser.add_subparsers(dest="command", required=True))
    out = tmp_path / "out"
    args = parser.parse_args(["report", str(study), "--out", str(out)])
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert args.func(args) == 0
    return study, out, printed.getvalue()


def test_figures_weights_and_cli(figures_report):
    from PIL import Image

    study, out, printed = figures_report
    assert "2 cell(s), 2 passed their baseline, 0 skipped" in printed
    names = sorted(p.name for p in out.glob("*.png"))
    assert names == [
        "reward_vs_bits_CartPole-v1_dqn.png",
        "reward_vs_bits_MinAtar-Breakout-v1_dqn.png",
        "sqnr_CartPole-v1_dqn.png",
        "sqnr_MinAtar-Breakout-v1_dqn.png",
        "weight_widths.png",
        "weights_CartPole-v1_dqn.png",
        "weights_MinAtar-Breakout-v1_dqn.png",
    ]
    for p in out.glob("*.png"):
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert 10_000 < p.stat().st_size < 1_000_000, p.name
        with Image.open(p) as im:
            assert 400 <= im.width <= 2000 and 300 <= im.height <= 2000, (p.name, im.size)
    assert not (study / "table2.md").exists()  # --out: nothing written into the study

    weights = (out / "weights.md").read_text()
    cnn = next(w for w in json.loads((out / "report.json").read_text())["weights"] if w["env_id"] == MINATAR)
    assert [layer["layer"].split("/")[-1] for layer in cnn["layers"]] == ["Conv", "Gemm", "Gemm"]
    assert cnn["layers"][0]["shape"] == [8, 4, 3, 3]
    dqn = next(w for w in json.loads((out / "report.json").read_text())["weights"] if w["env_id"] == "CartPole-v1")
    assert dqn["seeds"] == [0, 1] and dqn["figure_seed"] == 0
    assert "| CartPole-v1 | DQN | ok | 0,1 |" in weights and "SQNR 8b (dB)" in weights


def test_report_html_shows_report_json_in_chromium(figures_report):
    """report.html in headless Chromium (tests/report_pages.py): no console error, nothing fetched, not blank,
    every figure shown, and Table 2, the means, QAT vs PTQ and the weight ranges equal report.json's."""
    from report_pages import check_page

    _, out, _ = figures_report
    data = json.loads((out / "report.json").read_text())
    required = []
    for i, c in enumerate(data["cells"]):
        required += [f"cells.{i}.rewards.{p}.mean" for p in c["rewards"]]
        required += [f"cells.{i}.errors.{p}.mean" for p in c["errors"]] + [f"cells.{i}.threshold"]
    required += [f"algo_means.{i}.errors.int8" for i in range(len(data["algo_means"]))]
    required += [f"qat_vs_ptq.{i}.seeds.mean" for i in range(len(data["qat_vs_ptq"]))]
    required += [f"weights.{i}.widest_range.mean" for i in range(len(data["weights"]))]
    figures = (
        "[...document.querySelectorAll('figure img')].map(i => [i.closest('figure').dataset.figure, i.naturalWidth])"
    )
    loaded = check_page(out / "report.html", data, required, figures)
    assert sorted(name for name, width in loaded.found if width > 0) == sorted(p.name for p in out.glob("*.png"))


def test_report_html_without_figures_lists_what_was_left_out(main_study):
    """--no-figures: the page still has every table and says which trials were skipped."""
    study, report, _ = main_study
    page = (report.out_dir / "report.html").read_text()
    assert "<img" not in page and page.count("No figures (written with --no-figures") == len(report.cells)
    assert all(s.path in page for s in report.skipped) and "baseline failed" in page


# ------------------------------------------------------------------------------------------------ published


def test_seed_mean_errors_agree_with_its_table():
    for algo, (fp16, int8) in SEED_MEAN_ERRORS.items():
        rows = [v for (_, a), v in SEED_TABLE2.items() if a == algo]
        assert np.mean([error_percent(r[0], r[1]) for r in rows]) == pytest.approx(fp16, abs=0.006)
        assert np.mean([error_percent(r[0], r[2]) for r in rows]) == pytest.approx(int8, abs=0.006)


def test_gym_thresholds_are_gymnasiums():
    import gymnasium as gym

    for env_id, threshold in GYM_REWARD_THRESHOLDS.items():
        assert gym.spec(env_id).reward_threshold == threshold


def test_baseline_gate_rules():
    published, source, threshold = baseline_gate("CartPole-v1", "ppo")
    assert (published, threshold) == (500, 475) and "reward_threshold 475" in source
    # gymnasium's -110 is above the zoo's own A2C score (-111.3): 0.8 of it instead
    published, source, threshold = baseline_gate("MountainCar-v0", "a2c")
    assert published == -111.3 and threshold == pytest.approx(-111.3 - 0.2 * 111.3)
    assert baseline_gate("MountainCar-v0", "dqn")[2] == -110
    published, source, threshold = baseline_gate("PongNoFrameskip-v4", "ppo")
    assert threshold == pytest.approx(0.8 * 20.99) and "no reward_threshold" in source
    assert baseline_gate("ALE/Pong-v5", "ppo")[0] == 20.99
    assert seed_row("BreakoutNoFrameskip-v4", "dqn").error_int8 == pytest.approx(63.55, abs=0.01)
    assert seed_row("BipedalWalker-v3", "ddpg").note == "seed: BipedalWalker-v2"
    assert seed_row(MINATAR, "dqn") is None


@pytest.mark.parametrize(
    ("env_id", "algo", "expected"),
    [
        ("Acrobot-v1", "ppo", "unknown env 'Acrobot-v1'"),
        ("CartPole-v1", "sac", "CartPole-v1: no published zoo score for 'sac'"),
        ("MinAtar/Pong-v1", "dqn", "unknown MinAtar game"),
        ("MinAtar/Breakout-v1", "ddpg", "MinAtar has discrete actions"),
    ],
)
def test_baseline_gate_unknown(env_id, algo, expected):
    with pytest.raises(QuarlError) as e:
        baseline_gate(env_id, algo)
    assert expected in str(e.value) and "\n" not in str(e.value)


def test_baseline_gate_minatar_measures_a_random_policy():
    published, source, threshold = baseline_gate(MINATAR, "dqn", episodes=5)
    assert math.isnan(published) and "uniform random policy over 5 seeded episodes" in source
    assert threshold >= 1.0
    assert baseline_gate(MINATAR, "dqn", episodes=5) == (published, source, threshold)  # seeded: the same


def test_stat():
    s = stat([1.0, 2.0, 3.0])
    assert (s.mean, s.std, s.n) == (2.0, 1.0, 3)
    one = stat([4.0])
    assert one.n == 1 and math.isnan(one.std) and one.interval == (4.0, 4.0)


# ------------------------------------------------------------------------------------------------ 7 vs 8 weight bits


def test_seven_vs_eight_weight_bits_paired(tmp_path):
    """Two seeds of CartPole DQN where 7-bit weights lose every episode against 8-bit, and PPO where both are the
    same in every episode: errors, the paired difference, the Wilcoxon test and the reading, by hand."""
    from scipy.stats import wilcoxon

    study = tmp_path / "s"
    eight = {0: [500.0, 490.0, 480.0, 470.0], 1: [500.0, 500.0, 495.0, 485.0]}
    seven = {0: [300.0, 250.0, 200.0, 150.0], 1: [400.0, 380.0, 360.0, 340.0]}
    for s in (0, 1):
        returns = {"int8": eight[s], "int8-w7": seven[s]}
        means = {"int8": float(np.mean(eight[s])), "int8-w7": float(np.mean(seven[s]))}
        write_trial(study, make_trial("CartPole-v1", "dqn", s, 500, means, episode_returns=returns))
        write_trial(study, make_trial("CartPole-v1", "ppo", s, 500, {"int8": 495, "int8-w7": 495}))
    report = build_report(study, figures=False, warn=quiet)
    dqn, ppo = sorted(report.weight_bits, key=lambda d: d.algo)
    assert dqn.error8.mean == pytest.approx(np.mean([error_percent(500, 485), error_percent(500, 495)]))
    assert dqn.error7.mean == pytest.approx(np.mean([error_percent(500, 225), error_percent(500, 370)]))
    assert dqn.seeds.mean == pytest.approx(np.mean([485 - 225, 495 - 370])) and dqn.seeds.n == 2
    diffs = np.concatenate([np.subtract(eight[s], seven[s]) for s in (0, 1)])
    assert (dqn.episodes, dqn.episodes_differ) == (8, 8)
    assert dqn.wilcoxon_p == pytest.approx(wilcoxon(diffs).pvalue) and dqn.wilcoxon_p < 0.05
    assert dqn.verdict.startswith("8-bit weights score higher")
    assert dqn.seed_error_int8 == pytest.approx(seed_row("CartPole-v1", "dqn").error_int8)
    assert (ppo.episodes_differ, ppo.wilcoxon_p, ppo.verdict) == (0, 1.0, "identical returns in every episode")

    table = (study / "table2.md").read_text()
    assert "## 7 vs 8 weight bits (static int8, paired)" in table
    assert "| int8 | int8 w7 | int8-dyn |" in table
    means = {row["algo"]: row for row in csv.DictReader(io.StringIO((study / "table2_means.csv").read_text()))}
    assert float(means["dqn"]["err_int8_w7_pct"]) == pytest.approx(dqn.error7.mean)
    reading = (study / "reading.md").read_text()
    assert (
        f"DQN: mean int8 error +{dqn.error8.mean:.2f}% with 8-bit weights, +{dqn.error7.mean:.2f}% with 7-bit"
        in reading
    )
    assert "1 of 2 counted cell(s) differ between 7- and 8-bit weights" in reading
    saved = json.loads((study / "report.json").read_text())["weight_bits"]
    assert [w["verdict"] for w in saved] == [d.verdict for d in report.weight_bits]


def test_a_study_without_seven_bit_files_says_how_to_get_them(tmp_path):
    study = tmp_path / "s"
    write_trial(study, make_trial("CartPole-v1", "ppo", 0, 500, {"fp16": 500, "int8": 490, "int8-dynamic": 495}))
    report = build_report(study, figures=False, warn=quiet)
    assert report.weight_bits == []
    assert "`python -m quarl requantize` adds them" in (study / "reading.md").read_text()
    assert "| int8 w7 |" in (study / "table2.md").read_text()  # the column is there, empty (—)
