"""The blend's weights, measured per progress point on the calibration replay.

Why a module: how much a run's own epochs say about the rest of it, against its job's
earlier runs, is a property of the cluster (a quiet dedicated GPU repeats its epochs
within a few %, a shared node sees neighbours arrive and leave), so the blend
(``blend.py``) is not used with fixed weights: ``EtaModel.fit`` measures, on the
replayed samples (``replay.py``), per point of the plan

- the rate's Huber constant, its drift and the prior's sigma multiplier (``tune``),
- floors of the rate's and the job prior's sigmas at their measured errors
  (``measured_floors``),
- the job prior's weight from how much of a run's departure from its job's usual
  speed lasts (``measured_mixes``),

and turns the samples into residuals of the tuned blend (``blend_residuals``) for the
choice and the calibration. No I/O: functions of the samples and the settings passed
(``measured_mixes`` reads the blend's parts, which fills the prior's held-out cache).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple

import numpy as np

from gpu_eta.forecaster.calibration import (
    BINS,
    POINTS,
    SPAN_POINTS,
    Residual,
    bin_index,
    progress_point,
    shifted_errors,
    with_late_bins,
)
from gpu_eta.forecaster.estimators.blend import (
    BlendEstimator,
    Components,
    combine_many,
    part_columns,
)
from gpu_eta.forecaster.estimators.rate import weighted_median
from gpu_eta.forecaster.estimators.replay import Sample, recent_completed
from gpu_eta.forecaster.runs import Run, as_seen_live, running_prefix

PLAIN_MEAN = 1e9  # a Huber constant so large that no epoch is down-weighted
DRIFT_GRID = (0.05, 0.1, 0.2, 0.4, 0.8)
PRIOR_SCALE_GRID = (0.5, 1.0, 2.0, 4.0, 8.0, 1000.0)  # 1000: the prior ignored
MAX_MIX_CUTS = 32  # epoch ends per past run used to measure a job prior's weight
MIX_BUDGET = 1000  # ... and in all (~0.15 ms each: ~0.15 s of a fit)
MIX_SCALE = 0.05  # a departure from the job's usual speed (log) worth one full sample
LASTS_FROM = 0.75
"""From this bin on (a run past 62.5 % of its plan), a same-job prior carries no weight
against the run's own rate (``measured_mixes``): with less of the run ahead than behind,
the speed it has shown is what lasts."""

Weights = tuple[float, float, float]
"""A point's tuned (Huber constant, drift, prior scale)."""


class Floors(NamedTuple):
    """The measured floors of the rate's and of the same-job prior's sigma, per point."""

    rate: Mapping[float, float]
    prior: Mapping[float, float]


JobScale = Callable[[float], float]
"""The same-job prior's sigma multiplier for a tuned prior scale (``EtaModel._job_scale``)."""


def huber_grid(huber_c: float) -> tuple[float, ...]:
    """The configured Huber constant, and a plain (recency-weighted) log mean."""
    return (huber_c, PLAIN_MEAN) if huber_c != PLAIN_MEAN else (PLAIN_MEAN,)


def floored(c: Components, point: float, floors: Floors, mix: float | None = None) -> Components:
    """``c`` with the measured ``floors`` at ``point`` and a prior weight ``mix``
    (None: precision weights). The mix is passed, not looked up: during a refit the
    model still holds the previous fit's weights."""
    rate, prior = floors
    prior_floor = prior.get(point, 0.0) if c.prior_level == "job_batch" else 0.0
    return with_floors(c, rate.get(point, 0.0), prior_floor, mix)


def with_floors(
    c: Components, rate_floor: float, prior_floor: float, mix: float | None
) -> Components:
    """``c`` with these floors and prior weight: ``dataclasses.replace``'s value, built
    directly (a refit floors ~200,000 parts; ``runs.running_prefix`` says why)."""
    return Components(
        c.prior_center,
        c.prior_sigma,
        c.prior_n,
        c.rate,
        c.remaining,
        c.done,
        c.prior_level,
        rate_floor,
        prior_floor,
        mix,
    )


