"""The command-line contract of every host tool (nav_env, policies, quantize, hil).

    from airq_cli import ArgumentParser, UserError, output_dir, output_file, run

    def main(argv=None) -> int:
        p = ArgumentParser(prog="python -m pkg.tool", description="...")
        p.add_argument("--out", type=output_dir, default="out/tool")
        args = p.parse_args(argv)           # bad flags and unusable output paths stop here, exit 2
        import torch                         # heavy imports only after the arguments are known good
        ...

    if __name__ == "__main__":
        sys.exit(run(main))

The contract (firmware_bridge/cli.py keeps a copy for the Pi, tests/test_cli_contract.py checks
both agree): exit 0 done, 1 the work failed (device, network), 2 the user's mistake, 130
interrupted; a user error is exactly one stderr line ``error: <message>``, never a traceback; usage
lines say ``python -m ...`` and ``--help`` shows every default.
"""

from airq_cli.contract import (
    EXIT_FAILURE,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    OutputError,
    UserError,
    error_line,
    run,
)
from airq_cli.files import MISSING, json_text, jsonable, known_fields, shown, write_atomic, write_json
from airq_cli.parser import ArgumentParser, HelpFormatter, add_arguments, arg, defaults_from, flag_of
from airq_cli.paths import check_output_dir, check_output_file, file_mode, output_dir, output_file
from airq_cli.progress import Progress, progress

__all__ = [
    "EXIT_OK",
    "EXIT_FAILURE",
    "EXIT_USAGE",
    "EXIT_INTERRUPTED",
    "UserError",
    "OutputError",
    "error_line",
    "run",
    "ArgumentParser",
    "HelpFormatter",
    "defaults_from",
    "add_arguments",
    "arg",
    "flag_of",
    "check_output_dir",
    "check_output_file",
    "output_dir",
    "output_file",
    "file_mode",
    "MISSING",
    "json_text",
    "jsonable",
    "known_fields",
    "shown",
    "write_atomic",
    "write_json",
    "Progress",
    "progress",
]
