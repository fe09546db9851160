"""forecaster.history: a real SQLite file in a temp dir; refusals leave files untouched."""

from __future__ import annotations

import hashlib
import math
import sqlite3
from pathlib import Path

import pytest

from forecaster.history import HistoryError, HistoryStore, RunUpdate, monotone_epoch_times
from forecaster.runs import Run, validate_run


def update(run_id: str, ends=(), planned: float = 4, **kw) -> RunUpdate:
    kw.setdefault("start_timestamp", 1000.0)
    kw.setdefault("seen_timestamp", 2000.0)
    return RunUpdate(run_id=run_id, epochs_planned=planned, epoch_ends=tuple(ends), **kw)


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_epoch_ends_accumulate_across_cycles_and_restarts(tmp_path: Path) -> None:
    db = tmp_path / "h.sqlite"
    store = HistoryStore.open(db)
    store.record([update("r1", [(1, 1100.0)], namespace="ns", pod="p", container="c")])
    store.record([update("r1", [(2, 1200.0)])])  # a later cycle sees only epoch 2
    store.close()
    store = HistoryStore.open(db)  # restart: nothing lost
    (stored,) = store.running()
    assert stored.run.epoch_times == ((0.0, 1000.0), (1.0, 1100.0), (2.0, 1200.0))
    assert stored.run.completed is None
    validate_run(stored.run)
    store.close()


def test_utilisation_mean_is_weighted_across_cycles(tmp_path: Path) -> None:
    store = HistoryStore.open(tmp_path / "h.sqlite")
    store.record([update("r", util_mean=1.0, weight_seconds=30.0, memory_mean=float("nan"))])
    store.record([update("r", util_mean=0.0, weight_seconds=90.0, memory_mean=0.5)])
    feats = store.running()[0].run.features
    assert feats["gpu_utilization_ratio"] == pytest.approx(0.25)
    assert feats["memory_utilization_ratio"] == pytest.approx(0.5)
    store.close()


def test_finish_marks_completed_and_incomplete(tmp_path: Path) -> None:
    store = HistoryStore.open(tmp_path / "h.sqlite")
    store.record(
        [
            update("done", [(1, 1100), (2, 1200), (3, 1300), (4, 1400)]),
            update("cancelled", [(1, 1100)]),  # vanished at epoch 1 of 4
        ]
    )
    v0 = store.version
    finished = store.finish(["done", "cancelled", "unknown"], 5000.0)
    assert {r.run_id: r.completed for r in finished} == {"done": True, "cancelled": False}
    assert store.version == v0 + 1
    assert store.running() == []
    by_id = {r.run_id: r for r in store.finished()}
    assert by_id["cancelled"].epoch_times == ((0.0, 1000.0), (1.0, 1100.0))
    # a finished run is frozen: later updates for it change nothing
    store.record([update("cancelled", [(2, 1200)])])
    assert {r.run_id for r in store.finished()} == {"done", "cancelled"}
    assert store.running() == []
    assert store.count_finished() == 2
    store.close()


def test_import_finished_is_idempotent(tmp_path: Path) -> None:
    db = tmp_path / "h.sqlite"
    runs = [
        Run("a", 2, ((0, 0.0), (1, 10.0), (2, 20.0)), {"job_name": "j"}),
        Run("b", 3, ((0, 0.0), (1, 10.0))),
    ]
    store = HistoryStore.open(db)
    assert store.import_finished(runs) == 2
    assert store.import_finished(runs) == 0
    store.close()
    store = HistoryStore.open(db)
    got = {r.run_id: r for r in store.finished()}
    assert got["a"].completed is True and got["a"].features["job_name"] == "j"
    assert got["b"].completed is False
    store.close()


def test_a_failing_write_leaves_nothing_half_done(tmp_path: Path) -> None:
    store = HistoryStore.open(tmp_path / "h.sqlite")
    store.record([update("ok", [(1, 1100)])])
    bad = update("bad", planned=float("nan"))  # NOT NULL violated (NaN is NULL in SQLite)
    with pytest.raises(HistoryError, match="write failed"):
        store.record([update("ok", [(2, 1200)]), bad])
    (stored,) = store.running()
    assert stored.run.epoch_times[-1] == (1.0, 1100.0)  # epoch 2 rolled back with the batch
    store.close()


def test_corrupt_file_is_refused_and_untouched(tmp_path: Path) -> None:
    db = tmp_path / "h.sqlite"
    db.write_bytes(b"this is not sqlite at all\n" * 100)
    before = digest(db)
    with pytest.raises(HistoryError, match="not a usable SQLite database"):
        HistoryStore.open(db)
    assert digest(db) == before


def test_foreign_database_is_refused_and_untouched(tmp_path: Path) -> None:
    db = tmp_path / "grafana.db"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE dashboard (id INTEGER)")
    conn.commit()
    conn.close()
    before = digest(db)
    with pytest.raises(HistoryError, match="belongs to another program"):
        HistoryStore.open(db)
    assert digest(db) == before


def test_newer_schema_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "h.sqlite"
    HistoryStore.open(db).close()
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA user_version = 99")
    conn.close()
    with pytest.raises(HistoryError, match="schema version 99"):
        HistoryStore.open(db)


def test_missing_directory_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(HistoryError, match="does not exist"):
        HistoryStore.open(tmp_path / "nope" / "h.sqlite")


def test_monotone_epoch_times_drops_inconsistent_points() -> None:
    got = monotone_epoch_times(
        100.0,
        [(1, 110.0), (2, 105.0), (3, math.nan), (3, 130.0), (9, 200.0), (0.5, 90.0)],
        planned=4,
    )
    assert got == ((0.0, 100.0), (1.0, 110.0), (3.0, 130.0))


def test_damaged_epoch_list_is_a_clear_error(tmp_path: Path) -> None:
    db = tmp_path / "h.sqlite"
    store = HistoryStore.open(db)
    store.import_finished([Run("a", 1, ((0, 0.0), (1, 10.0)))])
    store.close()
    conn = sqlite3.connect(db)
    conn.execute("UPDATE runs SET epoch_times = ? WHERE run_id = 'a'", (b"abc",))
    conn.commit()
    conn.close()
    store = HistoryStore.open(db)
    with pytest.raises(HistoryError, match="damaged epoch list"):
        store.finished()
    store.close()


def test_meta_values_persist(tmp_path: Path) -> None:
    db = tmp_path / "h.sqlite"
    store = HistoryStore.open(db)
    assert store.get_meta("k") is None
    store.set_meta("k", "1")
    store.set_meta("k", "2")
    store.close()
    store = HistoryStore.open(db)
    assert store.get_meta("k") == "2"
    store.close()
