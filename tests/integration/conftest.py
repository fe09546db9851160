"""``demo_stack``: the whole demo (real exporters, Prometheus, forecaster) for a module;
``exporter_factory``: one ``python -m gpu_eta.exporter`` subprocess per call, stopped after the test.

Module-scoped so every test of a module that needs a live cluster shares one
start (~10 s) instead of paying for its own. It is bounded: the stack is stopped after
the module's last test, or after ``MAX_SECONDS`` at the latest, whichever comes
first, and every child process is stopped by process group. It runs until that last
test whether or not the tests between use it: keep it to modules whose tests all do.

The yielded object is ``gpu_eta.demo.stack.Stack``: ``.prometheus_url``, ``.nodes`` (each
with ``.name`` and ``.target``), ``.forecaster_url``, ``.processes()``, ``.driver``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gpu_eta.demo.stack import Stack, StackConfig
from gpu_eta.simulation.cluster import ALERT_CAUSES, ClusterConfig
from tests.integration.helpers import Exporter, start_exporter

MAX_SECONDS = 600.0  # hard upper bound on the stack's life, even if the module runs on
WARMUP_SECONDS = 90.0  # at most this long for the first forecasts to appear
DEFAULT_SEED = 3  # the simulated cluster's seed for a module that sets no DEMO_SEED


@pytest.fixture(scope="module")
def demo_stack(request: pytest.FixtureRequest) -> Iterator[Stack]:
    """The demo's whole chain, one per test module. Why not one per session: under
    pytest-xdist the modules using it run in other worker processes or far apart in
    one, so a session's stack would run twice at once, or idle as CPU load under
    unrelated files (some of which set a file-size limit for their whole process) and
    be stopped by ``MAX_SECONDS`` before its second module.

    The cluster's seed is the module's ``DEMO_SEED`` (else ``DEFAULT_SEED``): a seed
    decides when what a test waits for happens (a free GPU, a queued pod, a run with a
    completed past run of its configuration), so a module picks the one whose cluster
    shows what its tests read from the start, not minutes in."""
    seed = getattr(request.module, "DEMO_SEED", DEFAULT_SEED)
    config = StackConfig(
        cluster=ClusterConfig(seed=seed, time_scale=20.0, arrival_seconds=240.0, **ALERT_CAUSES),
        history_days=0.25,
        history_jobs=300,
        prometheus_port=0,  # any free port: never collide with a developer's Prometheus
        forecaster_port=0,
        scrape_interval="1s",
        forecaster_interval_seconds=3.0,
        real_training=1,
        # a short real run (~4 s of a core, ended before the first test): its epochs and
        # end are what tests read; the demo's 300 epochs cost ~80 s of a core per module
        real_training_epochs=10,
        alertmanager_port=0,
        alert_for="5s",
    )
    stack = Stack(config, say=lambda msg: None)
    stack.start()
    timer = threading.Timer(MAX_SECONDS, stack.stop)
    timer.daemon = True
    timer.start()
    try:
        prom = stack.prometheus
        assert prom is not None
        # ready = every node scraped and the forecaster has published for some run
        prom.wait_for('up{job="gpu-eta-exporter"} == 1', timeout=60, min_results=len(stack.nodes))
        prom.wait_for("gpu_eta_job_predicted_completion_timestamp_seconds", timeout=WARMUP_SECONDS)
        yield stack
    finally:
        timer.cancel()
        stack.stop()


@pytest.fixture
def exporter_factory(tmp_path: Path) -> Iterator[Callable[..., Exporter]]:
    """``exporter_factory(*args, ready="/healthz")`` starts ``python -m gpu_eta.exporter *args``
    on free ports (log in ``tmp_path``); every exporter started is stopped at teardown,
    even when the test fails."""
    started: list[Exporter] = []

    def factory(*args: str, ready: str = "/healthz") -> Exporter:
        name = "exporter.log" if not started else f"exporter-{len(started) + 1}.log"
        exporter = start_exporter(tmp_path / name, *args, ready=ready)
        started.append(exporter)
        return exporter

    yield factory
    for exporter in started:
        exporter.stop()
