"""Combined estimate: the history prior weighs less as the run's own evidence grows.

Why precision weighting in log space: the prior (``prior.py``) and the run's own rate
(``rate.py``) are two noisy measurements of the same log remaining time. Weighting
each by ``1/σ²`` makes the hand-over automatic and explainable: at 0 % only the prior
exists; early on a consistent job's prior (small σ, e.g. a job re-run many times at
the same batch size) dominates one or two noisy epochs; as epochs accrue the rate's
σ shrinks and it takes over; a wide prior (new job, pooled regression) barely
moves a rate that already has a few epochs. The raw interval here is not
calibrated: ``gpu_eta.forecaster.estimators.eta_model.EtaModel`` rescales it from measured residuals.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from gpu_eta.forecaster.estimators.base import (
    NotFittedError,
    at_now,
    lognormal_quantiles,
    ordered,
    remaining_epochs,
    stall_widen,
)
from gpu_eta.forecaster.estimators.memo import Memo
from gpu_eta.forecaster.estimators.prior import PriorEstimator
from gpu_eta.forecaster.estimators.rate import measured_points, own_rate, rate_sigma, watched
from gpu_eta.forecaster.forecast import Forecast
from gpu_eta.forecaster.runs import Run, counts_steps

REPLAYED_RATES: Memo[tuple[float, float, float, int] | None] = Memo(32768)
"""``own_rate`` of replayed moments (``components_for`` with ``before``), kept across
refits (``memo.py``): a replay of 600 runs reads ~10,000 (two Huber constants), and
each refit most of the last one's. Not for the live path, whose ``EtaModel._known``
keeps a running job's parts."""


def replayed_rate(
    run: Run, half_life_ratio: float, huber_c: float, warmup_excess: float
) -> tuple[float, float, float, int] | None:
    """``own_rate`` of a replayed ``run``, kept in ``REPLAYED_RATES`` under all it reads:
    the plan, the progress points, whether they count steps (``runs.counts_steps``),
    and the settings (the warm-up excess with its sign: ``-0.0`` is kept apart)."""
    key = (
        run.epochs_planned,
        run.epoch_times,
        counts_steps(run),
        half_life_ratio,
        huber_c,
        warmup_excess,
        math.copysign(1.0, warmup_excess),
    )
    return REPLAYED_RATES.get(
        key,
        lambda: own_rate(
            run, half_life_ratio=half_life_ratio, huber_c=huber_c, warmup_excess=warmup_excess
        ),
    )


@dataclass(frozen=True)
class RawEstimate:
    """Log remaining seconds from the last epoch end, its log-sd, and provenance."""

    center: float
    sigma: float
    method: str  # "rate", "prior" or "blend"
    n_obs: int
    prior_weight: float
    # the two parts' log-sds as weighed (floors and tuned scales applied; rate None when
    # the prior stands alone): what a bench needs to try another rule of combining them
    prior_sigma: float = math.nan
    rate_sigma: float | None = None


@dataclass(frozen=True, slots=True)
class Components:
    """The two measurements before weighting, so weights can be tuned cheaply.

    ``rate`` is ``own_rate``'s ``(log seconds per epoch, scale, n_eff, n)`` or None.
    """

    prior_center: float
    prior_sigma: float
    prior_n: int
    rate: tuple[float, float, float, int] | None
    remaining: float
    done: float  # the progress the rate watched (``rate.watched``)
    prior_level: str = ""  # PriorEstimate.level: "job_batch", "job", "regression", …
    rate_floor: float = 0.0  # the cluster's measured error of own rates (EtaModel sets it)
    prior_floor: float = 0.0  # the same for a same-job prior (EtaModel sets it)
    # a same-job prior's measured weight against the rate (EtaModel sets it; None:
    # precision weights decide)
    prior_mix: float | None = None

    @property
    def rate_center(self) -> float | None:
        """Log remaining seconds by the run's own rate alone (None before any interval)."""
        if self.rate is None:
            return None
        return self.rate[0] + math.log(max(self.remaining, 1e-9))

    def combine(
        self, drift: float, prior_scale: float, job_prior_scale: float | None = None
    ) -> RawEstimate:
        """Precision-weighted estimate for a drift and prior-sigma multipliers.

        ``job_prior_scale`` multiplies a same-job-same-batch prior's sigma (default:
        ``prior_scale``); ``prior_scale`` the weaker levels' (see ``EtaModel``).
        """
        s_p = self.prior_sigma * (
            job_prior_scale
            if job_prior_scale is not None and self.prior_level == "job_batch"
            else prior_scale
        )
        s_p = max(s_p, self.prior_floor)
        if self.rate is None:
            # The prior alone: at most its own spread (the calibrator widens it as
            # measured). A tuned multiplier above 1 only says "weigh the prior less
            # against a rate"; applied to a prior standing alone it made a
            # history-only P90 hours past a P50 of minutes (×8 at 0 % progress).
            alone = max(min(s_p, self.prior_sigma), self.prior_floor)
            return RawEstimate(self.prior_center, alone, "prior", self.prior_n, 1.0, alone)
        _center, scale, n_eff, n = self.rate
        mu_r = self.rate_center
        s_r = max(rate_sigma(scale, n_eff, self.remaining, self.done, drift, n), self.rate_floor)
        mu, sigma, w_p = combine((mu_r, s_r), (self.prior_center, s_p))
        if self.prior_mix is not None and self.prior_level == "job_batch":
            w_p = self.prior_mix
            mu = w_p * self.prior_center + (1.0 - w_p) * mu_r
        return RawEstimate(mu, sigma, "blend", n, w_p, s_p, s_r)


