"""gpu_eta.forecaster.cycle: what the model and the plan-less durations learn between
fits, through whole cycles over canned answers (docs/forecaster.md, "Cycle").

Runs that finish between two fits reach the model by ``update`` exactly as a fit and
one update of all of them would give them; while refits keep failing (a refit child
killed for its memory, the refit timeout, an error each time) neither the cycle nor
the model nor the durations grow with every run that finishes.
"""

from __future__ import annotations

import gc
import logging
import tracemalloc
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import ClassVar

import pytest

from gpu_eta.forecaster.config import CycleSettings
from gpu_eta.forecaster.cycle import Cycle
from gpu_eta.forecaster.estimators.eta_model import EtaModel
from gpu_eta.forecaster.history import HistoryStore
from gpu_eta.forecaster.runs import Run
from tests.forecaster.test_cycle import NOW, CannedClient, StandInModel, job, merge

CYCLE_SECONDS = 60.0


@pytest.fixture
def store(tmp_path: Path) -> Iterator[HistoryStore]:
    st = HistoryStore.open(tmp_path / "h.sqlite")
    yield st
    st.close()


def finishing(first: int, n: int, t: float, names: Sequence[str] | None = None) -> dict:
    """``n`` runs (ids from ``first``) that complete their 2 epochs in the cycle at
    ``t``; each its own job (a sweep) unless ``names`` gives the job names in turn."""
    parts = []
    for i in range(first, first + n):
        name = names[i % len(names)] if names else f"sweep-{i}"
        start = t - 400 - 7 * (i % 5)  # durations differ a little, as real ones do
        ends = [(1, start + 180 + (i % 3)), (2, t - 10)]
        parts.append(job(f"r{i}", 2, ends, start, pod=f"{name}-{i:09d}"))
    return merge(*parts)


class FailingRefits(StandInModel):
    """The first fit works, every later one raises (as a refit child killed for its
    memory does: ``ModelError``); counts the runs ``update`` is given."""

    fitted: ClassVar[int] = 0
    updated: ClassVar[int] = 0

    def fit(self, history: Sequence[Run]) -> FailingRefits:
        FailingRefits.fitted += 1
        if FailingRefits.fitted > 1:
            raise RuntimeError("refit child died (exit code -9)")
        return super().fit(history)

    def update(self, new_runs: Sequence[Run]) -> None:
        FailingRefits.updated += len(new_runs)


def runs_alive() -> int:
    gc.collect()
    return sum(1 for o in gc.get_objects() if type(o) is Run)


def test_nothing_grows_with_finished_runs_while_refits_fail(
    store: HistoryStore, caplog: pytest.LogCaptureFixture
) -> None:
    """fit_runs 40, eight runs of a sweep (each its own job) finishing a cycle, every
    refit failing: the model is given at most 40 runs after its fit, the runs kept
    alive are those of the store's window, and the memory held grows by no more than
    200 bytes a run finished from cycle 75 to 150. It grew by ~1.4 kB a run: every
    run was kept for the model's updates, and each new job added a configuration to
    the plan-less durations."""
    # no log records kept by the capture: a failed refit's holds the history fitted
    caplog.set_level(logging.ERROR, logger="gpu_eta")
    FailingRefits.fitted = FailingRefits.updated = 0
    fit_runs, per_cycle = 40, 8
    t = [NOW]
    client = CannedClient({})
    settings = CycleSettings(background_refit=False, refit_seconds=300, fit_runs=fit_runs)
    cycle = Cycle(client, store, settings, model_factory=FailingRefits, clock=lambda: t[0])
    held = []
    alive = runs_alive()  # other tests' leftovers
    try:
        for c in range(151):
            # traced from cycle 75 only, what the bound compares (tracing every cycle
            # took 5.3 s here, 3.0 s so): an allocation older than that and freed later
            # is not subtracted, so the growth read is never smaller than the growth
            if c == 75:
                tracemalloc.start()
            t[0] = NOW + CYCLE_SECONDS * c
            client.answers = finishing(per_cycle * c, per_cycle, t[0])
            client.seen, client.range_spans = [], []  # the canned client's own records
            cycle.run()
            if c in (75, 150):
                held.append(tracemalloc.get_traced_memory()[0])
    finally:
        tracemalloc.stop()
    assert store.count_finished() == 151 * per_cycle
    assert FailingRefits.fitted == 31  # the first fit, then 30 refits failed
    assert FailingRefits.updated == fit_runs
    assert runs_alive() - alive <= fit_runs + 2 * per_cycle  # the window and a cycle's
    assert held[1] - held[0] < 200 * 75 * per_cycle, held


class RecordingModel(EtaModel):
    """The real model, recording what each of its fits saw."""

    fitted_on: ClassVar[list[list[Run]]] = []

    def fit(self, history: Sequence[Run]) -> RecordingModel:
        RecordingModel.fitted_on.append(list(history))
        super().fit(history)
        return self


def test_forecasts_are_those_of_the_fit_and_one_update_of_every_run_finished_since(
    store: HistoryStore,
) -> None:
    """Refits succeeding, runs of three jobs finishing every cycle: after each cycle the
    cycle's model forecasts every running run exactly as a model fitted on what the
    cycle's last fit saw and then given, in one ``update``, every run finished since
    (the store's order). Learning between fits is a behaviour of the model alone: how
    the cycle keeps track of what it has handed over must not show in a forecast."""
    RecordingModel.fitted_on = []
    t = [NOW]
    client = CannedClient({})
    settings = CycleSettings(background_refit=False, refit_seconds=600, fit_runs=100)
    factory = lambda: RecordingModel(random_state=0)  # noqa: E731
    cycle = Cycle(client, store, settings, model_factory=factory, clock=lambda: t[0])
    names = ("train-bert", "train-resnet", "train-gpt")
    compared = 0
    for c in range(24):
        t[0] = NOW + CYCLE_SECONDS * c
        running = merge(
            *(
                job(f"live-{k}", 2, [(1, NOW - 200)], NOW - 400, pod=f"{n}-{990_000_000 + k}")
                for k, n in enumerate(names)
            )
        )
        client.answers = merge(finishing(3 * c, 3, t[0], names), running)
        fs = cycle.run()
        fitted = RecordingModel.fitted_on[-1]
        since = store.finished()
        if fitted:
            since = since[[r.run_id for r in since].index(fitted[-1].run_id) + 1 :]
        reference = EtaModel(random_state=0).fit(fitted)
        reference.update(since)
        assert cycle.model is not None
        for jf in fs.jobs:
            ours = cycle.model.predict(jf.run, t[0])
            theirs = reference.predict(jf.run, t[0])
            assert (ours.p10, ours.p50, ours.p90) == (theirs.p10, theirs.p50, theirs.p90)
            compared += bool(since)
    assert len(RecordingModel.fitted_on) == 3  # the first fit and two refits
    assert compared >= 3 * 20  # most cycles had runs learnt by update
