"""Load a bench script (``bench/<name>.py``, not a package) as a module for its tests."""

from __future__ import annotations

from types import ModuleType

from tests.support.scripts import ROOT, load_script

BENCH = ROOT / "bench"


def load_bench(name: str) -> ModuleType:
    """``bench/<name>.py`` imported as ``bench_<name>`` (``load_script``: registered in
    ``sys.modules``, ``bench/`` on the path while it loads, so it can import its
    siblings such as ``forecast_accuracy``)."""
    return load_script(f"bench/{name}.py", f"bench_{name}")
