"""Self-check: trust a run's analogs as far as they foresaw the run's own past.

Why: earlier runs of the same configuration (analogs, ``analog.py``) are the best
forecast there is when this run goes like them, and a poor one when it does not
(another start-up, other evaluation passes, a slower node for this run). The replay
(``choice.py``) picks one option per progress point for *all* runs of a situation;
whether the analogs fit *this* run is visible in the run itself.

How: the run as seen now (last epoch end ``e_n`` at ``t_n``) is cut at earlier epoch
ends (``CUT_FRACTIONS`` of its current progress). At each cut ``j`` the analogs, seeing
only the run up to the cut, forecast the time still needed to reach ``e_n`` — a stretch
already seen — read off their own curves (``AnalogEstimator.estimate(target=…)``),
start-up and evaluation passes included; the log error against the truth
``t_n − t_j`` is their miss on the run's own past. With ``mse`` the mean squared miss
over the cuts, the analogs get the weight

    trust = 1 / (1 + mse / TRUST_SCALE²)

against the option the replay chose (``checked``): the inverse-variance weight of the
analogs against an option whose error is taken as ``TRUST_SCALE``. Analogs that foresaw
the seen stretch within 0.5 % carry 80 % of the forecast, within 1 % half of it;
analogs that missed it by several % barely move it.

Why the analogs only: the same check run on every candidate (Keras' mean,
``predict_linear``, the blend; each weighted by its own past misses) did not carry over
from one MLPerf split to the other — a steady past says little about whether a rate
read off it will hold to the end (past-best was the future-best in 24–36 % of moments
among four candidates) — while the analogs' miss on the past ranks their miss on the
future well (Spearman 0.5–0.9 at 25–75 %, both splits), because what they add to the
run's own rate is its shape, and the seen stretch tests that shape.

Cost: at most ``len(CUT_FRACTIONS)`` analog forecasts (≤ 10 interpolations each) per
run that has analogs; nothing for the others.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gpu_eta.forecaster.calibration import cut_limit
from gpu_eta.forecaster.estimators.analog import AnalogEstimator
from gpu_eta.forecaster.runs import Run, running_prefix

CUT_FRACTIONS = (0.5, 0.75)
"""Where the run is cut, as shares of its current progress: the last epoch end at or
before each (a cut needs the start and one epoch end, and one epoch end after it)."""
TRUST_SCALE = 0.01
"""The log error taken for the replay-chosen option when weighing the analogs against it
(chosen on MLPerf v0.5–v1.1 and confirmed on v2.0–v2.1; the figures for 0.005, 0.01
and 0.02 are in docs/forecasting-evidence.md, "Self-check")."""


@dataclass(frozen=True, slots=True)
class Cut:
    """The run as it looked at an earlier epoch end, and what happened until now."""

    run: Run  # truncated at the cut
    target: float  # the progress reached now (``e_n``)
    actual: float  # log seconds from the cut's last epoch end to now's


def cuts(run: Run, fractions: Sequence[float] = CUT_FRACTIONS) -> list[Cut]:
    """``run`` cut at the last epoch end at or before each share of its progress
    (``calibration.cut_limit``: the replay's rule, whatever unit the run counts in)."""
    times = run.epoch_times
    n = len(times)
    if n < 3:
        return []
    e_n, t_n = times[-1]
    epochs = [e for e, _t in times]
    out: list[Cut] = []
    seen: set[int] = set()
    for f in fractions:
        j = min(bisect.bisect_right(epochs, cut_limit(f, e_n)), n - 1)
        if j < 2 or j in seen:
            continue
        seen.add(j)
        e_j, t_j = times[j - 1]
        if not (t_n > t_j and e_n > e_j):
            continue
        part = running_prefix(run, tuple(times[:j]))
        out.append(Cut(part, float(e_n), math.log(t_n - t_j)))
    return out


def trust(misses: Sequence[float], scale: float = TRUST_SCALE) -> float | None:
    """The analogs' weight from their log misses on the run's past (None without any)."""
    if not misses:
        return None
    mse = sum(m * m for m in misses) / len(misses)
    return 1.0 / (1.0 + mse / (scale * scale))


def analog_trust(
    run: Run, horizon: Callable[[Cut], float | None], scale: float = TRUST_SCALE
) -> float | None:
    """``trust`` of the analogs for ``run``; ``horizon(cut)`` is their log seconds from
    the cut to ``cut.target`` (None where they cannot answer). None unless they
    answered at every cut: a partial check would favour analogs that skipped a miss."""
    run_cuts = cuts(run)
    misses = []
    for cut in run_cuts:
        value = horizon(cut)
        if value is None or not math.isfinite(value):
            return None
        misses.append(value - cut.actual)
    return trust(misses, scale)


def checked(base: float, analog: float, weight: float) -> float:
    """The log centre of an option after the self-check: ``weight`` of it moved to the
    analogs."""
    return weight * analog + (1.0 - weight) * base


def self_check(analog: AnalogEstimator, run: Run, before: float | None) -> float | None:
    """``analog_trust`` of ``analog``'s forecasts for ``run`` (from runs that ended
    before ``before``; None: all of them): one rule for the calibration replay and the
    live forecast. None without analogs or epochs enough to check them."""

    def horizon(cut: Cut) -> float | None:
        found = analog.estimate(cut.run, before, target=cut.target)
        return None if found is None else found.log_remaining

    return analog_trust(run, horizon)
