"""The ETAs people already have, implemented faithfully so gpu-eta is scored against them.

Why these: they are what users see today. tqdm prints an EMA-smoothed rate ETA,
Keras' progress bar an average step time that skips the first (warm-up) step, many
scripts print elapsed/done × remaining (the cumulative mean), Prometheus users write
``predict_linear`` over a trailing window, and a colleague would say "this job took
about as long as last time" (history match). Each returns a point forecast
(P10 = P50 = P90) and raises ``InsufficientData`` when it has nothing to go on (the
rate baselines at 0 %, history match with no earlier runs), so ``evaluate`` scores
each on what it can answer and reports how many it answered.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

import numpy as np

from gpu_eta.forecaster.estimators.base import (
    InsufficientData,
    NotFittedError,
    intervals,
    remaining_epochs,
)
from gpu_eta.forecaster.estimators.prior import job_key
from gpu_eta.forecaster.forecast import Forecast
from gpu_eta.forecaster.runs import Run


def _point(remaining: float, method: str, n_obs: int = 0) -> Forecast:
    value = max(0.0, float(remaining))
    return Forecast(value, value, value, method=method, n_obs=n_obs)


class _RateBaseline:
    """Shared face: no history to learn, a fitted flag for the contract."""

    method = "baseline"

    def fit(self, history: Sequence[Run]) -> _RateBaseline:
        self.n_history_ = len(history)
        return self

    def predict(self, run: Run, now: float, stalled: bool = False) -> Forecast:
        if not hasattr(self, "n_history_"):
            raise NotFittedError(f"{type(self).__name__}.predict called before fit")
        m = remaining_epochs(run)
        if m <= 0:
            return _point(0.0, self.method)
        return _point(self.per_epoch(run) * m, self.method, len(run.epoch_times) - 1)

    def per_epoch(self, run: Run) -> float:  # pragma: no cover - abstract
        raise NotImplementedError


class TqdmEma(_RateBaseline):
    """tqdm's ETA: exponential moving average of time per unit, ``smoothing=alpha``.

    As tqdm's ``EMA``: ``ema = α·x + (1−α)·ema`` per update, divided by ``1 − (1−α)^k``
    (bias correction), so the first update is the first interval itself.
    """

    method = "tqdm_ema"

    def __init__(self, alpha: float = 0.3) -> None:
        self.alpha = alpha

    def per_epoch(self, run: Run) -> float:
        per_epoch, _w, _e = intervals(run)
        if len(per_epoch) == 0:
            raise InsufficientData("tqdm EMA needs one epoch interval")
        ema, beta = 0.0, 1.0 - self.alpha
        for x in per_epoch:
            ema = self.alpha * x + beta * ema
        return ema / (1.0 - beta ** len(per_epoch))


class KerasMean(_RateBaseline):
    """Keras' progress bar: mean time per unit since the end of the first one."""

    method = "keras_mean"

    def per_epoch(self, run: Run) -> float:
        times = run.epoch_times
        if len(times) < 2:
            raise InsufficientData("Keras mean needs one epoch interval")
        if len(times) == 2:
            (e0, t0), (e1, t1) = times
            return (t1 - t0) / (e1 - e0)
        (e1, t1), (en, tn) = times[1], times[-1]
        return (tn - t1) / (en - e1)


class CumulativeMean(_RateBaseline):
    """Elapsed / done × remaining: the simplest ETA."""

    method = "cumulative_mean"

    def per_epoch(self, run: Run) -> float:
        if len(run.epoch_times) < 2 or run.epochs_done <= 0:
            raise InsufficientData("cumulative mean needs one epoch interval")
        return (run.last_timestamp - run.start_timestamp) / run.epochs_done


class PredictLinear:
    """Prometheus ``predict_linear(gpu_eta_training_epoch[W], …)`` solved for the plan.

    Least squares of epoch on time over the epoch-end samples in the trailing window
    ``W`` (``window_seconds``, or ``window_ratio`` of the elapsed time when unset; at
    least the last two samples), then the time the line reaches ``epochs_planned``.
    """

    method = "predict_linear"

    def __init__(self, window_seconds: float | None = None, window_ratio: float = 0.5) -> None:
        self.window_seconds = window_seconds
        self.window_ratio = window_ratio

    def fit(self, history: Sequence[Run]) -> PredictLinear:
        self.n_history_ = len(history)
        return self

    def predict(self, run: Run, now: float, stalled: bool = False) -> Forecast:
        if not hasattr(self, "n_history_"):
            raise NotFittedError("PredictLinear.predict called before fit")
        if remaining_epochs(run) <= 0:
            return _point(0.0, self.method)
        pts = np.asarray(run.epoch_times, dtype=float)
        if len(pts) < 2:
            raise InsufficientData("predict_linear needs two samples")
        elapsed = max(0.0, now - run.start_timestamp)
        window = (
            self.window_seconds if self.window_seconds is not None else self.window_ratio * elapsed
        )
        sel = pts[pts[:, 1] >= now - window]
        if len(sel) < 2:
            sel = pts[-2:]
        t, e = sel[:, 1], sel[:, 0]
        t_mean = t.mean()
        sxx = float(np.sum((t - t_mean) ** 2))
        if sxx <= 0:
            raise InsufficientData("predict_linear: samples share one timestamp")
        slope = float(np.sum((t - t_mean) * (e - e.mean())) / sxx)
        if slope <= 0:
            raise InsufficientData("predict_linear: no progress in the window")
        at_plan = t_mean + (run.epochs_planned - e.mean()) / slope
        return _point(at_plan - now, self.method, len(sel))


class HistoryMatch:
    """Median total duration of earlier completed runs of the same job, minus elapsed.

    Falls back to all earlier completed runs when the job is new.
    """

    method = "history_match"

    def fit(self, history: Sequence[Run]) -> HistoryMatch:
        by_job: dict[str, list[float]] = {}
        pooled: list[float] = []
        for run in history:
            if run.completed is not True:
                continue
            total = run.last_timestamp - run.start_timestamp
            pooled.append(total)
            key = job_key(run)
            if key:
                by_job.setdefault(key, []).append(total)
        self.medians_ = {key: statistics.median(v) for key, v in by_job.items()}
        self.pooled_median_ = statistics.median(pooled) if pooled else None
        self.n_history_ = len(history)
        return self

    def predict(self, run: Run, now: float, stalled: bool = False) -> Forecast:
        if not hasattr(self, "medians_"):
            raise NotFittedError("HistoryMatch.predict called before fit")
        if remaining_epochs(run) <= 0:
            return _point(0.0, self.method)
        total = self.medians_.get(job_key(run), self.pooled_median_)
        if total is None:
            raise InsufficientData("history match: no earlier completed run")
        return _point(total - (now - run.start_timestamp), self.method)
