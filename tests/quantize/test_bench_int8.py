"""quantize bench and card say on what int8 kernels they measured, and bench warns about a file this
host does not compute exactly (a u8s8 file on an AVX2 host without VNNI)."""

import json

from firmware_bridge.device import cpu_model
from firmware_bridge.int8_kernels import int8_kernels


def test_bench_names_the_int8_kernels_and_warns_on_a_saturating_file(fp32_model, quantized_models, tmp_path, capsys):
    from quantize.card import build_card
    from quantize.cli import main
    from quantize.errors import run_cli
    from quantize.ptq import StaticInt8Options, quantize_file

    u8s8 = tmp_path / "bc_u8s8.onnx"
    quantize_file(
        fp32_model, "int8", u8s8, calibration_episodes=2, heldout_episodes=0, options=StaticInt8Options(scheme="u8s8")
    )
    out = tmp_path / "bench.json"
    args = ["bench", str(fp32_model), str(quantized_models["int8"]), str(u8s8), "--calls", "20", "--json", str(out)]
    assert run_cli(main, args) == 0
    text = capsys.readouterr().out
    host = f"{cpu_model()}: {int8_kernels().describe()}"
    assert text.splitlines()[1] == host
    warned = [line for line in text.splitlines() if line.startswith("warning: ")]
    assert warned == (
        [] if int8_kernels().u8s8_exact else ["warning: bc_u8s8.onnx: not computed exactly here (scheme u8s8)"]
    )
    rows = json.loads(out.read_text())
    assert [r["int8_scheme"] for r in rows] == [None, "u8s7", "u8s8"] and all(r["host"] == host for r in rows)
    card = build_card(quantized_models["int8"], [], str(out), None)
    assert f"Measured on {host}." in card
