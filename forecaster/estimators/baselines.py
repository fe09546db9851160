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

import bisect
from collections.abc import Sequence

import numpy as np

from gpu_eta.forecaster.estimators.base import (
    InsufficientData,
    NotFittedError,
    remaining_epochs,
)
from gpu_eta.forecaster.estimators.prior import job_key
from gpu_eta.forecaster.estimators.rate import sorted_median
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
    """tqdm's ETA: its rate is an EMA of the units of each update over an EMA of its
    seconds (``_ema_dn() / _ema_dt()``, ``smoothing=alpha``), not an EMA of each
    interval's seconds per unit: the two differ when intervals span different numbers
    of units (a missed report, thinned points), and this baseline is what tqdm shows.

    Each EMA is ``ema = α·x + (1−α)·ema`` per update, divided by ``1 − (1−α)^k`` (bias
    correction, equal for both, so it cancels in the ratio).
    """

    method = "tqdm_ema"

    def __init__(self, alpha: float = 0.3) -> None:
        self.alpha = alpha

    def per_epoch(self, run: Run) -> float:
        if len(run.epoch_times) < 2:
            raise InsufficientData("tqdm EMA needs one epoch interval")
        widths, times = np.diff(np.asarray(run.epoch_times, dtype=float), axis=0).T
        ema_units = ema_seconds = 0.0
        beta = 1.0 - self.alpha
        for units, seconds in zip(widths, times, strict=True):
            if seconds <= 0.0:  # tqdm leaves an update of no time out of its EMAs
                continue
            ema_units = self.alpha * units + beta * ema_units
            ema_seconds = self.alpha * seconds + beta * ema_seconds
        if ema_units <= 0.0:
            raise InsufficientData("tqdm EMA needs an interval that took time")
        return float(ema_seconds / ema_units)


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
        if len(run.epoch_times) < 2:
            raise InsufficientData("predict_linear needs two samples")
        elapsed = max(0.0, now - run.start_timestamp)
        window = (
            self.window_seconds if self.window_seconds is not None else self.window_ratio * elapsed
        )
        if len(run.epoch_times) <= SMALL_SAMPLES:
            return self._predict_small(run, now, window)
        pts = np.asarray(run.epoch_times, dtype=float)
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

    def _predict_small(self, run: Run, now: float, window: float) -> Forecast:
        """``predict`` on Python floats for a run of ≤ ``SMALL_SAMPLES`` samples.

        Why: it runs for every running job in every cycle (``choice.rate_candidates``),
        and numpy's per-call overhead on 2–20 samples was most of its cost. The same
        arithmetic, sums in numpy's order (``numpy_sum``), so the results are equal.
        """
        pts = [(float(e), float(t)) for e, t in run.epoch_times]
        sel = [p for p in pts if p[1] >= now - window]
        if len(sel) < 2:
            sel = pts[-2:]
        t = [p[1] for p in sel]
        e = [p[0] for p in sel]
        n = len(sel)
        t_mean = numpy_sum(t) / n
        dt = [v - t_mean for v in t]
        sxx = numpy_sum([d * d for d in dt])
        if sxx <= 0:
            raise InsufficientData("predict_linear: samples share one timestamp")
        e_mean = numpy_sum(e) / n
        slope = numpy_sum([d * (v - e_mean) for d, v in zip(dt, e, strict=True)]) / sxx
        if slope <= 0:
            raise InsufficientData("predict_linear: no progress in the window")
        at_plan = t_mean + (run.epochs_planned - e_mean) / slope
        return _point(at_plan - now, self.method, n)


SMALL_SAMPLES = 64
"""Up to this many samples ``PredictLinear`` computes on Python floats (see
``PredictLinear._predict_small``); beyond, numpy."""


def numpy_sum(values: Sequence[float], start: int = 0, n: int | None = None) -> float:
    """``np.sum`` of a float64 sequence, bit for bit: numpy's pairwise summation
    (sequential below 8 values, eight interleaved partial sums up to 128, halves
    beyond), so a plain-float path rounds exactly as the array path does."""
    n = len(values) - start if n is None else n
    if n < 8:
        res = 0.0
        for i in range(start, start + n):
            res += values[i]
        return res
    if n <= 128:
        r = list(values[start : start + 8])
        end = n - n % 8
        for i in range(8, end, 8):
            for j in range(8):
                r[j] += values[start + i + j]
        res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]))
        for i in range(end, n):
            res += values[start + i]
        return res
    half = n // 2
    half -= half % 8
    return numpy_sum(values, start, half) + numpy_sum(values, start + half, n - half)


class HistoryMatch:
    """Median total duration of earlier completed runs of the same job, minus elapsed.

    Falls back to all earlier completed runs when the job is new. ``update`` learns
    runs that ended since ``fit`` (the answers those of a ``fit`` on all of them), so
    a backtest that asks it at every moment about the runs ended before reads each
    run once, not every earlier run each time (n²/2 reads for n runs).
    """

    method = "history_match"

    def fit(self, history: Sequence[Run]) -> HistoryMatch:
        self._durations: dict[str, list[float]] = {}
        self._pooled: list[float] = []
        self.medians_: dict[str, float] = {}
        self.pooled_median_: float | None = None
        self.n_history_ = 0
        self.update(history)
        return self

    def update(self, new_runs: Sequence[Run]) -> HistoryMatch:
        """Learn ``new_runs`` on top of what was learnt: only these are read. Unlike
        ``EtaModel.update`` and the priors' (given the whole history each time), pass
        only runs not given before: a run given twice counts twice in the medians.

        Why sorted lists: each job's durations stay in order as runs arrive
        (``insort``), so a median is one or two reads by index, and only the medians
        of the jobs a new run belongs to are taken again."""
        if not hasattr(self, "_pooled"):
            raise NotFittedError("HistoryMatch.update called before fit")
        touched: set[str] = set()
        for run in new_runs:
            if run.completed is not True:
                continue
            total = run.last_timestamp - run.start_timestamp
            bisect.insort(self._pooled, total)
            key = job_key(run)
            if key:
                bisect.insort(self._durations.setdefault(key, []), total)
                touched.add(key)
        for key in touched:
            self.medians_[key] = sorted_median(self._durations[key])
        if self._pooled:
            self.pooled_median_ = sorted_median(self._pooled)
        self.n_history_ += len(new_runs)
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
