"""The estimators by name: gpu-eta's models (``rate``, ``prior``, ``blend``) and the
baselines they are scored against. The face they share is ``estimators.base``; one
contract test runs over every registered name (tests/forecaster/
test_estimator_contract.py).
"""

from __future__ import annotations

from gpu_eta.forecaster.errors import ForecasterError
from gpu_eta.forecaster.estimators.base import Estimator
from gpu_eta.forecaster.estimators.baselines import (
    CumulativeMean,
    HistoryMatch,
    KerasMean,
    PredictLinear,
    TqdmEma,
)
from gpu_eta.forecaster.estimators.blend import BlendEstimator
from gpu_eta.forecaster.estimators.prior import PriorEstimator
from gpu_eta.forecaster.estimators.rate import RateEstimator


def _registry() -> dict[str, type]:
    return {
        "rate": RateEstimator,
        "prior": PriorEstimator,
        "blend": BlendEstimator,
        "history_match": HistoryMatch,
        "tqdm_ema": TqdmEma,
        "keras_mean": KerasMean,
        "cumulative_mean": CumulativeMean,
        "predict_linear": PredictLinear,
    }


def estimator_names() -> list[str]:
    """Registered estimator names (gpu-eta's parts first, then the baselines)."""
    return list(_registry())


def make_estimator(name: str, **params: object) -> Estimator:
    """Build a registered estimator by name; unknown names are a clear error."""
    registry = _registry()
    if name not in registry:
        raise ForecasterError(f"unknown estimator {name!r}; known: {', '.join(registry)}")
    return registry[name](**params)


BASELINES = ("history_match", "tqdm_ema", "keras_mean", "cumulative_mean", "predict_linear")
