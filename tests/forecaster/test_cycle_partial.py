"""gpu_eta.forecaster.cycle: a partial read (answers with ``warnings``: a Thanos store
or a Prometheus remote-read source down) does not count runs' absences, for up to
``partial_hold_seconds`` (docs/forecaster.md, "Jobs from series"; ``cycle.partial_hold``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpu_eta.forecaster.cycle import partial_hold
from gpu_eta.forecaster.history import HistoryStore
from tests.forecaster.test_cycle import NOW, CannedClient, StandInModel, job, make_cycle, merge

DOWN = "remote_read: Post http://store:10901/api/v1/read: connection refused"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[HistoryStore]:
    st = HistoryStore.open(tmp_path / "h.sqlite")
    yield st
    st.close()


def both() -> dict:
    return merge(job("a", 10, [(1, NOW - 10)], NOW - 100), job("b", 10, [(1, NOW - 20)], NOW - 100))


def only_a() -> dict:
    """What a server answers with the store holding ``b`` down: ``a`` alone."""
    return job("a", 10, [(1, NOW - 10)], NOW - 100)


def test_a_run_missing_from_partial_reads_is_not_finished_and_runs_on_when_whole(
    store: HistoryStore,
) -> None:
    """The store holding ``b`` down for 15 minutes (grace 10): ``a`` is forecast as
    ever, ``b`` is neither forecast nor finished, and back it is forecast again without
    a revive (no refit, nothing learnt as cancelled)."""
    t = [NOW]
    client = CannedClient(both())
    cycle = make_cycle(client, store, clock=lambda: t[0], vanish_grace_seconds=600)
    assert len(cycle.run().jobs) == 2
    fits = list(StandInModel.fits)
    client.answers, client.warnings = only_a(), [DOWN]
    for _ in range(15):
        t[0] += 60
        fs = cycle.run()
        assert fs.n_finished == 0 and [j.run.run_id for j in fs.jobs] == ["a"]
    assert store.count_finished() == 0
    client.answers, client.warnings = both(), []
    t[0] += 60
    fs = cycle.run()
    assert sorted(j.run.run_id for j in fs.jobs) == ["a", "b"]
    assert store.count_finished() == 0 and StandInModel.fits == fits


def test_a_run_gone_while_reads_were_partial_finishes_a_grace_after_they_are_whole(
    store: HistoryStore,
) -> None:
    t = [NOW]
    client = CannedClient(both())
    cycle = make_cycle(client, store, clock=lambda: t[0], vanish_grace_seconds=600)
    cycle.run()
    client.answers, client.warnings = only_a(), [DOWN]
    for _ in range(20):
        t[0] += 60
        assert cycle.run().n_finished == 0
    client.warnings = []  # whole again: b is gone for good
    finished_at = []
    for i in range(1, 16):
        t[0] += 60
        if cycle.run().n_finished:
            finished_at.append(i)
    assert finished_at == [10]  # the grace, counted from the last partial read
    assert [(r.run_id, r.completed) for r in store.finished()] == [("b", False)]


def test_reads_partial_for_longer_than_the_hold_count_absences_again(
    store: HistoryStore,
) -> None:
    """A store down for good (or a broken remote_read): once the reads have been
    partial for ``partial_hold_seconds``, a run gone is finished one grace later."""
    t = [NOW]
    client = CannedClient(both())
    cycle = make_cycle(
        client, store, clock=lambda: t[0], vanish_grace_seconds=600, partial_hold_seconds=1800
    )
    cycle.run()
    client.answers, client.warnings = only_a(), [DOWN]
    finished_at = []
    for i in range(1, 61):
        t[0] += 60
        if cycle.run().n_finished:
            finished_at.append(i)
    # partial since read 1: held up to read 31 (1800 s), counted from it, 600 s later
    assert finished_at == [41]


def test_the_hold_is_kept_in_the_history_file_for_once_runs(store: HistoryStore) -> None:
    """``cli once`` (a new Cycle every read) in a setup partial for good still finishes a
    vanished run: the partial run's start is read back from the history file."""
    client = CannedClient(both())
    make_cycle(client, store).run()
    client.answers, client.warnings = only_a(), [DOWN]
    finished_at = []
    for i in range(1, 61):
        at = NOW + 60 * i
        settings = {"vanish_grace_seconds": 600, "partial_hold_seconds": 1800}
        if make_cycle(client, store, clock=lambda at=at: at, **settings).run().n_finished:
            finished_at.append(i)
    assert finished_at == [41]


