"""Bad input: one-line error, exit code 2, no partial output file."""

import subprocess
import sys

import pytest

from quantize.cli import main
from quantize.errors import run_cli


def run(argv, capsys):
    code = run_cli(main, argv)
    err = capsys.readouterr().err
    return code, err


def assert_one_line_error(code, err, needle):
    assert code == 2
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], err


def test_not_onnx(tmp_path, capsys):
    bad = tmp_path / "notes.onnx"
    bad.write_text("this is not a model\n" * 10)
    out = tmp_path / "out.onnx"
    code, err = run(["ptq", str(bad), "--to", "int8", "-o", str(out)], capsys)
    assert_one_line_error(code, err, "not a valid ONNX model")
    assert list(tmp_path.iterdir()) == [bad]


def test_truncated(fp32_model, tmp_path, capsys):
    cut = tmp_path / "cut.onnx"
    data = fp32_model.read_bytes()
    cut.write_bytes(data[: len(data) // 2])
    for target in ("int8", "fp16", "int8-dynamic"):
        code, err = run(["ptq", str(cut), "--to", target, "-o", str(tmp_path / "o.onnx")], capsys)
        assert_one_line_error(code, err, "not a valid ONNX model")
    code, err = run(["inspect", str(cut)], capsys)
    assert_one_line_error(code, err, "not a valid ONNX model")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cut.onnx"]


def test_missing_file(tmp_path, capsys):
    code, err = run(["bench", str(tmp_path / "nope.onnx")], capsys)
    assert_one_line_error(code, err, "no such file")


def test_input_size_mismatch(tmp_path, capsys):
    from firmware_bridge.toy_policy import build_mlp_policy

    small = tmp_path / "small.onnx"
    small.write_bytes(build_mlp_policy(obs_dim=100, hidden=8))
    code, err = run(["ptq", str(small), "--to", "int8", "-o", str(tmp_path / "o.onnx"), "--level", "default"], capsys)
    assert_one_line_error(code, err, "input size 100 does not match the env's observation size 1032")
    assert not (tmp_path / "o.onnx").exists()


def test_zero_calibration_episodes(fp32_model, tmp_path, capsys):
    out = tmp_path / "o.onnx"
    code, err = run(["ptq", str(fp32_model), "--to", "int8", "-o", str(out), "--calibration-episodes", "0"], capsys)
    assert_one_line_error(code, err, "--calibration-episodes must be >= 1")
    assert not out.exists()


@pytest.mark.parametrize("bits", ["1", "17", "0", "x"])
def test_bits_outside_range(bits, capsys):
    code, err = run(["analyze", "whatever.onnx", "--bits", bits], capsys)
    assert_one_line_error(code, err, "bits must be an integer from 2 to 16")
    code, err = run(["qat", "runs/nothing", "--bits", bits], capsys)
    assert_one_line_error(code, err, "bits must be an integer from 2 to 16")


def test_quantizing_a_quantized_model_is_refused(quantized_models, tmp_path, capsys):
    code, err = run(["ptq", str(quantized_models["int8"]), "--to", "int8", "-o", str(tmp_path / "o.onnx")], capsys)
    assert_one_line_error(code, err, "already int8")


def test_exit_code_from_the_real_command(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x08\x07garbage")
    proc = subprocess.run([sys.executable, "-m", "quantize", "inspect", str(bad)], capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith("error: ") and len(proc.stderr.strip().splitlines()) == 1
