"""gpu_eta.forecaster.history: a real SQLite file in a temp dir; refusals leave files untouched."""

from __future__ import annotations

import dataclasses
import hashlib
import math
import sqlite3
from pathlib import Path

import pytest

from gpu_eta.forecaster import history_file
from gpu_eta.forecaster.history import HistoryError, HistoryStore
from gpu_eta.forecaster.history_file import SCHEMA_VERSION
from gpu_eta.forecaster.history_rows import monotone_epoch_times
from gpu_eta.forecaster.runs import (
    HISTORY_POINTS,
    Run,
    RunUpdate,
    run_key,
    thinned,
    validate_run,
)


def update(run_id: str, ends=(), planned: float = 4, **kw) -> RunUpdate:
    kw.setdefault("start_timestamp", 1000.0)
    kw.setdefault("seen_timestamp", 2000.0)
    return RunUpdate(run_id=run_id, epochs_planned=planned, epoch_ends=tuple(ends), **kw)


def key(run_id: str, namespace: str = "", pod: str = "", container: str = "") -> tuple:
    return (namespace, pod, container, run_id)


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_epoch_ends_accumulate_across_cycles_and_restarts(tmp_path: Path) -> None:
    db = tmp_path / "h.sqlite"
    store = HistoryStore.open(db)
    store.record([update("r1", [(1, 1100.0)], namespace="ns", pod="p", container="c")])
    store.record([update("r1", [(2, 1200.0)], namespace="ns", pod="p", container="c")])
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
    finished = store.finish([key("done"), key("cancelled"), key("unknown")], 5000.0)
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


def test_finished_limit_keeps_the_most_recent_runs_oldest_first(tmp_path: Path) -> None:
    """``finished(limit)``: the newest ``limit`` by finish time, in the same order as
    ``finished()``; runs finished later join it and push the oldest out."""
    store = HistoryStore.open(tmp_path / "h.sqlite")
    for i in range(5):
        store.record([update(f"r{i}", [(1, 1100.0), (2, 1200.0)], planned=2)])
        store.finish([key(f"r{i}")], 5000.0 + i)
    assert [r.run_id for r in store.finished()] == ["r0", "r1", "r2", "r3", "r4"]
    assert [r.run_id for r in store.finished(3)] == ["r2", "r3", "r4"]
    store.record([update("r5", [(1, 1100.0)], planned=2)])
    store.finish([key("r5")], 6000.0)
    assert [r.run_id for r in store.finished(3)] == ["r3", "r4", "r5"]
    assert [r.run_id for r in store.finished()][-2:] == ["r4", "r5"]
    assert len(store.finished()) == store.count_finished() == 6
    store.close()


def _plan(conn: sqlite3.Connection, statement: str) -> list[str]:
    """SQLite's query plan of ``statement`` (as traced: its parameters inlined), one
    line per step."""
    return [row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + statement)]


def _finish_out_of_id_order(store: HistoryStore) -> list[str]:
    """Eight runs of three points finished in an order unlike their ids; their run ids
    oldest first."""
    order = [3, 0, 7, 1, 6, 2, 5, 4]
    for i in range(8):
        store.record([update(f"r{i}", [(1, 1100.0), (2, 1200.0)], planned=2)])
    for i in order:
        store.finish([key(f"r{i}")], 5000.0 + 10 * order.index(i))
    return [f"r{i}" for i in order]


def test_finished_runs_are_read_newest_first_along_the_index_sorting_nothing(
    tmp_path: Path,
) -> None:
    """Each read of the history is one statement that walks ``runs_finished`` and
    sorts nothing: with no index on the finish time SQLite sorted the selected rows,
    progress blobs and all, in a temporary file about the size of the history (469 MB
    for 100,000 runs) under the pod's 64 MiB /tmp."""
    store = HistoryStore.open(tmp_path / "h.sqlite")
    order = _finish_out_of_id_order(store)
    statements: list[str] = []
    store._conn.set_trace_callback(statements.append)
    try:
        assert [r.run_id for r in store.finished()] == order
        assert [r.run_id for r in store.finished(5)] == order[3:]
        assert [r.run_id for r in store.finished(None, 6)] == order[-2:]  # 3 points each
    finally:
        store._conn.set_trace_callback(None)
    reads = [q for q in statements if "FROM runs" in q]
    for read in reads:
        plan = _plan(store._conn, read)
        assert not any("TEMP B-TREE" in step for step in plan), (read, plan)
        assert any("USING INDEX runs_finished" in step for step in plan), (read, plan)
    assert len(reads) == 3, reads
    store.close()


