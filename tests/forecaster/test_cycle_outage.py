"""gpu_eta.forecaster.cycle and history: a Prometheus outage or a scrape gap longer than
``--history.vanish-grace`` does not lose the running runs (docs/forecaster.md, "Jobs
from series").

The grace counts only seconds covered by successful reads (``cycle.uncovered_since``,
``cycle.unseen_seconds``), and a run finished as vanished that is present again with
the same start is running again (``HistoryStore.record``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest

from gpu_eta.forecaster.cycle import Cycle, revive_refit, uncovered_since, unseen_seconds
from gpu_eta.forecaster.history import HistoryStore
from gpu_eta.forecaster.pending import run_durations
from gpu_eta.forecaster.promapi import PromAPIError
from gpu_eta.forecaster.runs import RunUpdate
from tests.forecaster.test_cycle import (
    NOW,
    CannedClient,
    StandInModel,
    job,
    make_cycle,
    merge,
)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[HistoryStore]:
    st = HistoryStore.open(tmp_path / "h.sqlite")
    yield st
    st.close()


def test_an_outage_longer_than_the_grace_does_not_finish_the_running_runs(
    store: HistoryStore,
) -> None:
    t = [NOW]
    live = job("a", 10, [(1, NOW - 10)], NOW - 100)
    client = CannedClient(live)
    cycle = make_cycle(client, store, clock=lambda: t[0], vanish_grace_seconds=600)
    assert len(cycle.run().jobs) == 1
    client.fail = True  # Prometheus away for 15 minutes
    for _ in range(15):
        t[0] += 60
        with pytest.raises(PromAPIError):
            cycle.run()
    # back, not scraped yet: the window still holds the run, nothing is present
    client.fail = False
    client.answers = {k: v for k, v in live.items() if k != "present"}
    t[0] += 30
    assert cycle.run().n_finished == 0
    t[0] += 60  # still not scraped: the absence counts from the first read after
    assert cycle.run().n_finished == 0 and store.count_finished() == 0
    client.answers = job("a", 10, [(1, NOW - 10), (2, t[0] + 20)], NOW - 100)
    t[0] += 60
    assert [j.run.run_id for j in cycle.run().jobs] == ["a"]
    # gone for good: finished a grace after the first read that saw it gone
    client.answers = {}
    t[0] += 60
    assert cycle.run().n_finished == 0
    t[0] += 600
    assert cycle.run().n_finished == 1
    assert [r.completed for r in store.finished()] == [False]


def test_a_gap_longer_than_the_grace_between_once_runs_still_finishes_a_vanished_run(
    store: HistoryStore,
) -> None:
    """``cli once`` from a CronJob every 15 minutes, grace 10: each read's gap is
    uncovered, yet a run gone is finished at the read after the one that saw it gone."""
    client = CannedClient(job("a", 10, [(1, NOW - 10)], NOW - 100))
    make_cycle(client, store).run()
    client.answers = {}
    fs = make_cycle(client, store, clock=lambda: NOW + 900, vanish_grace_seconds=600).run()
    assert fs.n_finished == 0
    fs = make_cycle(client, store, clock=lambda: NOW + 1800, vanish_grace_seconds=600).run()
    assert fs.n_finished == 1


def test_a_run_finished_as_vanished_comes_back_running(store: HistoryStore) -> None:
    """Prometheus up but not scraping the exporters for longer than the grace (a
    discovery outage): the run is finished as incomplete; present again with the same
    start, it runs on with its epochs, and leaves the finished history."""
    t = [NOW]
    client = CannedClient(job("a", 10, [(1, NOW - 10)], NOW - 100))
    cycle = make_cycle(client, store, clock=lambda: t[0], vanish_grace_seconds=120)
    cycle.run()
    client.answers = {}
    for _ in range(3):
        t[0] += 60
        cycle.run()
    assert [r.completed for r in store.finished()] == [False]
    version = store.version
    fits = len(StandInModel.fits)
    t[0] += 60
    client.answers = job("a", 10, [(1, NOW - 10), (2, t[0] - 5)], NOW - 100)
    fs = cycle.run()
    (jf,) = fs.jobs
    assert jf.run.epoch_times == ((0.0, NOW - 100), (1.0, NOW - 10), (2.0, t[0] - 5))
    assert store.count_finished() == 0 and store.finished() == []
    assert store.version > version
    assert StandInModel.fits[fits:] == [0]  # refitted at once, without the fake cancellation


def test_a_run_that_keeps_coming_back_forces_one_refit_per_refit_interval(
    store: HistoryStore, caplog: pytest.LogCaptureFixture
) -> None:
    """A run finished as vanished and revived, again and again (an exporter flapping past
    the grace, a run finished each cycle by a plan not its own): its first revive forces
    a refit at once and is said at INFO; its next ones within ``refit_seconds`` wait for
    the regular refit, which comes ``refit_seconds`` after the one forced (a refit a
    cycle, else), and are said at DEBUG (an INFO line a cycle, else)."""
    t = [NOW]
    live = job("a", 10, [(1, NOW - 10)], NOW - 100)
    client = CannedClient(live)
    cycle = make_cycle(
        client, store, clock=lambda: t[0], vanish_grace_seconds=120, refit_seconds=600
    )
    cycle.run()
    caplog.set_level(logging.DEBUG, logger="gpu_eta.forecaster")
    said: list[list[int]] = []  # per revive, the levels of its "present again" lines

    def away_and_back() -> list[int]:
        """Three cycles away (finished), one back (revived): the fits meanwhile."""
        fits = len(StandInModel.fits)
        client.answers = {}
        for _ in range(3):
            t[0] += 60
            cycle.run()
        assert [r.completed for r in store.finished()] == [False]
        t[0] += 60
        client.answers = live
        caplog.clear()
        assert [j.run.run_id for j in cycle.run().jobs] == ["a"]
        assert store.finished() == []
        lines = [r for r in caplog.records if "present again" in r.getMessage()]
        assert all("1 run(s)" in r.getMessage() and "ml/pod-a/c/a" in r.getMessage() for r in lines)
        said.append([r.levelno for r in lines])
        return StandInModel.fits[fits:]

    assert away_and_back() == [0]  # revived: refitted at once, without it
    assert away_and_back() == []  # again 240 s later: no refit forced
    assert said == [[logging.INFO], [logging.DEBUG]]
    t[0] += 360  # the regular refit, 600 s after the forced one: the history changed
    cycle.run()
    assert StandInModel.fits[-1:] == [0] and len(StandInModel.fits) == 3
    # 600 s on: finished, it is learnt by the regular refit; revived, past the refit
    # interval since the refit it forced, it forces one again
    t[0] += 600
    assert away_and_back() == [1, 0]
    assert said[-1] == [logging.INFO]


def test_revive_refit() -> None:
    a, b = ("ml", "p", "c", "a"), ("ml", "p", "c", "b")
    force, forced = revive_refit({}, [a], NOW, 600)
    assert force and forced == {a: NOW}
    assert revive_refit(forced, [a], NOW + 599, 600) == (False, {a: NOW})
    assert revive_refit(forced, [a, b], NOW + 60, 600) == (True, {a: NOW + 60, b: NOW + 60})
    assert revive_refit(forced, [a], NOW + 600, 600) == (True, {a: NOW + 600})
    assert revive_refit(forced, [a], NOW, 0) == (True, {a: NOW})  # refits each cycle


class _Learning(StandInModel):
    """Records the run ids handed to each ``update``."""

    handed: ClassVar[list[list[str]]] = []

    def update(self, runs) -> None:
        _Learning.handed.append([r.run_id for r in runs])


def test_a_revived_run_makes_no_finished_run_learnt_twice(store: HistoryStore) -> None:
    """The run revived was the last one the model learnt: until the refit it forces is
    installed, nothing is handed incrementally (handing on from a run no longer in the
    finished history handed every finished run a second time)."""
    t = [NOW]
    client = CannedClient(
        merge(job("c1", 2, [(1, NOW - 50)], NOW - 100), job("a", 10, [(1, NOW - 10)], NOW - 100))
    )
    cycle = make_cycle(
        client,
        store,
        clock=lambda: t[0],
        vanish_grace_seconds=120,
        background_refit=True,
        refit_in_process=False,
        refit_seconds=10**9,
    )
    cycle.model_factory = _Learning
    cycle.run()
    t[0] += 60  # c1 completes
    client.answers = merge(
        job("c1", 2, [(1, NOW - 50), (2, t[0] - 5)], NOW - 100),
        job("a", 10, [(1, NOW - 10)], NOW - 100),
    )
    cycle.run()
    client.answers = {}  # a vanishes past the grace: finished after c1, learnt last
    for _ in range(3):
        t[0] += 60
        cycle.run()
    assert [r.run_id for r in store.finished()] == ["c1", "a"]
    _Learning.handed.clear()
    t[0] += 60  # a is back with its start: revived
    client.answers = job("a", 10, [(1, NOW - 10), (2, t[0] - 5)], NOW - 100)
    cycle.run()
    cycle.wait_for_refit()
    cycle.run()
    assert all(call.count("c1") <= 1 for call in _Learning.handed), _Learning.handed
    assert [r.run_id for r in cycle._learnt_last] == ["c1"]  # the refit, without a


def test_a_run_back_with_another_start_is_not_revived(store: HistoryStore) -> None:
    key = {"namespace": "ml", "pod": "p", "container": "c"}
    store.record([RunUpdate("a", 10, NOW - 100, ((1, NOW - 50),), **key, seen_timestamp=NOW)])
    store.finish([("ml", "p", "c", "a")], NOW)
    moved = RunUpdate("a", 10, NOW - 80, ((1, NOW + 250),), **key, seen_timestamp=NOW + 300)
    assert store.record([moved]) == []
    assert [r.completed for r in store.finished()] == [False]
    same = RunUpdate("a", 10, NOW - 100.5, ((2, NOW + 250),), **key, seen_timestamp=NOW + 300)
    assert store.record([same]) == [("ml", "p", "c", "a")]
    (back,) = store.running()
    assert back.run.epoch_times == ((0, NOW - 100.5), (1, NOW - 50), (2, NOW + 250))


def test_a_lingering_vanished_run_is_not_revived(store: HistoryStore) -> None:
    """A run finished as vanished whose series linger in the window (not present) stays
    finished."""
    t = [NOW]
    client = CannedClient(job("a", 10, [(1, NOW - 10)], NOW - 700, present=False))
    cycle = make_cycle(client, store, clock=lambda: t[0], vanish_grace_seconds=600)
    assert cycle.run().n_finished == 1
    t[0] += 60
    assert cycle.run().jobs == () and store.count_finished() == 1


@pytest.mark.parametrize(
    ("previous", "now", "failed_at", "expected"),
    [
        (None, NOW, NOW - 30, None),  # the first read: nothing to cover
        (NOW - 60, NOW, None, None),  # a read a cycle ago
        (NOW - 120, NOW, NOW - 60, NOW - 120),  # a read failed since
        (NOW - 60, NOW, NOW - 60, None),  # it failed after it recorded (a later query)
        (NOW - 601, NOW, None, NOW - 601),  # a gap longer than the grace
    ],
)
def test_uncovered_since(
    previous: float | None, now: float, failed_at: float | None, expected: float | None
) -> None:
    assert uncovered_since(previous, now, failed_at, 600) == expected


@pytest.mark.parametrize(
    ("previous", "failed_at", "expected"),
    [(None, NOW, 0.0), (NOW - 900, None, 0.0), (NOW - 900, NOW - 60, 840.0), (NOW, NOW, 0.0)],
)
def test_unseen_seconds(previous: float | None, failed_at: float | None, expected: float) -> None:
    assert unseen_seconds(previous, failed_at) == expected


def _attempt(cycle: Cycle, fail: bool, client: CannedClient) -> int | None:
    """One cycle, its reads failing (``None``) or not (runs it finished)."""
    client.fail = fail
    try:
        return cycle.run().n_finished
    except PromAPIError:
        return None
    finally:
        client.fail = False


def test_a_vanished_run_is_finished_by_the_seconds_reads_saw_between_failed_ones(
    store: HistoryStore,
) -> None:
    """Prometheus answering every other cycle (queries timing out at a large site): the
    seconds each successful read covers since the failed one before it add up, and the
    run is finished once they pass the grace; the failed cycles' seconds do not count."""
    t = [NOW]
    client = CannedClient(job("a", 10, [(1, NOW - 10)], NOW - 100))
    cycle = make_cycle(client, store, clock=lambda: t[0], vanish_grace_seconds=600)
    cycle.run()
    client.answers = {}  # gone for good
    finished_at = []
    for i in range(1, 41):
        t[0] += 60
        if _attempt(cycle, i % 2 == 1, client):
            finished_at.append(i)
    # the first read after a failure starts the count (the run was seen at the read
    # before it); each later one adds its 60 s: ten of them are the grace
    assert finished_at == [22]
    assert [r.completed for r in store.finished()] == [False]


