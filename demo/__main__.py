"""``python -m gpu_eta.demo``: the one-command demo (see docs/demo.md)."""

import sys


def _main() -> int:
    """Run the demo; a Ctrl-C before its own signal handling is in place (while Python
    imports it, or reads its flags) ends it as one later does: exit 0, no traceback
    (docs/demo.md, "Exit codes"). Nothing has started then, so there is nothing to stop.
    """
    try:
        from gpu_eta.demo.main import main

        return main()
    except KeyboardInterrupt:
        print("\ngpu-eta demo: stopping…", file=sys.stderr)
        return 0


if __name__ == "__main__":
    sys.exit(_main())
