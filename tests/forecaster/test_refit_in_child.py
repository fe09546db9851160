"""The real model, fitted on runs read back from the history file, crosses the refit pipe.

Why: the service refits in a forked child and the fitted ``EtaModel`` comes back
pickled (``refit.fit_in_child``). Runs read from the history store carry read-only
features (``MappingProxyType``), which pickle refuses; a model that keeps runs (the
prior's regression rows, the predict memo) then failed every background refit and
the service kept its first model for good.
"""

from __future__ import annotations

import pickle
from pathlib import Path

from gpu_eta.forecaster.estimators.eta_model import EtaModel
from gpu_eta.forecaster.history import HistoryStore
from gpu_eta.forecaster.refit import fit_in_child
from gpu_eta.forecaster.runs import Run
from gpu_eta.forecaster.runs_csv import read_runs

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "runs" / "mlperf_v2_sample.csv.gz"


def stored_runs(tmp_path: Path) -> list[Run]:
    store = HistoryStore.open(tmp_path / "h.sqlite")
    try:
        store.import_finished(read_runs(FIXTURE))
        return store.finished()
    finally:
        store.close()


def test_a_stored_run_pickles_with_read_only_features(tmp_path: Path) -> None:
    run = stored_runs(tmp_path)[0]
    assert run.features  # the fixture has identity columns
    back = pickle.loads(pickle.dumps(run))
    assert back == run
    assert type(back.features) is type(run.features)  # still read-only


def test_the_fitted_model_comes_back_from_a_child(tmp_path: Path) -> None:
    history = stored_runs(tmp_path)
    here = EtaModel(random_state=0).fit(history)
    there = fit_in_child(lambda: EtaModel(random_state=0), history, timeout_seconds=300)
    running = Run("r", history[0].epochs_planned, history[0].epoch_times[:3], history[0].features)
    now = running.last_timestamp + 1
    assert there.predict(running, now) == here.predict(running, now)
