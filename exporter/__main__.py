"""``python -m gpu_eta.exporter``."""

import sys

from gpu_eta.exporter.main import main

if __name__ == "__main__":
    sys.exit(main())