def _has_finish_index(conn: sqlite3.Connection) -> bool:
    return (
        conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'index' AND name = 'runs_finished'"
        ).fetchone()
        is not None
    )


def test_a_schema_4_file_without_the_finish_index_gains_it_and_stays_schema_4(
    tmp_path: Path,
) -> None:
    """A file an earlier release wrote (schema 4, no ``runs_finished``) gets the index
    at open, every row kept, and keeps ``user_version`` 4: an additive index is no new
    schema, so a rolled-back release still opens the file (it refuses a newer
    version) and SQLite keeps the index up to date on its writes."""
    db = tmp_path / "h.sqlite"
    store = HistoryStore.open(db)
    order = _finish_out_of_id_order(store)
    store.record([update("live", [(1, 1100.0)], planned=2)])
    store.close()
    conn = sqlite3.connect(db, isolation_level=None)  # as the earlier release wrote it
    conn.executescript("DROP INDEX runs_finished; PRAGMA user_version = 4;")
    rows = conn.execute("SELECT * FROM runs ORDER BY id").fetchall()
    conn.close()
    store = HistoryStore.open(db)
    statements: list[str] = []
    store._conn.set_trace_callback(statements.append)
    assert [r.run_id for r in store.finished()] == order
    store._conn.set_trace_callback(None)
    reads = [q for q in statements if "FROM runs" in q]
    assert reads and not any("TEMP B-TREE" in s for q in reads for s in _plan(store._conn, q))
    assert [s.run.run_id for s in store.running()] == ["live"]
    store.close()
    conn = sqlite3.connect(db)
    assert _has_finish_index(conn)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 4
    assert conn.execute("SELECT * FROM runs ORDER BY id").fetchall() == rows
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    conn.close()


def test_a_file_an_earlier_release_wrote_after_the_index_is_read_whole(tmp_path: Path) -> None:
    """An earlier release knows nothing of ``runs_finished``. Writing the file with the
    index there (SQLite updates it on every write) or after a tool rebuilt the file
    without it, its runs are read in finish order, the index is built again at the
    next open, and the file stays sound."""
    db = tmp_path / "h.sqlite"
    store = HistoryStore.open(db)
    order = _finish_out_of_id_order(store)
    store.record([update("late", [(1, 1100.0), (2, 1200.0)], planned=2)])
    store.close()
    conn = sqlite3.connect(db, isolation_level=None)  # the earlier release, index present
    conn.execute(
        "UPDATE runs SET state = 'completed', finished_timestamp = 9000.0, "
        "epoch_times = (SELECT epoch_times FROM runs WHERE run_id = 'r0') "
        "WHERE run_id = 'late'"
    )
    conn.execute("DELETE FROM epoch_ends")
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    conn.execute("DROP INDEX runs_finished")  # a tool rebuilt the file without it
    conn.execute("UPDATE runs SET finished_timestamp = 1.0 WHERE run_id = ?", (order[-1],))
    conn.close()
    expected = [order[-1], *order[:-1], "late"]
    store = HistoryStore.open(db)
    assert [r.run_id for r in store.finished()] == expected
    assert store.skipped_rows == 0
    assert _has_finish_index(store._conn)
    store.close()
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    conn.close()


def test_the_finish_index_dropped_under_an_open_store_changes_no_read(tmp_path: Path) -> None:
    """Another process dropping ``runs_finished`` while the store is open: the next
    read sorts instead, and returns the same runs in the same order."""
    db = tmp_path / "h.sqlite"
    store = HistoryStore.open(db)
    order = _finish_out_of_id_order(store)
    other = sqlite3.connect(db, isolation_level=None)
    other.execute("DROP INDEX runs_finished")
    other.close()
    assert [r.run_id for r in store.finished(5)] == order[3:]
    assert [r.run_id for r in store.finished(None, 6)] == order[-2:]
    store.close()


