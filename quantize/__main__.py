import sys

from airq_cli import run
from quantize.cli import main

sys.exit(run(main))