def measured_floors(samples: Sequence[Sample], min_samples: int) -> Floors:
    """The measured error of the run's own rate, and of a same-job prior, per point.

    Why: how much the epochs seen say about the epochs to come is a property of
    the cluster, and an earlier run of the same job can say more. The rate's model
    sigma knows only the run's own scatter and the prior's only how whole runs
    repeat, so the blend trusted the rate too much exactly where the job's history
    knew better (shared-machine runs at 10–50 %). Both are measured here on the same
    replayed past runs, with the same robust spread (1.4826·MAD of log remaining minus
    the truth, about its median: the bias is calibration's job), and become floors of
    the two sigmas at that point, so the precision weights rest on measured errors.
    None at a point until both have ``min_samples`` samples there. Like the pooled
    regression they are fitted on all replayed runs (a small, documented in-sample
    leak in the published quality).
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
        if min(len(r_err), len(p_err)) >= min_samples:
            for errs, out in ((r_err, rate), (p_err, prior)):
                arr = np.asarray(errs)
                out[point] = float(1.4826 * np.median(np.abs(arr - np.median(arr))))
    return Floors(with_late_bins(rate), with_late_bins(prior))  # END: 0.95's


def blend_residuals(
    samples: Sequence[Sample],
    weights: Mapping[float, Weights],
    grid: tuple[float, ...],
    job_scale: JobScale,
) -> list[Residual]:
    """The blend's residual of each sample at its point's ``weights``, bin by bin
    (``replay.samples_in_order`` gives the samples in the same order)."""
    out = []
    for point in BINS:
        chosen = [s for s in samples if s.point == point]
        if not chosen:
            continue
        c, drift, prior_scale = weights[point]
        parts = [s.parts[grid.index(c)] for s in chosen]
        center, sigma = combine_many(parts, drift, prior_scale, job_scale(prior_scale))
        out.extend(
            Residual(s.point, float(c), float(sg), s.actual, s.timestamp)
            for s, c, sg in zip(chosen, center, sigma, strict=True)
        )
    return out


def tune(
    samples: Sequence[Sample],
    *,
    default: Weights,
    grid: tuple[float, ...],
    job_scale: JobScale,
    shift_prior: float,
    margin: float,
    min_samples: int,
) -> dict[float, Weights]:
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
    before the choice decides which runs publish it). ``default`` stays unless
    another choice is better by ``margin`` (10 %): on a few dozen runs a grid of 30
    overfits. A bin with fewer than ``min_samples`` samples takes the choice made on
    all bins pooled; with fewer than that overall, the defaults.
    """
    combos = [(c, d, p) for c in grid for d in DRIFT_GRID for p in PRIOR_SCALE_GRID]
    if default not in combos:
        combos.append(default)
    i_default = combos.index(default)
    points = np.array([s.point for s in samples])
    actual = np.array([s.actual for s in samples])
    # read once per Huber constant, combined at every drift and prior scale
    parts_by_c = {c: part_columns([s.parts[i] for s in samples]) for i, c in enumerate(grid)}
    # err[c][i]: error of sample i under combo c after its bin's shift
    errs = np.empty((len(combos), len(samples)))
    bins = bin_index(points)  # the same bins for every combination
    for c, (huber_c, drift, prior_scale) in enumerate(combos):
        center, _sigma = combine_many(
            parts_by_c[huber_c], drift, prior_scale, job_scale(prior_scale)
        )
        errs[c] = shifted_errors(points, actual - center, shift_prior, bins=bins)

    def pick(score: np.ndarray) -> Weights:
        # leave the defaults only for a clear gain: small samples overfit a grid
        best = int(np.argmin(score))
        if score[best] < (1.0 - margin) * score[i_default]:
            return combos[best]
        return default

    pooled = default
    enough = [p for p in SPAN_POINTS if (points == p).sum() >= min_samples]
    if enough:
        pooled = pick(np.mean([np.median(errs[:, points == p], axis=1) for p in enough], axis=0))
    own = with_late_bins(
        {
            p: pick(np.median(errs[:, points == p], axis=1))
            for p in POINTS
            if (points == p).sum() >= min_samples
        }
    )
    return with_late_bins({p: own.get(p, pooled) for p in POINTS})  # END: 0.95's