def test_a_warning_of_a_range_answer_makes_the_read_partial(store: HistoryStore) -> None:
    t = [NOW]
    client = CannedClient(both())
    cycle = make_cycle(client, store, clock=lambda: t[0], vanish_grace_seconds=600, range_every=1)
    cycle.run()
    client.answers, client.range_warnings = only_a(), [DOWN]
    for _ in range(15):
        t[0] += 60
        assert cycle.run().n_finished == 0
    assert store.count_finished() == 0


def test_partial_reads_are_logged_when_they_start_pass_the_hold_and_end(
    store: HistoryStore, caplog: pytest.LogCaptureFixture
) -> None:
    t = [NOW]
    client = CannedClient(both())
    cycle = make_cycle(
        client, store, clock=lambda: t[0], vanish_grace_seconds=600, partial_hold_seconds=300
    )
    cycle.run()
    client.answers, client.warnings = only_a(), [DOWN, DOWN]
    with caplog.at_level(logging.INFO, logger="gpu_eta.forecaster.cycle"):
        for _ in range(10):
            t[0] += 60
            cycle.run()
        client.answers, client.warnings = both(), []
        for _ in range(11):  # whole for a grace after the last partial read: over
            t[0] += 60
            cycle.run()
    said = [
        (r.levelname, r.getMessage())
        for r in caplog.records
        if r.name == "gpu_eta.forecaster.cycle" and "answers" in r.getMessage()
    ]
    assert [level for level, _ in said] == ["WARNING", "WARNING", "INFO"], said
    assert "1 warning(s), first: " + DOWN in said[0][1]
    assert "counted as vanished again" in said[1][1] and DOWN in said[1][1]
    assert "whole again after 540s" in said[2][1]  # the first partial read to the last


@pytest.mark.parametrize(
    ("before", "now", "said", "expected"),
    [
        ((None, None), NOW, [], (None, None, False)),  # whole
        ((NOW - 60, NOW - 60), NOW, [], (NOW - 60, NOW - 60, False)),  # a whole read in it
        ((NOW - 900, NOW - 600), NOW, [], (None, None, False)),  # whole for a grace: over
        ((None, None), NOW, [DOWN], (NOW, NOW, True)),  # turns partial
        ((NOW - 3600, NOW - 60), NOW, [DOWN], (NOW - 3600, NOW, True)),  # at the bound
        ((NOW - 3601, NOW - 60), NOW, [DOWN], (NOW - 3601, NOW, False)),  # past it
        ((NOW + 60, NOW + 60), NOW, [DOWN], (NOW, NOW, True)),  # a clock stepped back
    ],
)
def test_partial_hold(
    before: tuple, now: float, said: list[str], expected: tuple[float | None, float | None, bool]
) -> None:
    assert partial_hold(before, now, said, 3600, 600) == expected


def test_no_hold_counts_absences_from_the_first_partial_read() -> None:
    assert partial_hold((None, None), NOW, [DOWN], 0, 600) == (NOW, NOW, False)


def test_a_flapping_store_does_not_restart_the_hold(store: HistoryStore) -> None:
    """A store answering whole one read in ten: each whole read restarted the run of
    partial reads, so the bound was never reached (``b``, gone for good, finished
    after 100 min instead of 40)."""
    t = [NOW]
    client = CannedClient(both())
    cycle = make_cycle(
        client, store, clock=lambda: t[0], vanish_grace_seconds=600, partial_hold_seconds=1800
    )
    cycle.run()
    client.answers = only_a()
    finished_at = []
    for i in range(1, 121):
        t[0] += 60
        client.warnings = [] if i % 10 == 0 else [DOWN]
        if cycle.run().n_finished:
            finished_at.append(i)
    assert finished_at and finished_at[0] <= 41, finished_at


