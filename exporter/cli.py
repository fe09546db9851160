"""``python -m exporter`` / ``gpu-eta-exporter``: the entry point, safe without extras.

``pip install gpu-eta`` (the progress client for training images) installs the
console script too, but not the exporter's packages (``pyyaml``,
``prometheus-client``, ``grpcio`` …). Importing the program (``exporter.app``)
there would end in a ``ModuleNotFoundError`` traceback; this module imports it
inside ``main`` and turns a missing extra into one line and exit 2. Every other
name (``parse_config``, ``ExitCode``, ``Runtime`` …) is ``exporter.app``'s, looked up
on first use, so ``from exporter.cli import parse_config`` keeps working.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Sequence
from typing import Any

__all__ = ["EXTRA_MODULES", "main", "missing_dependency"]

PROG = "gpu-eta exporter"
USAGE_EXIT = 2  # exporter.app.ExitCode.USAGE is this value (app imports it)
# top-level modules of the `exporter` extra (pyproject.toml) the program imports
EXTRA_MODULES = frozenset(
    {"yaml", "prometheus_client", "grpc", "google", "kubernetes", "requests", "pynvml"}
)


def missing_dependency(err: ModuleNotFoundError) -> str | None:
    """The line for a missing extra's module, or None when ``err`` is not one (a bug
    of ours, which must keep its traceback)."""
    name = err.name or ""
    if name.split(".")[0] not in EXTRA_MODULES:
        return None
    return f"{PROG}: missing dependency {name!r}: pip install 'gpu-eta[exporter]'"


def main(argv: Sequence[str] | None = None, stop: threading.Event | None = None) -> int:
    """Run the exporter (``exporter.app.main``); exit 2 with one line on stderr when
    the ``exporter`` extra is not installed."""
    try:
        from exporter import app
    except ModuleNotFoundError as err:
        line = missing_dependency(err)
        if line is None:
            raise
        print(line, file=sys.stderr)
        return USAGE_EXIT
    return app.main(argv, stop=stop)


def __getattr__(name: str) -> Any:
    """``exporter.cli.<name>`` for the program's other names (module ``__getattr__``)."""
    if name.startswith("__"):
        raise AttributeError(name)
    from exporter import app

    return getattr(app, name)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
