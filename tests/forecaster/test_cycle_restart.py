"""gpu_eta.forecaster.cycle: a run restarted under its own key (a named run trained
again in the same pod and container, a job whose sender keeps its run id) is read
again at once: its new start is an unchanging series, held between full reads
(static_series), and is re-read in the cycle whose epoch or last end went back."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gpu_eta.forecaster.cycle import progress_marks, went_back
from gpu_eta.forecaster.history import HistoryStore
from gpu_eta.forecaster.series import Series
from tests.forecaster.test_cycle import NOW, CannedClient, job, make_cycle, s


@pytest.fixture
def store(tmp_path: Path) -> Iterator[HistoryStore]:
    st = HistoryStore.open(tmp_path / "h.sqlite")
    yield st
    st.close()


class TimedClient(CannedClient):
    """Range answers cut to [start, end], as a TSDB answers them."""

    def range(self, query: str, start: float, end: float, step_seconds: float) -> list[Series]:
        out = super().range(query, start, end, step_seconds)
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


def test_went_back() -> None:
    a, b, c = ("ml", "p", "c", "a"), ("ml", "p", "c", "b"), ("ml", "p", "c", "c")
    nan = float("nan")
    before = {a: (5.0, 100.0), b: (5.0, 100.0), c: (5.0, nan)}
    now = {a: (1.0, 200.0), b: (5.0, 90.0), c: (6.0, 300.0), ("x", "", "", "new"): (0.0, nan)}
    assert went_back(before, now) == {a, b}
    assert went_back(before, before) == set()


def test_progress_marks() -> None:
    lab = {"namespace": "ml", "pod": "p", "container": "c", "run_id": "r"}
    marks = progress_marks({"epoch": [s(3, **lab)], "last_end": [s(NOW, **lab)]})
    assert marks == {("ml", "p", "c", "r"): (3, NOW)}
