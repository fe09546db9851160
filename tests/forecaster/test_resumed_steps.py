"""A run followed in steps alone, resumed from a checkpoint: read from the step it started
at (``gpu_eta_training_start_step``), live and in the history it is stored in.

Steps carry no time on the wire: the cycle times a step when a read first shows it.
Without the start step, a run resumed at 8,000 of 10,000 reads as 8,000 steps done
before the first read that shows it (docs/progress.md, "The client";
docs/forecaster.md, "Jobs from series"). Canned answers (``test_cycle.CannedClient``),
the real model and a real history file; through a real exporter and Prometheus in
tests/integration/test_forecaster_prometheus.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpu_eta.forecaster.config import CycleSettings
from gpu_eta.forecaster.cycle import Cycle
from gpu_eta.forecaster.history import HistoryStore
from gpu_eta.forecaster.pending import PendingSettings
from gpu_eta.forecaster.runs import own_work, resume_point
from gpu_eta.forecaster.runs_from_series import assemble
from gpu_eta.forecaster.series import Sample, Series
from tests.forecaster.test_cycle import CannedClient

T0 = 1_700_000_000.0
LAB = {"node": "n1", "namespace": "ml", "pod": "ft-x7k2p", "container": "c", "run_id": "ft"}
PLAN, RESUMED, PACE = 10_000.0, 8_000.0, 10.0  # steps, steps, steps a second


def _instant(
    lab: dict[str, str], at: float, start: float, last: float, step: float, start_step: float | None
) -> dict[str, list[Sample]]:
    """The instant answers at ``at`` for a run of 10,000 steps started at ``start``, last
    reported at ``last`` at ``step``, with its start step or, as from an exporter without
    that series, none."""
    instant = {
        "present": [Sample(lab, last, at)],
        "steps_planned": [Sample(lab, PLAN, at)],
        "step": [Sample(lab, step, at)],
        "start": [Sample(lab, start, at)],
        "last_report": [Sample(lab, last, at)],
    }
    if start_step is not None:
        instant["start_step"] = [Sample(lab, start_step, at)]
    return instant


def _answers(at: float, start_step: float | None) -> tuple[dict, dict]:
    """What Prometheus answers at ``at`` for the run resumed at 8,000 (started at T0,
    10 steps a second, a report every second; the exporter scraped every 15 s)."""
    scrapes = [float(t) for t in range(int(T0) + 15, int(at) + 1, 15)]
    seen = tuple((t, min(PLAN, RESUMED + PACE * (t - T0))) for t in scrapes)
    last, step = seen[-1]
    return _instant(LAB, at, T0, last, step, start_step), {"step_range": [Series(LAB, seen)]}


def test_the_start_step_is_the_runs_origin_stamped_at_its_start() -> None:
    """``assemble``: the start step is a point at the run's start, as an epoch a resume
    ended at its start; without the series the run is read as before."""
    instant, ranges = _answers(T0 + 60, RESUMED)
    (update,) = assemble(instant, ranges, now=T0 + 60, span_seconds=60).updates
    assert update.epoch_ends[0] == (RESUMED, T0)
    del instant["start_step"]
    (old,) = assemble(instant, ranges, now=T0 + 60, span_seconds=60).updates
    assert old.epoch_ends[0] == (RESUMED + PACE * 15, T0 + 15)


def _cycles(tmp_path: Path, start_step: float | None) -> tuple[list[float], HistoryStore]:
    """Cycles every 30 s from 20 s after the run's start until it ends; the P50
    remaining seconds each forecast it, and the history file."""
    store = HistoryStore.open(tmp_path / "h.sqlite")
    now = [T0 + 20]
    client = CannedClient({})
    cycle = Cycle(
        client,
        store,
        CycleSettings(
            background_refit=False,
            refit_seconds=0,
            pending=PendingSettings(enabled=False),
            lookback_seconds=600,
        ),
        clock=lambda: now[0],
    )
    remaining = []
    while now[0] <= T0 + (PLAN - RESUMED) / PACE + 30:
        client.answers, client.ranges = _answers(now[0], start_step)
        fs = cycle.run()
        remaining += [j.completion_timestamps[1] - now[0] for j in fs.jobs]
        now[0] += 30
    return remaining, store


def _fresh_run_left(store: HistoryStore, start: float) -> float:
    """The P50 remaining seconds of the job's next run (``ft``, another pod), fresh from
    step 0 of 10,000 and 5 s in: forecast from the job's history alone."""
    lab = {**LAB, "pod": "ft-b2c4d", "run_id": "ft2"}
    at = start + 5
    instant = _instant(lab, at, start, start + 1, 0.0, None)
    client = CannedClient(instant, {"step_range": [Series(lab, ((start + 1, 0.0),))]})
    settings = CycleSettings(
        background_refit=False, refit_seconds=0, pending=PendingSettings(enabled=False)
    )
    (job,) = Cycle(client, store, settings, clock=lambda: at).run().jobs
    return job.completion_timestamps[1] - at


