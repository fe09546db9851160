"""gpu_eta.forecaster.history: a run that reports only steps keeps at most one stored
point per 1/``STEP_CELLS`` of its plan across cycles (the newest), not one more per
cycle (docs/forecaster.md, "History file")."""

from __future__ import annotations

import dataclasses
import math
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpu_eta.common.progress_bound import STEP_CELLS
from gpu_eta.forecaster.history import HistoryStore, crowded_steps
from gpu_eta.forecaster.runs import STEPS_UNIT, RunUpdate
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
    """30 cycles, one new step each, within the first two cells of the plan: each
    cycle thins only its own points, so without the store's thinning across cycles the
    file would hold 30 points where two are allowed (any number of cycles above a
    handful tells the two apart)."""
    t = [NOW]
    client = CannedClient(answers(1, NOW))
    cycle = make_cycle(client, store, clock=lambda: t[0])
    for i in range(1, 31):  # 3,000 of 1,000,000 steps: the first two cells
        t[0] = NOW + 60 * i
        client.answers = answers(100 * i, t[0])
        cycle.run()
    assert rows(store) <= 2
    (run,) = [r.run for r in store.running()]
    assert run.epoch_times[-1] == (3000.0, t[0] - 5)  # the newest point is kept
    assert running_of(store.path) == store.running()


def test_at_most_one_point_per_cell_of_the_plan(store: HistoryStore) -> None:
    """800 updates of a fractional step over a plan of 1,000 steps: two in every cell
    (2.5 steps), so unthinned the file would hold twice the bound."""
    key = {"namespace": "ml", "pod": "p", "container": "c"}
    features = {"progress_unit": STEPS_UNIT}
    for i in range(1, 801):  # 800 updates over a plan of 1,000 steps: every cell
        end = ((1.25 * i, NOW + i),)
        up = RunUpdate("r", 1000, NOW, end, **key, features=features, seen_timestamp=NOW + i)
        store.record([up])
    assert rows(store) <= STEP_CELLS + 1
    (run,) = store.running()
    assert run.run.epoch_times[-1] == (1000.0, NOW + 800)


def test_an_epoch_run_keeps_every_epoch(store: HistoryStore) -> None:
    """100 whole epochs of a plan of 1,000: 2.5 epochs a cell, so thinned by cell as a
    step-counting run is, fewer than half of them would stay."""
    key = {"namespace": "ml", "pod": "p", "container": "c"}
    for i in range(1, 101):
        store.record([RunUpdate("r", 1000, NOW, ((i, NOW + i),), **key, seen_timestamp=NOW + i)])
    assert rows(store) == 100


def test_a_run_reporting_fractional_epochs_keeps_at_most_one_point_per_cell(
    store: HistoryStore,
) -> None:
    """Hugging Face's ``state.epoch`` (0.49, 0.98, ...) short of its plan, one report a
    cycle: at most one stored point per cell, in the file and in memory, as a run
    counted in steps beside it: 500 reports reach 99 cells, about five in each, so
    unthinned either run holds five times the bound."""
    key = {"namespace": "ml", "container": "c"}
    store.running()  # as a cycle does: the ends are held from the first record on
    for c in range(1, 501):
        t = NOW + 60 * c
        epoch = 0.49 * c
        frac = RunUpdate("frac", 1000, NOW, ((epoch, t - 1),), **key, pod="nb", seen_timestamp=t)
        steps = step_update("steps", [1000 * epoch], t - 1, planned=1e6)
        store.record([frac, steps])
    reached = int(245 * STEP_CELLS / 1000) + 1  # cells of the plan reached: 99 of 400
    held = {r.run.run_id: r.run.epoch_times for r in store.running()}
    # at most the start, one point per cell reached and the latest
    assert len(held["frac"]) <= reached + 2 and len(held["steps"]) <= reached + 2
    assert held["frac"][-1] == (245.0, NOW + 60 * 500 - 1)  # the newest is kept
    assert rows(store) <= 2 * (reached + 1)
    assert running_of(store.path) == store.running()


def test_crowded_steps() -> None:
    # plan 400: one cell per step
    assert crowded_steps([1.0, 1.5, 1.7, 2.0, 3.2], 400) == {1.0, 1.5}
    assert crowded_steps([], 400) == set()
    assert crowded_steps([5.0, 1.0, 5.5], 400) == {5.0}


def test_crowded_steps_with_a_plan_too_small_for_cells_drops_nothing() -> None:
    """A quotient beyond any cell (stored steps, then a plan of 1e-300; a step of 1e307
    over a plan of 1) drops none of those points: ``int`` of an infinite cell raised
    OverflowError, which failed the cycle's ``record`` and every cycle after it."""
    assert crowded_steps([5e9, 1e10], 1e-300) == set()
    assert crowded_steps([1e307, 2e307, 0.5, 0.501], 1) == {0.5}


