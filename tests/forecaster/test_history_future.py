"""Finish times after the cycle's own time (``HistoryStore`` and ``FUTURE_SECONDS``): a
run stamped by a clock that was ahead (a Prometheus clock adopted, then corrected; a
seed CSV's typo) is left out of the model's reads and of retention's floor until that
time comes, counted and said once, and kept in the file; retention still reaches runs
finished by a clock that stepped back.

Real SQLite files throughout; the clock is the ``now`` each call is given.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from gpu_eta.forecaster import history_space
from gpu_eta.forecaster.history import FUTURE_SECONDS, HistoryStore
from gpu_eta.forecaster.history_space import Retention
from gpu_eta.forecaster.runs import Run
from tests.forecaster.test_history_retention import DAY, T0, finish_runs, stored_ids

YEAR = 365 * DAY


def ids(runs: list[Run]) -> list[str]:
    return [run.run_id for run in runs]


def test_a_run_finished_after_the_cycles_time_is_left_out_counted_and_kept(
    tmp_path: Path, caplog
) -> None:
    db = tmp_path / "h.sqlite"
    store = HistoryStore.open(db)
    finish_runs(store, range(0, 2), T0 - DAY)
    finish_runs(store, range(2, 3), T0 + 5 * YEAR)  # a cycle on a clock 5 years ahead
    with caplog.at_level(logging.WARNING, logger="gpu_eta.forecaster.history"):
        for now in (T0, T0 + 60.0):  # two cycles after the clock came back
            store.record([], now=now)
            assert ids(store.finished()) == ["r0", "r1"]
    assert store.future_rows == 1
    said = [r.getMessage() for r in caplog.records if "after this cycle's time" in r.message]
    assert len(said) == 1 and "r2" in said[0], said
    assert stored_ids(db) == ["r0", "r1", "r2"]  # nothing stored is lost
    store.record([], now=T0 + 5 * YEAR)  # its time came: read as any
    assert ids(store.finished()) == ["r0", "r1", "r2"] and store.future_rows == 0
    store.close()


def test_runs_finished_after_a_future_run_read_in_one_order_across_a_restart(
    tmp_path: Path,
) -> None:
    """The memory appended a new run after the future one while a read of the file sorts
    it before: the model, whose last learnt run was the future one, was handed the new
    run again after a restart (``refit.appended_since``)."""
    db = tmp_path / "h.sqlite"
    store = HistoryStore.open(db)
    finish_runs(store, range(0, 1), T0 + 5 * YEAR)
    finish_runs(store, range(1, 2), T0 - DAY)
    store.record([], now=T0)
    store.finished()  # the model's read, cached
    finish_runs(store, range(2, 3), T0)
    in_memory = ids(store.finished())
    store.close()
    store = HistoryStore.open(db)
    store.record([], now=T0 + 60.0)
    assert in_memory == ids(store.finished()) == ["r1", "r2"]
    store.close()


def test_runs_imported_between_runs_held_in_memory_are_read_in_the_files_order(
    tmp_path: Path,
) -> None:
    """A seeded run finishing before the newest run the memory holds: appended, it came
    after that run, where a read of the file sorts it before (``_finished_changed``), and
    the model was handed it again after a restart (``refit.appended_since``)."""
    db = tmp_path / "h.sqlite"
    store = HistoryStore.open(db)
    finish_runs(store, range(0, 1), T0)
    finish_runs(store, range(1, 2), T0 + DAY)
    store.finished()  # the model's read, cached
    seed = Run("seed", 2, ((0, T0 - 20), (1, T0 - 10), (2, T0 + 10)))
    assert store.import_finished([seed], now=T0 + DAY) == 1
    in_memory = ids(store.finished())
    store.close()
    store = HistoryStore.open(db)
    assert in_memory == ids(store.finished()) == ["r0", "seed", "r1"]
    store.close()


def test_the_floor_counts_no_run_from_the_future(tmp_path: Path) -> None:
    db = tmp_path / "h.sqlite"
    store = HistoryStore.open(db, retention=Retention(max_age_seconds=DAY, keep_runs=3))
    finish_runs(store, range(0, 1), T0 + 5 * YEAR)
    for i in range(1, 4):
        finish_runs(store, range(i, i + 1), T0 - 10 * DAY + i)
    assert store.retain(T0) == 0  # the three real runs are the floor
    assert stored_ids(db) == ["r1", "r2", "r3", "r0"]
    assert ids(store.finished(3)) == ["r1", "r2", "r3"]
    store.close()


@pytest.mark.parametrize(("keep_runs", "kept"), [(1, ["r2", "r0"]), (0, ["r0"])])
def test_a_pass_on_a_low_room_volume_keeps_a_run_from_the_future(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, keep_runs: int, kept: list[str]
) -> None:
    """With a floor, the floor is of real runs; without one (``--model.fit-runs 0``) the
    age protects no run while the room is low, and the horizon alone keeps the run from
    the future (``retain``'s cutoff)."""
    db = tmp_path / "h.sqlite"
    store = HistoryStore.open(db, retention=Retention(max_age_seconds=DAY, keep_runs=keep_runs))
    finish_runs(store, range(0, 1), T0 + 5 * YEAR)
    finish_runs(store, range(1, 3), T0 - 10 * DAY)
    monkeypatch.setattr(history_space, "low_room_bytes", lambda capacity: 1 << 62)
    store.retain(T0)
    assert stored_ids(db) == kept
    store.close()


def test_runs_finished_by_a_clock_that_stepped_back_are_retained_in_their_turn(
    tmp_path: Path,
) -> None:
    """A pass starts after the last run it deleted: runs finished before that by a clock
    that stepped back were never deleted until a restart."""
    db = tmp_path / "h.sqlite"
    store = HistoryStore.open(db, retention=Retention(max_age_seconds=DAY))
    finish_runs(store, range(0, 2), T0 + 10 * DAY)  # the clock ahead
    assert store.retain(T0 + 20 * DAY) == 2
    finish_runs(store, range(2, 4), T0)  # the clock back by 10 days
    assert store.retain(T0 + 30 * DAY) == 2
    assert stored_ids(db) == []
    store.close()


def test_the_tolerance_is_above_the_clock_offset_bound() -> None:
    from gpu_eta.forecaster.prom_clock import OFFSET_BOUND_SECONDS

    assert FUTURE_SECONDS > 2 * OFFSET_BOUND_SECONDS  # the hysteresis reaches twice it


def test_a_seeded_run_ending_after_the_imports_time_is_skipped_and_named(
    tmp_path: Path, caplog
) -> None:
    db = tmp_path / "h.sqlite"
    store = HistoryStore.open(db)
    runs = [
        Run("past", 2, ((0, T0), (1, T0 + 10), (2, T0 + 20))),
        Run("typo", 2, ((0, T0), (1, T0 + 10), (2, T0 + 1000 * YEAR))),
    ]
    with caplog.at_level(logging.WARNING, logger="gpu_eta.forecaster.history"):
        assert store.import_finished(runs, now=T0 + DAY) == 1
    said = [r.getMessage() for r in caplog.records if "after the import's time" in r.message]
    assert len(said) == 1 and "'typo'" in said[0], said
    assert stored_ids(db) == ["past"]
    store.close()


def test_runs_held_in_memory_are_read_again_when_the_clock_steps_back(tmp_path: Path) -> None:
    """A run finished at the cycle's time, read by the model, and then the clock steps
    back 5 years (the Prometheus clock the cycle took was wrong): the next cycle's read
    leaves it out, and the version bumps so that the model refits without it."""
    store = HistoryStore.open(tmp_path / "h.sqlite")
    finish_runs(store, range(0, 1), T0 - DAY)
    finish_runs(store, range(1, 2), T0 + 5 * YEAR)  # the cycle on the clock ahead
    assert ids(store.finished()) == ["r0", "r1"]
    version = store.version
    store.record([], now=T0)  # the clock back
    assert ids(store.finished()) == ["r0"] and store.future_rows == 1
    assert store.version > version
    store.close()