def test_finished_points_keeps_the_most_recent_runs_within_a_point_budget(
    tmp_path: Path,
) -> None:
    """``finished(limit, points)``: of the newest ``limit``, the newest whose points add
    up to at most ``points`` (a run of hundreds of epochs weighs what it holds); runs
    finished later push out as many of the oldest as the budget needs, and the cache
    ends where a fresh read of the file does."""
    db = tmp_path / "h.sqlite"
    store = HistoryStore.open(db)

    def add(name: str, epochs: int, finish: float) -> None:
        ends = [(float(e), 1000.0 + 100 * e) for e in range(1, epochs + 1)]
        store.record([update(name, ends, planned=epochs)])
        store.finish([key(name)], finish)

    for i, epochs in enumerate((2, 4, 2, 3, 1)):  # 3, 5, 3, 4 and 2 points
        add(f"r{i}", epochs, 5000.0 + i)
    assert [r.run_id for r in store.finished(None, 9)] == ["r2", "r3", "r4"]  # 3 + 4 + 2
    assert [r.run_id for r in store.finished(2, 9)] == ["r3", "r4"]
    assert [r.run_id for r in store.finished(None, 1)] == []  # the newest alone is over
    assert [r.run_id for r in store.finished(None, 9)] == ["r2", "r3", "r4"]
    add("r5", 3, 6000.0)  # 4 points: r2 and r3 make room
    assert [r.run_id for r in store.finished(None, 9)] == ["r4", "r5"]
    add("r6", 1, 6001.0)  # 2 points: fits beside them
    assert [r.run_id for r in store.finished(None, 9)] == ["r4", "r5", "r6"]
    store.close()
    again = HistoryStore.open(db)
    assert [r.run_id for r in again.finished(None, 9)] == ["r4", "r5", "r6"]
    assert again.count_finished() == 7  # the file keeps every run
    again.close()


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
    db = tmp_path / "h.sqlite"
    store = HistoryStore.open(db)
    store.record([update("ok", [(1, 1100)])])
    other = sqlite3.connect(db)  # a constraint the second run's insert fails
    other.execute(
        "CREATE TRIGGER refuse BEFORE INSERT ON runs WHEN NEW.run_id = 'bad' "
        "BEGIN SELECT RAISE(ABORT, 'refused'); END"
    )
    other.commit()
    other.close()
    bad = update("bad")
    with pytest.raises(HistoryError, match="write failed"):
        store.record([update("ok", [(2, 1200)]), bad])
    (stored,) = store.running()
    assert stored.run.epoch_times[-1] == (1.0, 1100.0)  # epoch 2 rolled back with the batch
    store.close()


def test_corrupt_file_is_set_aside_untouched_and_a_new_history_starts(tmp_path: Path) -> None:
    db = tmp_path / "h.sqlite"
    db.write_bytes(b"this is not sqlite at all\n" * 100)
    before = digest(db)
    store = HistoryStore.open(db)  # a refusal would restart the forecaster for ever
    assert store.finished() == [] and store.persistent
    store.close()
    (aside,) = tmp_path.glob("h.sqlite.corrupt-*")
    assert digest(aside) == before


def test_set_asides_in_the_same_second_keep_every_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The copy was named by the second alone and moved with ``os.replace``: a second
    damaged file within that second (a restart, damaged again) overwrote the first."""
    monkeypatch.setattr(history_file.time, "time", lambda: 1_700_000_000.5)
    db = tmp_path / "h.sqlite"
    expected = set()
    for n in range(3):
        db.write_bytes(f"damaged copy {n}\n".encode() * 100)
        expected.add(digest(db))
        HistoryStore.open(db).close()
    stamp = "h.sqlite.corrupt-1700000000"
    copies = [stamp, f"{stamp}-1", f"{stamp}-2"]
    assert sorted(p.name for p in tmp_path.glob("h.sqlite.corrupt-*")) == copies
    assert {digest(tmp_path / name) for name in copies} == expected  # none overwritten


def test_a_set_aside_name_is_free_for_the_file_and_its_journal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A journal left under a name (its file deleted by a human) is not overwritten
    either: the file and its journal move to the next name free for both."""
    monkeypatch.setattr(history_file.time, "time", lambda: 1_700_000_000.5)
    stamp = tmp_path / "h.sqlite.corrupt-1700000000"
    Path(f"{stamp}-journal").write_bytes(b"older journal")
    db = tmp_path / "h.sqlite"
    db.write_bytes(b"damaged")
    Path(f"{db}-journal").write_bytes(b"journal")
    assert history_file.set_aside(str(db)) == f"{stamp.name}-1"
    assert Path(f"{stamp}-1").read_bytes() == b"damaged"
    assert Path(f"{stamp}-1-journal").read_bytes() == b"journal"
    assert Path(f"{stamp}-journal").read_bytes() == b"older journal"
    assert not stamp.exists() and not db.exists()


def test_set_aside_of_a_missing_file_leaves_no_reserved_name(tmp_path: Path) -> None:
    assert history_file.set_aside(str(tmp_path / "gone.sqlite"))
    assert list(tmp_path.iterdir()) == []


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


def _damage(db: Path, run_id: str) -> None:
    """Overwrite ``run_id``'s epoch list in the file ``db`` with bytes no reader takes."""
    conn = sqlite3.connect(db)
    conn.execute("UPDATE runs SET epoch_times = ? WHERE run_id = ?", (b"abc", run_id))
    conn.commit()
    conn.close()


