"""``EtaModel``: the one object the service and ``evaluate`` use — blend + calibration.

Why a facade: the service (H5) needs ``fit(history)`` once per cycle and
``predict(run, now)`` per running job, plus the measured quality it publishes; it
should not know there is a prior, a rate and a calibrator inside.

``fit`` (budget: well under a second or two on 50,000 runs) does three things:

1. fits the blend's prior (``estimators/prior.py``; regression on the most recent
   ``max_regression_runs``, job groups capped at ``max_job_runs``);
2. replays the most recent ``max_calibration_runs`` completed runs at each progress
   point (start, and the last epoch seen at 10/25/50/75/90/95 %, and once in its last
   interval: ``calibration_moments``), their job prior built only
   from runs that ended before that moment (temporal), the pooled regression fitted
   as it stood before the run (``PriorEstimator.held_out``), and collects normalised
   residuals of the raw estimate against the truth;
3. fits split-conformal z quantiles per bin on them (``calibration.py``) and
   measures leave-later-out quality, ``quality_`` (and ``tails_``, the shares below
   P10 and above P90); a bin whose measured coverage falls short of the target has
   each tail's level moved by that tail's excess misses (once, ``_levels``), and
   ``quality_`` is re-measured with them; without analogs, a job whose replayed
   forecasts share a bias beyond that calibration's shift gets its own
   (``_job_shifts``); before all this, each job's unit is scaled by how wide its
   replayed forecasts miss against the others' (``_job_scales``).

Why 600 replayed runs (``max_calibration_runs``): every choice, calibration bin and job
shift above is measured per situation and point, and the situations without analogs
are a small share of a cluster's recent runs, so with 300 they rarely held the samples
a choice needs. Chosen on MLPerf v0.5–v1.1 among 300, 600 and 1,000 (gpu-eta ÷ best
baseline at 50 / 75 %: 0.47 / 0.54, 0.41 / 0.49, 0.43 / 0.52) and confirmed on
v2.0–v2.1 (0.42 / 0.48 → 0.39 / 0.42); a fit costs little more (3.0–3.4 s on 4,297
MLPerf runs either way; 3.6–3.8 → 4.1–4.2 s on the cluster bench's 100,000).

``predict`` is then pure arithmetic per run (≈ 0.08 ms on MLPerf runs,
``bench/predict_speed.py``): raw estimate → calibrated quantiles → shifted to ``now``
(time since the last epoch end counts, never into the past) or, for a stalled run,
held and widened. The costly parts of a run's estimate are kept per run content
(``_known``), so a run with nothing new since the last cycle costs little more than
the calibration and the shift.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from gpu_eta.forecaster.calibration import (
    BINS,
    END,
    POINTS,
    SIGMA_POWER,
    SPAN_POINTS,
    Calibrator,
    Level,
    Residual,
    applied_shift,
    bias_shift,
    group_scales,
    group_shifts,
    measure_tails,
    progress_point,
    shifted_errors,
    tails,
    with_late_bins,
)
from gpu_eta.forecaster.errors import ForecasterError
from gpu_eta.forecaster.estimators.analog import AnalogEstimate, AnalogEstimator, identity
from gpu_eta.forecaster.estimators.base import NotFittedError
from gpu_eta.forecaster.estimators.blend import (
    BlendEstimator,
    Components,
    RawEstimate,
    blend_forecast,
    combine_many,
)
from gpu_eta.forecaster.estimators.choice import (
    DEFAULTS,
    OPTIONS,
    SELF_CHECK,
    SITUATIONS,
    Option,
    centre,
    choose,
    own_centre,
    own_discount,
    rate_candidates,
    situation,
)
from gpu_eta.forecaster.estimators.prior import HOLDOUT_SPAN, NUMERIC_RAW, job_key
from gpu_eta.forecaster.estimators.rate import weighted_median
from gpu_eta.forecaster.estimators.selfcheck import Cut, analog_trust
from gpu_eta.forecaster.forecast import Forecast
from gpu_eta.forecaster.runs import Run


def truncate(run: Run, point: float) -> Run:
    """``run`` as it looked at its last epoch end at or before ``point`` of its plan."""
    limit = point * run.epochs_planned + 1e-9
    times = tuple(et for et in run.epoch_times if et[0] <= limit)
    return dataclasses.replace(run, epoch_times=times, completed=None)


def replay_moments(run: Run) -> Iterator[tuple[float, Run]]:
    """``(point, run as it looked then)`` at each of ``POINTS`` (``truncate``): each
    moment once, at the first point that reaches it (a run of ten epochs is at its
    ninth at 90 and at 95 %), none that shows the whole run or has no time left.

    Why one function: the backtest (``evaluate.replay_events``) must score a past run
    at the moments the calibration replays it (``calibration_moments``: these, and one
    of the last interval, which the backtest does not score).
    """
    seen: set[int] = set()
    for point in POINTS:
        part = truncate(run, point)
        n_seen = len(part.epoch_times)
        if n_seen in seen or n_seen == len(run.epoch_times):
            continue
        seen.add(n_seen)
        if run.last_timestamp > part.last_timestamp:
            yield point, part


def calibration_moments(run: Run) -> Iterator[tuple[float, Run]]:
    """``replay_moments``, and one moment of the run's last interval for the ``END``
    bin: the middle one of its progress points past 95 % of the plan (before its end,
    with time left).

    Why: a live run past 95 % takes the ``END`` bin, and a calibration replayed only up
    to 95 % never saw what is left then (the last steps and the stop). Why the middle
    one: a live run is forecast at each of those points; its last alone (one step
    before the end, on step-level runs) is not what most of them look like. Only the
    calibration replays it: ``evaluate`` scores ``POINTS``."""
    yield from replay_moments(run)
    if run.epochs_planned <= 0:
        return
    times, end = run.epoch_times, run.last_timestamp
    late = [
        k
        for k in range(1, len(times) - 1)
        if times[k][1] < end  # time left
        and progress_point(min(1.0, times[k][0] / run.epochs_planned)) == END
    ]
    if late:
        k = late[len(late) // 2]
        yield END, dataclasses.replace(run, epoch_times=times[: k + 1], completed=None)


PLAIN_MEAN = 1e9  # a Huber constant so large that no epoch is down-weighted
DRIFT_GRID = (0.05, 0.1, 0.2, 0.4, 0.8)
PRIOR_SCALE_GRID = (0.5, 1.0, 2.0, 4.0, 8.0, 1000.0)  # 1000: the prior ignored
MAX_MIX_CUTS = 32  # epoch ends per past run used to measure a job prior's weight
MIX_BUDGET = 1000  # ... and in all (~0.15 ms each: ~0.15 s of a fit)
POWERS = {"analog": 1.0}
"""Per situation, the power of sigma that is the unit of its residuals (default
``sigma_power``, 0.5). Analogs: 1, the usual studentised score, because their spread
is a measured dispersion of this configuration's own runs (see ``analog.py``)."""
MEMO_MAX = 50_000
"""Runs whose costly parts ``EtaModel._known`` keeps (one entry per running job; runs
that ended linger until the next fit). About 2.5 KB each on MLPerf-sized runs (1.5 KB
of parts, plus the epoch ends the entry still holds once the cycle's ``Run`` objects
are rebuilt): 25 MB at 10,000 running jobs, ≤ ~125 MB before it is cleared."""
T = TypeVar("T")
MIX_SCALE = 0.05  # a departure from the job's usual speed (log) worth one full sample


