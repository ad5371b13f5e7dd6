"""quantize qat / sweep default to rounding weights to nearest; the seed's floor formula is selected by
name; the method names of before (ptq/qat meant floor) that changed meaning are refused in one line."""

import pytest

from quantize.cli import build_parser, main
from quantize.errors import QuantizeError, run_cli
from quantize.sweep import METHOD_SPECS, RENAMED, check_method


def test_qat_rounds_to_nearest_by_default_and_floor_by_name():
    p = build_parser()
    assert p.parse_args(["qat", "RUN", "--bits", "4"]).rounding == "nearest"
    assert p.parse_args(["qat", "RUN", "--bits", "4", "--rounding", "floor"]).rounding == "floor"
    assert p.parse_args(["qat", "RUN", "--bits", "4", "--rounding", "nearest"]).rounding == "nearest"


def test_sweep_default_methods_round_to_nearest():
    args = build_parser().parse_args(["sweep", "RUN"])
    assert args.methods == ["ptq", "qat"]
    assert [METHOD_SPECS[m].rounding for m in args.methods] == ["nearest", "nearest"]
    assert [METHOD_SPECS[m].qat for m in args.methods] == [False, True]


def test_sweep_floor_methods_by_name():
    args = build_parser().parse_args(
        [
            "sweep",
            "RUN",
            "--methods",
            "ptq-floor",
            "qat-floor",
            "ptq-weights-floor",
            "ptq-floor-bc",
            "qat-floor-bc",
            "ptq-weights",
        ]
    )
    spec = {m: METHOD_SPECS[m] for m in args.methods}
    assert all(spec[m].rounding == "floor" for m in args.methods if "floor" in m)
    assert spec["ptq-weights"].rounding == "nearest" and not spec["ptq-weights"].activations
    assert spec["ptq-floor-bc"].bias_correction and spec["qat-floor-bc"].bias_correction and spec["qat-floor"].qat
    # every plain (no -floor) name rounds to nearest
    assert all(s.rounding == "nearest" for m, s in METHOD_SPECS.items() if "floor" not in m)


@pytest.mark.parametrize("old,new", sorted(RENAMED.items()))
def test_renamed_sweep_methods_fail_in_one_line_naming_the_new_name(old, new, capsys):
    assert new in METHOD_SPECS and old not in METHOD_SPECS
    with pytest.raises(QuantizeError, match=f"'{old}' was renamed: use '{new}'"):
        check_method(old)
    assert run_cli(main, ["sweep", "RUN", "--methods", "ptq", old]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and f"'{new}'" in err and "ptq-floor" in err


def test_unknown_sweep_method_lists_the_known_ones(capsys):
    assert run_cli(main, ["sweep", "RUN", "--methods", "ptq-up"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "ptq-floor" in err and "qat-floor-bc" in err