def test_damaged_epoch_list_skips_that_run_only(tmp_path: Path, caplog) -> None:
    db = tmp_path / "h.sqlite"
    store = HistoryStore.open(db)
    store.import_finished([Run(r, 1, ((0, 0.0), (1, 10.0))) for r in ("a", "b")])
    store.close()
    _damage(db, "a")
    store = HistoryStore.open(db)
    assert [r.run_id for r in store.finished()] == ["b"]
    assert store.skipped_rows == 1 and "damaged epoch list" in caplog.text
    assert store.count_finished() == 2  # the row stays in the file for a human
    store.close()


def test_a_damaged_row_does_not_count_against_the_runs_asked(tmp_path: Path) -> None:
    """``finished(limit)`` gives ``limit`` runs where the file holds them: a damaged row
    is skipped and the next older run read in its place (a SQL LIMIT counted it)."""
    db = tmp_path / "h.sqlite"
    store = HistoryStore.open(db)
    store.import_finished(
        [Run(r, 1, ((0, float(i)), (1, 10.0 + i))) for i, r in enumerate("abcde")]
    )
    store.close()
    _damage(db, "d")
    store = HistoryStore.open(db)
    assert [r.run_id for r in store.finished(3)] == ["a", "b", "c", "e"][-3:]
    assert store.skipped_rows == 1
    store.close()


def test_meta_values_persist(tmp_path: Path) -> None:
    db = tmp_path / "h.sqlite"
    store = HistoryStore.open(db)
    assert store.get_meta("k") is None
    store.set_meta("k", "1")
    store.set_meta("k", "2")
    store.set_metas({"a": "x", "b": "y"})  # a cycle's state, in one transaction
    store.close()
    store = HistoryStore.open(db)
    assert (store.get_meta("k"), store.get_meta("a"), store.get_meta("b")) == ("2", "x", "y")
    store.close()


def test_same_run_id_in_two_pods_and_two_containers_is_three_runs(tmp_path: Path) -> None:
    db = tmp_path / "h.sqlite"
    store = HistoryStore.open(db)
    a = {"namespace": "ml", "pod": "a", "container": "main"}
    b = {"namespace": "ml", "pod": "b", "container": "main"}
    b2 = {"namespace": "ml", "pod": "b", "container": "sidecar"}
    store.record(
        [
            update("my-run-1", [(1, 1100.0)], planned=2, **a),
            update("my-run-1", [(1, 1500.0)], planned=8, start_timestamp=1400.0, **b),
            update("my-run-1", [(1, 1700.0)], planned=3, start_timestamp=1600.0, **b2),
        ]
    )
    store.record([update("my-run-1", [(2, 1200.0)], planned=2, **a)])
    store.close()
    store = HistoryStore.open(db)
    runs = {run_key(r.run): r.run for r in store.running()}
    assert runs[key("my-run-1", **a)].epoch_times == ((0, 1000.0), (1, 1100.0), (2, 1200.0))
    assert runs[key("my-run-1", **b)].epoch_times == ((0, 1400.0), (1, 1500.0))
    assert runs[key("my-run-1", **b2)].epoch_times == ((0, 1600.0), (1, 1700.0))
    (done,) = store.finish([key("my-run-1", **a)], 3000.0)
    assert done.completed is True and done.pod == "a"
    assert {run_key(r.run) for r in store.running()} == {
        key("my-run-1", **b),
        key("my-run-1", **b2),
    }
    store.finish([key("my-run-1", **b), key("my-run-1", **b2)], 4000.0)
    store.close()
    store = HistoryStore.open(db)
    got = {run_key(r): r for r in store.finished()}
    assert len(got) == 3 and store.count_finished() == 3
    assert got[key("my-run-1", **b)].completed is False
    assert got[key("my-run-1", **b)].epochs_planned == 8
    assert got[key("my-run-1", **b2)].epoch_times[-1] == (1.0, 1700.0)
    with pytest.raises(TypeError, match="namespace, pod, container, run_id"):
        store.finish(["my-run-1"], 5000.0)  # type: ignore[list-item]
    store.close()


