"""The command-line contract over every tool (airq_cli; firmware_bridge/cli.py for the device side):
an unusable output path or a wrong flag is one line on stderr naming the problem, exit 2, no
traceback, and is found before the heavy imports (torch, SB3, onnx, onnxruntime, matplotlib);
every usage line says ``python -m``; --help shows every default; results are written with the
umask's mode, not mkstemp's 0600."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

import airq_cli
from firmware_bridge import cli as fb_cli

# Every entry point: grep -rn '__main__' --include=*.py airq_cli nav_env policies quantize hil firmware_bridge actorq quarl
MODULES = [
    "nav_env.bench",
    "nav_env.demo",
    "nav_env.evaluate",
    "nav_env.airsim.fake_server",
    "nav_env.dynamics.identify",
    "policies.bench",
    "policies.export",
    "policies.widen",
    "policies.evaluate",
    "policies.card",
    "policies.distill",
    "policies.train",
    "quantize",
    "device_emulation.arm",
    "deployment_study.memfit",
    "hil.bench",
    "deployment_study",
    "deployment_study.dynamics_gap",
    "deployment_study.vehicles",
    "deployment_study.autopilot_table",
    "device_emulation.roofline",
    "hil.run",
    "firmware_bridge.bench",
    "firmware_bridge.serve",
    "firmware_bridge.keys",
    "firmware_bridge.systemd",
    "firmware_bridge.outputs",
    "actorq.bench_weights",
    "actorq.train",
    "actorq.bench",
    "quarl",
]
QUANTIZE_COMMANDS = ["ptq", "inspect", "bench", "card", "analyze", "qat", "sweep", "observations"]

# (module, argv with OUT where the output path goes, "file" or "dir"). Input files need not exist:
# the output path is checked while parsing, before anything reads them.
OUTPUTS = [
    ("nav_env.bench", ["--out", "OUT"], "file"),
    ("nav_env.demo", ["--out", "OUT"], "dir"),
    ("nav_env.evaluate", ["--out", "OUT"], "dir"),
    ("nav_env.airsim.fake_server", ["--write-scene", "OUT"], "file"),
    ("nav_env.dynamics.identify", ["--out", "OUT"], "file"),
    ("deployment_study.dynamics_gap", ["--out", "OUT"], "dir"),
    ("deployment_study.vehicles", ["a", "b", "--out", "OUT"], "dir"),
    ("deployment_study.autopilot_table", ["--models", "m.onnx", "--px4", "px4", "--out", "OUT"], "dir"),
    ("policies.bench", ["--out", "OUT"], "file"),
    ("policies.export", ["runs/none", "-o", "OUT"], "file"),
    ("policies.widen", ["m.onnx", "--camera", "144x256", "-o", "OUT"], "file"),
    ("policies.widen", ["m.onnx", "--check", "m_int8.onnx", "--report", "OUT"], "file"),
    ("policies.evaluate", ["baseline:random", "--out", "OUT"], "dir"),
    ("policies.card", ["--run", "r", "--onnx", "m.onnx", "--eval", "e.json", "-o", "OUT"], "file"),
    ("policies.distill", ["--teacher", "r", "--out", "OUT"], "dir"),
    ("policies.train", ["--out", "OUT"], "dir"),
    ("quantize", ["ptq", "m.onnx", "--to", "int8", "-o", "OUT"], "file"),
    ("quantize", ["bench", "m.onnx", "--json", "OUT"], "file"),
    ("quantize", ["card", "m.onnx", "-o", "OUT"], "file"),
    ("quantize", ["analyze", "m.onnx", "--out", "OUT"], "dir"),
    ("quantize", ["qat", "r", "--bits", "4", "--out", "OUT"], "dir"),
    ("quantize", ["sweep", "r", "--out", "OUT"], "dir"),
    ("hil.run", ["--policy", "m.onnx", "--sim-only", "--out", "OUT"], "dir"),
    ("hil.run", ["--resume", "OUT"], "dir"),
    ("deployment_study", ["--sim-only", "--out", "OUT"], "dir"),
    ("deployment_study.memfit", ["--model", "m.onnx", "--out", "OUT"], "dir"),
    ("hil.bench", ["--policy", "m.onnx", "--out", "OUT"], "file"),
    ("device_emulation.roofline", ["measure", "--out", "OUT"], "file"),
    ("firmware_bridge.keys", ["OUT", "bridge"], "dir"),
    ("firmware_bridge.outputs", ["record", "m.onnx", "--observations", "o.npy", "-o", "OUT"], "file"),
    ("quantize", ["observations", "m.onnx", "-o", "OUT"], "file"),
    ("actorq.bench_weights", ["--out", "OUT"], "file"),
    ("actorq.train", ["--out", "OUT"], "dir"),
    ("actorq.bench", ["--bench-out", "OUT"], "dir"),
    ("quarl", ["run", "c.toml", "--out", "OUT"], "dir"),
]
# Modules with no output path of their own (they print, serve or prepare a cache).
NO_OUTPUT = {"device_emulation.arm", "firmware_bridge.bench", "firmware_bridge.serve", "firmware_bridge.systemd"}
HEAVY = ("torch", "stable_baselines3", "onnx", "onnxruntime", "matplotlib", "mujoco", "numba")

# Runs a module as `python -m` does, then reports its exit code and which heavy packages it imported.
PROBE = """
import json, runpy, sys
module = sys.argv[1]
sys.argv = [module, *sys.argv[2:]]
code = 0
try:
    runpy.run_module(module, run_name="__main__", alter_sys=True)
