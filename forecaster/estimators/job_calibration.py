"""A job's own corrections to its situation's calibration: its shared bias and its width.

Why a module: ``EtaModel`` calibrates one set of quantiles per situation (new, transfer,
job, analog: ``choice.SITUATIONS``) and point, fitted on the mix of jobs the cluster
ran. Two things that mix hides are measured per job (by job name, ``prior.job_key``)
on the same replayed forecasts: how far a job's forecasts are off together
(``job_shifts``, without analogs) and how wide they miss against the others'
(``job_scales``). Pure functions of the replayed residuals.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from gpu_eta.forecaster.calibration import (
    BINS,
    Residual,
    applied_shift,
    bias_shift,
    group_scales,
    group_shifts,
)
from gpu_eta.forecaster.estimators.choice import DEFAULTS, OWN, POWERS, SITUATIONS

JobKey = tuple[str, str, float]
"""(situation, job, point)."""

OWN_RATE_SITUATIONS = tuple(name for name in SITUATIONS if DEFAULTS[name] == OWN)
"""The situations whose forecasts read the run's own rate unless the replay shows a
better option ("new", "transfer": ``choice.DEFAULTS``, the same ``choice.OPTIONS``):
past the start, a job's bias is measured over them together (``job_shifts``)."""


def job_shifts(
    moved: Mapping[str, Sequence[Residual]],
    jobs: Mapping[str, Sequence[str]],
    shiftable: Mapping[str, Sequence[bool]],
    bin_shift: Callable[[str, float], float],
    prior: float,
) -> dict[JobKey, float]:
    """Per (situation, job, point) without analogs, the bias the job's replayed
    forecasts share after their calibration's shift (``bin_shift(situation, point)``:
    the shift of the calibration the situation takes there; ``calibration.
    group_shifts``, shrunk by ``prior`` pseudo-samples), over those that take it
    (``shiftable``, ``eta_model.takes_job_shift``).

    Why: without analogs the centre is read off the run itself (its rates, the
    blend), and what such a rate misses is the job's shape (evaluation passes the
    robust rate discounts, a slow last stretch), the same on any hardware, while
    the calibration's shift is one for all jobs of the situation. Measured on
    MLPerf runs of configurations never run before: at 50 / 75 % 0.96 / 0.61 % →
    0.78 / 0.57 % (v0.5–v1.1, where a prior of 5 was chosen over 10), 2.18 / 1.40 %
    → 2.05 / 1.29 % (v2.0–v2.1), within noise at 10 / 25 %
    (docs/forecasting-evidence.md, "Calibration and quality").

    Past the start, the forecasts of situations "new" and "transfer" are one group per
    job (``OWN_RATE_SITUATIONS``): both read the run's own rate and choose among the same
    options, so what they miss of a job is its shape whichever prior the run had, and a
    job's moments in one of them were too few to show a bias the other's show too (on
    configurations never run before, MLPerf v2.0–v2.1 at 25 / 50 / 75 / 90 %: 0.89 /
    0.64 / 0.70 / 0.80 → 0.69 / 0.56 / 0.53 / 0.59× the best baseline; "Calibration and
    quality"). At the start each keeps its own: the centre is then the prior alone,
    whose bias is the prior's, not the job's.
    """
    # (the situations sharing the shift, job, point)
    keys: list[tuple[tuple[str, ...], str, float]] = []
    errors: list[float] = []
    for name in (s for s in SITUATIONS if s != "analog"):
        for r, job, takes in zip(moved[name], jobs[name], shiftable[name], strict=True):
            if job and takes:
                pooled = name in OWN_RATE_SITUATIONS and r.point != 0.0
                keys.append((OWN_RATE_SITUATIONS if pooled else (name,), job, r.point))
                errors.append(
                    r.actual - r.center - applied_shift(bin_shift(name, r.point), r.shift_cap)
                )
    shifts = group_shifts(keys, errors, prior)
    return {
        (name, job, point): shift for (group, job, point), shift in shifts.items() for name in group
    }


def job_scales(
    moved: Mapping[str, Sequence[Residual]],
    jobs: Mapping[str, Sequence[str]],
    *,
    sigma_power: float,
    min_samples: int,
    shift_prior: float,
    prior: float,
) -> tuple[dict[JobKey, float], dict[str, list[Residual]]]:
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
    ``prior`` pseudo-samples (5: a job with five replayed forecasts at a point is
    half its own, half everyone's; ``math.inf``: no job scales). A point needs
    ``min_samples`` residuals of the situation; a run without a job name keeps
    factor 1.
    """
    factors: dict[JobKey, float] = {}
    out: dict[str, list[Residual]] = {}
    for name in SITUATIONS:
        power = POWERS.get(name, sigma_power)
        scaled = list(moved[name])
        for point in BINS:
            idx = [i for i, r in enumerate(scaled) if r.point == point and jobs[name][i]]
            # the factor is on the situation's own unit (``power``); every
            # calibration is fitted on the sigmas scaled here, so whichever one
            # ``predict`` applies agrees with them (where all residuals are of one
            # situation that is everyone's, in ``sigma_power``: the factor's effect
            # is then its power-weighted share)
            if len(idx) < min_samples:
                continue
            errors = [scaled[i].actual - scaled[i].center for i in idx]
            shift = bias_shift(errors, shift_prior)
            scores = [
                (e - applied_shift(shift, scaled[i].shift_cap))
                / max(scaled[i].sigma, 1e-12) ** power
                for e, i in zip(errors, idx, strict=True)
            ]
            by_job, left_out = group_scales([jobs[name][i] for i in idx], scores, prior)
            for job, f in by_job.items():
                factors[(name, job, point)] = f ** (1.0 / power)
            for i, f in zip(idx, left_out, strict=True):
                r = scaled[i]
                scaled[i] = r.moved(r.center, r.sigma * f ** (1.0 / power), r.shift_cap)
        out[name] = scaled
    return factors, out