def test_stored_steps_then_a_tiny_plan_are_recorded(store: HistoryStore) -> None:
    store.record([step_update("r", [5e9, 1e10], NOW, planned=1e10)])
    store.record([step_update("r", [1e10 + 1], NOW + 60, planned=1e-300)])  # raised
    assert rows(store) == 3  # none in a cell: none dropped


def step_update(
    run_id: str, steps: list[float], t: float, planned: float = 1000.0, unit: str = STEPS_UNIT
) -> RunUpdate:
    """An update of ``run_id`` counted in ``unit`` (steps; "": epochs)."""
    key = {"namespace": "ml", "pod": f"p-{run_id}", "container": "c"}
    ends = tuple((step, t + k) for k, step in enumerate(steps))
    features = {"progress_unit": unit} if unit else {}
    return RunUpdate(run_id, planned, NOW, ends, **key, features=features, seen_timestamp=t)


def test_a_held_step_only_run_is_thinned_without_reading_its_points(store: HistoryStore) -> None:
    """A run whose ends are held in memory (read by ``running``, as a cycle does) is
    thinned from them: ``record`` reads none of its stored points from the file. Forty
    records (28 steps of a plan of 1,000: three or four points a cell) thin in most of them, as
    many chances for a read as any number more."""
    ids = [f"r{i}" for i in range(5)]
    store.record([step_update(r, [1.0], NOW) for r in ids])
    store.running()  # the cycle's read: the ends are held from now on
    statements: list[str] = []
    store._conn.set_trace_callback(statements.append)
    try:
        for i in range(2, 41):
            store.record([step_update(r, [i * 0.7], NOW + i) for r in ids])
            assert len(store.running()) == len(ids)
    finally:
        store._conn.set_trace_callback(None)
    reads = [st for st in statements if st.lstrip().upper().startswith("SELECT")]
    assert not [st for st in reads if "epoch_ends" in st]
    reached = int(40 * 0.7 * STEP_CELLS / 1000) + 1  # cells of the plan reached: 12
    assert rows(store) <= len(ids) * (reached + 1)  # unthinned: 40 points a run
    assert any(st.lstrip().upper().startswith("DELETE FROM EPOCH_ENDS") for st in statements)
    assert running_of(store.path) == store.running()


def running_of(path: str) -> list:
    fresh = HistoryStore.open(path)
    try:
        return fresh.running()
    finally:
        fresh.close()


@pytest.mark.parametrize("steps", [True, False], ids=["steps", "fractional-epochs"])
def test_held_and_read_thinning_store_the_same_points(tmp_path: Path, steps: bool) -> None:
    """Thinning from held ends deletes exactly what thinning from the file's does: two
    stores given the same updates, one held (``running`` each cycle), one never. In
    epochs, updates whose points are all whole numbers are not thinned, the others are."""
    import random

    held = HistoryStore.open(tmp_path / "held.sqlite")
    read = HistoryStore.open(tmp_path / "read.sqlite")
    rng = random.Random(11)
    unit = STEPS_UNIT if steps else ""
    ids = [f"r{i}" for i in range(8)]
    step = dict.fromkeys(ids, 0.0)
    try:
        for cycle in range(100):
            t = NOW + 60 * cycle
            batch = []
            for run_id in rng.sample(ids, 5):
                steps = []
                for _ in range(rng.randint(1, 4)):
                    step[run_id] += rng.choice([0.5, 1.0, 2.5, 7.0])
                    steps.append(step[run_id])
                if rng.random() < 0.2:  # an old point again, already stored or thinned
                    steps.append(rng.choice(steps) - rng.choice([0.0, 1.0, 3.0]))
                planned = 400.0 if rng.random() < 0.85 else 300.0  # a changed plan now and then
                up = step_update(run_id, steps, t, planned, unit)
                if rng.random() < 0.1:  # a point with no time: never stored, never held
                    nan_end = (step[run_id] + 0.3, math.nan)
                    up = dataclasses.replace(up, epoch_ends=(*up.epoch_ends, nan_end))
                batch.append(up)
                if rng.random() < 0.1:  # the same run twice in one record
                    batch.append(step_update(run_id, [step[run_id] + 0.25], t, 250.0, unit))
            for store in (held, read):
                store.record(batch)
            assert held.running() == running_of(read.path), cycle  # held as a fresh read
            if cycle % 25 == 24:  # a run ends: its key leaves both
                gone = rng.choice(ids)
                for store in (held, read):
                    store.finish([("ml", f"p-{gone}", "c", gone)], t + 1)
            dump = "SELECT r.run_id, e.epoch, e.timestamp FROM epoch_ends e JOIN runs r ON r.id = e.run"
            a = sorted(held._conn.execute(dump).fetchall())
            b = sorted(read._conn.execute(dump).fetchall())
            assert a == b, cycle
        assert running_of(held.path) == held.running()
    finally:
        held.close()
        read.close()