def test_seeded_runs_meet_live_runs_by_run_id_in_a_compatible_namespace(tmp_path: Path) -> None:
    store = HistoryStore.open(tmp_path / "h.sqlite")
    seed = Run("seed-1", 2, ((0, 0.0), (1, 10.0), (2, 20.0)), namespace="ml")
    assert store.import_finished([seed]) == 1
    assert store.import_finished([Run("seed-1", 2, ((0, 0.0), (1, 10.0)))]) == 0  # ns unknown
    # the demo backfills the seeded runs into Prometheus too: the live series add nothing
    same = {"namespace": "ml", "pod": "p", "container": "c", "start_timestamp": 0.0}
    store.record([update("seed-1", [(1, 10.0)], **same)])
    assert store.running() == []
    # the same hand-written id in another namespace is another run
    store.record([update("seed-1", [(1, 1100.0)], namespace="other", pod="p", container="c")])
    assert [run_key(r.run) for r in store.running()] == [key("seed-1", "other", "p", "c")]
    # a CSV that repeats a run seen live adds nothing; one from another namespace does
    live_seen = Run("seed-1", 4, ((0, 0.0), (1, 5.0)), namespace="other")
    assert store.import_finished([live_seen]) == 0
    assert store.import_finished([Run("seed-1", 4, ((0, 0.0),), namespace="third")]) == 1
    # runs with pods are matched by their whole key
    pod_run = Run("x", 1, ((0, 0.0), (1, 1.0)), namespace="ml", pod="a", container="c")
    assert store.import_finished([pod_run]) == 1
    assert store.import_finished([pod_run]) == 0
    assert store.import_finished([Run("x", 1, ((0, 0.0), (1, 1.0)), namespace="ml", pod="b")]) == 1
    store.close()


FIXTURE_V1 = Path(__file__).parent / "data" / "history_v1.sqlite"


def test_schema_1_file_is_migrated_keeping_every_run(tmp_path: Path) -> None:
    """A history file written by the schema-1 forecaster (data/make_history.py 1)."""
    db = tmp_path / "h.sqlite"
    db.write_bytes(FIXTURE_V1.read_bytes())
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 1
    conn.close()
    store = HistoryStore.open(db)
    store.close()
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 4
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    conn.close()
    store = HistoryStore.open(db)  # opening again is a no-op
    assert store.get_meta("last_query_timestamp") == "2300.0"
    finished = {r.run_id: r for r in store.finished()}
    assert {k: r.completed for k, r in finished.items()} == {
        "seed-1": True,
        "done-1": True,
        "gone-1": False,
    }
    assert finished["seed-1"].namespace == "ml" and finished["seed-1"].pod == ""
    assert finished["done-1"].epoch_times == ((0, 1000.0), (1, 1100.0), (2, 1200.0))
    assert finished["done-1"].features["gpu_utilization_ratio"] == pytest.approx(0.8)
    assert run_key(finished["gone-1"]) == ("ml", "train-b", "main", "gone-1")
    (live,) = store.running()
    assert run_key(live.run) == ("ml", "train-c", "main", "live-1") and live.node == "n2"
    assert live.run.epoch_times == ((0, 2000.0), (1, 2100.0), (2, 2200.0), (3, 2300.0))
    assert live.run.features["gpu_utilization_ratio"] == pytest.approx(0.75)
    assert live.run.features["batch_size"] == 64.0
    # the migrated run keeps accumulating, and its id can now be reused by another pod
    other = {"namespace": "ml", "pod": "train-d", "container": "main"}
    mine = {"namespace": "ml", "pod": "train-c", "container": "main"}
    store.record(
        [
            update("live-1", [(4, 2400.0)], planned=10, start_timestamp=2000.0, **mine),
            update("live-1", [(1, 5100.0)], planned=3, start_timestamp=5000.0, **other),
        ]
    )
    runs = {r.run.pod: r.run for r in store.running()}
    assert runs["train-c"].epoch_times[-1] == (4.0, 2400.0)
    assert runs["train-d"].epoch_times == ((0, 5000.0), (1, 5100.0))
    store.finish([key("live-1", **mine)], 6000.0)
    assert len(store.finished()) == 4 and len(store.running()) == 1
    store.close()


def test_failed_migration_leaves_the_file_untouched(tmp_path: Path) -> None:
    db = tmp_path / "h.sqlite"
    db.write_bytes(FIXTURE_V1.read_bytes())
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE runs_v2 (x INTEGER)")  # the migration's CREATE TABLE fails
    conn.commit()
    conn.close()
    before = digest(db)
    with pytest.raises(HistoryError, match="migrating schema 1 to 4 failed"):
        HistoryStore.open(db)
    assert digest(db) == before


FIXTURE_V2 = Path(__file__).parent / "data" / "history_v2.sqlite"


