"""python -m quarl: see quarl/cli.py."""

import sys

from airq_cli import run
from quarl.cli import main

if __name__ == "__main__":
    sys.exit(run(main))
