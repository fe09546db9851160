"""History retention (``HistoryStore.retain``, ``history_space``): what is deleted, what
is kept (running runs, the floor of most recent runs, seeded runs, runs younger than
the age), in bounded batches, across restarts, with the model's runs unchanged; the
maintained finished count; the room on a real volume (a tmpfs, root only).

Real SQLite files throughout; the clock is the ``now`` each call is given.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

from gpu_eta.forecaster import history_space
from gpu_eta.forecaster.history import HistoryStore
from gpu_eta.forecaster.history_space import HistorySpace, Retention, low_room_bytes, space_of
from gpu_eta.forecaster.runs import Run, RunUpdate, run_key
from tests.support.read_only import read_only_directory, run_unprivileged
from tests.support.tmpfs import run_on_tmpfs

_T = TypeVar("_T")

DAY = 86400.0
T0 = 1_700_000_000.0


def live(i: int, start: float, epochs: int = 3, planned: float = 3) -> RunUpdate:
    """A live run (pod and container known) of ``epochs`` epochs of 100 s from ``start``."""
    return RunUpdate(
        run_id=f"r{i}",
        epochs_planned=planned,
        start_timestamp=start,
        epoch_ends=tuple((float(e), start + 100.0 * e) for e in range(1, epochs + 1)),
        namespace="ns",
        pod=f"pod-{i}",
        container="main",
        features={"job_name": "train"},
        seen_timestamp=start + 100.0 * epochs,
    )


def finish_runs(store: HistoryStore, ids: range, at: float) -> None:
    """Record the live runs ``ids`` and finish them at ``at`` (one cycle each)."""
    ups = [live(i, at - 400.0) for i in ids]
    store.record(ups)
    store.finish([run_key(u) for u in ups], at)


def stored_ids(db: Path, state: str = "finished") -> list[str]:
    """The run ids the file holds (``finished`` or ``running``), by finish then id."""
    conn = sqlite3.connect(db)
    try:
        op = "!=" if state == "finished" else "="
        rows = conn.execute(
            f"SELECT run_id FROM runs WHERE state {op} 'running' ORDER BY finished_timestamp, id"
        ).fetchall()
    finally:
        conn.close()
    return [r[0] for r in rows]


def sql_count(db: Path) -> int:
    conn = sqlite3.connect(db)
    try:
        return conn.execute("SELECT COUNT(*) FROM runs WHERE state != 'running'").fetchone()[0]
    finally:
        conn.close()


# -- what is deleted ------------------------------------------------------------------


def test_only_finished_runs_older_than_the_age_are_deleted(tmp_path: Path) -> None:
    db = tmp_path / "h.sqlite"
    store = HistoryStore.open(db, retention=Retention(max_age_seconds=30 * DAY))
    finish_runs(store, range(0, 5), T0)  # 40 days old at the pass
    finish_runs(store, range(5, 8), T0 + 20 * DAY)  # 20 days old
    store.record([live(100, T0 - DAY, epochs=1, planned=10)])  # running since before all
    deleted = store.retain(T0 + 40 * DAY)
    assert deleted == 5
    assert stored_ids(db) == ["r5", "r6", "r7"]
    assert stored_ids(db, "running") == ["r100"]
    assert store.count_finished() == 3 == sql_count(db)
    store.close()


def test_the_floor_keeps_the_most_recent_runs_whatever_their_age(tmp_path: Path) -> None:
    db = tmp_path / "h.sqlite"
    store = HistoryStore.open(db, retention=Retention(max_age_seconds=DAY, keep_runs=4))
    for i in range(10):  # one run finishing per hour, all long past the age
        finish_runs(store, range(i, i + 1), T0 + 3600.0 * i)
    assert store.retain(T0 + 100 * DAY) == 6
    assert stored_ids(db) == ["r6", "r7", "r8", "r9"]
    assert store.retain(T0 + 100 * DAY) == 0  # the floor holds
    store.close()


def test_runs_seeded_from_a_csv_are_kept(tmp_path: Path) -> None:
    """A seeded run has no pod and no container; the next start would import it
    again, so deleting it would churn for ever."""
    db = tmp_path / "h.sqlite"
    store = HistoryStore.open(db, retention=Retention(max_age_seconds=DAY))
    store.import_finished(
        [Run(f"seed{i}", 2, ((0, T0 + i), (1, T0 + i + 10), (2, T0 + i + 20))) for i in range(3)]
    )
    finish_runs(store, range(3), T0 + 100.0)
    assert store.retain(T0 + 10 * DAY) == 3
    assert stored_ids(db) == ["seed0", "seed1", "seed2"]
    assert store.import_finished([Run("seed0", 2, ((0, T0), (1, T0 + 10), (2, T0 + 20)))]) == 0
    store.close()


def test_runs_seeded_with_their_pod_are_kept(tmp_path: Path) -> None:
    """A seed CSV may name each run's namespace, pod and container (docs/evaluate.md);
    retention told a seeded run by its empty pod, so it deleted those and every start
    imported them again."""
    db = tmp_path / "h.sqlite"
    seeded = [
        Run(
            f"seed{i}",
            2,
            ((0, T0 + i), (1, T0 + i + 10), (2, T0 + i + 20)),
            namespace="ml",
            pod=f"trainer-{i}",
            container="main",
        )
        for i in range(3)
    ]
    for start in range(2):  # two starts, each importing the same seed
        store = HistoryStore.open(db, retention=Retention(max_age_seconds=DAY))
        assert store.import_finished(seeded) == (3 if start == 0 else 0)
        finish_runs(store, range(3 * start, 3 * start + 3), T0 + 100.0)
        assert store.retain(T0 + 10 * DAY) == 3  # the live runs only
        assert stored_ids(db) == ["seed0", "seed1", "seed2"]
        store.close()


def _seed_and_finish(db: Path, n_live: int) -> None:
    """A history at ``db`` of one run seeded from a CSV and ``n_live`` live runs, all
    finished long ago."""
    store = HistoryStore.open(db)
    store.import_finished([Run("seed", 2, ((0, T0), (1, T0 + 10), (2, T0 + 20)))])
    finish_runs(store, range(n_live), T0 + 100.0)
    store.close()


def test_a_file_without_the_seeded_mark_gains_it_for_the_runs_seeded_before(
    tmp_path: Path,
) -> None:
    """A file an earlier release wrote has no ``runs.seeded``: the open adds it, marks
    the runs that release seeded (no pod, no container), and keeps schema 4."""
    db = tmp_path / "h.sqlite"
    _seed_and_finish(db, 1)
    conn = sqlite3.connect(db, isolation_level=None)  # as the earlier release wrote it
    conn.execute("DROP INDEX runs_retainable")  # on runs.seeded: added with it
    conn.execute("ALTER TABLE runs DROP COLUMN seeded")
    conn.close()
    store = HistoryStore.open(db, retention=Retention(max_age_seconds=DAY))
    assert store.retain(T0 + 10 * DAY) == 1
    store.close()
    assert stored_ids(db) == ["seed"]
    conn = sqlite3.connect(db)
    assert conn.execute("SELECT run_id, seeded FROM runs").fetchall() == [("seed", 1)]
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 4
    conn.close()


def _empty_history(directory: Path) -> None:
    HistoryStore.open(directory / "h.sqlite").close()


def _finish_for_90_days(path: str) -> tuple[bool, int, list[str]]:
    """Runs finishing over 90 days on the store at ``path`` with a 30-day retention,
    one cycle's pass each time: whether the store writes its file, the runs the passes
    deleted, and the runs it holds after a pass at day 90."""
    store = HistoryStore.open(path, retention=Retention(max_age_seconds=30 * DAY))
    try:
        deleted = 0
        for day in range(0, 90, 10):  # five runs finishing every ten days
            finish_runs(store, range(day, day + 5), T0 + day * DAY)
            deleted += store.retain(T0 + day * DAY + 500.0)
        deleted += store.retain(T0 + 90 * DAY)
        return store.persistent, deleted, sorted(r.run_id for r in store.finished())
    finally:
        store.close()


def test_the_memory_copy_of_a_read_only_history_is_retained_too() -> None:
    """A read-only file is used through an in-memory copy for as long as the volume
    stays read-only (weeks, if the alert is left alone): without retention there, the
    copy grew by every run that finished, until the forecaster was OOM-killed."""
    with read_only_directory(_empty_history) as directory:
        persistent, deleted, held = run_unprivileged(
            _finish_for_90_days, str(directory / "h.sqlite")
        )
    assert not persistent
    recent = [*range(60, 65), *range(70, 75), *range(80, 85)]  # the last 30 days
    assert held == sorted(f"r{i}" for i in recent)
    assert deleted == 30


def test_a_pass_deletes_at_most_a_batch(tmp_path: Path) -> None:
    db = tmp_path / "h.sqlite"
    store = HistoryStore.open(db, retention=Retention(max_age_seconds=DAY, batch_runs=7))
    finish_runs(store, range(20), T0)
    passes = []
    while deleted := store.retain(T0 + 2 * DAY):
        passes.append(deleted)
    assert passes == [7, 7, 6]
    assert store.count_finished() == 0 == sql_count(db)
    store.close()


def test_without_retention_nothing_is_deleted(tmp_path: Path) -> None:
    db = tmp_path / "h.sqlite"
    store = HistoryStore.open(db)
    finish_runs(store, range(5), T0)
    assert store.retain(T0 + 1000 * DAY) == 0
    store.record([live(9, T0 + 1000 * DAY)], now=T0 + 1000 * DAY)
    assert len(stored_ids(db)) == 5
    store.close()


def test_a_cycle_write_runs_a_pass_first_and_retention_survives_a_restart(
    tmp_path: Path,
) -> None:
    """``record`` (the cycle's first write) starts with a pass: the room it frees is
    there for the write. The settings are the start's: a restarted store deletes too."""
    db = tmp_path / "h.sqlite"
    store = HistoryStore.open(db, retention=Retention(max_age_seconds=30 * DAY, keep_runs=2))
    finish_runs(store, range(6), T0)
    store.close()
    store = HistoryStore.open(db, retention=Retention(max_age_seconds=30 * DAY, keep_runs=2))
    now = T0 + 31 * DAY
    store.record([live(50, now - 300.0)], now=now)
    assert stored_ids(db) == ["r4", "r5"]
    assert stored_ids(db, "running") == ["r50"]
    store.close()
    store = HistoryStore.open(db)  # restarted: the deleted runs stay deleted
    assert [r.run_id for r in store.finished()] == ["r4", "r5"]
    assert store.count_finished() == 2
    store.close()


def test_the_model_keeps_its_runs_when_the_floor_covers_them(tmp_path: Path) -> None:
    """The floor is ``--model.fit-runs``: retention never deletes a run the model reads,
    so the cached runs stay as they are and no refit is asked for."""
    db = tmp_path / "h.sqlite"
    store = HistoryStore.open(db, retention=Retention(max_age_seconds=DAY, keep_runs=5))
    for i in range(12):
        finish_runs(store, range(i, i + 1), T0 + 60.0 * i)
    before = store.finished(5)
    version = store.version
    assert store.retain(T0 + 10 * DAY) == 7
    assert store.version == version
    assert store.finished(5) == before
    assert [r.run_id for r in before] == ["r7", "r8", "r9", "r10", "r11"]
    store.close()
    fresh = HistoryStore.open(db)
    assert fresh.finished(5) == before  # what a restart reads: the same runs
    fresh.close()


def test_the_floor_reaches_past_damaged_rows_the_models_read_skipped(tmp_path: Path) -> None:
    """A damaged row among the most recent (text a ``sqlite3`` shell wrote into a
    number column) is skipped by the model's read, which reads the next older run in
    its place; the floor counted the damaged rows as runs kept, so a pass deleted runs
    the model read (two damaged rows of the newest five: after a restart the model had
    three runs of the five it fits on). The floor reaches as far past them as the
    read did."""
    db = tmp_path / "h.sqlite"
    rule = Retention(max_age_seconds=DAY, keep_runs=5)
    store = HistoryStore.open(db, retention=rule)
    for i in range(10):
        finish_runs(store, range(i, i + 1), T0 + 60.0 * i)
    store.close()
    conn = sqlite3.connect(db)
    conn.execute("UPDATE runs SET epochs_planned = 'x' WHERE run_id IN ('r8', 'r9')")
    conn.commit()
    conn.close()
    store = HistoryStore.open(db, retention=rule)
    before = [r.run_id for r in store.finished(5)]
    assert before == ["r3", "r4", "r5", "r6", "r7"]
    assert store.retain(T0 + 10 * DAY) == 3
    assert store.retain(T0 + 10 * DAY) == 0  # the floor holds
    store.close()
    fresh = HistoryStore.open(db, retention=rule)
    assert [r.run_id for r in fresh.finished(5)] == before  # a restart reads the same
    assert stored_ids(db) == ["r3", "r4", "r5", "r6", "r7", "r8", "r9"]  # damaged: kept
    fresh.close()


def test_runs_the_model_read_that_go_ask_for_a_refit(tmp_path: Path) -> None:
    """A floor below what the model reads (``--model.fit-runs 0``: all of them): the
    deleted runs leave the model's history at the next fit."""
    db = tmp_path / "h.sqlite"
    store = HistoryStore.open(db, retention=Retention(max_age_seconds=DAY, keep_runs=2))
    for i in range(4):
        finish_runs(store, range(i, i + 1), T0 + 60.0 * i)
    assert len(store.finished()) == 4
    version = store.version
    assert store.retain(T0 + 10 * DAY) == 2
    assert store.version > version
    assert [r.run_id for r in store.finished()] == ["r2", "r3"]
    store.close()


# -- the finished count ------------------------------------------------------------------


def test_the_finished_count_is_kept_without_a_scan(tmp_path: Path) -> None:
    """Counted once, then kept in step by the store's writes: the cycle asks every
    time, and a scan of 450,000 runs took 22 ms."""
    db = tmp_path / "h.sqlite"
    store = HistoryStore.open(db, retention=Retention(max_age_seconds=DAY))
    finish_runs(store, range(4), T0)
    assert store.count_finished() == 4
    statements: list[str] = []
    store._conn.set_trace_callback(statements.append)
    assert store.count_finished() == 4
    assert statements == []
    store._conn.set_trace_callback(None)
    # every write that adds or removes a finished run moves it
    store.import_finished([Run("seed", 1, ((0, T0), (1, T0 + 10)))])
    assert store.count_finished() == 5 == sql_count(db)
    late = live(7, T0, epochs=1, planned=3)
    store.record([late])
    store.finish([run_key(late)], T0 + 500.0)  # vanished at epoch 1 of 3: incomplete
    assert store.count_finished() == 6 == sql_count(db)
    back = dataclasses.replace(late, seen_timestamp=T0 + 900.0)
    assert store.record([back]) == [run_key(late)]  # present again: running again
    assert store.count_finished() == 5 == sql_count(db)
    store.retain(T0 + 2 * DAY)
    assert store.count_finished() == 1 == sql_count(db)  # the seeded run
    store.close()


# -- the room --------------------------------------------------------------------------


def test_the_room_is_the_volume_s_available_bytes_and_the_file_s_free_pages() -> None:
    mib = 1024 * 1024
    assert HistorySpace(500 * mib, 10 * mib, 60 * mib, 1024 * mib).room_bytes == 70 * mib
    assert not HistorySpace(500 * mib, 10 * mib, 60 * mib, 1024 * mib).low
    assert HistorySpace(500 * mib, 1 * mib, 60 * mib, 1024 * mib).low
    assert low_room_bytes(1024 * mib) == 64 * mib
    assert low_room_bytes(8 * mib) == 8 * mib // 10  # a tenth of a small volume
    assert not HistorySpace(1, 0).low  # unknown room: never low


def test_the_space_of_a_file_is_read_from_it_and_its_volume(tmp_path: Path) -> None:
    db = tmp_path / "h.sqlite"
    store = HistoryStore.open(db)
    finish_runs(store, range(30), T0)
    space = store.space()
    assert space is not None
    assert space.file_bytes == db.stat().st_size
    vfs = os.statvfs(tmp_path)
    assert space.capacity_bytes == vfs.f_blocks * vfs.f_frsize
    assert space.available_bytes is not None and space.available_bytes > 0
    assert space.free_bytes == 0
    store._conn.execute("DELETE FROM runs")
    assert store.space().free_bytes > 0  # type: ignore[union-attr]
    store.close()
    assert space_of(":memory:", 0) is None


def test_low_room_deletes_runs_beyond_the_floor_whatever_their_age(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A volume with less room than ``low_room_bytes`` (here: any volume) loses its
    oldest runs beyond the floor, young as they are, until the file holds that much
    free; a pass with room enough deletes by age only."""
    db = tmp_path / "h.sqlite"
    store = HistoryStore.open(db, retention=Retention(max_age_seconds=365 * DAY, keep_runs=3))
    finish_runs(store, range(10), T0)
    assert store.retain(T0 + DAY) == 0  # room enough: a day-old run stays
    monkeypatch.setattr(history_space, "low_room_bytes", lambda capacity: 1 << 62)
    assert store.retain(T0 + DAY) == 7
    assert stored_ids(db) == ["r7", "r8", "r9"]
    store.close()


def test_low_room_names_the_damaged_copies_set_aside_beside_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A damaged file set aside (``<name>.corrupt-<time>``) stays on the volume for a
    human, as big as the history was: with the room low, retention deletes the new
    history's runs while those copies hold the space, and the WARNING said only to
    grow the volume or shorten the retention. It names the copies and their size."""
    db = tmp_path / "h.sqlite"
    (tmp_path / "h.sqlite.corrupt-1700000000").write_bytes(b"\0" * (3 << 20))
    (tmp_path / "h.sqlite.corrupt-1700000000-journal").write_bytes(b"\0" * (1 << 20))
    (tmp_path / "h.sqlite.corrupt-1700000500").write_bytes(b"\0" * (2 << 20))
    (tmp_path / "other.sqlite.corrupt-1700000000").write_bytes(b"\0" * (5 << 20))
    store = HistoryStore.open(db, retention=Retention(max_age_seconds=365 * DAY, keep_runs=3))
    finish_runs(store, range(5), T0)
    monkeypatch.setattr(history_space, "low_room_bytes", lambda capacity: 1 << 62)
    with caplog.at_level(logging.WARNING, logger="gpu_eta.forecaster.history"):
        assert store.retain(T0 + DAY) == 2
    (line,) = [r.getMessage() for r in caplog.records if "little room" in r.getMessage()]
    assert "2 damaged copies set aside beside it hold 6.0 MiB" in line, line
    store.close()


# -- a real volume: a tmpfs -----------------------------------------------------------

FILL_CHILD = """
import json, os, sys
from gpu_eta.forecaster.history import HistoryError, HistoryStore
from gpu_eta.forecaster.history_space import Retention
from gpu_eta.forecaster.runs import RunUpdate, run_key

volume, mode, cycles = sys.argv[1], sys.argv[2], int(sys.argv[3])
db = os.path.join(volume, "h.sqlite")
retention = Retention(max_age_seconds=30 * 86400.0, keep_runs=200)
store = HistoryStore.open(db, retention=retention if mode == "retain" else None)
t0 = 1.7e9

def cycle(c):
    now = t0 + 60.0 * c
    ups = [
        RunUpdate(run_id=f"r{c}-{k}", epochs_planned=30.0, start_timestamp=now - 3000.0,
                  namespace=f"user-{k}", pod=f"sweep-{c:06d}-{k:02d}-x7k2p", container="main",
                  node="gpu-node-1", features={"job_name": "sweep", "gpus": 1.0},
                  epoch_ends=tuple((float(e), now - 3000.0 + 100.0 * e) for e in range(1, 31)),
                  seen_timestamp=now)
        for k in range(20)
    ]
    store.record(ups, now=now)
    store.finish([run_key(u) for u in ups], now)

sizes, error, after = [], None, None
for c in range(cycles):
    try:
        cycle(c)
    except HistoryError as err:
        error = f"cycle {c}: {err}"
        break
    sizes.append(os.path.getsize(db))
if mode == "keep-then-retain":  # the next start, with retention
    store.close()
    store = HistoryStore.open(db, retention=retention)
    after = 0
    for c in range(len(sizes) + 1, len(sizes) + 11):
        cycle(c)
        after += 1
space = store.space()
print(json.dumps({"error": error, "cycles": len(sizes), "sizes": sizes[::50] + sizes[-1:],
                  "finished": store.count_finished(), "room_low": space.low,
                  "capacity": space.capacity_bytes, "after": after}))
store.close()
"""


def fill_a_tmpfs(tmp_path: Path, mode: str, cycles: int, size: str = "4m") -> dict:
    """Run ``cycles`` cycles of 20 finishing runs on a fresh ``size`` tmpfs (root and
    unshare(1); skipped elsewhere): what the child saw."""
    proc = run_on_tmpfs(tmp_path, FILL_CHILD, [mode, str(cycles)], size, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.splitlines()[-1])


@pytest.fixture(scope="module")
def filled_then_retained(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """One child for the two tests that fill a volume without retention: its first
    phase (a store without retention, cycles until a write fails full) is the whole of
    what the first test asserts, so it reads the same child's outcome; the second reads
    what the next start with retention did after it."""
    return fill_a_tmpfs(tmp_path_factory.mktemp("filled"), "keep-then-retain", 2000)


def test_without_retention_the_history_fills_its_volume(filled_then_retained: dict) -> None:
    """What retention prevents: the file grows until every cycle's write fails (the
    child's store without retention, before its restart with retention)."""
    got = filled_then_retained
    assert got["error"] is not None and "full" in got["error"], got


def test_retention_keeps_the_history_within_its_volume(tmp_path: Path) -> None:
    """Half as many runs again as the volume holds (without retention it fills at
    cycle 245): the room runs low, the oldest runs beyond the floor go, and the file
    stops growing with room left for every write. Its size is flat from cycle 300 on
    (the same at 300, 349 and 499), so the last two sizes compared (cycles 300 and 349)
    span as many passes as any later pair would."""
    got = fill_a_tmpfs(tmp_path, "retain", 350)
    assert got["error"] is None, got
    assert got["cycles"] == 350
    assert got["finished"] >= 200  # the floor
    assert got["finished"] < 350 * 20
    sizes = got["sizes"]
    assert sizes[-1] < got["capacity"]
    assert sizes[-1] == sizes[-2] or sizes[-1] - sizes[-2] < 64 * 1024, sizes  # flat


def test_a_volume_filled_without_retention_is_written_again_after_a_start_with_it(
    filled_then_retained: dict,
) -> None:
    """A history that filled its volume (every write failing full, as a release without
    retention leaves it): the next start's passes delete runs beyond the floor, halving
    their batch while its journal does not fit the room the failed write left, and the
    cycles write again."""
    got = filled_then_retained
    assert got["error"] is not None and "full" in got["error"], got
    assert got["after"] == 10, got
    assert got["finished"] < (got["cycles"] + 10) * 20


def vm_steps(store: HistoryStore, call: Callable[[], _T], every: int = 1) -> tuple[_T, int]:
    """What ``call`` returned and the SQLite VM instructions it ran on ``store``'s
    connection, in units of ``every`` (a count of the work done, the same on any
    machine)."""
    steps = [0]

    def count() -> int:
        steps[0] += 1
        return 0

    store._conn.set_progress_handler(count, every)
    try:
        got = call()
    finally:
        store._conn.set_progress_handler(None, every)
    return got, steps[0]


def _pass_steps(store: HistoryStore, now: float) -> tuple[int, int]:
    """The runs a retention pass at ``now`` deleted and the SQLite VM instructions it
    ran."""
    return vm_steps(store, lambda: store.retain(now))


def _seeded_history(db: Path, n_seeded: int) -> HistoryStore:
    """``n_seeded`` old runs seeded from a CSV and 20 live runs, all finished long ago,
    with a floor of 20: a retention pass has nothing to delete."""
    store = HistoryStore.open(db, retention=Retention(max_age_seconds=DAY, keep_runs=20))
    store.import_finished(
        [
            Run(f"seed{i}", 2, ((0, T0 + i), (1, T0 + i + 10), (2, T0 + i + 20)))
            for i in range(n_seeded)
        ]
    )
    finish_runs(store, range(20), T0 + 10 * DAY)
    return store


def test_a_pass_with_nothing_to_delete_does_not_read_the_seeded_runs(tmp_path: Path) -> None:
    """Seeded runs are never deleted, but a pass found its candidates along the finish
    index and left the seeded ones out only after reading each row: with nothing to
    delete it read every seeded run, every cycle (50,000 seeded runs: 31-40 ms a pass).
    An empty pass, after the first (which counts the finished runs once), does the same
    work over 4,000 seeded runs as over 100."""
    few = _seeded_history(tmp_path / "few.sqlite", 100)
    many = _seeded_history(tmp_path / "many.sqlite", 4000)
    try:
        assert few.retain(T0 + 40 * DAY) == many.retain(T0 + 40 * DAY) == 0
        for day in (40, 41):
            (gone_few, steps_few), (gone_many, steps_many) = (
                _pass_steps(few, T0 + day * DAY),
                _pass_steps(many, T0 + day * DAY),
            )
            assert gone_few == gone_many == 0
            assert steps_many <= steps_few + 50, (steps_few, steps_many)
    finally:
        few.close()
        many.close()


def test_a_file_without_the_retention_index_gains_it_and_stays_schema_4(tmp_path: Path) -> None:
    """A file an earlier release wrote has no ``runs_retainable``: the open builds it
    (no new schema version: a rolled-back release still opens the file), every row
    kept, and a pass deletes along it what it deleted before."""
    db = tmp_path / "h.sqlite"
    _seed_and_finish(db, 3)
    conn = sqlite3.connect(db, isolation_level=None)  # as the earlier release wrote it
    conn.execute("DROP INDEX runs_retainable")
    rows = conn.execute("SELECT * FROM runs ORDER BY id").fetchall()
    conn.close()
    store = HistoryStore.open(db, retention=Retention(max_age_seconds=DAY, keep_runs=1))
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("SELECT * FROM runs ORDER BY id").fetchall() == rows
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 4
        (plan,) = [
            row[3]
            for row in conn.execute(
                "EXPLAIN QUERY PLAN SELECT finished_timestamp, id FROM runs WHERE "
                "finished_timestamp IS NOT NULL AND finished_timestamp < 1 AND "
                "state != 'running' AND seeded = 0 ORDER BY finished_timestamp, id"
            )
        ]
        assert "runs_retainable" in plan
    finally:
        conn.close()
    assert store.retain(T0 + 10 * DAY) == 2
    store.close()
    assert stored_ids(db) == ["seed", "r2"]


# -- the marks of completed runs retention deleted ---------------------------------------


def _completed_and_cancelled(db: Path, linger: float = 3600.0) -> HistoryStore:
    """r0 completed (3/3), r1 left at 1 of 3 (incomplete), both finished at T0 and
    deleted by a pass: the store that deleted them."""
    store = HistoryStore.open(db, retention=Retention(DAY, linger_seconds=linger))
    store.record([live(0, T0 - 400.0), live(1, T0 - 400.0, epochs=1)])
    store.finish([run_key(live(0, 0)), run_key(live(1, 0))], T0)
    assert store.retain(T0 + 2 * DAY) == 2 and store.count_finished() == 0
    return store


def test_a_completed_run_retention_deletes_keeps_its_start_for_its_lingering_series(
    tmp_path: Path,
) -> None:
    """Its pod may live on with the run's series: the next process must know them as
    that run's (``completed_starts``), or it stores the run again, finished at its own
    time. A run left incomplete is not one (``completed_starts`` never named it), and a
    new run recorded under the key is the key's latest: the mark is not read."""
    db = tmp_path / "h.sqlite"
    _completed_and_cancelled(db).close()
    store = HistoryStore.open(db)  # the next process
    try:
        keys = [run_key(live(0, 0)), run_key(live(1, 0))]
        assert store.completed_starts(keys) == {keys[0]: T0 - 400.0}
        store.record([live(0, T0 + 3 * DAY)])  # trained again: a new run under the key
        assert store.completed_starts(keys) == {}
    finally:
        store.close()


def test_a_mark_lasts_while_reads_find_its_series_and_the_lookback_after(
    tmp_path: Path,
) -> None:
    """A mark is renewed by every write whose read found the run's series
    (``record``'s ``lingering``) and deleted ``linger_seconds`` after the last one:
    bounded by the pods still present, not by a fixed age (a Job's Succeeded pod may
    live for months). A forecaster down for longer than that renews the marks of the
    runs its first read finds before deleting the others."""
    db = tmp_path / "h.sqlite"
    store = _completed_and_cancelled(db, linger=3600.0)
    k0 = run_key(live(0, 0))
    try:
        at = T0 + 2 * DAY
        for step in range(1, 4):  # a cycle an hour, the pod still there
            store.record([], now=at + 3000.0 * step, lingering=[k0])
        assert store.completed_starts([k0]) == {k0: T0 - 400.0}
        store.record([], now=at + 9000.0 + 3601.0 + 10 * DAY, lingering=[k0])  # down 10 days
        assert store.completed_starts([k0]) == {k0: T0 - 400.0}
        last = at + 9000.0 + 3601.0 + 10 * DAY
        store.record([], now=last + 3599.0)  # the pod gone: no read finds the series
        assert store.completed_starts([k0]) == {k0: T0 - 400.0}
        store.record([], now=last + 3601.0)
        assert store.completed_starts([k0]) == {}
    finally:
        store.close()
    conn = sqlite3.connect(db)
    assert conn.execute("SELECT COUNT(*) FROM retired").fetchone() == (0,)
    conn.close()


def test_a_mark_outlasts_an_exporter_down_longer_than_the_lookback(tmp_path: Path) -> None:
    """The service's retention (``--history.retention 9d``, ``--history.lookback``
    6 h): a completed run deleted, its mark renewed once, then 7 h of cycles without
    its series (the node's exporter crash-looping, the node NotReady). The exporter
    back, its state file publishes the Succeeded pod's row again with the run's start:
    a mark deleted ``--history.lookback`` after its last renewal was gone, and the run
    was read as ending and stored again, the newest. It lasts the retention period."""
    from gpu_eta.forecaster.config import history_retention
    from gpu_eta.forecaster.main import build_parser, config_from_args

    argv = ["serve", "--history.retention", "9d", "--history.lookback", "21600"]
    argv += ["--model.fit-runs", "0"]  # no floor: the run is deleted
    rule = history_retention(config_from_args(build_parser().parse_args(argv)))
    assert rule is not None and rule.max_age_seconds == 9 * DAY
    db = tmp_path / "h.sqlite"
    store = HistoryStore.open(db, retention=rule)
    try:
        store.record([live(0, T0 - 400.0)])
        k0 = run_key(live(0, 0))
        store.finish([k0], T0)
        assert store.retain(T0 + 10 * DAY) == 1 and store.count_finished() == 0
        at = T0 + 10 * DAY + 60.0
        store.record([], now=at, lingering=[k0])  # the pod there, its series read
        for minute in range(1, 7 * 60 + 1):  # the exporter down: no read renews it
            store.record([], now=at + 60.0 * minute)
        assert store.completed_starts([k0]) == {k0: T0 - 400.0}
        store.record([], now=at + 9 * DAY + 1.0)  # gone for longer than the retention
        assert store.completed_starts([k0]) == {}
    finally:
        store.close()


def test_a_file_without_the_retired_table_gains_it_and_stays_schema_4(tmp_path: Path) -> None:
    """A file an earlier release wrote has no ``retired``: the open adds it (no new
    schema version: the earlier release opens the file and ignores the table), every
    row kept, and a pass marks what it deletes there."""
    db = tmp_path / "h.sqlite"
    store = HistoryStore.open(db)
    store.record([live(0, T0 - 400.0)])
    store.finish([run_key(live(0, 0))], T0)
    store.close()
    conn = sqlite3.connect(db, isolation_level=None)  # as the earlier release wrote it
    conn.execute("DROP TABLE retired")
    rows = conn.execute("SELECT * FROM runs ORDER BY id").fetchall()
    conn.close()
    store = HistoryStore.open(db, retention=Retention(DAY))
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("SELECT * FROM runs ORDER BY id").fetchall() == rows
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 4
        assert store.retain(T0 + 2 * DAY) == 1
        assert conn.execute("SELECT run_id, start_timestamp FROM retired").fetchall() == [
            ("r0", T0 - 400.0)
        ]
    finally:
        conn.close()
        store.close()