def test_schema_2_step_runs_stored_in_percent_are_kept_apart_or_converted(tmp_path: Path) -> None:
    """Schema 2 stored a step-only run in percent of its steps (data/make_history.py 2).
    A finished one stays as stored but is its own job to the models; a running one is
    rescaled to steps at its first update, once, and finishes as the job it is."""
    db = tmp_path / "h.sqlite"
    db.write_bytes(FIXTURE_V2.read_bytes())
    store = HistoryStore.open(db)
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 4
    conn.close()
    finished = {r.run_id: r for r in store.finished()}
    old = finished["steps-done"]
    assert old.epochs_planned == 100.0 and old.epoch_times[-1] == (100.0, 1400.0)
    assert old.features["job_name"] == "bert (percent)"
    assert old.features["progress_unit"] == "percent"
    assert dict(finished["epochs-done"].features) == {"job_name": "cnn", "namespace": "ml"}
    # seeded from a CSV counting real steps (plan 3,000, not 100): left as it was
    assert finished["csv-steps"].features["job_name"] == "bert"
    assert finished["csv-steps"].features["progress_unit"] == "steps"
    store.close()
    store = HistoryStore.open(db)  # a restart between the upgrade and the run's next update
    (live,) = store.running()
    assert live.run.epoch_times == ((0, 2000.0), (10.0, 2100.0), (20.0, 2200.0))
    # the first update after the upgrade carries the steps planned (2,000) and the steps
    # seen again (400) and new (600): the stored 10 / 20 % become 200 / 400 steps
    bert = {"namespace": "ml", "pod": "bert-b", "container": "main", "node": "n1"}
    features = {"job_name": "bert", "namespace": "ml", "progress_unit": "steps"}
    ends = [(400.0, 2200.0), (600.0, 2300.0)]
    store.record(
        [update("steps-live", ends, 2000.0, start_timestamp=2000.0, features=features, **bert)]
    )
    times = ((0, 2000.0), (200.0, 2100.0), (400.0, 2200.0), (600.0, 2300.0))
    (live,) = store.running()
    assert live.run.epochs_planned == 2000.0 and live.run.epoch_times == times
    store.close()
    store = HistoryStore.open(db)  # converted once: a restart does not rescale again
    store.record(
        [
            update(
                "steps-live",
                [(800.0, 2400.0)],
                2000.0,
                start_timestamp=2000.0,
                features=features,
                **bert,
            )
        ]
    )
    (live,) = store.running()
    assert live.run.epoch_times == (*times, (800.0, 2400.0))
    store.finish([key("steps-live", "ml", "bert-b", "main")], 2500.0)
    new = {r.run_id: r for r in store.finished()}["steps-live"]
    assert new.features["job_name"] == "bert" and new.features["progress_unit"] == "steps"
    store.close()


def test_a_step_run_stored_in_percent_that_never_reports_again_finishes_in_percent(
    tmp_path: Path,
) -> None:
    db = tmp_path / "h.sqlite"
    db.write_bytes(FIXTURE_V2.read_bytes())
    store = HistoryStore.open(db)
    (run,) = store.finish([key("steps-live", "ml", "bert-b", "main")], 2500.0)
    assert run.completed is False
    gone = {r.run_id: r for r in store.finished()}["steps-live"]
    assert gone.epoch_times[-1] == (20.0, 2200.0)
    assert gone.features["job_name"] == "bert (percent)"
    store.close()


def test_a_long_run_is_learnt_from_thinned_and_kept_whole_in_the_file(tmp_path: Path) -> None:
    """A run of 400 step reports is read back with HISTORY_POINTS points, its start, first
    report and end kept, whether the cache was loaded before it finished or read after;
    the file keeps all 401."""
    db = tmp_path / "h.sqlite"
    store = HistoryStore.open(db)
    assert store.finished() == []  # the cache is loaded before the run finishes
    ends = [(float(10 * k), 1000.0 + 3.0 * k) for k in range(1, 401)]
    store.record([update("long", ends, 4000.0, pod="p", features={"progress_unit": "steps"})])
    (final,) = store.finish([key("long", pod="p")], 3000.0)
    assert len(final.epoch_times) == 401  # what finish returns is the whole run
    (cached,) = store.finished()
    store.close()
    store = HistoryStore.open(db)
    (read,) = store.finished()
    store.close()
    assert cached == read
    assert len(read.epoch_times) == HISTORY_POINTS
    assert read.epoch_times[0] == (0, 1000.0) and read.epoch_times[-1] == (4000.0, 2200.0)
    assert read.epoch_times[1] == (10.0, 1003.0)  # the first report: the first bin's moment
    assert read.completed is True and read.epochs_planned == 4000.0
    conn = sqlite3.connect(db)
    (blob,) = conn.execute("SELECT epoch_times FROM runs").fetchone()
    conn.close()
    assert len(blob) == 401 * 16