def test_once_runs_log_a_run_of_partial_reads_once(
    store: HistoryStore, caplog: pytest.LogCaptureFixture
) -> None:
    """``cli once`` is a new process every read: what it had logged was its own, so
    every run logged the partial WARNING again and none the INFO when whole."""
    client = CannedClient(both())
    make_cycle(client, store).run()
    settings = {"vanish_grace_seconds": 120, "partial_hold_seconds": 180}
    with caplog.at_level(logging.INFO, logger="gpu_eta.forecaster.cycle"):
        for i in range(1, 11):
            client.answers, client.warnings = (only_a(), [DOWN]) if i <= 6 else (both(), [])
            at = NOW + 60 * i
            make_cycle(client, store, clock=lambda at=at: at, **settings).run()
    said = [
        (r.levelname, r.getMessage())
        for r in caplog.records
        if r.name == "gpu_eta.forecaster.cycle" and "answers" in r.getMessage()
    ]
    assert [level for level, _ in said] == ["WARNING", "WARNING", "INFO"], said


def test_without_a_hold_partial_reads_are_logged_once(
    store: HistoryStore, caplog: pytest.LogCaptureFixture
) -> None:
    t = [NOW]
    client = CannedClient(both())
    cycle = make_cycle(client, store, clock=lambda: t[0], partial_hold_seconds=0)
    cycle.run()
    client.answers, client.warnings = only_a(), [DOWN]
    with caplog.at_level(logging.INFO, logger="gpu_eta.forecaster.cycle"):
        for _ in range(3):
            t[0] += 60
            cycle.run()
    said = [r for r in caplog.records if "answers" in r.getMessage()]
    assert len(said) == 1 and "counted as vanished again" in said[0].getMessage()


class QueueStoreDown(CannedClient):
    """Its queue answer (the folded kube-state query) carries ``queue_warnings``; the
    runs' answers carry ``warnings`` as ``CannedClient``'s."""

    def __init__(self, answers: dict) -> None:
        super().__init__(answers)
        self.queue_warnings: list[str] = []

    def instant(self, query: str, at: float | None = None, *, warnings=None, skipped=None):  # type: ignore[override]
        out = super().instant(query, at, warnings=warnings, skipped=skipped)
        if warnings is not None and "kube_pod_status_phase" in query:
            warnings.extend(self.queue_warnings)
        return out


def test_a_partial_queue_answer_is_said_once_unless_the_runs_read_said_it(
    store: HistoryStore, caplog: pytest.LogCaptureFixture
) -> None:
    """A store holding only kube-state-metrics series away: the runs' read is whole, so
    nothing else says the queue's predictions rest on part of the queue."""
    t = [NOW]
    client = QueueStoreDown(both())
    cycle = make_cycle(client, store, clock=lambda: t[0], vanish_grace_seconds=600)

    def queue_lines() -> list[str]:
        lines = [r.getMessage() for r in caplog.records if "pending-pod answer" in r.getMessage()]
        caplog.clear()
        return lines

    with caplog.at_level(logging.WARNING, logger="gpu_eta.forecaster.cycle"):
        cycle.run()
        assert queue_lines() == []
        client.queue_warnings = [DOWN]
        for _ in range(3):
            t[0] += 60
            cycle.run()
            assert len(queue_lines()) == (1 if _ == 0 else 0)
        client.queue_warnings = []
        t[0] += 60
        cycle.run()
        client.queue_warnings = [DOWN]  # away again: said again
        t[0] += 60
        cycle.run()
        assert len(queue_lines()) == 1
        # the runs' read partial too (every answer, the queue's first, says another
        # store is down): its own line says it, the queue's does not again
        client.warnings = ["store-b down"]
        t[0] += 60
        cycle.run()
        assert queue_lines() == []