except SystemExit as e:
    code = e.code
heavy = [m for m in HEAVY_NAMES if m in sys.modules]
print("\\nAIRQ-PROBE " + json.dumps({"code": code, "heavy": heavy}))
""".replace("HEAVY_NAMES", repr(HEAVY))


def probe(module: str, argv: list[str], cwd: Path) -> tuple[int, list[str], str]:
    r = subprocess.run(
        [sys.executable, "-c", PROBE, module, *argv],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        env=os.environ | {"PYTHONPATH": str(Path(__file__).resolve().parents[1])},
    )
    result = json.loads(r.stdout.rsplit("AIRQ-PROBE ", 1)[1])
    return result["code"], result["heavy"], r.stderr


def bad_paths(tmp_path: Path, kind: str) -> dict[str, Path]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    a_file = tmp_path / "file.txt"
    a_file.write_text("not a folder\n")
    a_dir = tmp_path / "adir"
    a_dir.mkdir()
    return {
        "wrong kind": a_file if kind == "dir" else a_dir,  # a file where a folder goes, a folder where a file goes
        "under a file": a_file / "sub" / ("out" if kind == "dir" else "out.json"),
        "unwritable": Path("/proc/airq-no-such-dir")
        / ("out" if kind == "dir" else "out.json"),  # root cannot write there either
    }


def test_every_entry_point_is_listed():
    root = Path(__file__).resolve().parents[1]
    found = set()
    for package in (
        "nav_env",
        "policies",
        "quantize",
        "hil",
        "firmware_bridge",
        "device_emulation",
        "deployment_study",
        "actorq",
        "quarl",
    ):
        for path in (root / package).rglob("*.py"):
            if '__name__ == "__main__"' in path.read_text() or path.name == "__main__.py":
                rel = path.relative_to(root).with_suffix("")
                found.add(".".join(rel.parts[:-1] if rel.name == "__main__" else rel.parts))
    assert found == set(MODULES)
    assert {m for m, _, _ in OUTPUTS} | NO_OUTPUT == set(MODULES)
    assert {argv[0] for m, argv, _ in OUTPUTS if m == "quantize"} == set(QUANTIZE_COMMANDS) - {"inspect"}


@pytest.mark.parametrize("problem", ["wrong kind", "under a file", "unwritable"])
@pytest.mark.parametrize(
    ("module", "argv", "kind"),
    OUTPUTS,
    ids=[f"{m}-{a[0]}-{a[-2] if a[-1] != 'bridge' else 'DIR'}" for m, a, _ in OUTPUTS],
)
def test_unusable_output_path_is_one_line_exit_2_before_heavy_imports(module, argv, kind, problem, tmp_path):
    out = bad_paths(tmp_path, kind)[problem]
    code, heavy, err = probe(module, [str(out) if a == "OUT" else a for a in argv], tmp_path)
    lines = err.strip().splitlines()
    assert code == 2, err
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("error: ") and str(out) in lines[0], err
    assert heavy == [], f"{module} imported {heavy} before reporting a bad output path"
    assert not list(tmp_path.rglob(".airq-write-check-*")), "the writability probe left a file behind"


@pytest.mark.parametrize("module", MODULES)
def test_wrong_flag_is_one_line_exit_2_before_heavy_imports(module, tmp_path):
    argv = ["ptq", "--no-such-flag"] if module == "quantize" else ["--no-such-flag"]
    code, heavy, err = probe(module, argv, tmp_path)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), err
    assert f"python -m {module}" in lines[0], err  # points at the right --help
    assert heavy == [], f"{module} imported {heavy} before reporting a wrong flag"


@pytest.mark.parametrize("module", MODULES)
def test_help_says_python_m(module):
    r = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"usage: python -m {module} "), r.stdout[:200]


class _Captured(Exception):
    pass


def _parsers_of(module: str, argv: list[str], monkeypatch) -> argparse.ArgumentParser:
    """The parser ``module``'s main builds for ``argv + --help`` (caught as it prints its help)."""
    import importlib

    seen = []

    def capture(self, file=None):
        seen.append(self)
        raise _Captured

    monkeypatch.setattr(argparse.ArgumentParser, "print_help", capture)
    main = importlib.import_module(
        {"quantize": "quantize.cli", "deployment_study": "deployment_study.study", "quarl": "quarl.cli"}.get(
            module, module
        )
    ).main
    with pytest.raises(_Captured):
        main([*argv, "--help"])
    return seen[0]


