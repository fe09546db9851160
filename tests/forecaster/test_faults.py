"""Damaged history and a forecaster whose cycles wedge or fail (issues 13 and 15).

Real SQLite files (damaged by hand, as a disk or a person would), the real
``EtaModel``, the real HTTP server answering the probes; cycles are scripted where
the test is about the service around them.
"""

from __future__ import annotations

import logging
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import requests
from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_eta.forecaster.estimators.eta_model import EtaModel
from gpu_eta.forecaster.forecast import ForecastSet
from gpu_eta.forecaster.history import HistoryError, HistoryStore
from gpu_eta.forecaster.publish import ServiceState, make_registry
from gpu_eta.forecaster.runs import Run
from gpu_eta.forecaster.server import Service, metrics_server
from tests.support.clock import Clock
from tests.support.read_only import read_only_directory, run_unprivileged


def finished_runs(n: int) -> list[Run]:
    return [
        Run(f"r{i}", 4, tuple((e, 1000.0 * i + 60.0 * e) for e in range(5)), completed=True)
        for i in range(n)
    ]


def test_one_non_numeric_epochs_planned_does_not_stop_every_fit(tmp_path: Path, caplog) -> None:
    db = tmp_path / "h.sqlite"
    store = HistoryStore.open(db)
    store.import_finished(finished_runs(12))
    store.close()
    conn = sqlite3.connect(db)
    conn.execute("UPDATE runs SET epochs_planned = 'abc' WHERE run_id = 'r3'")  # REAL keeps text
    conn.commit()
    conn.close()
    store = HistoryStore.open(db)
    history = store.finished()
    assert len(history) == 11 and "r3" not in {r.run_id for r in history}
    EtaModel(random_state=0).fit(history)  # used to fail on every cycle
    assert store.skipped_rows == 1 and "epochs_planned 'abc' is not a number" in caplog.text
    store.close()


def test_bad_running_row_is_skipped_not_fatal(tmp_path: Path) -> None:
    from gpu_eta.forecaster.runs import RunUpdate

    store = HistoryStore.open(tmp_path / "h.sqlite")
    store.record([RunUpdate(f"live{i}", 4, 1000.0, ((1, 1060.0),)) for i in range(3)])
    store._conn.execute("UPDATE runs SET epochs_planned = x'00ff' WHERE run_id = 'live1'")
    assert sorted(r.run.run_id for r in store.running()) == ["live0", "live2"]
    store.close()


def test_page_damage_is_set_aside_and_a_new_history_starts(tmp_path: Path, caplog) -> None:
    db = tmp_path / "h.sqlite"
    store = HistoryStore.open(db)
    store.import_finished(finished_runs(200))
    store.close()
    data = bytearray(db.read_bytes())
    for offset in range(4096 + 100, len(data), 997):  # scribble over pages after the header
        data[offset] ^= 0x5A
    db.write_bytes(bytes(data))
    store = HistoryStore.open(db)
    try:
        assert store.finished() == []  # a usable, empty history: the service goes on
        assert list(tmp_path.glob("h.sqlite.corrupt-*"))
        assert "moved to h.sqlite.corrupt-" in caplog.text
    finally:
        store.close()


def _open_and_write(path: str) -> tuple:
    try:
        store = HistoryStore.open(path)
        n = len(store.finished())
        store.import_finished([Run("new", 1, ((0, 0.0), (1, 5.0)))])
        return ("ok", n, store.persistent, len(store.finished()))
    except HistoryError as err:
        return ("error", str(err), None, None)


def _history_of_five(directory: Path) -> None:
    store = HistoryStore.open(directory / "h.sqlite")
    store.import_finished(finished_runs(5))
    store.close()


def test_read_only_directory_forecasts_from_a_memory_copy() -> None:
    with read_only_directory(_history_of_five) as directory:
        db = directory / "h.sqlite"
        before = db.read_bytes()
        result = run_unprivileged(_open_and_write, str(db))
        assert result == ("ok", 5, False, 6)  # 5 read, writes work in memory
        assert db.read_bytes() == before  # the file itself is untouched


# A writer killed inside a transaction, after SQLite spilled changed pages into the file:
# the file is half written and its rollback journal is hot (SQLite rolls it back at the
# next read, which needs to write)
KILLED_WRITER = """
import os, sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("PRAGMA cache_size = 2")
conn.execute("BEGIN IMMEDIATE")
conn.execute("UPDATE runs SET features = features || '{}'")
os.kill(os.getpid(), 9)
"""


def _history_with_a_hot_journal(directory: Path) -> None:
    store = HistoryStore.open(directory / "h.sqlite")
    store.import_finished(finished_runs(300))
    store.close()
    subprocess.run(
        [sys.executable, "-c", KILLED_WRITER.replace("{}", " " * 200), str(directory / "h.sqlite")]
    )
    assert (directory / "h.sqlite-journal").stat().st_size > 0


def test_a_read_only_directory_with_a_leftover_journal_forecasts_from_the_rolled_back_copy() -> (
    None
):
    """A forecaster killed mid-write, then its volume remounted read-only (ext4's
    errors=remount-ro does both on one I/O fault): SQLite must roll the journal back
    before any read and cannot beside a read-only file, so every start exited 1."""
    with read_only_directory(_history_with_a_hot_journal) as directory:
        db = directory / "h.sqlite"
        before = (db.read_bytes(), (directory / "h.sqlite-journal").read_bytes())
        result = run_unprivileged(_open_and_write, str(db))
        assert result == ("ok", 300, False, 301)  # the runs as last committed
        assert (db.read_bytes(), (directory / "h.sqlite-journal").read_bytes()) == before


