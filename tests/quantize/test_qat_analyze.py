"""QAT on a tiny policies.train run: trains, freezes ranges, exports an int8 QDQ file that loads in
onnxruntime, agrees with the torch fake-quant actor and carries metadata; analyze writes its plots."""

import json
import subprocess
import sys

import numpy as np
import onnx
import pytest
import torch

from quantize.affine import fake_quantize
from quantize.fakequant import FakeQuantActor, activation_quants, calibrate, fake_quant_weight, quant_linears


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "p1_tiny"
    cmd = [
        sys.executable,
        "-m",
        "policies.train",
        "--policy",
        "policy1",
        "--steps",
        "4096",
        "--num-envs",
        "16",
        "--n-steps",
        "128",
        "--batch-size",
        "512",
        "--n-epochs",
        "1",
        "--eval-every",
        "4096",
        "--eval-episodes",
        "4",
        "--checkpoint-every",
        "4096",
        "--torch-threads",
        "1",
        "--progress",
        "false",
        "--out",
        str(out),
    ]
    subprocess.run(cmd, check=True, capture_output=True, timeout=120)
    return out


def test_torch_weight_fake_quant_matches_the_numpy_formula():
    w = torch.randn(64, 100) * 0.1
    for bits in (2, 4, 8, 12):
        for rounding in ("floor", "nearest"):
            got = fake_quant_weight(w, bits, rounding).numpy()
            want = fake_quantize(w.numpy(), bits, rounding)
            assert np.mean(np.isclose(got, want, atol=1e-6)) > 0.999


def test_qat_trains_and_exports_int8(tiny_run, tmp_path, capsys):
    from quantize.cli import main
    from quantize.errors import run_cli
    from quantize.runtime import session

    out = tmp_path / "qat8"
    code = run_cli(
        main,
        [
            "qat",
            str(tiny_run),
            "--bits",
            "8",
            "--delay",
            "2048",
            "--steps",
            "4096",
            "--episodes",
            "4",
            "--threads",
            "1",
            "--out",
            str(out),
        ],
    )
    assert code == 0, capsys.readouterr().err
    report = json.loads((out / "qat.json").read_text())
    assert report["froze_at"] >= 2048
    assert report["onnx_agreement_vs_torch"] >= 0.99
    path = out / "policy_qat_int8.onnx"
    model = onnx.load(path)
    assert model.ir_version <= 10
    meta = {p.key: p.value for p in model.metadata_props}
    assert meta["airq.precision"] == "int8" and meta["airq.quant.bits"] == "8"
    # the default weight rounding is nearest, and the file and qat.json say so
    assert report["rounding"] == "nearest" and meta["airq.quant.weight_rounding"] == "nearest"
    assert "(nearest)" in meta["airq.quant.method"]
    assert meta["airq.quant.source_sha256"] and "QAT" in meta["airq.quant.method"]
    assert meta["airq.obs_dim"] == "1032" and meta["airq.action_space"] == "discrete:25"
    # uint8 x uint8 (QAT's asymmetric 256-code grid): exact on every CPU, unlike full-range int8 weights
    from quantize.inspect_model import int8_scheme_from_weights

    assert meta["airq.quant.scheme"] == "u8u8" and int8_scheme_from_weights(model)["scheme"] == "u8u8"
    sess = session(path.read_bytes())
    action, logits = sess.run(
        ["action", "logits"], {"obs": np.random.default_rng(0).uniform(size=(3, 1032)).astype(np.float32)}
    )
    assert action.shape == (3,) and logits.shape == (3, 25)
    actor = torch.load(out / "actor_fakequant.pt", weights_only=False)
    assert all(q.frozen for q in activation_quants(actor))
    assert {lin.rounding for lin in quant_linears(actor)} == {"nearest"}


def test_qat_below_8_bits_has_no_onnx(tiny_run, tmp_path, capsys):
    from quantize.cli import main
    from quantize.errors import run_cli

    out = tmp_path / "qat4"
    assert (
        run_cli(
            main,
            [
                "qat",
                str(tiny_run),
                "--bits",
                "4",
                "--delay",
                "0",
                "--steps",
                "2048",
                "--episodes",
                "2",
                "--threads",
                "1",
                "--out",
                str(out),
            ],
        )
        == 0
    )
    assert (out / "qat.json").is_file() and not (out / "policy_qat_int8.onnx").exists()
    assert json.loads((out / "qat.json").read_text())["rounding"] == "nearest"
    assert {lin.rounding for lin in quant_linears(torch.load(out / "actor_fakequant.pt", weights_only=False))} == {
        "nearest"
    }


