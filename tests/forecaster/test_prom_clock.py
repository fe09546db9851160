"""gpu_eta.forecaster.prom_clock, and how the cycle uses it: Prometheus' clock read
from its answers' ``Date`` header (kept by the client: test_promapi_edges), the cycle's
time taken from it only when the clocks are further apart than the bound. Against a
real Prometheus and a real VictoriaMetrics: tests/forecaster/test_cycle_clock.py."""

from __future__ import annotations

import logging
import math
import re
import time
from pathlib import Path

import pytest

from gpu_eta.forecaster.history import HistoryStore
from gpu_eta.forecaster.prom_clock import (
    MAX_OFFSET_SECONDS,
    OFFSET_BOUND_SECONDS,
    measured_offset,
    offset_to_apply,
)
from gpu_eta.forecaster.series import Sample
from tests.forecaster.test_cycle import NOW, CannedClient, job, make_cycle

BOUND = OFFSET_BOUND_SECONDS


@pytest.mark.parametrize(
    ("date", "received", "expected"),
    [
        (1000.0, 1000.0, 0.5),  # the Date's second, read at its middle
        (1000.0, 1400.7, -400.2),  # this clock ahead
        (1400.0, 1000.0, 400.5),  # behind
        (MAX_OFFSET_SECONDS + 1000.0, 0.0, None),  # no clock's date
        (math.inf, 0.0, None),
        (math.nan, 0.0, None),
    ],
)
def test_measured_offset(date: float, received: float, expected: float | None) -> None:
    got = measured_offset(date, received)
    assert got == (None if expected is None else pytest.approx(expected))


@pytest.mark.parametrize(
    ("measured", "applied", "expected"),
    [
        (None, 0.0, 0.0),  # no Date yet: the cycle's own clock
        (None, -400.0, -400.0),  # a Date missing from one answer: the offset stays
        (0.4, 0.0, 0.0),  # a clock in step
        (-29.0, 0.0, 0.0),  # within the bound: unchanged, as before
        (-31.0, 0.0, -31.0),
        (400.0, 0.0, 400.0),
        (-401.0, -400.0, -401.0),  # followed while applied
        (-20.0, -31.0, -20.0),  # hovering near the bound: not dropped at once
        (-14.0, -31.0, 0.0),  # well inside it: dropped
        (20.0, 0.0, 0.0),
    ],
)
def test_offset_to_apply(measured: float | None, applied: float, expected: float) -> None:
    assert offset_to_apply(measured, applied, BOUND) == expected


def test_an_infinite_bound_never_moves_the_cycles_time() -> None:
    assert offset_to_apply(-1e6, 0.0, math.inf) == 0.0


class DatedClient(CannedClient):
    """Canned answers, each stamped with the ``Date`` of a Prometheus whose clock is
    ``server[0]`` and with that as the monotonic time they came in (the two advance
    together); records each instant query's evaluation time."""

    def __init__(self, instant: dict[str, list[Sample]], server: list[float]) -> None:
        super().__init__(instant)
        self.server = server
        self.at: list[float | None] = []

    def monotonic(self) -> float:
        return self.server[0]

    def instant(self, query, at=None, *, warnings=None, skipped=None):  # type: ignore[no-untyped-def]
        self.at.append(at)
        return super().instant(query, at, warnings=warnings, skipped=skipped)

    def _count(self, query: str) -> None:
        super()._count(query)
        self.stats.date = (float(math.floor(self.server[0])), self.monotonic())