def _damaged_file(directory: Path) -> None:
    (directory / "h.sqlite").write_bytes(b"SQLite format 3\x00" + bytes(range(256)) * 32)


def _open_and_say(path: str) -> tuple:
    """``_open_and_write``, and what the open logged at ERROR."""
    records: list[str] = []
    handler = logging.Handler(logging.ERROR)
    handler.emit = lambda record: records.append(record.getMessage())  # type: ignore[method-assign]
    logging.getLogger("gpu_eta.forecaster.history").addHandler(handler)
    return (*_open_and_write(path), records)


def test_a_damaged_file_that_cannot_be_set_aside_starts_an_empty_history_in_memory() -> None:
    """A damaged file on a read-only volume cannot be moved aside: the start used to exit
    1 for ever; it goes on with an empty history in memory, the file left for a human."""
    with read_only_directory(_damaged_file) as directory:
        db = directory / "h.sqlite"
        before = db.read_bytes()
        *result, errors = run_unprivileged(_open_and_say, str(db))
        assert result == ["ok", 0, False, 1]
        assert db.read_bytes() == before and sorted(p.name for p in directory.iterdir()) == [
            "h.sqlite"
        ]
    (error,) = errors
    assert "cannot be moved aside" in error and "new, empty history in memory" in error


# -- the probes ------------------------------------------------------------------------


class FailingCycle:
    store = None

    def run(self) -> ForecastSet:
        raise HistoryError(
            "history file h.sqlite: cannot write: attempt to write a readonly database"
        )


def test_liveness_fails_when_every_cycle_fails_for_long() -> None:
    clock = Clock()
    svc = Service(FailingCycle(), ServiceState(), 60, failing_after_seconds=600, monotonic=clock)
    assert svc.run_once() is False
    assert svc.liveness() == (True, "ok")  # a failure or two is Prometheus restarting
    clock.now += 601
    assert svc.run_once() is False
    ok, why = svc.liveness()
    assert not ok and "every cycle failed for 601s" in why and "readonly" in why
    ready, why = svc.readiness()
    assert not ready and "no forecast published yet" in why


class BlockingCycle:
    store = None

    def __init__(self) -> None:
        self.release = threading.Event()
        self.entered = threading.Event()

    def run(self) -> ForecastSet:
        self.entered.set()
        self.release.wait(30)
        return ForecastSet(timestamp=time.time())


def test_probes_over_http_wedged_cycle_and_readiness() -> None:
    cycle = BlockingCycle()
    state = ServiceState()
    svc = Service(cycle, state, 60, wedged_after_seconds=0.3)
    srv = metrics_server(
        make_registry(state), "127.0.0.1", 0, liveness=svc.liveness, readiness=svc.readiness
    ).serve()
    base = f"http://127.0.0.1:{srv.port}"
    try:
        svc.start()
        assert cycle.entered.wait(10)
        ready = requests.get(base + "/readyz", timeout=10)
        assert ready.status_code == 503 and "no forecast published yet" in ready.text
        time.sleep(0.5)
        live = requests.get(base + "/healthz", timeout=10)
        assert live.status_code == 503 and "wedged" in live.text
        cycle.release.set()
        deadline = time.monotonic() + 10
        while state.forecasts is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert requests.get(base + "/healthz", timeout=10).status_code == 200
        assert requests.get(base + "/readyz", timeout=10).status_code == 200
        assert requests.get(base + "/-/ready", timeout=10).status_code == 200
    finally:
        svc.stop(5)
        srv.stop()


# -- Prometheus API answers: hostile JSON is a PromAPIError, never an escape -------------


def test_deeply_nested_or_huge_numbers_in_an_api_answer_are_prom_api_errors() -> None:
    """JSON nested too deep is an error of the whole answer; a 400-digit timestamp
    costs only its own series (skipped and counted)."""
    import json

    from gpu_eta.forecaster.promapi import PromAPIError
    from gpu_eta.forecaster.promparse import Skipped, decode_response, parse_vector

    deep = b"[" * 100_000
    huge = json.dumps(
        {
            "status": "success",
            "data": {"resultType": "vector", "result": [{"metric": {}, "value": [10**400, "1"]}]},
        }
    ).encode()
    with pytest.raises(PromAPIError):
        parse_vector(decode_response(deep, 200))
    skipped = Skipped()
    assert parse_vector(decode_response(huge, 200), "", skipped) == []
    assert skipped.count == 1


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400))
def test_fuzz_api_answers_raise_only_prom_api_errors(body: bytes) -> None:
    from gpu_eta.forecaster.promapi import PromAPIError
    from gpu_eta.forecaster.promparse import decode_response, parse_matrix, parse_vector

    try:
        data = decode_response(
            b'{"status":"success","data":{"resultType":"vector","result":[' + body + b"]}}", 200
        )
        parse_vector(data)
        parse_matrix(data)
    except PromAPIError:
        pass