@pytest.mark.parametrize("start_step", [RESUMED, None], ids=["start_step", "old_exporter"])
def test_a_resumed_step_run_is_forecast_and_stored_as_its_own_work(
    tmp_path: Path, start_step: float | None
) -> None:
    """Live, the run's remaining time is the steps left at its own pace: its first
    forecast, 20 s in, from the one scrape 15 s in (step 8,150: 1,850 steps at 10 a
    second, 185 s from that scrape, 180 s from now), not 8,150 steps read done in 15 s
    (2 s). Stored, it is a run of 2,000 steps over 200 s, not of 10,000 (0.1 s a step,
    not 0.02): the job's next run, fresh, is forecast from its history at about its
    1,000 s (a fifth of it, 205 s, read as 10,000 steps). An exporter without the start
    step: read as before (what it never sent cannot be known)."""
    remaining, store = _cycles(tmp_path, start_step)
    try:
        (done,) = store.finished()
        if start_step is None:  # as before: 8,000 steps read done by the first scrape
            assert remaining[0] < 30 and resume_point(done) == 0
            return
        truth = (PLAN - RESUMED - PACE * 15) / PACE - 5
        assert truth * 0.8 < remaining[0] < truth * 1.25, remaining
        assert resume_point(done) == RESUMED
        work = own_work(done)
        assert (work.epochs_planned, work.epochs_done) == (PLAN - RESUMED, PLAN - RESUMED)
        assert work.last_timestamp - work.start_timestamp == pytest.approx(200, abs=15)
        # the job's next run, fresh: 10,000 steps at the 0.1 s a step it learnt
        left = _fresh_run_left(store, T0 + 1_000)
        assert PLAN / PACE * 0.8 < left < PLAN / PACE * 1.25, left
    finally:
        store.close()


def test_the_history_keeps_the_start_step_beside_a_step_of_its_cell(tmp_path: Path) -> None:
    """The history file keeps at most the newest stored step of each 1/400 of the plan
    (``history.crowded_steps``), but not over the start step: a run resumed at 8,000
    whose first reads show 8,005 and 8,020 (the same 25 steps of 10,000) keeps its
    origin, cycle after cycle, in memory and read back from the file."""
    store = HistoryStore.open(tmp_path / "h.sqlite")
    try:
        for at, step in ((T0 + 15, 8_005.0), (T0 + 30, 8_020.0), (T0 + 45, 8_035.0)):
            instant = _instant(LAB, at, T0, at, step, RESUMED)
            store.record(assemble(instant, {}, now=at, span_seconds=0).updates, now=at)
            (running,) = store.running()
            assert resume_point(running.run) == RESUMED, running.run.epoch_times
    finally:
        store.close()
    again = HistoryStore.open(tmp_path / "h.sqlite")
    try:
        (running,) = again.running()
        assert running.run.epoch_times[:2] == ((0.0, T0), (RESUMED, T0))
    finally:
        again.close()