def test_thinned_keeps_the_ends_the_first_report_and_even_spacing_and_epoch_by_epoch_runs() -> None:
    """The start, the first report (a live run's first forecast reads that interval alone:
    the calibration replays it, ``replay.calibration_moments``) and the end, the rest
    evenly spaced by index from the first report on."""
    steps = tuple((10.0 * k, 100.0 + k) for k in range(1000))
    run = Run("r", 9990.0, steps, completed=True)
    short = thinned(run, 10)
    assert [e for e, _ in short.epoch_times] == [
        0,
        10,
        1260,
        2510,
        3750,
        5000,
        6250,
        7490,
        8740,
        9990,
    ]
    assert short.features == run.features and short.completed is True
    assert thinned(short, 10) is short and thinned(run, 1000) is run
    assert [e for e, _ in thinned(run, 3).epoch_times] == [0, 10, 9990]
    # one point more than kept: only one of the middle ones goes
    assert len(thinned(Run("r", 100.0, steps[:101]), 100).epoch_times) == 100
    # reported epoch by epoch: kept whole (a period of evaluation passes shows only so)
    epochs = Run("e", 999.0, tuple((float(k), 100.0 + k) for k in range(1000)))
    assert thinned(epochs, 10) is epochs
    # a run counted in steps, reported at every step, is no epoch-by-epoch run
    every_step = dataclasses.replace(epochs, features={"progress_unit": "steps"})
    assert len(thinned(every_step, 10).epoch_times) == 10
    with pytest.raises(ValueError):
        thinned(run, 2)


def test_running_runs_held_in_memory_match_a_fresh_read_of_the_file(tmp_path: Path) -> None:
    """running() keeps epoch ends in memory between cycles; after every kind of write it
    must give exactly what a second connection reading the file gives."""
    import random

    db = tmp_path / "h.sqlite"
    store = HistoryStore.open(db)
    # a finished run seeded without a pod: a live run with its id and start is never recorded
    store.import_finished([Run("seeded", 3, ((0, 1000.0), (3, 1040.0)), completed=True)])
    rng = random.Random(7)
    ids = [f"r{i}" for i in range(12)] + ["seeded"]
    ends: dict[str, list[tuple[float, float]]] = {r: [] for r in ids}
    finished: set[str] = set()
    for step in range(30):
        batch = []
        for run_id in rng.sample(ids, 6):
            if ends[run_id] and rng.random() < 0.3:  # a moved end: the first time stays
                epoch, ts = ends[run_id][-1]
                ends[run_id].append((epoch, ts + 5))
            ends[run_id].append((len(ends[run_id]) + 1.0, 1000.0 + 50 * step + rng.random()))
            planned = 40.0 if rng.random() < 0.9 else 30.0  # a changed plan now and then
            batch.append(update(run_id, ends[run_id][-3:], planned=planned, pod=f"p-{run_id}"))
        store.record(batch)
        if step % 4 == 3:  # some runs vanish or end
            gone = [run_id for run_id in rng.sample(ids, 2) if run_id not in finished]
            store.finish([key(r, pod=f"p-{r}") for r in gone], 5000.0 + step)
            finished.update(gone)
        fresh = HistoryStore.open(db)
        try:
            assert store.running() == fresh.running()
            assert sorted(r.run_id for r in fresh.finished()) == sorted(finished | {"seeded"})
        finally:
            fresh.close()
    assert all(s.run.run_id != "seeded" for s in store.running())
    store.close()


T0 = 1_800_000_000.0
POD = {"namespace": "ml", "pod": "train-0", "container": "main"}


@pytest.mark.parametrize("held", [True, False], ids=["ends-held-in-memory", "restarted-store"])
def test_a_run_restarted_under_its_key_shows_the_new_attempts_progress(
    tmp_path: Path, held: bool
) -> None:
    """Same (namespace, pod, container, run_id), a later start, epochs from 1 again (the
    job restarted, its exporter lost its state). The first attempt's ends used to stay
    (all before the new start, so never shown) and keep the new attempt's ends of the
    same epochs out: the run showed no progress at all, and finished so."""
    db = tmp_path / "h.sqlite"
    store = HistoryStore.open(db)
    first = [(e, T0 + 100 * e) for e in range(1, 6)]
    store.record([update("my-run", first, planned=20, start_timestamp=T0, **POD)])
    assert store.running()[0].run.epochs_done == 5
    if not held:
        store.close()
        store = HistoryStore.open(db)
    start = T0 + 1000
    for ends in ([(1, start + 100), (2, start + 200)], [(3, start + 300)]):  # two cycles
        store.record([update("my-run", ends, planned=20, start_timestamp=start, **POD)])
        store.running()
    expected = ((0.0, start), (1.0, start + 100), (2.0, start + 200), (3.0, start + 300))
    (stored,) = store.running()
    assert stored.run.epoch_times == expected
    fresh = HistoryStore.open(db)
    assert fresh.running() == store.running()
    fresh.close()
    (done,) = store.finish([key("my-run", **POD)], start + 400)
    assert done.epoch_times == expected and done.completed is False
    store.close()