def test_reads_between_outages_that_see_a_run_absent_do_not_finish_it(
    store: HistoryStore,
) -> None:
    """A flapping Prometheus: back for one read before its first scrape (every run
    absent), then away longer than the grace, then back before its first scrape again.
    The reads saw the run absent for one cycle's seconds at most: it runs on."""
    t = [NOW]
    live = job("a", 10, [(1, NOW - 10)], NOW - 100)
    client = CannedClient(live)
    cycle = make_cycle(client, store, clock=lambda: t[0], vanish_grace_seconds=600)
    cycle.run()
    unscraped = {k: v for k, v in live.items() if k != "present"}
    for outage in (5, 15, 15):
        for _ in range(outage):
            t[0] += 60
            assert _attempt(cycle, True, client) is None
        client.answers = unscraped
        t[0] += 60
        assert _attempt(cycle, False, client) == 0
    assert store.count_finished() == 0
    client.answers = live  # scraped again: forecast on, never finished meanwhile
    t[0] += 60
    assert [j.run.run_id for j in cycle.run().jobs] == ["a"]


def test_a_run_gone_during_an_outage_is_learnt_ending_at_its_last_epoch_end(
    store: HistoryStore,
) -> None:
    """Finished 31 minutes after it ended (an outage, then the grace), the run the models
    learn from ends at its last epoch end: its finish time orders the history only."""
    t = [NOW]
    client = CannedClient(job("a", 10, [(1, NOW - 10)], NOW - 100))
    cycle = make_cycle(client, store, clock=lambda: t[0], vanish_grace_seconds=600)
    cycle.run()
    for _ in range(20):  # away while the run reaches epoch 2 at NOW + 100 and is deleted
        t[0] += 60
        assert _attempt(cycle, True, client) is None
    client.answers = job("a", 10, [(1, NOW - 10), (2, NOW + 100)], NOW - 100, present=False)
    while not cycle.run().n_finished:
        t[0] += 60
    assert t[0] >= NOW + 1800
    (run,) = store.finished()
    assert run.completed is False and run.last_timestamp == NOW + 100
    assert run_durations([run]) == (200.0,)