@dataclass(frozen=True, slots=True)
class _Sample:
    """A past run truncated at a point: the raw parts and the true log remaining."""

    point: float
    parts: tuple[Components, ...]  # one per Huber constant of EtaModel._huber_grid()
    actual: float
    timestamp: float
    analog: AnalogEstimate | None = None  # from runs of the same identity that ended before
    rates: Mapping[str, float] = dataclasses.field(default_factory=dict)  # choice.rate_candidates
    trust: float | None = None  # the analogs' self-check on the run's own past (selfcheck.py)
    job: str = ""  # prior.job_key of the run: the key of its job shift (EtaModel._job_shifts)


def shift_cap(name: str, parts: Components, rates: Mapping[str, float]) -> float | None:
    """The cap on a forecast's positive calibration shift in situation ``name``: the
    run's own discount of its slow epochs without analogs (``choice.own_discount``: a
    shift puts back that cost, and one job filling the replay otherwise sets it for
    all), none with analogs, whose centre is not the run's rate. One rule for the
    replayed forecasts (``fit``) and the published ones (``predict``)."""
    return None if name == "analog" else own_discount(parts, rates)


def takes_job_shift(name: str, parts: Components, cap: float | None) -> bool:
    """Whether a forecast in situation ``name`` (its run's ``parts``, its ``shift_cap``
    ``cap``) gets its job's shift: in "new" not while its centre reads one or two
    intervals.

    Why: a job shift is a bias by job name on any hardware, the job's shape (evaluation
    passes, a slow last stretch). Until the robust rate drops its first interval, a new
    job's centre is the first intervals' reading, and what biases it is the start-up,
    the system's data loading and compilation, not the job's. MLPerf configurations
    never run before, v0.5–v1.1 at 10 %: 2.83 % with it, 2.26 % without (v2.0–v2.1
    3.35 / 3.28 %); docs/forecasting-evidence.md, "Calibration and quality". One rule
    for ``fit`` and ``predict``.
    """
    return name != "new" or parts.rate is None or cap is not None


def samples_in_order(samples: Sequence[_Sample]) -> list[_Sample]:
    """``samples`` in the order ``EtaModel._residuals`` returns their residuals."""
    return [s for point in BINS for s in samples if s.point == point]


