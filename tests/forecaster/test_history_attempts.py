"""gpu_eta.forecaster.history: a new run under the key of a finished run (a StatefulSet
pod ``trainer-0``, a resubmitted PyTorchJob's ``master-0``, a named run trained again)
is recorded and forecast; the finished run keeps its row under the next ``attempt``
(schema 4, docs/forecaster.md "History file")."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpu_eta.forecaster.history import HistoryStore, new_attempt
from gpu_eta.forecaster.runs import RunUpdate, run_key
from tests.forecaster.test_cycle import NOW, CannedClient, job, make_cycle

KEY = {"namespace": "ml", "pod": "trainer-0", "container": "c"}


@pytest.fixture
def store(tmp_path: Path) -> Iterator[HistoryStore]:
    st = HistoryStore.open(tmp_path / "h.sqlite")
    yield st
    st.close()


def test_a_second_run_under_a_finished_key_is_forecast_and_kept(store: HistoryStore) -> None:
    t = [NOW]
    first = job("resnet", 2, [(1, NOW - 100), (2, NOW - 10)], NOW - 200, pod="trainer-0")
    client = CannedClient(first)
    cycle = make_cycle(client, store, clock=lambda: t[0], refit_seconds=0)
    assert cycle.run().n_finished == 1  # reached its plan: completed
    client.answers = {}
    for _ in range(3):  # the old run's series leave the window
        t[0] += 600
        cycle.run()
    t[0] += 600
    start = t[0] - 300
    client.answers = job("resnet", 2, [(1, t[0] - 100)], start, pod="trainer-0")
    fs = cycle.run()
    assert [j.run.start_timestamp for j in fs.jobs] == [start] and fs.job_errors == {}
    t[0] += 120
    client.answers = job("resnet", 2, [(1, t[0] - 220), (2, t[0] - 20)], start, pod="trainer-0")
    assert cycle.run().n_finished == 1
    done = store.finished()
    assert [r.epoch_times[0][1] for r in done] == [NOW - 200, start]
    assert {run_key(r) for r in done} == {("ml", "trainer-0", "c", "resnet")}
    attempts = sqlite3.connect(store.path).execute("SELECT attempt FROM runs ORDER BY id")
    assert [a for (a,) in attempts] == [1, 0]


def test_a_start_between_the_finished_runs_start_and_last_end_is_dropped_and_counted(
    store: HistoryStore,
) -> None:
    t = [NOW]
    client = CannedClient(job("r", 2, [(1, NOW - 100), (2, NOW - 10)], NOW - 200, pod="trainer-0"))
    cycle = make_cycle(client, store, clock=lambda: t[0])
    cycle.run()
    client.answers = {}
    t[0] += 600
    cycle.run()
    t[0] += 60
    client.answers = job("r", 2, [(1, NOW - 50)], NOW - 150, pod="trainer-0")  # overlaps
    fs = cycle.run()
    assert fs.jobs == () and fs.job_errors == {"finished_key": 1}
    assert store.dropped_updates == 1 and store.count_finished() == 1


def test_the_finished_runs_own_series_change_nothing(store: HistoryStore) -> None:
    store.record([RunUpdate("r", 2, NOW - 200, ((2, NOW - 10),), **KEY, seen_timestamp=NOW)])
    store.finish([("ml", "trainer-0", "c", "r")], NOW)
    store.record([RunUpdate("r", 2, NOW - 200, ((2, NOW - 10),), **KEY, seen_timestamp=NOW + 60)])
    assert store.running() == [] and store.dropped_updates == 0 and store.count_finished() == 1


@pytest.mark.parametrize(
    ("start", "expected"),
    [
        (100.0, None),  # the finished run itself
        (100.5, None),  # its start re-read, rounded
        (50.0, None),  # an older snapshot
        (150.0, False),  # well before its last epoch end: neither run
        (285.0, False),  # more than ten seconds before it
        (295.0, True),  # seconds before it: another node's clock (NEW_ATTEMPT_SKEW_SECONDS)
        (300.0, True),  # at its last epoch end
        (400.0, True),
    ],
)
def test_new_attempt(start: float, expected: bool | None) -> None:
    """Which start is the finished run's, a new run's under its key, or neither; a new
    run re-created on another node may start seconds "before" the last end it follows."""
    assert new_attempt(start, 100.0, ((0.0, 100.0), (1.0, 200.0), (2.0, 300.0))) is expected


_V3_RUNS = """CREATE TABLE runs (id INTEGER PRIMARY KEY, run_id TEXT NOT NULL,
    namespace TEXT NOT NULL DEFAULT '', pod TEXT NOT NULL DEFAULT '',
    container TEXT NOT NULL DEFAULT '', node TEXT NOT NULL DEFAULT '',
    epochs_planned REAL NOT NULL, start_timestamp REAL NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('running', 'completed', 'incomplete')),
    features TEXT NOT NULL DEFAULT '{}', util_sum REAL NOT NULL DEFAULT 0,
    util_weight REAL NOT NULL DEFAULT 0, memory_sum REAL NOT NULL DEFAULT 0,
    memory_weight REAL NOT NULL DEFAULT 0, last_seen REAL NOT NULL,
    finished_timestamp REAL, epoch_times BLOB,
    UNIQUE (namespace, pod, container, run_id))"""


def test_schema_3_file_is_migrated_and_takes_a_second_run(tmp_path: Path) -> None:
    db = tmp_path / "h.sqlite"
    store = HistoryStore.open(db)
    store.record([RunUpdate("r", 2, NOW - 200, ((2, NOW - 10),), **KEY, seen_timestamp=NOW)])
    store.finish([("ml", "trainer-0", "c", "r")], NOW)
    store.record([RunUpdate("s", 4, NOW - 200, ((1, NOW - 10),), **KEY, seen_timestamp=NOW)])
    store.close()
    conn = sqlite3.connect(db, isolation_level=None)  # as schema 3 wrote it
    conn.executescript(
        "BEGIN; ALTER TABLE runs RENAME TO old; "
        + _V3_RUNS
        + "; INSERT INTO runs SELECT id, run_id, namespace, pod, container, node, "
        "epochs_planned, start_timestamp, state, features, util_sum, util_weight, memory_sum, "
        "memory_weight, last_seen, finished_timestamp, epoch_times FROM old; DROP TABLE old; "
        "PRAGMA user_version = 3; COMMIT;"
    )
    conn.close()
    store = HistoryStore.open(db)
    assert [r.run_id for r in store.finished()] == ["r"]
    (live,) = store.running()
    assert live.run.epoch_times == ((0, NOW - 200), (1, NOW - 10))
    store.record([RunUpdate("r", 2, NOW + 100, ((1, NOW + 150),), **KEY, seen_timestamp=NOW + 200)])
    assert sorted(s.run.run_id for s in store.running()) == ["r", "s"]
    store.close()
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 4
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    conn.close()


def _attempts(store: HistoryStore) -> list[tuple[int, float, str]]:
    rows = sqlite3.connect(store.path).execute(
        "SELECT attempt, start_timestamp, state FROM runs ORDER BY attempt"
    )
    return [(a, start, state) for a, start, state in rows]


def test_a_vanished_run_of_an_earlier_attempt_back_with_its_start_runs_again(
    store: HistoryStore,
) -> None:
    """Finished as vanished, then moved to attempt 1 by a run that followed it under its
    key (its own start re-derived later by a restarted exporter, one that lost its
    state): present again with its start, it is the attempt revived and it takes its
    updates; the other run keeps its row under the attempt it leaves."""
    key = ("ml", "trainer-0", "c", "r")
    store.record(
        [RunUpdate("r", 10, NOW - 200, ((1, NOW - 150),), **KEY, seen_timestamp=NOW - 140)]
    )
    store.finish([key], NOW)  # vanished: incomplete
    store.record([RunUpdate("r", 10, NOW + 100, (), **KEY, seen_timestamp=NOW + 160)])
    store.finish([key], NOW + 800)
    assert _attempts(store) == [(0, NOW + 100, "incomplete"), (1, NOW - 200, "incomplete")]
    back = RunUpdate("r", 10, NOW - 200, ((2, NOW + 850),), **KEY, seen_timestamp=NOW + 900)
    assert store.record([back]) == [key]
    assert _attempts(store) == [(0, NOW - 200, "running"), (1, NOW + 100, "incomplete")]
    on = RunUpdate("r", 10, NOW - 200, ((3, NOW + 950),), **KEY, seen_timestamp=NOW + 960)
    store.record([on])
    (live,) = store.running()
    assert live.last_seen == NOW + 960
    assert [e for e, _ in live.run.epoch_times] == [0, 1, 2, 3]
    assert [r.start_timestamp for r in store.finished()] == [NOW + 100]


def test_a_vanished_earlier_attempt_is_not_revived_while_its_key_runs(
    store: HistoryStore,
) -> None:
    """Its key holds a running run: the update is that run's (an older snapshot)."""
    key = ("ml", "trainer-0", "c", "r")
    store.record(
        [RunUpdate("r", 10, NOW - 200, ((1, NOW - 150),), **KEY, seen_timestamp=NOW - 140)]
    )
    store.finish([key], NOW)
    store.record([RunUpdate("r", 10, NOW + 100, (), **KEY, seen_timestamp=NOW + 160)])
    store.close()
    reopened = HistoryStore.open(store.path)  # nothing held: the file is asked
    try:
        back = RunUpdate("r", 10, NOW - 200, (), **KEY, seen_timestamp=NOW + 900)
        assert reopened.record([back]) == []
        assert [r.start_timestamp for r in reopened.finished()] == [NOW - 200]
    finally:
        reopened.close()