def _offset_lines(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    return [
        (r.levelno, r.getMessage())
        for r in caplog.records
        if "Prometheus' clock" in r.getMessage() or "agrees with Prometheus" in r.getMessage()
    ]


def test_a_cycle_off_by_400s_reads_at_prometheus_time_says_so_once_and_back(
    tmp_path, caplog: pytest.LogCaptureFixture
) -> None:
    answers = job("run", 10, [(1, NOW - 200), (2, NOW - 100)], NOW - 300)
    plain = CannedClient(answers)
    plain_store = HistoryStore.open(tmp_path / "plain.sqlite")
    t = [NOW + 400.5]  # the forecaster's clock
    server = [NOW + 0.5]  # Prometheus' (mid-second: where its Date is read)
    dated = DatedClient(answers, server)
    store = HistoryStore.open(tmp_path / "h.sqlite")
    try:
        ref = make_cycle(plain, plain_store, clock=lambda: server[0])
        cycle = make_cycle(dated, store, clock=lambda: t[0])
        cycle.monotonic = dated.monotonic
        with caplog.at_level(logging.INFO, logger="gpu_eta.forecaster.cycle"):
            sent = []
            for _ in range(3):
                fs = cycle.run()
                assert fs.timestamp == pytest.approx(server[0], abs=1)
                assert fs.clock_offset_seconds == pytest.approx(-400, abs=1)
                assert [j.run.run_id for j in fs.jobs] == ["run"]
                sent.append((fs.queries, ref.run().queries))
                # every query after the first is asked at Prometheus' time
                assert all(abs(at - server[0]) < 0.1 for at in dated.at[1:] if at)
                assert len(dated.at) > 5
                dated.at.clear()
                t[0] += 60
                server[0] += 60
            # the first cycle of the process asks its first query again, the others not
            assert [mine - theirs for mine, theirs in sent] == [1, 0, 0]
            t[0] = server[0]  # the node's clock fixed
            fs = cycle.run()
            assert fs.clock_offset_seconds == 0.0 and fs.timestamp == t[0]
            cycle.run()
        lines = _offset_lines(caplog)
        assert [level for level, _ in lines] == [logging.WARNING, logging.INFO]
        assert "400s behind this forecaster's" in lines[0][1]
        assert fs.queries == ref.run().queries
    finally:
        store.close()
        plain_store.close()


def test_a_new_process_starts_at_the_offset_kept_and_does_not_say_it_again(
    tmp_path, caplog: pytest.LogCaptureFixture
) -> None:
    """``once`` runs by a CronJob on a node 400 s ahead: each a new process on the same
    history file. The first says the offset and asks its first query again; the next
    start at the offset kept: no query asked twice, nothing said again."""
    answers = job("run", 10, [(1, NOW - 200), (2, NOW - 100)], NOW - 300)
    server = [NOW + 0.5]
    plain = CannedClient(answers)
    path = tmp_path / "h.sqlite"
    extra = []
    with caplog.at_level(logging.INFO, logger="gpu_eta.forecaster.cycle"):
        for _ in range(3):
            dated = DatedClient(answers, server)  # a new process: no Date read yet
            store = HistoryStore.open(path)
            ref_store = HistoryStore.open(tmp_path / "ref.sqlite")
            try:
                cycle = make_cycle(dated, store, clock=lambda: server[0] + 400)
                cycle.monotonic = dated.monotonic
                fs = cycle.run()
                assert fs.timestamp == pytest.approx(server[0], abs=0.1)
                ref = make_cycle(plain, ref_store, clock=lambda: server[0])
                extra.append(fs.queries - ref.run().queries)
            finally:
                store.close()
                ref_store.close()
            server[0] += 300
    assert extra == [1, 0, 0]
    assert [level for level, _ in _offset_lines(caplog)] == [logging.WARNING]


def test_a_cycle_without_dates_or_within_the_bound_is_unchanged(
    tmp_path, caplog: pytest.LogCaptureFixture
) -> None:
    answers = job("run", 10, [(1, NOW - 200), (2, NOW - 100)], NOW - 300)
    for name, c in (("none", CannedClient(answers)), ("near", DatedClient(answers, [NOW - 20]))):
        store = HistoryStore.open(tmp_path / f"{name}.sqlite")
        try:
            with caplog.at_level(logging.INFO, logger="gpu_eta.forecaster.cycle"):
                cycle = make_cycle(c, store)
                cycle.monotonic = getattr(c, "monotonic", time.monotonic)
                fs = cycle.run()
            assert fs.timestamp == NOW and fs.clock_offset_seconds == 0.0
        finally:
            store.close()
    assert _offset_lines(caplog) == []


def test_the_alerts_threshold_is_the_bound_the_cycle_follows_prometheus_beyond() -> None:
    """GpuEtaForecasterClockOffset fires for exactly the offsets the cycle works around
    (docs/alerts.md, ``clock_offset_seconds``)."""
    rules = (Path(__file__).resolve().parents[2] / "rules" / "gpu-eta.rules.yaml").read_text()
    found = re.search(r"> (\S+)\s+# THRESHOLD clock_offset_seconds", rules)
    assert found is not None and float(found.group(1)) == OFFSET_BOUND_SECONDS
