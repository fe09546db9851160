"""gpu_eta.forecaster.history: a run that reports only steps keeps at most one stored
point per 1/``STEP_CELLS`` of its plan across cycles (the newest), not one more per
cycle (docs/forecaster.md, "History file")."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpu_eta.forecaster.history import HistoryStore, crowded_steps
from gpu_eta.forecaster.runs import STEPS_UNIT, RunUpdate
from gpu_eta.forecaster.runs_from_series import STEP_CELLS
from tests.forecaster.test_cycle import NOW, CannedClient, make_cycle, s

LAB = {"node": "n1", "namespace": "ml", "pod": "p", "container": "c", "run_id": "tqdm"}


@pytest.fixture
def store(tmp_path: Path) -> Iterator[HistoryStore]:
    st = HistoryStore.open(tmp_path / "h.sqlite")
    yield st
    st.close()


def answers(step: float, t: float) -> dict:
    return {
        "steps_planned": [s(1_000_000, **LAB)],
        "step": [s(step, **LAB)],
        "start": [s(NOW - 60, **LAB)],
        "last_report": [s(t - 5, **LAB)],
        "present": [s(t - 5, **LAB)],
    }


def rows(store: HistoryStore) -> int:
    return sqlite3.connect(store.path).execute("SELECT COUNT(*) FROM epoch_ends").fetchone()[0]


def test_a_step_only_runs_stored_points_stay_bounded_across_cycles(store: HistoryStore) -> None:
    t = [NOW]
    client = CannedClient(answers(1, NOW))
    cycle = make_cycle(client, store, clock=lambda: t[0])
    for i in range(1, 301):  # 3,000 of 1,000,000 steps: the first two cells
        t[0] = NOW + 60 * i
        client.answers = answers(10 * i, t[0])
        cycle.run()
    assert rows(store) <= 2
    (run,) = [r.run for r in store.running()]
    assert run.epoch_times[-1] == (3000.0, t[0] - 5)  # the newest point is kept
    fresh = HistoryStore.open(store.path)
    try:
        assert fresh.running() == store.running()
    finally:
        fresh.close()


def test_at_most_one_point_per_cell_of_the_plan(store: HistoryStore) -> None:
    key = {"namespace": "ml", "pod": "p", "container": "c"}
    features = {"progress_unit": STEPS_UNIT}
    for i in range(1, 2001):  # 2,000 updates over a plan of 1,000 steps: every cell
        end = ((i / 2, NOW + i),)
        up = RunUpdate("r", 1000, NOW, end, **key, features=features, seen_timestamp=NOW + i)
        store.record([up])
    assert rows(store) <= STEP_CELLS + 1
    (run,) = store.running()
    assert run.run.epoch_times[-1] == (1000.0, NOW + 2000)


def test_an_epoch_run_keeps_every_epoch(store: HistoryStore) -> None:
    key = {"namespace": "ml", "pod": "p", "container": "c"}
    for i in range(1, 901):
        store.record([RunUpdate("r", 1000, NOW, ((i, NOW + i),), **key, seen_timestamp=NOW + i)])
    assert rows(store) == 900


def test_crowded_steps() -> None:
    # plan 400: one cell per step
    assert crowded_steps([1.0, 1.5, 1.7, 2.0, 3.2], 400) == {1.0, 1.5}
    assert crowded_steps([], 400) == set()
    assert crowded_steps([5.0, 1.0, 5.5], 400) == {5.0}
