"""``EtaModel``: the one object the service and ``evaluate`` use — blend + calibration.

Why a facade: the service (H5) needs ``fit(history)`` once per cycle and
``predict(run, now)`` per running job, plus the measured quality it publishes; it
should not know there is a prior, a rate and a calibrator inside.

``fit`` (budget: well under a second or two on 50,000 runs) does four things:

1. fits the blend's prior (``estimators/prior.py``; regression on the most recent
   ``max_regression_runs``, job groups capped at ``max_job_runs``) and the analogs;
2. replays the most recent ``max_calibration_runs`` completed runs at each progress
   point (``replay.py``: start, the last epoch seen at 10/25/50/75/90/95 %, and once
   in its last interval), their job prior and analogs built only from runs that ended
   before that moment, the pooled regression as it stood before the run;
3. measures the blend's weights, sigma floors and prior mix per point on those
   samples (``tuning.py``) and chooses per situation and point which estimate to
   publish (``choice.py``);
4. scales each job's unit by how wide its replayed forecasts miss against the
   others' (``job_calibration.job_scales``), fits split-conformal z quantiles per
   bin (``calibration.calibrate``: a bin whose measured coverage falls short has
   each tail's level moved by that tail's excess misses, once) for all situations
   together, for each with enough residuals and for the forecasts resting on one
   earlier run (``ONE_ANALOG``), measures leave-later-out
   quality, ``quality_`` (and ``tails_``, the shares below P10 and above P90), and,
   without analogs, gives a job whose replayed forecasts share a bias beyond that
   calibration's shift a shift of its own (``job_calibration.job_shifts``).

Why 600 replayed runs (``max_calibration_runs``): every choice, calibration bin and job
shift above is measured per situation and point (the job shifts of situations "new"
and "transfer" together past the start), and the situations without analogs
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
import math
from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

from gpu_eta.forecaster.calibration import (
    BINS,
    END,
    FIRST,
    POINTS,
    SIGMA_POWER,
    Calibrator,
    Level,
    Measured,
    Residual,
    calibrate,
    run_point,
    with_late_bins,
)
from gpu_eta.forecaster.errors import ForecasterError
from gpu_eta.forecaster.estimators.analog import AnalogEstimator, identity
from gpu_eta.forecaster.estimators.base import NotFittedError, lognormal_quantiles
from gpu_eta.forecaster.estimators.blend import (
    BlendEstimator,
    Components,
    RawEstimate,
    blend_forecast,
)
from gpu_eta.forecaster.estimators.choice import (
    DEFAULTS,
    OPTIONS,
    POWERS,
    SELF_CHECK,
    SITUATIONS,
    Option,
    candidates,
    choose,
    own_discount,
    rate_candidates,
    situation,
    with_option,
)
from gpu_eta.forecaster.estimators.job_calibration import job_scales, job_shifts
from gpu_eta.forecaster.estimators.pooled import NUMERIC_RAW
from gpu_eta.forecaster.estimators.prior import HOLDOUT_SPAN, NEW_JOB_LEVEL, job_key
from gpu_eta.forecaster.estimators.replay import (
    replay_samples,
    run_bin,
    samples_in_order,
    with_parts,
)
from gpu_eta.forecaster.estimators.selfcheck import self_check
from gpu_eta.forecaster.estimators.tuning import (
    blend_residuals,
    floored,
    huber_grid,
    measured_floors,
    measured_mixes,
    tune,
    with_floors,
)
from gpu_eta.forecaster.forecast import Forecast
from gpu_eta.forecaster.runs import Run, own_work

ONE_ANALOG = "analog:one"
"""The key in ``calibrators_`` of the forecasts with analogs that rest on one earlier
run of their configuration (``AnalogEstimate.n`` 1): calibrated on their own kind where
they have ``min_samples`` residuals at the point (``EtaModel._calibration``).

