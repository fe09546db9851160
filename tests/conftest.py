"""Shared fixtures: a real Prometheus launcher (skips nothing: CI installs it).

Also a guard: the code under test is imported as ``gpu_eta.*`` through an install
(``pip install -e .``), so a run from a checkout other than the installed one would
silently test the other one. It stops with how to fix it instead.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from gpu_eta.launch.prometheus import PrometheusServer, ScrapeJob

ROOT = Path(__file__).resolve().parents[1]


def _installed_elsewhere() -> list[str]:
    wrong = []
    for name, folder in (
        ("gpu_eta.exporter", "exporter"),
        ("gpu_eta_report", "report/gpu_eta_report"),
    ):
        try:
            spec = importlib.util.find_spec(name)
        except ModuleNotFoundError:  # gpu_eta itself missing
            spec = None
        where = Path(spec.origin).resolve().parent if spec and spec.origin else None
        if where != (ROOT / folder).resolve():
            wrong.append(f"{name} is {where or 'not installed'}")
    return wrong


def pytest_configure(config: pytest.Config) -> None:
    wrong = _installed_elsewhere()
    if wrong:
        raise pytest.UsageError(
            f"this checkout is {ROOT}, but {'; '.join(wrong)}. ./test.sh re-installs this "
            "checkout into the interpreter it runs (scripts/bootstrap.sh); to keep the other "
            "install, run the tests with a Python of their own, e.g. python3 -m venv --without-pip "
            "--system-site-packages VENV && VENV/bin/pip install --no-deps "
            f"--no-build-isolation -e {ROOT} -e {ROOT}/report (docs/architecture.md)"
        )


@pytest.fixture
def prometheus_factory() -> Iterator:
    """Start real Prometheus servers for a test; every one is stopped afterwards.

    Usage: ``prom = prometheus_factory([ScrapeJob("exporter", ["127.0.0.1:9842"])])``.
    """
    from gpu_eta.launch.prometheus import start_prometheus

    started: list[PrometheusServer] = []

    def factory(jobs: list[ScrapeJob], **kwargs) -> PrometheusServer:
        server = start_prometheus(jobs, **kwargs)
        started.append(server)
        return server

    yield factory
    for server in started:
        server.stop()