class PartColumns(NamedTuple):
    """Many samples' ``Components`` as arrays, one per field ``combine_many`` reads."""

    prior_center: np.ndarray
    prior_sigma: np.ndarray
    job_batch: np.ndarray  # bool: the prior is the same job at the same batch size
    prior_floor: np.ndarray
    has_rate: np.ndarray  # bool
    rate_center: np.ndarray  # 0 without a rate
    rate_scale: np.ndarray  # 1 without a rate
    rate_n_eff: np.ndarray  # 1 without a rate
    rate_n: np.ndarray  # 0 without a rate
    remaining: np.ndarray
    done: np.ndarray
    rate_floor: np.ndarray
    prior_mix: np.ndarray  # NaN where precision weights decide


def part_columns(parts: Sequence[Components]) -> PartColumns:
    """``parts`` as ``PartColumns``, for ``combine_many``.

    Why apart: ``tuning.tune`` combines the same samples at every (drift, prior scale)
    of its grid; reading thousands of dataclasses into arrays cost more than the
    arithmetic, so it is done once per sample list.
    """
    n = len(parts)
    return PartColumns(
        prior_center=np.fromiter((c.prior_center for c in parts), float, n),
        prior_sigma=np.fromiter((c.prior_sigma for c in parts), float, n),
        job_batch=np.fromiter((c.prior_level == "job_batch" for c in parts), bool, n),
        prior_floor=np.fromiter((c.prior_floor for c in parts), float, n),
        has_rate=np.fromiter((c.rate is not None for c in parts), bool, n),
        rate_center=np.fromiter((c.rate[0] if c.rate else 0.0 for c in parts), float, n),
        rate_scale=np.fromiter((c.rate[1] if c.rate else 1.0 for c in parts), float, n),
        rate_n_eff=np.fromiter((c.rate[2] if c.rate else 1.0 for c in parts), float, n),
        rate_n=np.fromiter((c.rate[3] if c.rate else 0 for c in parts), float, n),
        remaining=np.fromiter((c.remaining for c in parts), float, n),
        done=np.fromiter((c.done for c in parts), float, n),
        rate_floor=np.fromiter((c.rate_floor for c in parts), float, n),
        prior_mix=np.fromiter(
            (
                c.prior_mix if c.prior_mix is not None and c.prior_level == "job_batch" else np.nan
                for c in parts
            ),
            float,
            n,
        ),
    )


