"""gpu_eta.forecaster.cycle: a run restarted under its own key (a named run trained
again in the same pod and container, a job whose sender keeps its run id) is read
again at once: its new start is an unchanging series, held between full reads
(static_series), and is re-read in the cycle whose epoch, last end or step went back.
So is a run whose plan is raised while it runs (a named run reporting ``epochs`` 4,
then 8): a run whose progress reaches the plan held for it has its plan read again in
that cycle, before it is judged finished."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpu_eta.forecaster import queries
from gpu_eta.forecaster.cycle import Cycle, progress_marks, went_back
from gpu_eta.forecaster.history import HistoryStore
from gpu_eta.forecaster.series import Series
from gpu_eta.forecaster.static_series import StaticSeries
from tests.forecaster.test_cycle import NOW, CannedClient, job, labels_of, make_cycle, merge, s


@pytest.fixture
def store(tmp_path: Path) -> Iterator[HistoryStore]:
    st = HistoryStore.open(tmp_path / "h.sqlite")
    yield st
    st.close()


class TimedClient(CannedClient):
    """Range answers cut to [start, end], as a TSDB answers them."""

    def range(
        self, query: str, start: float, end: float, step_seconds: float, **kw
    ) -> list[Series]:
        out = super().range(query, start, end, step_seconds, **kw)
        return [Series(x.labels, tuple(p for p in x.points if start <= p[0] <= end)) for x in out]


def test_a_restarted_run_is_forecast_from_its_new_attempt_at_once(store: HistoryStore) -> None:
    t = [NOW]
    lab = {"node": "n1", "namespace": "ml", "pod": "pod-named", "container": "c"}
    lab["run_id"] = "named"
    client = TimedClient({})
    cycle = make_cycle(client, store, clock=lambda: t[0], range_every=5, static_full_every=10)

    def at(now: float, ends: list[tuple[float, float]], start: float):
        t[0] = now
        client.answers = job("named", 10, ends, start)
        client.ranges = {
            "epoch_range": [Series(lab, tuple((ts, e) for e, ts in ends))],
            "epoch_end_range": [Series(lab, tuple((ts, ts) for _e, ts in ends))],
        }
        return cycle.run()

    at(NOW, [(e, NOW - 400 + 60 * e) for e in range(1, 6)], NOW - 400)
    start = NOW + 30  # restarted with the same key, one epoch a minute again
    starts = []
    for i in range(1, 13):
        now = NOW + 60 * i
        ends = [(e, start + 60 * e - 5) for e in range(1, i + 1) if start + 60 * e - 5 <= now]
        starts += [j.run.start_timestamp for j in at(now, ends, start).jobs]
    assert set(starts) == {start}
    (done,) = store.finished()
    assert [e for e, _ in done.epoch_times] == list(range(11))
    assert done.epoch_times[0] == (0, start)


def test_a_restarted_run_past_its_old_epoch_by_the_next_cycle_is_seen_restarted(
    store: HistoryStore,
) -> None:
    """A run restarted under its key whose new attempt passes its old epoch and last
    end before the next cycle: no progress mark goes back, but its start changed in the
    window (``started_again``, answered as the TSDB answers queries.STARTED_AGAIN), so
    its new start is read in that cycle, not at the next full read (up to 10 cycles)."""
    t = [NOW]
    client = TimedClient({})
    cycle = make_cycle(client, store, clock=lambda: t[0], range_every=5, static_full_every=10)

    def at(now: float, ends: list[tuple[float, float]], start: float, changed: bool) -> list[float]:
        t[0] = now
        client.answers = job("named", 10, ends, start)
        lab = labels_of("named")
        client.answers["started_again"] = [s(start, **lab)] if changed else []
        return [j.run.start_timestamp for j in cycle.run().jobs]

    assert at(NOW, [(1, NOW - 70), (2, NOW - 10)], NOW - 130, changed=False) == [NOW - 130]
    start = NOW + 5  # restarted under its key, 8 s an epoch: at epoch 6 by the next cycle
    ends = [(e, start + 8 * e) for e in range(1, 7)]
    assert at(NOW + 60, ends, start, changed=True) == [start]
    # still answered while the change is in the window: the start held is the new one,
    # nothing read again
    asked = len(client.seen)
    assert at(NOW + 70, ends, start, changed=True) == [start]
    assert not [q for q in client.seen[asked:] if _START_OF_NAMED in q]


_START_OF_NAMED = 'gpu_eta_training_run_start_timestamp_seconds{run_id=~"named"}'


def test_a_start_answered_unchanged_reads_nothing_again(store: HistoryStore) -> None:
    """A start the window shows changing (e.g. the series' first samples in the
    window) whose value is the one held is not read again: only a start that differs
    from the held one makes the run new."""
    t = [NOW]
    client = TimedClient({})
    cycle = make_cycle(client, store, clock=lambda: t[0], range_every=5, static_full_every=10)
    client.answers = job("named", 10, [(1, NOW - 70)], NOW - 130)
    cycle.run()
    client.answers["started_again"] = [s(NOW - 130, **labels_of("named"))]
    asked = len(client.seen)
    t[0] = NOW + 60
    assert [j.run.start_timestamp for j in cycle.run().jobs] == [NOW - 130]
    assert not [q for q in client.seen[asked:] if 'run_id=~"named"' in q]  # nor named


def test_a_restarted_run_is_named_in_the_reads_while_its_window_reaches_back(
    store: HistoryStore,
) -> None:
    """A run found restarted is named in the restarted runs' clause of the progress and
    unchanging reads (queries.AGAIN_SERIES) from the cycle that finds it, its progress
    read included when its start's change finds it, until the read window no longer
    reaches back to that cycle; then no more (the clause costs its runs' series)."""
    t = [NOW]
    client = TimedClient({})
    cycle = make_cycle(client, store, clock=lambda: t[0], overlap_seconds=120)
    epoch_read = f"max by ({queries.RUN_LABELS}) (last_over_time(gpu_eta_training_epoch["
    named = '{run_id=~"named"}'

    def names(now: float, start: float, changed: bool = False) -> tuple[bool, bool]:
        """Whether this cycle's epoch read, and its read of the run's plan, name it."""
        t[0] = now
        client.answers = job("named", 10, [(1, now - 20)], start)
        lab = labels_of("named")
        client.answers["started_again"] = [s(start, **lab)] if changed else []
        asked = len(client.seen)
        cycle.run()
        sent = client.seen[asked:]
        epoch = [q for q in sent if q.startswith(epoch_read)]
        plan = [q for q in sent if "gpu_eta_training_epochs_planned{run_id" in q]
        return any(named in q for q in epoch), any(named in q for q in plan)

    assert names(NOW, NOW - 130) == (False, False)
    found = NOW + 60  # restarted: its start changed; read again, named
    assert names(found, NOW + 50, changed=True) == (True, True)
    # each window (60 s since the previous cycle, 120 s overlap) reaches back to it
    assert [names(found + 60 * i, NOW + 50)[0] for i in (1, 2, 3)] == [True] * 3
    assert names(found + 240, NOW + 50) == (False, False)


def test_a_run_restarted_before_the_first_read_is_named_in_it(store: HistoryStore) -> None:
    """The first read (a forecaster just started: its window the whole lookback) holds
    nothing to compare a start with: a run whose start changed in the window is named
    in its clause, its earlier attempt's last samples being in that window."""
    client = TimedClient(job("named", 10, [(1, NOW - 20)], NOW - 100))
    client.answers["started_again"] = [s(NOW - 100, **labels_of("named"))]
    make_cycle(client, store).run()
    epoch_read = f"max by ({queries.RUN_LABELS}) (last_over_time(gpu_eta_training_epoch["
    (epoch,) = [q for q in client.seen if q.startswith(epoch_read)]
    assert '{run_id=~"named"}' in epoch


def test_went_back() -> None:
    a, b, c = ("ml", "p", "c", "a"), ("ml", "p", "c", "b"), ("ml", "p", "c", "c")
    d = ("ml", "p", "c", "d")  # reports only steps
    nan = float("nan")
    before = {a: (5.0, 100.0, nan), b: (5.0, 100.0, nan), c: (5.0, nan, nan), d: (nan, nan, 900.0)}
    now = {
        a: (1.0, 200.0, nan),
        b: (5.0, 90.0, nan),
        c: (6.0, 300.0, nan),
        d: (nan, nan, 100.0),
        ("x", "", "", "new"): (0.0, nan, nan),
    }
    assert went_back(before, now) == {a, b, d}
    assert went_back(before, before) == set()
    assert went_back({d: (nan, nan, 900.0)}, {d: (nan, nan, nan)}) == set()  # not read


def test_progress_marks() -> None:
    lab = {"namespace": "ml", "pod": "p", "container": "c", "run_id": "r"}
    tqdm = {**lab, "run_id": "tqdm"}
    marks = progress_marks(
        {"epoch": [s(3, **lab)], "last_end": [s(NOW, **lab)], "step": [s(700, **tqdm)]}
    )
    assert marks[("ml", "p", "c", "r")][:2] == (3, NOW)
    assert math.isnan(marks[("ml", "p", "c", "r")][2])
    epoch, end, step = marks[("ml", "p", "c", "tqdm")]
    assert math.isnan(epoch) and math.isnan(end) and step == 700


def test_a_restarted_step_only_run_is_forecast_from_its_new_attempt_at_once(
    store: HistoryStore,
) -> None:
    """A run that reports only steps (a tqdm bar, a ``max_steps`` trainer) restarted
    under its key: its step goes back, as a restarted run's epoch does."""
    t = [NOW]
    lab = {"node": "n1", "namespace": "ml", "pod": "pod-tqdm", "container": "c", "run_id": "tqdm"}
    client = TimedClient({})
    cycle = make_cycle(client, store, clock=lambda: t[0], range_every=5, static_full_every=10)

    def at(now: float, start: float):
        t[0] = now
        step = 100.0 * int((now - 5 - start) // 60)  # 100 steps a minute
        client.answers = {
            "steps_planned": [s(100_000, **lab)],
            "step": [s(step, **lab)],
            "start": [s(start, **lab)],
            "last_report": [s(now - 5, **lab)],
            "present": [s(now - 5, **lab)],
        }
        client.ranges = {"step_range": [Series(lab, ((now - 5, step),))]}
        return cycle.run()

    at(NOW, NOW - 400)
    start = NOW + 30  # restarted with the same key, from step 0 again
    starts = [j.run.start_timestamp for i in range(1, 9) for j in at(NOW + 60 * i, start).jobs]
    assert set(starts) == {start}
    (live,) = store.running()
    assert live.run.start_timestamp == start
    assert all(ts >= start for _, ts in live.run.epoch_times)


LABELS = {"node": "n1", "namespace": "ml", "pod": "trainer-0", "container": "c"}


def test_a_run_whose_plan_is_raised_is_not_finished_at_its_old_plan(store: HistoryStore) -> None:
    t = [NOW]
    client = CannedClient({})
    cycle = make_cycle(client, store, clock=lambda: t[0], static_full_every=10)
    start = NOW - 300

    def at(now: float, planned: float, epochs: int):
        t[0] = now
        ends = [(float(e), start + 60 * e) for e in range(1, epochs + 1)]
        client.answers = job("named", planned, ends, start, pod="trainer-0")
        return cycle.run()

    at(NOW, 4, 3)  # 3 of 4 epochs
    for i, epochs in enumerate((4, 5), start=1):  # the plan is 8 from now on
        fs = at(NOW + 60 * i, 8, epochs)
        assert [(j.run.epochs_done, j.run.epochs_planned) for j in fs.jobs] == [(epochs, 8)]
        assert fs.n_finished == 0
    assert store.finished() == []
    (running,) = store.running()
    assert running.run.epochs_planned == 8
    fs = at(NOW + 240, 8, 8)  # reaches the new plan: completed, with all its epochs
    assert fs.jobs == () and fs.n_finished == 1
    (done,) = store.finished()
    assert done.completed and (done.epochs_done, done.epochs_planned) == (8, 8)


def _at_three_of_four(store: HistoryStore) -> tuple[list[float], CannedClient, Cycle, float, list]:
    """A cycle (its clock ``t[0]``) that has seen run ``named`` of pod trainer-0 at 3 of its
    4 epochs; ``ends``: all four epoch ends."""
    t = [NOW]
    client = CannedClient({})
    cycle = make_cycle(client, store, clock=lambda: t[0], static_full_every=10)
    start = NOW - 300
    ends = [(float(e), start + 60 * e) for e in range(1, 5)]
    client.answers = job("named", 4, ends[:3], start, pod="trainer-0")
    cycle.run()
    return t, client, cycle, start, ends


def test_a_run_at_its_plan_is_finished_with_one_read_of_its_plan(store: HistoryStore) -> None:
    """Reaching the plan held asks for the plan once more (a set match), not every cycle
    while the finished run's series stay exported: a Job's Succeeded pod lives on, its
    run at its plan, long after the cycle has forgotten finishing it (its window)."""
    t, client, cycle, start, ends = _at_three_of_four(store)
    client.answers = job("named", 4, ends, start, pod="trainer-0")
    reads = []
    for i in range(1, 9):  # the 10th cycle would be the scheduled full read
        t[0] = NOW + 60 * i
        client.seen.clear()
        cycle.run()
        reads.append(sum('run_id=~"named"' in q and "epochs_planned" in q for q in client.seen))
    assert reads[0] >= 1 and reads[1:] == [0] * 7
    (done,) = store.finished()
    assert done.completed and done.epochs_planned == 4


def test_many_finished_runs_still_exported_make_no_full_read(store: HistoryStore) -> None:
    """More finished runs at their plan than one set-matched read may name
    (``MAX_UNKNOWN_RUNS``) must not turn every cycle into a full read of every run."""
    t = [NOW]
    client = CannedClient({})
    cycle = make_cycle(client, store, clock=lambda: t[0], static_full_every=10)
    start = NOW - 300
    ends = [(float(e), start + 60 * e) for e in range(1, 5)]
    n = queries.MAX_UNKNOWN_RUNS + 50
    client.answers = merge(*[job(f"r{i}", 4, ends[:3], start) for i in range(n)])
    cycle.run()
    client.answers = merge(*[job(f"r{i}", 4, ends, start) for i in range(n)])
    full_prefix = f"max by ({queries.RUN_LABELS}) (last_over_time(gpu_eta_training_epochs_planned["
    full = []
    for i in range(1, 9):
        t[0] = NOW + 60 * i
        client.seen.clear()
        cycle.run()
        full.append(any(q.startswith(full_prefix) for q in client.seen))
    assert len(store.finished()) == n
    assert full[1:] == [False] * 7


def test_a_run_whose_plan_is_not_answered_when_it_ends_keeps_its_plan(
    store: HistoryStore,
) -> None:
    """The plan read again as the run reaches it is not answered (its series left the
    window, a partial answer): the plan held is kept, the run finished completed, not
    left without a plan and stored cancelled an epoch short once its pod leaves."""
    t, client, cycle, start, ends = _at_three_of_four(store)
    answers = job("named", 4, ends, start, pod="trainer-0")
    answers["planned"] = []
    client.answers = answers
    t[0] = NOW + 60
    cycle.run()
    client.answers = {}  # the pod leaves
    for i in range(2, 6):
        t[0] = NOW + 60 * i
        cycle.run()
    (done,) = store.finished()
    assert done.completed and (done.epochs_done, done.epochs_planned) == (4, 4)


def test_refresh_keeps_what_the_read_does_not_answer() -> None:
    held = StaticSeries()
    run = ("ml", "trainer-0", "c", "r")
    old = {
        "planned": [s(4, **LABELS, run_id="r")],
        "start": [s(NOW - 300, **LABELS, run_id="r")],
        "batch_size": [s(32, **LABELS, run_id="r")],
    }
    held.store(old, full=True)
    held.refresh([run])
    assert held.unknown([run]) == [run]  # read again in this cycle
    # the read answers a new start and the steps plan only: the epochs plan is not
    # put back beside a plan answered, the batch size is
    held.store(
        {
            "steps_planned": [s(100, **LABELS, run_id="r")],
            "start": [s(NOW - 200, **LABELS, run_id="r")],
        },
        full=False,
    )
    got = {name: [x.value for x in v] for name, v in held.answers([run]).items() if v}
    assert got == {"steps_planned": [100], "start": [NOW - 200], "batch_size": [32]}
    # forget drops all, no fallback
    held.forget([run], NOW)
    held.store({}, full=False)
    assert not any(held.answers([run]).values())


def test_reached_plan() -> None:
    held = StaticSeries()
    run = ("ml", "trainer-0", "c", "r")
    steps_run = ("ml", "trainer-0", "c", "s")
    held.store(
        {
            "planned": [s(4, **LABELS, run_id="r")],
            "steps_planned": [s(100, **LABELS, run_id="s")],
        },
        full=True,
    )

    def answer(epoch: float, step: float, run_id: str = "r") -> dict[str, list]:
        return {
            "epoch": [s(epoch, **LABELS, run_id=run_id)],
            "step": [s(step, **LABELS, run_id="s")],
        }

    assert held.reached_plan(answer(3, 99)) == set()
    assert held.reached_plan(answer(4, 100)) == {run, steps_run}
    assert held.reached_plan(answer(5, float("nan"))) == {run}
    # a run without a plan held has none to reach
    assert held.reached_plan(answer(9, 1, run_id="x")) == set()


def test_forget_drops_a_fallback_a_failed_cycle_left() -> None:
    """refresh, then the cycle fails before its read is stored, then the run restarts
    under its key (forget): the old attempt's start and plan must not come back."""
    held = StaticSeries()
    run = ("ml", "trainer-0", "c", "r")
    held.store(
        {
            "planned": [s(4, **LABELS, run_id="r")],
            "start": [s(NOW - 300, **LABELS, run_id="r")],
        },
        full=True,
    )
    held.refresh([run])
    held.forget([run], NOW)
    held.store({}, full=False)  # the restarted run's read answers nothing (partial)
    assert not any(held.answers([run]).values())


def test_a_named_run_begun_again_after_its_end_is_forecast_once_its_end_goes(
    store: HistoryStore,
) -> None:
    """A ``start`` naming a run that ended (a notebook cell run again): the exporter
    publishes a new start and no end. Its old end lingers in the window's reads, then
    goes while the run is present: its start is read again then, so the new attempt is
    recorded and forecast, not only at the next full read (``static_full_every``)."""
    t = [NOW]
    old = job("exp", 10, [(6, NOW - 100)], NOW - 1000)
    b = job("b", 10, [(1, NOW - 40)], NOW - 100)
    client = CannedClient(merge(old, b))
    cycle = make_cycle(client, store, clock=lambda: t[0])
    cycle.run()
    end = {"ended": [s(NOW - 50, **labels_of("exp"))]}
    client.answers = merge(old, b, end)
    t[0] = NOW + 60
    assert [j.run.run_id for j in cycle.run().jobs] == ["b"]  # early-stopped at 6
    new = job("exp", 10, [(6, NOW - 100)], NOW + 100)  # begun again at NOW + 100
    for i in (2, 3, 4):  # the old end still in the window: done, as it was
        t[0] = NOW + 60 * i
        client.answers = merge(new, b, end)
        assert [j.run.run_id for j in cycle.run().jobs] == ["b"]
    t[0] = NOW + 300
    client.answers = merge(new, b)
    assert sorted(j.run.run_id for j in cycle.run().jobs) == ["b", "exp"]
    ((stored,),) = [[r for r in store.running() if r.run.run_id == "exp"]]
    assert stored.run.start_timestamp == NOW + 100
    assert [(r.run_id, r.completed, r.epochs_planned) for r in store.finished()] == [
        ("exp", True, 6)
    ]
    # the plan the first attempt stated is its own (the replay's), not the new one's
    assert store.finished()[0].features["epochs_planned_stated"] == 10
    assert "epochs_planned_stated" not in stored.run.features
