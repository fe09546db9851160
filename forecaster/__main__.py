"""``python -m forecaster``: see ``forecaster.cli``."""

import sys

from forecaster.cli import main

if __name__ == "__main__":
    sys.exit(main())