def combine_many(
    parts: Sequence[Components] | PartColumns,
    drift: float,
    prior_scale: float,
    job_prior_scale: float | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """``Components.combine`` over many samples at once: ``(centers, sigmas)``;
    ``parts`` as given or already read into arrays (``part_columns``).

    Vectorised because the model tunes the weights over a grid on thousands of past
    predictions every fit; equal to the scalar path (tests check it).
    """
    cols = parts if isinstance(parts, PartColumns) else part_columns(parts)
    p_c = cols.prior_center
    p_s = cols.prior_sigma * prior_scale
    if job_prior_scale is not None:
        p_s = np.where(cols.job_batch, p_s * (job_prior_scale / prior_scale), p_s)
    floors = cols.prior_floor
    p_s = np.maximum(p_s, floors)
    p_alone = np.maximum(np.minimum(p_s, cols.prior_sigma), floors)
    has = cols.has_rate
    r_c, r_s, r_n, r_k = cols.rate_center, cols.rate_scale, cols.rate_n_eff, cols.rate_n
    rem, done = cols.remaining, cols.done
    mu_r = r_c + np.log(np.maximum(rem, 1e-9))
    m = np.maximum(rem, 1e-9)
    # rate.intervals_ahead, vectorised
    ahead = np.where(
        (r_k > 0) & (done > 0),
        np.maximum(rem, 0.0) * r_k / np.maximum(done, 1e-300),
        np.maximum(rem, 0.0),
    )
    s_r = np.sqrt(
        r_s**2 / r_n
        + r_s**2 / np.maximum(ahead, 1.0)
        + (drift * m / (np.maximum(done, 1e-9) + m)) ** 2
    )
    s_r = np.maximum(s_r, cols.rate_floor)
    w_r, w_p = 1.0 / s_r**2, 1.0 / p_s**2
    total = w_r + w_p
    center = np.where(has, (w_r * mu_r + w_p * p_c) / total, p_c)
    mix = cols.prior_mix
    mixed = has & np.isfinite(mix)
    center = np.where(mixed, mix * p_c + (1.0 - mix) * mu_r, center)
    sigma = np.where(has, np.sqrt(1.0 / total), p_alone)
    return center, sigma


def combine(
    rate: tuple[float, float] | None, prior: tuple[float, float]
) -> tuple[float, float, float]:
    """Precision-weighted mean of two log estimates: ``(center, sigma, prior_weight)``."""
    mu_p, s_p = prior
    if rate is None:
        return mu_p, s_p, 1.0
    mu_r, s_r = rate
    w_r, w_p = 1.0 / s_r**2, 1.0 / s_p**2
    total = w_r + w_p
    return (w_r * mu_r + w_p * mu_p) / total, math.sqrt(1.0 / total), w_p / total


class BlendEstimator:
    """Prior + own rate, precision weighted; uncalibrated log-normal quantiles."""

    def __init__(
        self,
        drift: float = 0.25,
        prior_scale: float = 1.0,
        half_life_ratio: float = 0.25,
        huber_c: float = 2.0,
        max_regression_runs: int = 5000,
        max_job_runs: int = 50,
        pooled: str = "rlm",
        random_state: int | None = None,
    ) -> None:
        self.drift = drift
        self.prior_scale = prior_scale
        self.half_life_ratio = half_life_ratio
        self.huber_c = huber_c
        self.max_regression_runs = max_regression_runs
        self.max_job_runs = max_job_runs
        self.pooled = pooled
        self.random_state = random_state

    def fit(self, history: Sequence[Run]) -> BlendEstimator:
        """Fit the prior on finished runs; the rate needs no fitting."""
        self.prior_ = PriorEstimator(
            max_regression_runs=self.max_regression_runs,
            max_job_runs=self.max_job_runs,
            pooled=self.pooled,
            random_state=self.random_state,
        ).fit(history)
        self.n_history_ = self.prior_.n_history_
        return self

    def components(
        self, run: Run, before: float | None = None, huber_c: float | None = None
    ) -> Components:
        """Prior and rate parts of ``run`` as of its last epoch end.

        ``before`` restricts the job prior to runs that ended before it (calibration's
        temporal prefix); the live path leaves it ``None``.
        """
        c = self.huber_c if huber_c is None else huber_c
        return self.components_for(run, before, (c,))[0]

    def components_for(
        self, run: Run, before: float | None, huber_cs: Sequence[float]
    ) -> tuple[Components, ...]:
        """``components`` for several Huber constants, sharing the prior lookup."""
        if not hasattr(self, "prior_"):
            raise NotFittedError("BlendEstimator used before fit")
        mu_p, s_p, est = self.prior_.log_remaining(run, before)
        m, done = remaining_epochs(run), watched(measured_points(run))
        warm = self.prior_.warmup_excess(run, before) if len(run.epoch_times) < 4 else 0.0
        out = []
        for c in huber_cs:
            if before is None:  # the live path
                rate = own_rate(
                    run, half_life_ratio=self.half_life_ratio, huber_c=c, warmup_excess=warm
                )
            else:  # a replayed moment: most refits read it again (``REPLAYED_RATES``)
                rate = replayed_rate(run, self.half_life_ratio, c, warm)
            out.append(Components(mu_p, s_p, est.n_obs, rate, m, done, est.level))
        return tuple(out)

    def raw(
        self,
        run: Run,
        before: float | None = None,
        drift: float | None = None,
        prior_scale: float | None = None,
    ) -> RawEstimate:
        """The raw log estimate for ``run`` (weights from the arguments or ``__init__``)."""
        return self.components(run, before).combine(
            self.drift if drift is None else drift,
            self.prior_scale if prior_scale is None else prior_scale,
        )

    def predict(self, run: Run, now: float, stalled: bool = False) -> Forecast:
        if not hasattr(self, "prior_"):
            raise NotFittedError("BlendEstimator.predict called before fit")

        def estimate() -> tuple[RawEstimate, tuple[float, float, float]]:
            raw = self.raw(run)
            return raw, lognormal_quantiles(raw.center, raw.sigma)

        return blend_forecast(self.prior_, run, now, stalled, estimate)


def blend_forecast(
    prior: PriorEstimator,
    run: Run,
    now: float,
    stalled: bool,
    estimate: Callable[[], tuple[RawEstimate, tuple[float, float, float]]],
) -> Forecast:
    """The Forecast of a blend from its quantiles at the last epoch end.

    Why shared: ``BlendEstimator`` (raw log-normal quantiles) and ``EtaModel``
    (calibrated ones) differ only in ``estimate``; a finished run is 0, a stalled
    one holds and widens, anything else is shifted to ``now`` (never into the past).
    """
    if remaining_epochs(run) <= 0:
        return Forecast(
            0.0, 0.0, 0.0, method="blend", converged=prior.converged_, warnings=prior.warnings_
        )
    raw, q = estimate()
    q = stall_widen(q, run, now) if stalled else at_now(q, run, now)
    return Forecast(
        *ordered(*q),
        method=raw.method,
        n_obs=raw.n_obs,
        stalled=stalled,
        converged=prior.converged_,
        warnings=prior.warnings_,
    )
