"""``python -m gpu_eta.top`` (also ``gpu-eta-top`` and ``python -m gpu_eta.forecaster top``)."""

import sys

from gpu_eta.top.main import main

if __name__ == "__main__":
    sys.exit(main())
