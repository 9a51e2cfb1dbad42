"""``python -m sde_core``: the command-line interface (see :mod:`sde_core.cli`)."""

import sys

from sde_core.cli import main

if __name__ == "__main__":
    sys.exit(main())
