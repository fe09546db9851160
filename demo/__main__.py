"""``python -m gpu_eta.demo``: the one-command demo (see docs/demo.md)."""

import sys

from gpu_eta.demo.main import main

if __name__ == "__main__":
    sys.exit(main())
