"""Load one of the repository's scripts (a file outside any package: ``bench/x.py``,
``rules/render.py``, ``grafana/build.py``, ``scripts/freeze_constraints.py``) as a module
for its tests.

Why one loader: the module is registered in ``sys.modules`` under its name before it
runs (dataclasses look their module up there), and its folder is on the path while it
loads, as when the script runs, so it can import its siblings; every copy of the three
``importlib`` lines had to remember both or not.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def load_script(path: str, name: str) -> ModuleType:
    """The repository's script ``path`` (relative to the checkout) imported as ``name``."""
    file = ROOT / path
    spec = importlib.util.spec_from_file_location(name, file)
    assert spec and spec.loader, file
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    sys.path.insert(0, str(file.parent))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(file.parent))
    return module
