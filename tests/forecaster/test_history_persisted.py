"""A history file the forecaster cannot write is published as
``gpu_eta_forecaster_history_persisted 0`` (issue 15: a read-only history had no
metric, only a note in ``/readyz``).

The whole path for real: a history file in a read-only directory, opened by a
process that cannot write there (root writes anywhere, so the child drops to
``nobody`` when run as root), one cycle against canned Prometheus answers, the
collector rendered and checked by the real ``promtool``.
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gpu_eta.forecaster.history import HistoryStore
from gpu_eta.forecaster.publish import ServiceState, make_registry
from gpu_eta.launch.prometheus import find_binary
from tests.forecaster.test_cycle import NOW, CannedClient, job, make_cycle

NAME = "gpu_eta_forecaster_history_persisted"


def exposition(path: str) -> str:
    """One cycle on the history at ``path`` and the forecaster's /metrics text."""
    store = HistoryStore.open(path)
    try:
        client = CannedClient(job("run", 10, [(1, NOW - 200), (2, NOW - 100)], NOW - 300))
        state = ServiceState()
        state.success(make_cycle(client, store).run(), 0.5, NOW)
        return generate_latest(make_registry(state, clock=lambda: NOW)).decode()
    finally:
        store.close()


def _in_child(path: str, queue) -> None:
    try:
        if os.getuid() == 0:
            os.setgid(65534)
            os.setuid(65534)  # root writes anywhere: drop to a user the directory refuses
        queue.put(exposition(path))
    except BaseException as err:  # reported to the test, not lost in the child
        queue.put(f"ERROR {type(err).__name__}: {err}")


def gauge(text: str) -> float:
    for fam in text_string_to_metric_families(text):
        if fam.name == NAME:
            (sample,) = fam.samples
            return sample.value
    raise AssertionError(f"{NAME} not in the exposition")


def promtool_check(text: str) -> None:
    proc = subprocess.run(
        [find_binary("promtool"), "check", "metrics"],
        input=text,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (proc.returncode, proc.stdout + proc.stderr) == (0, "")


def test_a_writable_history_is_published_as_persisted(tmp_path: Path) -> None:
    text = exposition(str(tmp_path / "h.sqlite"))
    assert gauge(text) == 1.0
    promtool_check(text)


def test_a_read_only_history_is_published_as_not_persisted() -> None:
    top = Path(tempfile.mkdtemp(prefix="gpu-eta-ro-"))  # pytest's tmp is private to root
    os.chmod(top, 0o755)
    directory = top / "ro"
    directory.mkdir()
    db = directory / "h.sqlite"
    HistoryStore.open(db).close()
    os.chmod(db, 0o444)
    os.chmod(directory, 0o555)
    try:
        ctx = multiprocessing.get_context("fork")
        queue = ctx.Queue()
        child = ctx.Process(target=_in_child, args=(str(db), queue))
        child.start()
        text = queue.get(timeout=120)
        child.join(30)
        assert not text.startswith("ERROR"), text
        assert gauge(text) == 0.0
        promtool_check(text)
    finally:
        os.chmod(directory, 0o755)
        shutil.rmtree(top)


@pytest.mark.parametrize("persisted", [True, False])
def test_the_gauge_follows_the_forecast_set(persisted: bool) -> None:
    from gpu_eta.forecaster.forecast import ForecastSet

    state = ServiceState()
    state.success(ForecastSet(timestamp=NOW, history_persisted=persisted), 0.5, NOW)
    assert gauge(generate_latest(make_registry(state)).decode()) == float(persisted)
