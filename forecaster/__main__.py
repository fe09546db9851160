"""``python -m gpu_eta.forecaster``: see ``gpu_eta.forecaster.main``."""

import sys

if __name__ == "__main__":
    try:
        from gpu_eta.forecaster.main import main
    except KeyboardInterrupt:  # Ctrl-C in the first import: one line, no traceback
        print("gpu-eta forecaster: interrupted", file=sys.stderr)
        sys.exit(1)
    sys.exit(main())
