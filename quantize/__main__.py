import sys

from quantize.cli import main
from quantize.errors import run_cli

sys.exit(run_cli(main))