HELP_CASES = (
    [(m, []) for m in MODULES]
    + [("quantize", [c]) for c in QUANTIZE_COMMANDS]
    + [
        ("device_emulation.roofline", ["measure"]),
        ("device_emulation.roofline", ["cost"]),
        ("hil.run", ["--resume", "DIR"]),
        ("quarl", ["run"]),
    ]
)


@pytest.mark.parametrize(("module", "argv"), HELP_CASES, ids=[" ".join([m, *a]) for m, a in HELP_CASES])
def test_help_shows_every_default(module, argv, monkeypatch):
    parser = _parsers_of(module, argv, monkeypatch)
    assert isinstance(parser, (airq_cli.ArgumentParser, fb_cli.OneLineArgumentParser))
    assert parser.prog.startswith(f"python -m {module}")
    for action in parser._actions:
        if not airq_cli.parser.default_note(action):
            continue  # no default worth showing (None, a switch, a required flag)
        formatter = parser._get_formatter()
        formatter.add_argument(action)
        text = formatter.format_help()
        assert "default" in text, f"{parser.prog} {action.option_strings}: --help hides its default {action.default!r}"


# ------------------------------------------------------------------------ the two copies of the contract


def test_firmware_bridge_keeps_the_same_contract(tmp_path, capsys):
    assert (
        (fb_cli.EXIT_OK, fb_cli.EXIT_FAILURE, fb_cli.EXIT_USAGE, fb_cli.EXIT_INTERRUPTED)
        == (airq_cli.EXIT_OK, airq_cli.EXIT_FAILURE, airq_cli.EXIT_USAGE, airq_cli.EXIT_INTERRUPTED)
        == (0, 1, 2, 130)
    )
    assert fb_cli.USAGE_ERROR_EXIT == airq_cli.EXIT_USAGE
    for message in ("plain", "two\nlines", "", ValueError("x\ny")):
        assert fb_cli.error_line(message) == airq_cli.error_line(message)
    # the same output-path verdicts, word for word
    for kind in ("file", "dir"):
        for path in [*bad_paths(tmp_path / kind, kind).values(), tmp_path / kind / "new" / "ok"]:
            verdicts = []
            for check in (
                (airq_cli.check_output_file, fb_cli.check_output_file)
                if kind == "file"
                else (airq_cli.check_output_dir, fb_cli.check_output_dir)
            ):
                try:
                    verdicts.append(str(check(path, "--out")))
                except (airq_cli.UserError, fb_cli.UsageError) as e:
                    verdicts.append(f"refused: {e}")
            assert verdicts[0] == verdicts[1], verdicts
    # the same result files: a folder made if missing, the content, the mode open() would give
    written = []
    for name, write in (("airq", airq_cli.write_atomic), ("bridge", fb_cli.write_atomic)):
        target = tmp_path / "new" / name / "result.bin"
        write(target, b"data")
        written.append((target.read_bytes(), target.stat().st_mode))
    assert written[0] == written[1]
    # the same parser: one-line errors, python -m prog, defaults in help
    parsers = [cls(prog="firmware_bridge.x") for cls in (airq_cli.ArgumentParser, fb_cli.OneLineArgumentParser)]
    texts, errors = [], []
    for p in parsers:
        p.add_argument("--n", type=int, default=3)
        p.add_argument("--path", default="out/x", help="where")
        p.add_argument("--flag", action="store_true")
        texts.append(p.format_help())
        with pytest.raises(SystemExit) as e:
            p.parse_args(["--n", "x"])
        errors.append((e.value.code, capsys.readouterr().err))
    assert texts[0] == texts[1] and "(default: 3)" in texts[0] and "where (default: out/x)" in texts[0]
    assert texts[0].startswith("usage: python -m firmware_bridge.x ")
    assert errors[0] == errors[1] and errors[0][0] == 2 and errors[0][1].count("\n") == 1


