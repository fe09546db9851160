"""``python -m demo``: the one-command demo (see docs/demo.md)."""

import sys

from demo.cli import main

sys.exit(main())
