"""Shared fixtures: a real Prometheus launcher (skips nothing: CI installs it).

Also a guard: the code under test is imported as ``gpu_eta.*`` through an install
(``pip install -e .``), so a run from a checkout other than the installed one would
silently test the other one. It stops with how to fix it instead.

And what the suite needs of every test in a process that runs many (pytest-xdist runs
the files in ``GPU_ETA_TEST_WORKERS`` processes, test.sh: 5, in no fixed order): no Hypothesis time limit per example (a busy
worker stalls for more than its default 200 ms), and the root logger as each test
found it (the exporter's and forecaster's ``main`` configure it for their process).
"""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from hypothesis import settings

from tests.support.serial_ast import serialise_ast_parse

serialise_ast_parse()
settings.register_profile("gpu-eta", deadline=None)
settings.load_profile("gpu-eta")

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


@pytest.fixture(autouse=True)
def _root_logger_restored() -> Iterator[None]:
    """The root logger's level and handlers put back after each test: a ``main`` run
    in-process (``main_in_thread``) sets them for the process, which later test files
    in the same worker would otherwise inherit."""
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    yield
    root.setLevel(level)
    for handler in [h for h in root.handlers if h not in handlers]:
        root.removeHandler(handler)
    for handler in handlers:
        if handler not in root.handlers:
            root.addHandler(handler)


# The test files that take longest (``--durations``, 2026-12-07), slowest first. A file's
# tests run in one worker (``--dist loadfile``), and xdist hands the files out in
# collection order (``--no-loadscope-reorder`` in test.sh; by default it orders them by
# their count of tests): one of these started last ran on alone for minutes after the
# others were done. Order only: a file missing here, or one that got faster, costs
# time, never a result.
SLOW_FILES = (
    "tests/report/test_callbacks_keras.py",
    "tests/report/test_callbacks_lightning.py",
    "tests/report/test_callbacks_keras_loops.py",
    "tests/report/test_callbacks_hf.py",
    "tests/forecaster/test_evaluate.py",
    "tests/top/test_render.py",
    "tests/ops/test_manifests.py",
    "tests/integration/test_demo_standalone.py",
    "tests/integration/test_demo.py",
    "tests/ops/test_chart.py",
    "tests/integration/test_forecaster_prometheus.py",
    "tests/forecaster/test_history_steps.py",
    "tests/top/test_top.py",
    "tests/forecaster/test_cycle_clock.py",
    "tests/demo/test_main.py",
    "tests/forecaster/test_cycle_restart_steps_prometheus.py",
    "tests/forecaster/test_cycle_restart_prometheus.py",
    "tests/report/test_client.py",
    "tests/report/test_callbacks.py",
    "tests/forecaster/test_main.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The slow files' tests first (``SLOW_FILES``), every file's in its own order, and
    the cases of ``SPREAD_TESTS`` last: each a few seconds at most, handed out one by one,
    they fill the workers' ends instead of leaving one to finish a long file alone."""
    rank = {name: i for i, name in enumerate(SLOW_FILES)}

    def key(item: pytest.Item) -> int:
        if item.nodeid.startswith(SPREAD_TESTS):
            return len(rank) + 1
        return rank.get(item.nodeid.split("::", 1)[0], len(rank))

    items.sort(key=key)


# Tests whose cases are handed out one by one, not with their file's other tests: each
# case is long, independent and starts no server a module shares (``--dist loadfile``
# would run them all in one worker, one after another). The promtool unit tests, one
# case per test group of tests/rules (tests/support/rule_tests.py): 190 s in two tests,
# 60 s since each group runs on the rule groups it reads (its longest 3-5 s).
SPREAD_TESTS = (
    "tests/ops/test_rules.py::test_promtool_unit_tests_pass[",
    "tests/ops/test_rules_prometheus3.py::test_promtool_unit_tests_pass_with_prometheus_3_windows[",
)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """``--dist loadfile`` with each case of ``SPREAD_TESTS`` a work unit of its own;
    every other test stays with its file. None (xdist's own) for another ``--dist``."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class SpreadScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return nodeid if nodeid.startswith(SPREAD_TESTS) else super()._split_scope(nodeid)

    return SpreadScheduling(config, log)


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