def test_firmware_bridge_imports_nothing_of_the_repo():
    code = (
        "import sys, firmware_bridge.cli, firmware_bridge.keys, firmware_bridge.serve; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('airq_cli', 'nav_env', 'policies', 'quantize', 'hil')))"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "[]", r.stdout + r.stderr


def test_run_turns_user_errors_and_argparse_exits_into_codes(capsys):
    def user_error(argv):
        raise airq_cli.UserError("bad thing\nsecond line")

    def bad_flag(argv):
        airq_cli.ArgumentParser(prog="x").parse_args(["--nope"])

    def interrupted(argv):
        raise KeyboardInterrupt

    assert airq_cli.run(user_error) == 2 and capsys.readouterr().err == "error: bad thing\n"
    assert airq_cli.run(bad_flag) == 2 and capsys.readouterr().err.count("\n") == 1
    assert airq_cli.run(interrupted) == 130
    assert airq_cli.run(lambda argv: (_ for _ in ()).throw(OSError("net")), failures=(OSError,)) == 1


def test_defaults_from_a_dataclass_are_written_once():
    from dataclasses import dataclass, field

    @dataclass
    class Args:
        port: int = 5555
        levels: list[str] = field(default_factory=lambda: ["default", "hard"])
        out_dir: Path = Path("out/x")
        models: list[str] = field(default_factory=list)

    p = airq_cli.ArgumentParser(prog="t")
    p.add_argument("--port", type=int)
    p.add_argument("--levels", nargs="+")
    p.add_argument("--out", type=airq_cli.output_dir)
    p.add_argument("--model", dest="models", action="append")
    airq_cli.defaults_from(p, Args, names={"out": "out_dir"})
    ns = p.parse_args([])
    assert (ns.port, ns.levels, ns.out, ns.models) == (5555, ["default", "hard"], "out/x", None)
    assert p.parse_args(["--model", "a"]).models == ["a"]  # an append flag does not keep a dataclass default
    assert "(default: 5555)" in p.format_help() and "(default: default hard)" in p.format_help()


def test_arguments_from_a_dataclass_take_type_help_and_flag_from_each_field(capsys):
    from dataclasses import dataclass, field

    kinds = ["x"]  # a registry: its names when the parser is built, not when the class was

    @dataclass
    class Args:
        kind: str = field(
            default="x", metadata=airq_cli.arg(lambda: "one of " + ", ".join(kinds), choices=lambda: kinds)
        )
        models: list[str] = field(default_factory=list, metadata=airq_cli.arg("a model", metavar="FILE", required=True))
        rate_hz: float | None = None
        mode: str = field(default="a", metadata=airq_cli.arg("the mode", choices=("a", "b")))
        timeout_s: float = field(default=1.0, metadata=airq_cli.arg("per request", flag="--timeout"))
        host: str | None = None
        local: bool = False
        out: str = field(default="out/x", metadata=airq_cli.arg(type=airq_cli.output_dir))
        resume: bool = False

    kinds.append("y")
    p = airq_cli.ArgumentParser(prog="t")
    where = p.add_mutually_exclusive_group()
    airq_cli.add_arguments(p, Args, skip=("resume",), groups={"host": where, "local": where})
    ns = p.parse_args(["--models", "m", "--models", "n", "--rate-hz", "2.5", "--timeout", "3", "--local"])
    assert Args(**vars(ns)) == Args(models=["m", "n"], rate_hz=2.5, timeout_s=3.0, local=True)
    assert airq_cli.flag_of(next(f for f in dataclasses.fields(Args) if f.name == "timeout_s")) == "--timeout"
    text = p.format_help()
    assert p.parse_args(["--models", "m", "--kind", "y"]).kind == "y" and "one of x, y" in text
    assert "--models FILE" in text and "per request (default: 1.0)" in text and "--resume" not in text
    bad = [
        ["--models", "m", "--mode", "c"],
        ["--models", "m", "--rate-hz", "x"],
        [],
        ["--models", "m", "--local", "--host", "h"],
    ]
    for argv in bad:  # a choice, a type, a required flag, a mutually exclusive pair: one line each
        with pytest.raises(SystemExit):
            p.parse_args(argv)
        assert capsys.readouterr().err.count("\n") == 1


# ------------------------------------------------------------------------------------- file modes


def _modes(folder: Path) -> dict[str, int]:
    return {p.name: stat.S_IMODE(p.stat().st_mode) for p in folder.rglob("*") if p.is_file()}


@pytest.mark.parametrize(("umask", "mode"), [(0o022, 0o644), (0o027, 0o640), (0o077, 0o600)])
def test_write_atomic_applies_the_umask(tmp_path, umask, mode):
    from airq_cli import write_atomic
    from nav_env.render import save_png

    old = os.umask(umask)
    try:
        write_atomic(tmp_path / "a" / "report.json", b"{}")
        save_png(tmp_path / "a" / "map.png", __import__("numpy").zeros((2, 2, 3), "uint8"))
    finally:
        os.umask(old)
    assert _modes(tmp_path) == {"report.json": mode, "map.png": mode}


def test_write_atomic_error_is_one_line_user_error(tmp_path):
    from airq_cli import write_atomic

    (tmp_path / "file.txt").write_text("x")
    with pytest.raises(airq_cli.OutputError, match="cannot write .*file.txt/out.json") as e:
        write_atomic(tmp_path / "file.txt" / "out.json", b"{}")
    assert isinstance(e.value, OSError) and "\n" not in str(e.value)


def _run_under_umask_022(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    r = subprocess.run(
        [
            sys.executable,
            "-c",
            "import os, runpy, sys; os.umask(0o022); sys.argv = sys.argv[1:]; "
            "runpy.run_module(sys.argv[0], run_name='__main__', alter_sys=True)",
            *argv,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
    )
    assert r.returncode == 0, r.stderr
    return r


def test_real_tool_outputs_are_readable_by_others(tmp_path):
    """ONNX (quantize ptq), report.json and PNGs (hil.run), a GIF (nav_env.demo) from real runs."""
    from firmware_bridge.toy_policy import build_mlp_policy

    (tmp_path / "toy.onnx").write_bytes(build_mlp_policy(1032, 16, seed=1))
    _run_under_umask_022(
        [
            "quantize",
            "ptq",
            "toy.onnx",
            "--to",
            "fp16",
            "-o",
            "q/toy_fp16.onnx",
            "--heldout-episodes",
            "0",
            "--level",
            "easy",
        ],
        tmp_path,
    )
    _run_under_umask_022(
        [
            "hil.run",
            "--quiet",
            "--policy",
            "toy.onnx",
            "--sim-only",
            "--episodes",
            "1",
            "--level",
            "easy",
            "--out",
            "hil",
        ],
        tmp_path,
    )
    _run_under_umask_022(["nav_env.demo", "--episodes", "1", "--level", "easy", "--out", "demo"], tmp_path)
    modes = _modes(tmp_path / "q") | _modes(tmp_path / "hil") | _modes(tmp_path / "demo")
    assert {
        "toy_fp16.onnx",
        "report.json",
        "run.jsonl",
        "latency_histogram.png",
        "episode_0.gif",
        "episode_0.png",
    } <= set(modes)
    assert {name: oct(m) for name, m in modes.items() if m != 0o644} == {}