Why: one earlier run says nothing of how its configuration's runs differ, and its
forecasts miss as those of many do not, while the situation's calibration pools every
count (on MLPerf about half of it five runs or more). MLPerf v0.5–v1.1 replayed round by round
(bench/cold_start.py): P10–P90 held 69 / 60 / 68 % of these outcomes at the start / 10
/ 25 % (two earlier runs: 82 / 82 / 80 %), 75 / 77 / 83 % calibrated on their own, the
median error the same; confirmed on v2.0–v2.1, 76 / 71 / 69 → 83 / 86 / 81 %
(docs/forecasting-evidence.md, "Each MLPerf round alone")."""
MEMO_MAX = 50_000
"""Runs whose costly parts ``EtaModel._known`` keeps (one entry per running job; runs
that ended linger until the next fit). About 2.5 KB each on MLPerf-sized runs (1.5 KB
of parts, plus the epoch ends the entry still holds once the cycle's ``Run`` objects
are rebuilt): 25 MB at 10,000 running jobs, ≤ ~125 MB before it is cleared."""
T = TypeVar("T")


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
        """Learn from finished runs (``completed`` True or False); returns ``self``.

        Every run is read as its own work (``runs.own_work``), here, in ``update`` and
        in ``predict``: a run resumed from a checkpoint is a run of the epochs it did,
        not one of its whole plan done in a fifth of the time."""
        history = [own_work(run) for run in history]
        blend = BlendEstimator(
            half_life_ratio=self.half_life_ratio,
            huber_c=self.huber_c,
            max_regression_runs=self.max_regression_runs,
            max_job_runs=self.max_job_runs,
            pooled=self.pooled,
            random_state=self.random_state,
        ).fit(history)
        analog = AnalogEstimator().fit(history)
        grid = huber_grid(self.huber_c)
        samples = replay_samples(
            blend, analog, history, max_runs=self.max_calibration_runs, huber_grid=grid
        )
        self.floors_ = floors = measured_floors(samples, self.min_samples)
        samples = [
            with_parts(s, tuple(floored(c, s.point, floors) for c in s.parts)) for s in samples
        ]
        self.weights_ = tune(
            samples,
            default=(self.huber_c, self.drift, self.prior_scale),
            grid=grid,
            job_scale=self._job_scale,
            shift_prior=self.shift_prior,
            margin=self.tune_margin,
            min_samples=self.min_tune_samples,
        )
        self.mix_: dict[float, float] = {}
        if self.measured_mix:
            self.mix_ = measured_mixes(
                blend,
                history,
                self.weights_,
                floors=floors,
                job_scale=self._job_scale,
                max_runs=self.max_calibration_runs,
                min_samples=self.min_mix_samples,
            )
            samples = [
                with_parts(
                    s,
                    tuple(
                        with_floors(c, c.rate_floor, c.prior_floor, self.mix_.get(s.point))
                        for c in s.parts
                    ),
                )
                for s in samples
            ]
        residuals = blend_residuals(samples, self.weights_, grid, self._job_scale)
        self.blend_ = blend
        self.analog_ = analog
        ordered_samples = samples_in_order(samples)
        # each sample's parts at its point's tuned Huber constant, as predict computes them
        tuned = [smp.parts[grid.index(self.weights_[smp.point][0])] for smp in ordered_samples]
        cands = [
            candidates(r.center, smp.rates, smp.analog, smp.trust, parts)
            for r, smp, parts in zip(residuals, ordered_samples, tuned, strict=True)
        ]
        self.choice_: dict[str, dict[float, Option]] = {}
        where = [
            situation(smp.analog is not None, smp.parts[0].prior_level) for smp in ordered_samples
        ]
        moved: dict[str, list[Residual]] = {name: [] for name in SITUATIONS}
        # which of the analog residuals (in ``moved["analog"]``'s order) rest on one run
        one_run = [ordered_samples[i].analog.n == 1 for i, w in enumerate(where) if w == "analog"]
        jobs: dict[str, list[str]] = {}  # the job of each of ``moved``'s residuals
        shiftable: dict[str, list[bool]] = {}  # whether each takes its job's shift
        for name in SITUATIONS:
            idx = [i for i, w in enumerate(where) if w == name]
            jobs[name] = [ordered_samples[i].job for i in idx]
            caps = [shift_cap(name, tuned[i], ordered_samples[i].rates) for i in idx]
            shiftable[name] = [
                takes_job_shift(name, tuned[i], cap) for i, cap in zip(idx, caps, strict=True)
            ]
            self.choice_[name] = with_late_bins(  # END: 0.95's option, FIRST: 0.1's
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
                    # win on the older and newer half alike, not where one job filled
                    # both, and without the most frequent configuration too
                    both_halves=name != "analog",
                    caps=caps,
                    configurations=None
                    if name == "analog"
                    else [ordered_samples[i].configuration for i in idx],
                )
            )
            for i, cap in zip(idx, caps, strict=True):
                r = residuals[i]
                option = self.choice_[name][r.point]
                r = with_option(r, option, cands[i], ordered_samples[i].analog)
                moved[name].append(r.moved(r.center, r.sigma, cap))
        self.job_scales_, moved = job_scales(
            moved,
            jobs,
            sigma_power=self.sigma_power,
            min_samples=self.min_tune_samples,
            shift_prior=self.shift_prior,
            prior=self.job_scale_prior,
        )
        # each situation is calibrated on its own kind of past prediction (a run with
        # earlier runs of its configuration is forecast far better than one without);
        # a situation with too few residuals at a point uses the calibration of all
        everything = [r for name in SITUATIONS for r in moved[name]]
        self.calibrator_, self.levels_, measured = self._calibrate(everything)
        self.tails_ = {p: (lo, hi) for p, (_err, _cov, lo, hi) in measured.items()}
        self.calibrators_: dict[str, Calibrator] = {}
        # counted without the first point's and the last interval's moments (one a run,
        # not scored), so they do not decide which calibration the other bins get
        n_all = sum(1 for r in everything if r.point not in (FIRST, END))
        for name in SITUATIONS:
            n = sum(1 for r in moved[name] if r.point not in (FIRST, END))
            if self.min_samples <= n < n_all:
                self.calibrators_[name] = self._calibrate(moved[name], POWERS.get(name))[0]
        few = [r for r, one in zip(moved["analog"], one_run, strict=True) if one]
        if sum(1 for r in few if r.point not in (FIRST, END)) >= self.min_samples:
            self.calibrators_[ONE_ANALOG] = self._calibrate(few, POWERS["analog"])[0]
        self.job_shifts_ = job_shifts(
            moved,
            jobs,
            shiftable,
            lambda name, point: self._calibration(name, point)[0].bins_[point][0],
            self.job_shift_prior,
        )
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
    ) -> tuple[Calibrator, dict[float, Level], Measured]:
        """``calibration.calibrate`` with this model's settings; residuals in units of
        ``sigma ** power`` (default ``sigma_power``)."""
        return calibrate(
            residuals,
            coverage=self.coverage,
            min_samples=self.min_samples,
            shift_prior=self.shift_prior,
            power=self.sigma_power if power is None else power,
            tail_levels=self.tail_levels,
        )

    def _calibration(
        self, name: str, point: float, analogs: int | None = None
    ) -> tuple[Calibrator, Calibrator | None]:
        """The calibration ``predict`` applies in situation ``name`` at ``point`` to a
        forecast of ``analogs`` earlier runs, and the situation's own (None without one).

        A forecast resting on one earlier run takes that of its kind (``ONE_ANALOG``)
        where it has ``min_samples`` residuals at ``point``; the situation's own where it
        has them (returned twice); else everyone's, and ``predict`` widens its bounds to the
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
        if name == "analog" and analogs == 1:
            one = self.calibrators_.get(ONE_ANALOG)
            if one is not None and one.n_.get(point, 0) >= self.min_samples:
                return one, one
        own = self.calibrators_.get(name)
        if own is None or own.n_.get(point, 0) < self.min_samples:
            # too few of this situation here: all of them
            return self.calibrator_, None if name == "analog" else own
        return own, own

    def _job_scale(self, prior_scale: float) -> float:
        """The same-job-same-batch prior's sigma multiplier for a tuned ``prior_scale``.

        The job prior's sigma is measured (the pooled spread of repeated runs on this
        cluster), so it is taken at ``job_prior_scale`` (1: as measured) while the
        weaker levels (another batch size, the pooled regression, whose in-sample
        scale is optimistic) keep ``prior_scale``. A tuned ``prior_scale`` moves both
        by the same factor; "ignore the prior" ignores both.
        """
        return self.job_prior_scale * prior_scale / self.prior_scale

    def update(self, new_runs: Sequence[Run]) -> None:
        """Learn ``new_runs`` as analogs and in their job's prior, without refitting:
        runs that finished after those fitted or given before, oldest first (see
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
        new_runs = [own_work(run) for run in new_runs]
        self.analog_.update(new_runs)
        self.blend_.prior_.update(new_runs)

    def blend_parts(self, run: Run, known: dict | None = None) -> tuple[Components, RawEstimate]:
        """``run``'s blend parts at its point (this fit's tuned Huber constant, floors and
        prior mix) and the blend's raw estimate, as ``predict`` reads them (``known``:
        its per-run memo, ``_known``). Public so that a bench can score the candidates
        behind a forecast (bench/centre_oracle.py) without rebuilding them."""
        run = own_work(run)  # as ``predict`` reads it (``fit``)
        # FIRST's weights, floors and mix are the 0.1 bin's copies (calibration.FIRST), so
        # the point read here needs no analogs, unlike the bin predict calibrates in
        point = run_point(run.progress_ratio, len(run.epoch_times))
        huber_c, drift, prior_scale = self.weights_[point]
        components = remember(
            {} if known is None else known,
            ("components", huber_c),
            lambda: self.blend_.components(run, huber_c=huber_c),
        )
        parts = floored(components, point, self.floors_, self.mix_.get(point))
        return parts, parts.combine(drift, prior_scale, self._job_scale(prior_scale))

    def predict(self, run: Run, now: float, stalled: bool = False) -> Forecast:
        """Remaining seconds of ``run`` at ``now``: calibrated P10/P50/P90."""
        if not hasattr(self, "blend_"):
            raise NotFittedError("EtaModel.predict called before fit")
        run = own_work(run)  # a resumed run: the epochs it did since its start (``fit``)

        def estimate() -> tuple[RawEstimate, tuple[float, float, float]]:
            known = self._known(run)  # this run's costly parts, kept while it is unchanged
            parts, raw = self.blend_parts(run, known)
            found = remember(known, "analog", lambda: self.analog_.estimate(run))
            point = run_bin(run, found is not None)
            name = situation(found is not None, parts.prior_level)
            option = self.choice_[name].get(point, DEFAULTS[name])
            calibrator, own = self._calibration(name, point, None if found is None else found.n)
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
                if point == 0 and parts.prior_level == NEW_JOB_LEVEL:
                    # a job never seen, before its first epoch: the prior's spread
                    # between jobs, which no replayed start calibrates (replay_samples)
                    return within_seen(
                        lognormal_quantiles(center, sigma),
                        self.blend_.prior_.regression_.total_range_,
                    )
                q = calibrator.quantiles(point, center, sigma, cap)
                if own is not None and own is not calibrator:
                    # neither is this situation at this point: the bounds of both (its
                    # residuals at other points, everyone's here), the centre of all
                    lo, _mid, hi = own.quantiles(point, center, sigma, cap)
                    q = min(q[0], lo), q[1], max(q[2], hi)
                if point == 0 and name == "new":  # a run no earlier run of its job
                    # speaks for: as long as some finished run took (the job's own runs
                    # and analogs scale with its plan, which may be longer than any yet)
                    q = within_seen(q, self.blend_.prior_.regression_.total_range_)
                return q

            if option == (("blend", 1.0),) and found is None:
                return raw, quantiles(raw.center, raw.sigma)
            trust = None
            if found is not None and SELF_CHECK in {name for name, _w in option}:
                trust = remember(known, "trust", lambda: self_check(self.analog_, run, None))
            cands = candidates(raw.center, rates, found, trust, parts)
            moved = with_option(
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
        typical analog spreads and pace weights of this run (``update`` replaces those of
        the runs that finished: only runs of the same configuration or job are
        recomputed). One entry
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
        # and the typical spreads and pace weights its analogs' are shrunk toward (its
        # job's, moved by a run of the job finishing on other hardware)
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
    finished runs the regression was fitted on (``PooledRegression.total_range_``).

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
