"""One contract over every estimator (scikit-learn's ``parametrize_with_checks`` idea)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from gpu_eta.forecaster.estimators import BASELINES, estimator_names, make_estimator
from gpu_eta.forecaster.estimators.base import Estimator, NotFittedError
from gpu_eta.forecaster.estimators.eta_model import EtaModel
from tests.forecaster.estimators.runs_factory import job_history, make_run

HISTORY = job_history(40, seed=12, noise=0.1)
RUNS = [
    make_run("p1", [6.0, 5.0, 5.5], planned=12, start=2e9, job_name="a", batch_size=64),
    make_run("p2", [9.0] * 8, planned=10, start=2e9, job_name="new", batch_size=float("nan")),
    make_run("p3", [4.0], planned=1.5, start=2e9),
]


def build(name: str):
    return EtaModel(random_state=0) if name == "gpu_eta" else make_estimator(name)


NAMES = ["gpu_eta", *estimator_names()]


@pytest.mark.parametrize("name", NAMES)
def test_fit_returns_self(name: str) -> None:
    est = build(name)
    assert isinstance(est, Estimator)
    assert est.fit(HISTORY) is est


@pytest.mark.parametrize("name", NAMES)
def test_predict_before_fit_raises(name: str) -> None:
    with pytest.raises(NotFittedError):
        build(name).predict(RUNS[0], RUNS[0].last_timestamp)


@pytest.mark.parametrize("name", NAMES)
def test_predict_before_fit_is_caught_as_scikit_learns_error_is(name: str) -> None:
    """scikit-learn's NotFittedError is a ValueError and an AttributeError."""
    for caught in (ValueError, AttributeError):
        with pytest.raises(caught):
            build(name).predict(RUNS[0], RUNS[0].last_timestamp)


def test_the_service_starts_without_loading_scikit_learn() -> None:
    """The default pooled model is statsmodels' RLM: scikit-learn (with scipy, 1-4 s
    here) is imported only by the ``hgb`` option, not at every forecaster start."""
    code = (
        "import sys\n"
        "import gpu_eta.forecaster.cycle, gpu_eta.forecaster.server\n"
        "import gpu_eta.forecaster.publish, gpu_eta.forecaster.estimators\n"
        "print(sorted(m for m in ('sklearn', 'scipy') if m in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.strip() == "[]", out.stdout


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("delay", [0.0, 3.0, 1e5])
def test_quantiles_ordered_never_negative(name: str, delay: float) -> None:
    est = build(name).fit(HISTORY)
    for run in RUNS:
        f = est.predict(run, run.last_timestamp + delay)
        assert 0.0 <= f.p10 <= f.p50 <= f.p90
        if name not in BASELINES:  # gpu-eta's parts: epochs remain, so time remains
            assert f.p50 > 0  # (baselines reproduce their tools, "0 s left" when late)


@pytest.mark.parametrize("name", NAMES)
def test_deterministic(name: str) -> None:
    a = [build(name).fit(HISTORY).predict(r, r.last_timestamp) for r in RUNS]
    b = [build(name).fit(HISTORY).predict(r, r.last_timestamp) for r in RUNS]
    assert a == b


@pytest.mark.parametrize("name", NAMES)
def test_init_stores_params_only(name: str) -> None:
    est = build(name)
    assert not [k for k in vars(est) if k.endswith("_")], "learned state only after fit"