class EtaModel:
    """gpu-eta's forecaster: precision-weighted prior + own rate, conformally calibrated."""

    def __init__(
        self,
        random_state: int | None = None,
        coverage: float = 0.8,
        max_calibration_runs: int = HOLDOUT_SPAN,
        max_regression_runs: int = 5000,
        max_job_runs: int = 50,
        min_samples: int = 8,
        min_tune_samples: int = 20,
        drift: float = 0.1,
        prior_scale: float = 8.0,
        job_prior_scale: float = 1.0,
        shift_prior: float = 20.0,
        tune_margin: float = 0.1,
        half_life_ratio: float = 0.25,
        huber_c: float = 2.0,
        pooled: str = "rlm",
        tail_levels: str = "per_tail",
        sigma_power: float = SIGMA_POWER,
        measured_mix: bool = True,
        min_mix_samples: int = 12,
        job_shift_prior: float = 5.0,
        job_scale_prior: float = 5.0,
    ) -> None:
        self.random_state = random_state
        self.coverage = coverage
        self.max_calibration_runs = max_calibration_runs
        self.max_regression_runs = max_regression_runs
        self.max_job_runs = max_job_runs
        self.min_samples = min_samples
        self.min_tune_samples = min_tune_samples
        self.drift = drift
        self.prior_scale = prior_scale
        self.job_prior_scale = job_prior_scale
        self.shift_prior = shift_prior
        self.tune_margin = tune_margin
        self.half_life_ratio = half_life_ratio
        self.huber_c = huber_c
        self.pooled = pooled
        if tail_levels not in ("per_tail", "symmetric"):
            raise ForecasterError(
                f"tail_levels must be 'per_tail' or 'symmetric', got {tail_levels!r}"
            )
        self.tail_levels = tail_levels
        self.sigma_power = sigma_power
        self.measured_mix = measured_mix
        self.min_mix_samples = min_mix_samples
        self.job_shift_prior = job_shift_prior
        self.job_scale_prior = job_scale_prior

    def fit(self, history: Sequence[Run]) -> EtaModel:
        """Learn from finished runs (``completed`` True or False); returns ``self``."""
        blend = BlendEstimator(
            half_life_ratio=self.half_life_ratio,
            huber_c=self.huber_c,
            max_regression_runs=self.max_regression_runs,
            max_job_runs=self.max_job_runs,
            pooled=self.pooled,
            random_state=self.random_state,
        ).fit(history)
        analog = AnalogEstimator().fit(history)
        samples = self._samples(blend, analog, history)
        self.rate_floor_, self.prior_floor_ = self._floors(samples)
        samples = [
            dataclasses.replace(s, parts=tuple(self._floored(c, s.point) for c in s.parts))
            for s in samples
        ]
        self.weights_ = self._tune(samples)
        self.mix_: dict[float, float] = {}
        if self.measured_mix:
            self.mix_ = self._mixes(blend, history, self.weights_)
            samples = [
                dataclasses.replace(
                    s,
                    parts=tuple(
                        dataclasses.replace(c, prior_mix=self.mix_.get(s.point)) for c in s.parts
                    ),
                )
                for s in samples
            ]
        residuals = self._residuals(samples, self.weights_)
        self.blend_ = blend
        self.analog_ = analog
        ordered_samples = samples_in_order(samples)
        grid = self._huber_grid()
        # each sample's parts at its point's tuned Huber constant, as predict computes them
        tuned = [smp.parts[grid.index(self.weights_[smp.point][0])] for smp in ordered_samples]
        cands = [
            self._candidates(r.center, smp.rates, smp.analog, smp.trust, parts)
            for r, smp, parts in zip(residuals, ordered_samples, tuned, strict=True)
        ]
        self.choice_: dict[str, dict[float, Option]] = {}
        where = [
            situation(smp.analog is not None, smp.parts[0].prior_level) for smp in ordered_samples
        ]
        moved: dict[str, list[Residual]] = {name: [] for name in SITUATIONS}
        jobs: dict[str, list[str]] = {}  # the job of each of ``moved``'s residuals
        shiftable: dict[str, list[bool]] = {}  # whether each takes its job's shift
        for name in SITUATIONS:
            idx = [i for i, w in enumerate(where) if w == name]
            jobs[name] = [ordered_samples[i].job for i in idx]
            caps = [shift_cap(name, tuned[i], ordered_samples[i].rates) for i in idx]
            shiftable[name] = [
                takes_job_shift(name, tuned[i], cap) for i, cap in zip(idx, caps, strict=True)
            ]
            self.choice_[name] = with_late_bins(  # END: 0.95's option
                choose(
                    [residuals[i].point for i in idx],
                    [residuals[i].actual for i in idx],
                    [cands[i] for i in idx],
                    OPTIONS[name],
                    all_points=POINTS,
                    default=DEFAULTS[name],
                    min_samples=self.min_tune_samples,
                    margin=self.tune_margin,
                    shift_prior=self.shift_prior,
                    # without analogs the replayed runs are other jobs': an option must
                    # win on the older and newer half alike, not where one job filled both
                    both_halves=name != "analog",
                    caps=caps,
                )
            )
            for i, cap in zip(idx, caps, strict=True):
                r = residuals[i]
                option = self.choice_[name][r.point]
                r = self._moved(r, option, cands[i], ordered_samples[i].analog)
                moved[name].append(dataclasses.replace(r, shift_cap=cap))
        self.job_scales_, moved = self._job_scales(moved, jobs)
        # each situation is calibrated on its own kind of past prediction (a run with
        # earlier runs of its configuration is forecast far better than one without);
        # a situation with too few residuals at a point uses the calibration of all
        everything = [r for name in SITUATIONS for r in moved[name]]
        self.calibrator_, self.levels_, measured = self._calibrate(everything)
        self.tails_ = {p: (lo, hi) for p, (_err, _cov, lo, hi) in measured.items()}
        self.calibrators_: dict[str, Calibrator] = {}
        # counted without the last interval's moments (one a run, not scored), so they
        # do not decide which calibration the other bins get
        n_all = sum(1 for r in everything if r.point != END)
        for name in SITUATIONS:
            n = sum(1 for r in moved[name] if r.point != END)
            if self.min_samples <= n < n_all:
                self.calibrators_[name] = self._calibrate(moved[name], POWERS.get(name))[0]
        self.job_shifts_ = self._job_shifts(moved, jobs, shiftable)
        # leave-later-out quality of all of them (each situation calibrated alike)
        self.quality_: Mapping[float, tuple[float, float]] = {
            p: (err, cov) for p, (err, cov, _lo, _hi) in measured.items()
        }
        self.n_residuals_ = len(everything)
        self.n_by_situation_ = {name: len(moved[name]) for name in SITUATIONS}
        self.n_samples_by_point_ = {p: sum(1 for r in everything if r.point == p) for p in BINS}
        self.n_history_ = len(history)
        return self

    def _calibrate(
        self, residuals: Sequence[Residual], power: float | None = None
    ) -> tuple[Calibrator, dict, Mapping[float, tuple[float, float, float, float]]]:
        """Split-conformal calibration on ``residuals``, its adjusted levels, and its
        leave-later-out quality (median error, coverage, tail shares) per point;
        residuals in units of ``sigma ** power`` (default ``sigma_power``)."""
        power = self.sigma_power if power is None else power
        measure = functools.partial(
            measure_tails,
            residuals,
            coverage=self.coverage,
            min_samples=self.min_samples,
            shift_prior=self.shift_prior,
            power=power,
        )
        measured = measure()
        levels = self._levels(measured)
        if levels:
            measured = measure(levels=levels)
        calibrator = Calibrator(
            coverage=self.coverage,
            min_samples=self.min_samples,
            shift_prior=self.shift_prior,
            power=power,
        ).fit(residuals, levels)
        return calibrator, levels, measured

    def _job_shifts(
        self,
        moved: Mapping[str, Sequence[Residual]],
        jobs: Mapping[str, Sequence[str]],
        shiftable: Mapping[str, Sequence[bool]],
    ) -> dict:
        """Per (situation, job, point) without analogs, the bias the job's replayed
        forecasts share after their calibration's shift (``calibration.group_shifts``),
        over those that take it (``shiftable``, ``takes_job_shift``).

        Why: without analogs the centre is read off the run itself (its rates, the
        blend), and what such a rate misses is the job's shape (evaluation passes the
        robust rate discounts, a slow last stretch), the same on any hardware, while
        the calibration's shift is one for all jobs of the situation. Measured on
        MLPerf runs of configurations never run before: at 50 / 75 % 0.96 / 0.61 % →
        0.78 / 0.57 % (v0.5–v1.1, where ``job_shift_prior`` 5 was chosen over 10),
        2.18 / 1.40 % → 2.05 / 1.29 % (v2.0–v2.1), within noise at 10 / 25 %
        (docs/forecasting-evidence.md, "Calibration and quality").
        """
        keys: list[tuple[str, str, float]] = []
        errors: list[float] = []
        for name in (s for s in SITUATIONS if s != "analog"):
            for r, job, takes in zip(moved[name], jobs[name], shiftable[name], strict=True):
                if job and takes:
                    shift = self._calibration(name, r.point)[0].bins_[r.point][0]
                    keys.append((name, job, r.point))
                    errors.append(r.actual - r.center - applied_shift(shift, r.shift_cap))
        return group_shifts(keys, errors, self.job_shift_prior)

    def _job_scales(
        self, moved: Mapping[str, Sequence[Residual]], jobs: Mapping[str, Sequence[str]]
    ) -> tuple[dict, dict[str, list[Residual]]]:
        """Per (situation, job, point), how wide the job's replayed forecasts miss against
        the situation's (``calibration.group_scales``), as a factor of sigma; and
        ``moved`` with each residual's sigma scaled by its factor measured without it.

        Why: calibration fits one set of quantiles per situation and point, in a unit
        (the blend's sigma, the analogs' spread) that does not know every job's
        accuracy. With analogs at 10 % the blend's sigma is mostly the cluster's
        measured rate error, the same for every job, while its misses differ tenfold:
        on MLPerf v2.0–v2.1 P10–P90 held 73 % of unet3d's outcomes and 91–92 % of
        resnet's and RNN-T's, so the coverage published for a cluster depended on its
        mix of jobs. Scaling each job's unit by its measured width makes the same
        quantiles fit each job (73–92 % → 80–88 %; docs/forecasting-evidence.md,
        "Calibration and quality"). A job is the job name (``prior.job_key``): how
        well a job is forecast is a property of its shape and carries over to other
        batch sizes and hardware. A job's width is shrunk toward the situation's by
        ``job_scale_prior`` pseudo-samples (5: a job with five replayed forecasts at a
        point is half its own, half everyone's; ``math.inf``: no job scales). A point
        needs ``min_tune_samples`` residuals of the situation; a run without a job name
        keeps factor 1.
        """
        factors: dict[tuple[str, str, float], float] = {}
        out: dict[str, list[Residual]] = {}
        for name in SITUATIONS:
            power = POWERS.get(name, self.sigma_power)
            scaled = list(moved[name])
            for point in BINS:
                idx = [i for i, r in enumerate(scaled) if r.point == point and jobs[name][i]]
                # the factor is on the situation's own unit (``power``); every
                # calibration is fitted on the sigmas scaled here, so whichever one
                # ``predict`` applies agrees with them (where all residuals are of one
                # situation that is everyone's, in ``sigma_power``: the factor's effect
                # is then its power-weighted share)
                if len(idx) < self.min_tune_samples:
                    continue
                errors = [scaled[i].actual - scaled[i].center for i in idx]
                shift = bias_shift(errors, self.shift_prior)
                scores = [
                    (e - applied_shift(shift, scaled[i].shift_cap))
                    / max(scaled[i].sigma, 1e-12) ** power
                    for e, i in zip(errors, idx, strict=True)
                ]
                by_job, left_out = group_scales(
                    [jobs[name][i] for i in idx], scores, self.job_scale_prior
                )
                for job, f in by_job.items():
                    factors[(name, job, point)] = f ** (1.0 / power)
                for i, f in zip(idx, left_out, strict=True):
                    scaled[i] = dataclasses.replace(
                        scaled[i], sigma=scaled[i].sigma * f ** (1.0 / power)
                    )
            out[name] = scaled
        return factors, out

    def _calibration(self, name: str, point: float) -> tuple[Calibrator, Calibrator | None]:
        """The calibration ``predict`` applies in situation ``name`` at ``point``, and
        the situation's own (None without one).

        The situation's own where it has ``min_samples`` residuals at ``point``
        (returned twice); else everyone's, and ``predict`` widens its bounds to the
        envelope with the situation's own (pooled over the other points) where that
        exists, but for runs with analogs. A method so that a bench can count which
        one each forecast took (``bench/calibration_paths.py``).

        Why no envelope with analogs: the envelope keeps a situation less accurate
        than most from inheriting the narrow bounds of the rest (a new job on a
        cluster of repeated ones). Runs with analogs are the most accurate forecasts
        there are, and where they are short at a point (early in a session)
        everyone's residuals are the same session's runs forecast without them; the
        envelope then held 94–97 % of their outcomes on the CPU recordings at 10 / 25 %
        (docs/forecasting-evidence.md, "Calibration and quality").
        """
        own = self.calibrators_.get(name)
        if own is None or own.n_.get(point, 0) < self.min_samples:
            # too few of this situation here: all of them
            return self.calibrator_, None if name == "analog" else own
        return own, own

    @staticmethod
    def _candidates(
        blend: float,
        rates: Mapping[str, float],
        analog: AnalogEstimate | None,
        trust: float | None = None,
        parts: Components | None = None,
    ) -> dict[str, float]:
        """Every candidate's log remaining seconds for one run, and the analogs'
        self-check trust (``choice.py``)."""
        out = {"blend": blend, **rates}
        if parts is not None and (own := own_centre(parts, rates)) is not None:
            out["own"] = own
        if analog is not None:
            out["analog"] = analog.log_remaining
            if trust is not None:
                out[SELF_CHECK] = trust
        return out

    @staticmethod
    def _moved(
        r: Residual, option: Option, cands: Mapping[str, float], analog: AnalogEstimate | None
    ) -> Residual:
        """``r`` with the centre of ``option`` (the blend where a candidate is missing)
        and, for the analogs' share, their spread in place of the blend's sigma."""
        c = centre(option, cands)
        if c is None:
            return r
        # the analogs' share of the centre, the self-check's trust included: their
        # spread measures how this configuration's runs differ, and the calibration
        # of a centre set by the analogs is in its units (POWERS). With the option's
        # own share only, a trusted analog centre kept the blend's sigma, one unit for
        # steady and noisy configurations alike (MLPerf fixture at 50 %: 0.68)
        share = sum(w for name, w in option if name == "analog")
        trust = cands.get(SELF_CHECK)
        if trust is not None and (SELF_CHECK, 0.0) in option:
            share = share + trust * (1.0 - share)
        if analog is None:
            sigma = r.sigma
        elif r.point == 0:
            # at the start (no epoch: no own rate) whatever the centre, the spread of
            # this configuration's runs is the unit: the blend's sigma there was one
            # unit for steady and noisy configurations alike (MLPerf fixture: BERT's
            # start intervals ±1 % against its runs' 3 %, coverage 70 %)
            sigma = analog.spread
        else:
            sigma = share * analog.spread + (1 - share) * r.sigma
        return dataclasses.replace(r, center=c, sigma=sigma)

    def _levels(self, measured: Mapping[float, tuple[float, float, float, float]]) -> dict:
        """Nominal levels for bins whose measured (leave-later-out) intervals miss.

        Drift makes the past a little too optimistic, so a bin whose measured
        coverage falls short gets its level raised by the shortfall, once (a
        one-step adaptive conformal inference). ``tail_levels="symmetric"`` raises
        the central coverage (both tails move alike, capped at 0.95);
        ``"per_tail"`` moves each bound by its own tail's excess misses (each tail
        capped at 0.025), because on a shared machine the misses are one-sided: a
        neighbour arriving makes runs longer than predicted, never shorter.
        """
        levels: dict[float, Level] = {}
        q_lo0, q_hi0 = tails(self.coverage)
        for p, (_err, cov, below, above) in measured.items():
            if not (math.isfinite(cov) and cov < self.coverage):
                continue
            if self.tail_levels == "symmetric":
                levels[p] = min(0.95, self.coverage + (self.coverage - cov))
            else:
                q_lo = max(0.025, q_lo0 - max(0.0, below - q_lo0))
                q_hi = min(0.975, q_hi0 + max(0.0, above - (1.0 - q_hi0)))
                levels[p] = (q_lo, q_hi)
        return levels

    def _samples(
        self, blend: BlendEstimator, analog: AnalogEstimator, history: Sequence[Run]
    ) -> list[_Sample]:
        """Replay recent completed runs at each point; job prior from earlier runs only."""
        done = [r for r in history if r.completed is True and len(r.epoch_times) >= 2]
        done.sort(key=lambda r: r.last_timestamp)
        done = done[-self.max_calibration_runs :] if self.max_calibration_runs > 0 else []
        out: list[_Sample] = []
        for run in done:
            end = run.last_timestamp
            for _point, part in calibration_moments(run):
                truth = end - part.last_timestamp
                end_before = part.last_timestamp
                found = analog.estimate(part, end_before)
                out.append(
                    _Sample(
                        point=progress_point(part.progress_ratio),
                        parts=blend.components_for(part, part.last_timestamp, self._huber_grid()),
                        actual=math.log(truth),
                        timestamp=part.last_timestamp,
                        analog=found,
                        rates=rate_candidates(part),
                        trust=None if found is None else self._trust(analog, part, end_before),
                        job=job_key(run),
                    )
                )
        return out

    def _floors(self, samples: Sequence[_Sample]) -> tuple[dict[float, float], dict[float, float]]:
        """The measured error of the run's own rate, and of a same-job prior, per point.

        Why: how much the epochs seen say about the epochs to come is a property of
        the cluster — a quiet dedicated GPU repeats its epochs within a few %, a
        shared node sees neighbours arrive and leave, so a run's early speed says
        little about its end, and an earlier run of the same job says more. The
        rate's model sigma knows only the run's own scatter and the prior's only
        how whole runs repeat, so the blend trusted the rate too much exactly where
        the job's history knew better (shared-machine runs at 10–50 %). Both are
        measured here on the same replayed past runs, with the same robust spread
        (1.4826·MAD of log remaining minus the truth, about its median: the bias is
        calibration's job), and become floors of the two sigmas at that point, so
        the precision weights rest on measured errors. None at a point until both
        have ``min_samples`` samples there. Like the pooled regression they are fitted on all replayed runs (a
        small, documented in-sample leak in ``quality_``).
        """
        rate: dict[float, float] = {}
        prior: dict[float, float] = {}
        for point in POINTS[1:]:
            r_err, p_err = [], []
            for s in samples:
                c = s.parts[0]
                if s.point != point or c.rate is None:
                    continue
                r_err.append(c.rate_center - s.actual)
                if c.prior_level == "job_batch":
                    p_err.append(c.prior_center - s.actual)
            # both or neither: a measured floor on one side only would tilt the
            # weights by what happens to be measured (the rate's error includes the
            # run's unknowable future, a prior's model sigma does not)
            if min(len(r_err), len(p_err)) >= self.min_samples:
                for errs, out in ((r_err, rate), (p_err, prior)):
                    arr = np.asarray(errs)
                    out[point] = float(1.4826 * np.median(np.abs(arr - np.median(arr))))
        return with_late_bins(rate), with_late_bins(prior)  # END: 0.95's

    def _floored(self, c: Components, point: float, mix: float | None = None) -> Components:
        """``c`` with this model's measured floors at ``point`` and a prior weight ``mix``
        (None: precision weights). The mix is passed, not read from ``self.mix_``: during
        a refit ``self.mix_`` still holds the previous fit's weights."""
        return dataclasses.replace(
            c,
            rate_floor=self.rate_floor_.get(point, 0.0),
            prior_floor=self.prior_floor_.get(point, 0.0) if c.prior_level == "job_batch" else 0.0,
            prior_mix=mix,
        )

    def _mixes(
        self,
        blend: BlendEstimator,
        history: Sequence[Run],
        weights: Mapping[float, tuple[float, float, float]],
    ) -> dict[float, float]:
        """The same-job prior's weight against the run's own rate, measured per point.

        Why: precision weights rest on two sigmas, and on a shared node neither
        describes the error that matters: a run's rate is right until a neighbour
        arrives or leaves (a bimodal error whose spread says little about the best
        weight) and a job's history averages over neighbours coming and going. What
        matters is how much of a run's current departure from its job's usual speed
        lasts until the end. So on past runs that had a same-job prior, at every
        epoch end (up to ``MAX_MIX_CUTS`` per run and ``MIX_BUDGET`` in all, evenly
        spaced), ``x`` = own rate −
        prior and ``y`` = truth − prior (log remaining seconds); the share of ``x``
        that persists, ``g``, is the median regression of ``y`` on ``x`` through the
        origin (the weighted median of ``y/x`` with weights ``|x|``), per progress bin,
        clipped to [0, 1]; the prior's weight is ``1 − g`` (a sparse late bin takes the
        bin before it, ``calibration.with_late_bins``). Every epoch end counts (up to
        ``MAX_MIX_CUTS`` a run), not just the replay points past the start, so the
        estimate settles with a few dozen runs. On a quiet node departures persist (``g`` ≈ 1,
        the rate decides); where neighbours come and go they fade, the more so the
        further ahead. A bin needs ``min_mix_samples`` (12) such epoch ends.
        """
        done = [r for r in history if r.completed is True and len(r.epoch_times) >= 3]
        done.sort(key=lambda r: r.last_timestamp)
        done = done[-self.max_calibration_runs :] if self.max_calibration_runs > 0 else []
        xs: dict[float, list[float]] = {p: [] for p in POINTS[1:]}
        ys: dict[float, list[float]] = {p: [] for p in POINTS[1:]}
        ws: dict[float, list[float]] = {p: [] for p in POINTS[1:]}
        per_run = min(MAX_MIX_CUTS, max(3, MIX_BUDGET // max(1, len(done))))
        for run in done:
            end, n = run.last_timestamp, len(run.epoch_times)
            cuts = np.linspace(2, n - 1, min(per_run, n - 2)).round().astype(int)
            for j in np.unique(cuts).tolist():
                part = dataclasses.replace(run, epoch_times=run.epoch_times[:j], completed=None)
                truth = end - part.last_timestamp
                if truth <= 0:
                    continue
                # past 95 %: the 95 % bin's, whose weight the last interval takes
                point = min(progress_point(part.progress_ratio), POINTS[-1])
                huber_c, drift, prior_scale = weights[point]
                c = blend.components_for(part, part.last_timestamp, (huber_c,))[0]
                if c.rate is None or c.prior_level != "job_batch":
                    continue
                scale = self._job_scale(prior_scale)
                precision = self._floored(c, point).combine(drift, prior_scale, scale)
                xs[point].append(c.rate_center - c.prior_center)
                ys[point].append(math.log(truth) - c.prior_center)
                ws[point].append(precision.prior_weight)
        out: dict[float, float] = {}
        for point in POINTS[1:]:
            x, y = np.asarray(xs[point]), np.asarray(ys[point])
            ok = np.abs(x) > 1e-6
            if int(ok.sum()) < self.min_mix_samples:
                continue
            g = weighted_median(y[ok] / x[ok], np.abs(x[ok]))
            measured = float(np.clip(1.0 - g, 0.0, 1.0))
            # departures far below MIX_SCALE barely move a forecast and say little
            # about how long a departure lasts: then the precision weights stand
            evidence = float(np.sum(np.abs(x[ok])))
            trust = evidence / (evidence + self.min_mix_samples * MIX_SCALE)
            out[point] = trust * measured + (1.0 - trust) * float(np.median(ws[point]))
        return with_late_bins(out)  # END: 0.95's

    def _job_scale(self, prior_scale: float) -> float:
        """The same-job-same-batch prior's sigma multiplier for a tuned ``prior_scale``.

        The job prior's sigma is measured (the pooled spread of repeated runs on this
        cluster), so it is taken at ``job_prior_scale`` (1: as measured) while the
        weaker levels (another batch size, the pooled regression, whose in-sample
        scale is optimistic) keep ``prior_scale``. A tuned ``prior_scale`` moves both
        by the same factor; "ignore the prior" ignores both.
        """
        return self.job_prior_scale * prior_scale / self.prior_scale

    def _huber_grid(self) -> tuple[float, ...]:
        """The configured Huber constant, and a plain (recency-weighted) log mean."""
        return (self.huber_c, PLAIN_MEAN) if self.huber_c != PLAIN_MEAN else (PLAIN_MEAN,)

    def _residuals(
        self, samples: Sequence[_Sample], weights: Mapping[float, tuple[float, float, float]]
    ) -> list[Residual]:
        grid = self._huber_grid()
        out = []
        for point in BINS:
            chosen = [s for s in samples if s.point == point]
            if not chosen:
                continue
            c, drift, prior_scale = weights[point]
            parts = [s.parts[grid.index(c)] for s in chosen]
            center, sigma = combine_many(parts, drift, prior_scale, self._job_scale(prior_scale))
            out.extend(
                Residual(s.point, float(c), float(sg), s.actual, s.timestamp)
                for s, c, sg in zip(chosen, center, sigma, strict=True)
            )
        return out

    def _tune(self, samples: Sequence[_Sample]) -> dict[float, tuple[float, float, float]]:
        """Pick, per progress bin, the rate's Huber constant (or a plain mean), its
        drift and the prior's sigma multiplier.

        The Huber constant decides whether slow epochs are spikes to discount or a
        slowdown to follow: it depends on the cluster too (evaluation passes vs
        neighbours whose load persists for many epochs).

        They set how fast the prior hands over to the run's own rate, which depends on
        the cluster (steady dedicated GPUs: a job repeats itself and the prior is
        worth a lot; contended or time-sliced ones: it is not). Scored on past runs by
        the median absolute error of the shift-corrected P50 (what calibration will
        publish; the shift unheld, as the blend is tuned for every situation at once,
        before the choice decides which runs publish it). The defaults stay unless
        another choice is better by ``tune_margin`` (10 %): on a few dozen runs a grid
        of 30 overfits. A bin with fewer than ``min_tune_samples`` samples takes the
        choice made on all bins pooled; with fewer than that overall, the defaults.
        """
        default = (self.huber_c, self.drift, self.prior_scale)
        grid = self._huber_grid()
        combos = [(c, d, p) for c in grid for d in DRIFT_GRID for p in PRIOR_SCALE_GRID]
        if default not in combos:
            combos.append(default)
        i_default = combos.index(default)
        points = np.array([s.point for s in samples])
        actual = np.array([s.actual for s in samples])
        parts_by_c = {c: [s.parts[i] for s in samples] for i, c in enumerate(grid)}
        # err[c][i]: error of sample i under combo c after its bin's shift
        errs = np.empty((len(combos), len(samples)))
        for c, (huber_c, drift, prior_scale) in enumerate(combos):
            center, _sigma = combine_many(
                parts_by_c[huber_c], drift, prior_scale, self._job_scale(prior_scale)
            )
            errs[c] = shifted_errors(points, actual - center, self.shift_prior)

        def pick(score: np.ndarray) -> tuple[float, float, float]:
            # leave the defaults only for a clear gain: small samples overfit a grid
            best = int(np.argmin(score))
            if score[best] < (1.0 - self.tune_margin) * score[i_default]:
                return combos[best]
            return default

        pooled = default
        enough = [p for p in SPAN_POINTS if (points == p).sum() >= self.min_tune_samples]
        if enough:
            pooled = pick(
                np.mean([np.median(errs[:, points == p], axis=1) for p in enough], axis=0)
            )
        own = with_late_bins(
            {
                p: pick(np.median(errs[:, points == p], axis=1))
                for p in POINTS
                if (points == p).sum() >= self.min_tune_samples
            }
        )
        return with_late_bins({p: own.get(p, pooled) for p in POINTS})  # END: 0.95's

    def update(self, history: Sequence[Run]) -> None:
        """Learn the runs that finished since ``fit`` as analogs and in their job's
        prior, without refitting.

        ``history`` is what ``fit`` saw with new runs appended (see
        ``AnalogEstimator.update``). Why: configurations are often re-run back to back,
        and the run that ended a minute ago is the best analog there is; the replay
        that calibrates built every past run's analogs and job prior from all runs
        that ended before it, so both are refreshed here; the regression, the weights
        and the calibration change slowly and wait for the next ``fit``. A run with
        analogs therefore always has its job prior too (a configuration is a job on a
        node type): ``predict`` has no "analogs without a job prior" case (none in
        41,384 replayed forecasts of the MLPerf, fixture and CPU corpora).
        """
        if not hasattr(self, "analog_"):
            raise NotFittedError("EtaModel.update called before fit")
        self.analog_.update(history)
        self.blend_.prior_.update(history)

    @staticmethod
    def _trust(analog: AnalogEstimator, run: Run, before: float | None) -> float | None:
        """The analogs' trust for ``run`` from their misses on its own past
        (``selfcheck.py``); None without analogs or epochs enough to check them."""

        def horizon(cut: Cut) -> float | None:
            found = analog.estimate(cut.run, before, target=cut.target)
            return None if found is None else found.log_remaining

        return analog_trust(run, horizon)

    def predict(self, run: Run, now: float, stalled: bool = False) -> Forecast:
        """Remaining seconds of ``run`` at ``now``: calibrated P10/P50/P90."""
        if not hasattr(self, "blend_"):
            raise NotFittedError("EtaModel.predict called before fit")
        point = progress_point(run.progress_ratio)

        def estimate() -> tuple[RawEstimate, tuple[float, float, float]]:
            known = self._known(run)  # this run's costly parts, kept while it is unchanged
            huber_c, drift, prior_scale = self.weights_[point]
            components = remember(
                known, ("components", huber_c), lambda: self.blend_.components(run, huber_c=huber_c)
            )
            parts = self._floored(components, point, self.mix_.get(point))
            raw = parts.combine(drift, prior_scale, self._job_scale(prior_scale))
            found = remember(known, "analog", lambda: self.analog_.estimate(run))
            name = situation(found is not None, parts.prior_level)
            option = self.choice_[name].get(point, DEFAULTS[name])
            calibrator, own = self._calibration(name, point)
            job = job_key(run)
            job_scale = self.job_scales_.get((name, job, point), 1.0)

            rates = remember(known, "rates", lambda: rate_candidates(run))
            cap = shift_cap(name, parts, rates)
            job_shift = (
                self.job_shifts_.get((name, job, point), 0.0)
                if takes_job_shift(name, parts, cap)
                else 0.0
            )

            def quantiles(center: float, sigma: float) -> tuple[float, float, float]:
                center += job_shift  # 0 but for a job whose own rates share a bias
                sigma *= job_scale  # 1 but for a job forecast better or worse than most
                q = calibrator.quantiles(point, center, sigma, cap)
                if own is not None and own is not calibrator:
                    # neither is this situation at this point: the bounds of both (its
                    # residuals at other points, everyone's here), the centre of all
                    lo, _mid, hi = own.quantiles(point, center, sigma, cap)
                    q = min(q[0], lo), q[1], max(q[2], hi)
                if point == 0 and name == "new":  # a run no earlier run of its job
                    # speaks for: as long as some finished run took (the job's own runs
                    # and analogs scale with its plan, which may be longer than any yet)
                    q = within_seen(q, self.blend_.prior_.total_range_)
                return q

            if option == (("blend", 1.0),) and found is None:
                return raw, quantiles(raw.center, raw.sigma)
            trust = None
            if found is not None and SELF_CHECK in {name for name, _w in option}:
                trust = remember(known, "trust", lambda: self._trust(self.analog_, run, None))
            cands = self._candidates(raw.center, rates, found, trust, parts)
            moved = self._moved(
                Residual(point, raw.center, raw.sigma, 0.0, 0.0), option, cands, found
            )
            # ``method`` keeps the blend's name: the published label set (prior, blend,
            # rate) is a metric contract; choice_ says which option stands behind it
            raw = dataclasses.replace(raw, center=moved.center, sigma=moved.sigma)
            return raw, quantiles(raw.center, raw.sigma)

        return blend_forecast(self.blend_.prior_, run, now, stalled, estimate)

    def _known(self, run: Run) -> dict:
        """What ``predict`` keeps of ``run`` (its components, analog forecast, the
        analogs' trust, the rate candidates), empty when the run or the fitted parts
        changed.

        Why: the cycle predicts every running job once a minute, and most show no new
        epoch end from one cycle to the next. These parts are most of a forecast's
        cost and depend only on the run's content and the fitted blend and analogs;
        the choices made with them (weights, option, calibration) are made again each
        time, so they follow any change of those. Safe by construction: kept parts are
        reused only for the run's whole content equal (epoch ends, plan, features; the
        utilisation means, which drift every cycle, only where the regression reads them),
        the same fitted ``blend_`` and ``analog_``, and the same analogs, job group and
        typical analog spreads of this run (``update`` replaces those of the runs that
        finished: only runs of the same configuration or job are recomputed). One entry
        per run (a changed run replaces its entry); at most ``MEMO_MAX`` entries, then
        cleared.
        """
        # the fitted parts themselves (held, so a refit's new parts cannot reuse their ids)
        state = (self.blend_, self.analog_)
        memo = self.__dict__.get("_memo")
        if (
            memo is None
            or memo[0][0] is not state[0]
            or memo[0][1] is not state[1]
            or len(memo[1]) >= MEMO_MAX
        ):
            memo = self.__dict__["_memo"] = (state, {})
        entries = memo[1]
        who = (run.run_id, run.namespace, run.pod, run.container)
        prior = self.blend_.prior_
        job = prior.job_group(run)
        features = run.features
        if job is not None:
            # a job prior: nothing kept reads the utilisation means (only the pooled
            # regression does, for a run without one), and they drift every cycle
            features = {k: v for k, v in features.items() if k not in NUMERIC_RAW}
        content = (run.epochs_planned, run.epoch_times, tuple(features.items()))
        # what ``update`` changes for this run: its analogs and its job group (both
        # replaced by new objects when a run of theirs finishes; compared by identity),
        # and the typical spreads its analogs' spread is shrunk toward (its job's, moved
        # by a run of the job finishing on other hardware)
        analogs = self.analog_.groups_.get(identity(run) or ())
        typicals = self.analog_.typicals(run)
        hit = entries.get(who)
        if (
            hit is not None
            and hit[0] == content
            and hit[1] is analogs
            and hit[2] is job
            and hit[3] == typicals
        ):
            return hit[4]
        known: dict = {}
        entries[who] = (content, analogs, job, typicals, known)
        return known


def within_seen(
    q: tuple[float, float, float], log_range: tuple[float, float]
) -> tuple[float, float, float]:
    """A start-of-run ``q`` (P10/P50/P90 of the whole run) moved, all three by one
    factor, so that its P50 lies within ``log_range``: the log durations of the
    finished runs the regression was fitted on (``PriorEstimator.total_range_``).

    For a run whose job has no earlier run here (situation ``new``: the pooled
    regression's prior). Why: before its first epoch such a run has nothing of its
    own nor of its job's, and a young cluster's calibration can stretch the prior far
    past every run it knows: 15 runs known on MLPerf v0.5, their bias shift took a
    46-hour prior to 38 days for a run of three hours. A P50 longer (or shorter) than
    any run this cluster finished is a claim none of them supports; the interval
    keeps its width, and the run's own rate takes over at its first epoch. With a
    mature history the range spans every kind of run and this seldom binds. Not for a
    run with a job prior or analogs: those scale the job's own runs by its plan, and a
    plan longer than any before is a run longer than any before.
    """
    low, high = log_range
    p10, p50, p90 = q
    if p50 <= 0:  # not from a calibration (its quantiles are safe_exp's): the shortest
        return q if low == -math.inf else (p10, math.exp(low), max(p90, math.exp(low)))
    log_p50 = math.log(p50)
    moved = min(max(log_p50, low), high) - log_p50  # 0 inside, and for a NaN range
    if not moved:
        return q
    f = math.exp(moved)
    return p10 * f, p50 * f, p90 * f


def remember(known: dict, key: object, compute: Callable[[], T]) -> T:
    """``known[key]``, computed by ``compute()`` the first time (None is kept too)."""
    if key in known:
        return known[key]
    value = known[key] = compute()
    return value