def measured_mixes(
    blend: BlendEstimator,
    history: Sequence[Run],
    weights: Mapping[float, Weights],
    *,
    floors: Floors,
    job_scale: JobScale,
    max_runs: int,
    min_samples: int,
) -> dict[float, float]:
    """The same-job prior's weight against the run's own rate, measured per point.

    Why: precision weights rest on two sigmas, and on a shared node neither
    describes the error that matters: a run's rate is right until a neighbour
    arrives or leaves (a bimodal error whose spread says little about the best
    weight) and a job's history averages over neighbours coming and going. What
    matters is how much of a run's current departure from its job's usual speed
    lasts until the end. So on the ``max_runs`` most recent past runs that had a
    same-job prior, at every epoch end (up to ``MAX_MIX_CUTS`` per run and
    ``MIX_BUDGET`` in all, evenly spaced), ``x`` = own rate − prior and ``y`` =
    truth − prior (log remaining seconds); the share of ``x`` that persists, ``g``,
    is the median regression of ``y`` on ``x`` through the origin (the weighted
    median of ``y/x`` with weights ``|x|``), per progress bin, clipped to [0, 1]; the
    prior's weight is ``1 − g``. Every epoch end counts, not just the replay
    points past the start, so the estimate settles with a few dozen runs. On a quiet
    node departures persist (``g`` ≈ 1, the rate decides); where neighbours come and
    go they fade, the more so the further ahead. A bin needs ``min_samples`` (12)
    such epoch ends; a bin short of them takes the weight measured on the epoch ends of
    the measured bins together (with too few even then, the precision weights stand).
    Why pooled rather than precision weights: while few past runs have a same-job
    prior, the bins are short of epoch ends just when a job's first forecasts are
    made, and there the precision weights gave the prior 0–0.16 where the measured
    weight, once it came, was 0.4–0.99 (`pinned_shared` at 25 %; at 10 / 25 / 50 %
    0.66 / 0.86 / 0.98 → 0.56 / 0.80 / 0.92× the best baseline pooled;
    docs/forecasting-evidence.md, "A short bin's prior weight, pooled").

    From the ``LASTS_FROM`` bin on (75 %: past 62.5 % of the plan, through the last
    interval) the weight is 0, not measured: with less of the run ahead than behind,
    the departure the rate shows has most of the run behind it and the stretch it must
    last is the shorter. Measured there, the share rests on small departures against
    the noise of a short remaining stretch (between fits of one MLPerf split it came
    out anywhere from 0 to 0.98), and on every corpus the rate alone was as good a
    centre late in a run or better: in hindsight the best fixed weight at 75–95 % is 0
    on all of them (``bench/centre_oracle.py``).
    """
    done = recent_completed(history, max_runs, 3)
    measured = [p for p in POINTS[1:] if p < LASTS_FROM]
    xs: dict[float, list[float]] = {p: [] for p in measured}
    ys: dict[float, list[float]] = {p: [] for p in measured}
    ws: dict[float, list[float]] = {p: [] for p in measured}
    per_run = min(MAX_MIX_CUTS, max(3, MIX_BUDGET // max(1, len(done))))
    for run in done:
        end, n = run.last_timestamp, len(run.epoch_times)
        seen = as_seen_live(run)  # to the plan it stated, as the calibration replays it
        cuts = np.linspace(2, n - 1, min(per_run, n - 2)).round().astype(int)
        for j in np.unique(cuts).tolist():
            part = running_prefix(seen, run.epoch_times[:j])
            truth = end - part.last_timestamp
            if truth <= 0:
                continue
            point = progress_point(part.progress_ratio)
            if point not in xs:  # late in the run: weight 0, nothing to measure
                continue
            huber_c, drift, prior_scale = weights[point]
            c = blend.components_for(part, part.last_timestamp, (huber_c,))[0]
            if c.rate is None or c.prior_level != "job_batch":
                continue
            precision = floored(c, point, floors).combine(
                drift, prior_scale, job_scale(prior_scale)
            )
            xs[point].append(c.rate_center - c.prior_center)
            ys[point].append(math.log(truth) - c.prior_center)
            ws[point].append(precision.prior_weight)
    own = {p: prior_weight(xs[p], ys[p], ws[p], min_samples) for p in measured}
    pooled = None
    if None in own.values():  # a bin short of epoch ends: those of all bins together
        together = ([v for p in measured for v in by_point[p]] for by_point in (xs, ys, ws))
        pooled = prior_weight(*together, min_samples)
    out: dict[float, float] = {p: 0.0 for p in BINS if p >= LASTS_FROM}
    for point, weight in own.items():
        if weight is None:
            weight = pooled
        if weight is not None:
            out[point] = weight
    return with_late_bins(out)  # FIRST: the 0.1 bin's, as every per-bin measure here


def prior_weight(
    xs: Sequence[float], ys: Sequence[float], ws: Sequence[float], min_samples: int
) -> float | None:
    """A same-job prior's weight from past epoch ends (``measured_mixes``): ``xs`` the
    own rate's departure from the prior, ``ys`` the truth's, ``ws`` the precision
    weights the prior had there; None with fewer than ``min_samples`` (at least one)
    departures. A function of its own because one bin's epoch ends and all the bins'
    together are measured alike, and so it can be checked without a model."""
    if not len(xs) == len(ys) == len(ws):
        counts = f"{len(xs)} departures, {len(ys)} truths, {len(ws)} weights"
        raise ValueError(f"prior_weight: {counts}")
    x, y = np.asarray(xs, dtype=float), np.asarray(ys, dtype=float)
    ok = np.abs(x) > 1e-6
    if int(ok.sum()) < max(1, min_samples):
        return None
    g = weighted_median(y[ok] / x[ok], np.abs(x[ok]))
    share = float(np.clip(1.0 - g, 0.0, 1.0))
    # departures far below MIX_SCALE barely move a forecast and say little
    # about how long a departure lasts: then the precision weights stand
    evidence = float(np.sum(np.abs(x[ok])))
    trust = evidence / (evidence + min_samples * MIX_SCALE)
    return trust * share + (1.0 - trust) * float(np.median(ws))
