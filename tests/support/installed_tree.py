"""The installed layout (``gpu_eta/<package>``, ``gpu_eta_report``) as symlinks to the
repository's folders, for tests that run Python without site-packages (``-S``) to
see what a bare install does: ``PYTHONPATH=<tree>`` then imports this checkout's code
under its installed names. Built from pyproject's package-dir, like the wheel."""

from __future__ import annotations

from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[2]


def installed_tree(dest: Path) -> Path:
    """``dest`` holding ``gpu_eta/`` and ``gpu_eta_report/`` as symlinks; returns dest."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    mapping = project["tool"]["setuptools"]["package-dir"]
    (dest / "gpu_eta").mkdir(parents=True, exist_ok=True)
    for package, folder in mapping.items():
        link = dest.joinpath(*package.split("."))
        if not link.exists():
            link.symlink_to(ROOT / folder, target_is_directory=True)
    report = dest / "gpu_eta_report"
    if not report.exists():
        report.symlink_to(ROOT / "report" / "gpu_eta_report", target_is_directory=True)
    return dest