def test_qat_floor_by_name_and_default_out_dir(tiny_run, capsys):
    from quantize.cli import main
    from quantize.errors import run_cli

    assert (
        run_cli(
            main,
            [
                "qat",
                str(tiny_run),
                "--bits",
                "4",
                "--rounding",
                "floor",
                "--delay",
                "0",
                "--steps",
                "2048",
                "--episodes",
                "2",
                "--threads",
                "1",
            ],
        )
        == 0
    )
    out = tiny_run / "qat_4bit_floor"  # the default folder names the rounding
    assert json.loads((out / "qat.json").read_text())["rounding"] == "floor"
    assert {lin.rounding for lin in quant_linears(torch.load(out / "actor_fakequant.pt", weights_only=False))} == {
        "floor"
    }
    assert "(floor weights)" in capsys.readouterr().out


def test_qat_rejects_bad_delay(tiny_run, capsys):
    from quantize.cli import main
    from quantize.errors import run_cli

    assert run_cli(main, ["qat", str(tiny_run), "--bits", "4", "--delay", "5000", "--steps", "4096"]) == 2
    assert "--delay" in capsys.readouterr().err


def test_ptq_fake_quant_calibrates_ranges(bc_actor):
    obs = torch.rand(256, 1032)
    actor = FakeQuantActor.from_actor(bc_actor, 6)
    calibrate(actor, obs)
    quants = activation_quants(actor)
    assert len(quants) == 4 and all(q.frozen for q in quants)
    assert float(quants[0].lo) >= 0.0 and float(quants[0].hi) <= 1.0
    with torch.no_grad():
        a, logits = actor(obs)
    assert logits.shape == (256, 25)


def test_analyze_writes_plots(fp32_model, tmp_path, capsys):
    from quantize.cli import main
    from quantize.errors import run_cli

    assert run_cli(main, ["analyze", str(fp32_model), "--bits", "8", "4", "--out", str(tmp_path)]) == 0
    rows = json.loads((tmp_path / "sqnr.json").read_text())
    assert len(rows) == 4
    # ~6 dB per bit, and the floor formula is worse than rounding to nearest
    for r in rows:
        assert 20 < r["sqnr_nearest_db"]["8"] - r["sqnr_nearest_db"]["4"] < 28
        assert r["sqnr_floor_db"]["8"] < r["sqnr_nearest_db"]["8"]
    assert (tmp_path / "weights.png").stat().st_size > 10_000 and (tmp_path / "sqnr.png").is_file()


def test_sweep_writes_table_plot_and_caches_cells(tiny_run, tmp_path, capsys):
    from quantize.cli import main
    from quantize.errors import run_cli

    argv = [
        "sweep",
        str(tiny_run),
        "--bits",
        "8",
        "3",
        "--methods",
        "ptq",
        "ptq-floor",
        "--episodes",
        "4",
        "--out",
        str(tmp_path),
    ]
    assert run_cli(main, argv) == 0
    table = (tmp_path / "sweep.md").read_text()
    assert "| 8 " in table and "| 3 " in table and "ptq-floor" in table
    assert (tmp_path / "sweep.png").stat().st_size > 5_000
    cells = json.loads((tmp_path / "sweep.json").read_text())["cells"]
    assert {(c["method"], c["bits"]) for c in cells} == {("ptq", 8), ("ptq", 3), ("ptq-floor", 8), ("ptq-floor", 3)}
    # plain ptq rounds weights to nearest, ptq-floor is the seed's formula; each cell records which
    assert {(c["method"], c["params"]["rounding"]) for c in cells} == {("ptq", "nearest"), ("ptq-floor", "floor")}
    capsys.readouterr()
    assert run_cli(main, argv) == 0
    assert capsys.readouterr().out.count("cached") == 4


def test_bench_interleaves_and_reports_ratios(fp32_model, quantized_models, tmp_path, capsys):
    from quantize.cli import main
    from quantize.errors import run_cli

    out = tmp_path / "bench.json"
    assert (
        run_cli(main, ["bench", str(fp32_model), str(quantized_models["int8"]), "--calls", "50", "--json", str(out)])
        == 0
    )
    text = capsys.readouterr().out
    assert "speedup p50" in text and "int8" in text
    rows = json.loads(out.read_text())
    assert [r["precision"] for r in rows] == ["fp32", "int8"] and all(r["calls"] == 50 for r in rows)


def test_bias_correction_cancels_the_floor_shift(bc_actor):
    obs = torch.rand(512, 1032)
    obs[:, 1024:] = obs[:, 1024:] * 2 - 1
    with torch.no_grad():
        _, ref = bc_actor(obs)
        errors = {}
        for bc in (False, True):
            actor = FakeQuantActor.from_actor(bc_actor, 6, rounding="floor")
            calibrate(actor, obs, bias_correction=bc)
            _, logits = actor(obs)
            errors[bc] = float((logits - ref).mean(0).abs().mean())
    assert errors[True] < errors[False] / 2
