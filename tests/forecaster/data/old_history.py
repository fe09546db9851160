"""``gpu_eta.forecaster.history`` as an older commit had it, for the makers of the
migration tests' stored files (``make_history_v*.py``): a file written by the code
that shipped a schema, not by a re-creation of its SQL."""

from __future__ import annotations

import subprocess
import sys
import types
from pathlib import Path


def load_history(commit: str, name: str) -> types.ModuleType:
    """``forecaster/history.py`` at ``commit``, loaded from git as module ``name``."""
    source = subprocess.run(
        ["git", "show", f"{commit}:forecaster/history.py"],
        check=True,
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[3],
    ).stdout
    # the package was ``forecaster`` before it became ``gpu_eta.forecaster``
    source = source.replace("from forecaster.", "from gpu_eta.forecaster.")
    module = types.ModuleType(name)
    sys.modules[module.__name__] = module
    exec(compile(source, f"{name}.py", "exec"), module.__dict__)
    return module
