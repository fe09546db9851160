"""``python -m gpu_eta.forecaster``: see ``gpu_eta.forecaster.main``."""

import sys

from gpu_eta.forecaster.main import main

if __name__ == "__main__":
    sys.exit(main())