def test_a_restarted_run_a_previous_version_left_without_progress_recovers(
    tmp_path: Path,
) -> None:
    """The file as the defect left it: the new start stored, the old attempt's ends
    kept. The next update clears them and the new attempt's ends are stored."""
    db = tmp_path / "h.sqlite"
    store = HistoryStore.open(db)
    store.record([update("r", [(1, 1100.0), (2, 1200.0)], start_timestamp=1000.0, **POD)])
    store.close()
    conn = sqlite3.connect(db)
    conn.execute("UPDATE runs SET start_timestamp = 5000")
    conn.commit()
    conn.close()
    store = HistoryStore.open(db)
    assert store.running()[0].run.epoch_times == ((0.0, 5000.0),)
    store.record([update("r", [(1, 5100.0)], start_timestamp=5000.0, **POD)])
    assert store.running()[0].run.epoch_times == ((0.0, 5000.0), (1.0, 5100.0))
    store.close()


def test_a_start_moved_earlier_or_a_little_later_keeps_every_end_shown(tmp_path: Path) -> None:
    """Only ends before a run's new start go (never shown under it); a start re-read a
    little later, or corrected earlier (an exporter replaying an older snapshot), keeps
    the stored ends. The rule already held before the restart fix; this guards it."""
    db = tmp_path / "h.sqlite"
    store = HistoryStore.open(db)
    store.record([update("r", [(1, 1100.0), (2, 1200.0)], start_timestamp=1000.0)])
    store.running()
    store.record([update("r", [(3, 1300.0)], start_timestamp=1000.5)])
    assert store.running()[0].run.epoch_times == (
        (0.0, 1000.5),
        (1.0, 1100.0),
        (2.0, 1200.0),
        (3.0, 1300.0),
    )
    store.record([update("r", [], start_timestamp=900.0)])
    assert store.running()[0].run.epoch_times == (
        (0.0, 900.0),
        (1.0, 1100.0),
        (2.0, 1200.0),
        (3.0, 1300.0),
    )
    assert store._conn.execute("SELECT COUNT(*) FROM epoch_ends").fetchone()[0] == 3
    store.close()


def test_restarts_and_start_corrections_match_a_fresh_read_and_the_attempt(
    tmp_path: Path,
) -> None:
    """Runs that restart under their key (a later start, epochs from 1), have their
    start corrected earlier, or just go on, in random order, with restarts of the
    store: every read gives exactly the current attempt, and the ends held in memory
    agree with a second connection reading the file."""
    import random

    db = tmp_path / "h.sqlite"
    store = HistoryStore.open(db)
    rng = random.Random(11)
    ids = [f"r{i}" for i in range(8)]
    start = {r: 1000.0 + rng.random() for r in ids}
    ends: dict[str, list[tuple[float, float]]] = {r: [] for r in ids}
    restarts = 0
    for step in range(40):
        batch = []
        for run_id in rng.sample(ids, 5):
            last = ends[run_id][-1][1] if ends[run_id] else start[run_id]
            roll = rng.random()
            if ends[run_id] and roll < 0.2:  # the job restarted: a later start, epoch 1
                start[run_id] = last + 50 + rng.random()
                ends[run_id] = []
                last = start[run_id]
                restarts += 1
            elif roll < 0.3:  # the start corrected earlier: every end is still the run's
                start[run_id] -= 5.0
            ends[run_id].append((len(ends[run_id]) + 1.0, last + 10 + rng.random()))
            batch.append(
                update(run_id, ends[run_id][-2:], planned=400, start_timestamp=start[run_id])
            )
        store.record(batch)
        if step % 3 == 0:
            store.running()  # the ends held in memory between some cycles, not others
        if step % 10 == 9:
            store.close()
            store = HistoryStore.open(db)
        got = {s.run.run_id: s.run.epoch_times for s in store.running()}
        want = {r: ((0.0, start[r]), *ends[r]) for r in ids if ends[r]}
        assert got == want, step
        fresh = HistoryStore.open(db)
        try:
            assert store.running() == fresh.running()
        finally:
            fresh.close()
    assert restarts >= 10
    store.close()
