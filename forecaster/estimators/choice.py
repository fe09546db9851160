"""Which estimate to publish, chosen per progress point on this cluster's past runs.

Why: no one estimate is best everywhere. On a cluster that re-runs its configurations
on dedicated GPUs (MLPerf) the analogs are several times better than anything read
from the run itself; on a shared machine where a neighbour arrives in one run and not
the next, the blend of history prior and robust own rate wins; on steady runs with a
long start-up and no history, a plain recent rate (Keras' mean, ``predict_linear``)
can beat a blend whose prior is a regression over other jobs. So ``EtaModel`` replays
its recent past runs (the calibration replay, every history-based part built only
from runs that ended before that moment), scores a few fixed **options** — single
candidates and even mixes, in log space — and keeps per progress point and
*situation* (``SITUATIONS``) the option with the lowest median error. ``DEFAULTS``
stand unless another option is better by ``margin`` (10 %): with a few dozen replayed
runs a choice among a dozen or two overfits otherwise. Where a run has no analogs, the other option
must also be better by that margin on the older and on the newer half of the replayed
runs alike (``both_halves``): those runs are other jobs', and whichever job filled the
recent past decided the choice for all (MLPerf with every run a job of its own, at 25 %:
1.42× the best baseline on v0.5–v1.1, where this was chosen, 1.05× with it; v2.0–v2.1
1.31 → 1.25×; docs/forecasting-evidence.md, "Which estimate is published"). A block of
one configuration fills both halves as easily, so there it must also win on the replayed
runs of every configuration but the most frequent one (``configuration``: hardware and
batch size, which a cluster where nothing repeats still repeats): one refit had chosen
the blend for 169 moments at 25 % on the strength of its largest configuration, 80 of
the 600 replayed runs (v0.5–v1.1 at 25 %: 1.30 → 1.02×, v2.0–v2.1 1.07 → 0.97×).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence

import numpy as np

from gpu_eta.forecaster.calibration import (
    SPAN_POINTS,
    Residual,
    bin_index,
    shifted_errors,
    with_late_bins,
)
from gpu_eta.forecaster.estimators.analog import AnalogEstimate
from gpu_eta.forecaster.estimators.base import InsufficientData
from gpu_eta.forecaster.estimators.baselines import KerasMean, PredictLinear
from gpu_eta.forecaster.estimators.blend import Components
from gpu_eta.forecaster.estimators.pooled import number
from gpu_eta.forecaster.estimators.rate import DROP_FIRST_FROM
from gpu_eta.forecaster.estimators.selfcheck import checked as checked_centre
from gpu_eta.forecaster.runs import Run

Option = tuple[tuple[str, float], ...]
"""Candidate names and their shares of the log centre (shares sum to 1)."""

BLEND: Option = (("blend", 1.0),)
RATES: Option = (("keras", 0.5), ("linear", 0.5))
OWN: Option = (("own", 1.0),)
ANALOGS: Option = (("analog", 1.0),)
AT_THEIR_PACE = "analog_pace"
"""The analogs read at their own pace (``AnalogEstimate.log_at_their_pace``): the run's
speed taken as its configuration's earlier runs', where ``analog`` reads it from the
run's own time since its first progress point."""
WEIGHED = "analog_weighed"
"""The two analog readings weighed per run by how well each foresaw the analogs' own
rest (``AnalogEstimate.log_weighed``, ``analog.pace_weight``)."""
PACE_OPTIONS: tuple[Option, ...] = (
    ((AT_THEIR_PACE, 1.0),),
    (("analog", 0.5), (AT_THEIR_PACE, 0.5)),
    ((WEIGHED, 1.0),),
)
ANALOG_SHARES = ("analog", AT_THEIR_PACE, WEIGHED)
"""Candidates whose share of a centre takes the analogs' spread (``with_option``)."""
PLAIN_OPTIONS: tuple[Option, ...] = (
    BLEND,
    RATES,
    (("keras", 1.0),),
    (("linear", 1.0),),
    (("blend", 0.5), ("linear", 0.5)),
    (("blend", 0.5), ("keras", 0.5)),
)
SELF_CHECK = "selfcheck"
"""An option holding ``(SELF_CHECK, 0.0)`` is *self-checked*: the candidates' entry of
that name is the analogs' trust for this run (``selfcheck.py``: how well they foresaw
the run's own past), and that share of the option's centre moves to the analogs."""
ANALOG_MIXES: tuple[Option, ...] = (
    (("analog", 0.75), ("blend", 0.25)),
    (("analog", 0.5), ("blend", 0.5)),
    (("analog", 0.5), ("linear", 0.5)),
)


def checked(option: Option) -> Option:
    """``option`` self-checked (see ``SELF_CHECK``)."""
    return (*option, (SELF_CHECK, 0.0))


ANALOG_OPTIONS: tuple[Option, ...] = (
    *PLAIN_OPTIONS,
    ANALOGS,
    *PACE_OPTIONS,
    *ANALOG_MIXES,
    *(checked(o) for o in (*PLAIN_OPTIONS, *PACE_OPTIONS, *ANALOG_MIXES)),
)
SITUATIONS = ("new", "transfer", "job", "analog")
"""No history of the job on this node type; a prior moved from the job's runs at another
batch size or read off its runs on the same hardware elsewhere (``prior`` level "job");
a job prior at this batch size; analogs (the same configuration). A transferred prior
is far off past the first epochs (MLPerf configurations never run before: 4-5 %
against the own rate's 1.4-1.7 % at 25-50 %), so it defaults to the own rate, as a new
job does: at 25 / 50 % 0.95 / 0.81 -> 0.86 / 0.64x the best baseline (v2.0-v2.1),
0.98 / 0.93 -> 0.94 / 0.81x (v0.5-v1.1; at 10 % 0.77 -> 0.89x, within noise)."""
POWERS = {"analog": 1.0}
"""Per situation, the power of sigma that is the unit of its residuals (default the
model's ``sigma_power``, 0.5). Analogs: 1, the usual studentised score, because their
spread is a measured dispersion of this configuration's own runs (see ``analog.py``)."""
OPTIONS = {
    "new": (*PLAIN_OPTIONS, OWN),
    "transfer": (*PLAIN_OPTIONS, OWN),
    "job": PLAIN_OPTIONS,
    "analog": ANALOG_OPTIONS,
}
DEFAULTS = {"new": OWN, "transfer": OWN, "job": BLEND, "analog": BLEND}
"""What stands until the replay shows a clearly better option: for a job never seen on
this node type, or one whose prior is borrowed ("transfer"), the run's own rate
(``own_centre``: a prior that is a regression over other jobs was 10–100x off at 10 %
on MLPerf, and once the first interval is dropped the robust rate beat the baselines'
reading at 25–75 % on most corpora, docs/forecasting-evidence.md, "Which estimate is
published"); otherwise the blend."""


def situation(has_analogs: bool, prior_level: str) -> str:
    """The situation of a run: analogs, a job prior, a transferred one, or neither."""
    if has_analogs:
        return "analog"
    if prior_level == "job_batch":
        return "job"
    return "transfer" if prior_level == "job" else "new"


_KERAS = KerasMean().fit([])
_LINEAR = PredictLinear().fit([])


def rate_candidates(run: Run) -> dict[str, float]:
    """Log remaining seconds from the last progress point by Keras' mean and by
    ``predict_linear`` (half the elapsed time); a candidate that cannot answer is absent."""
    out = {}
    for name, est in (("keras", _KERAS), ("linear", _LINEAR)):
        try:
            value = est.predict(run, run.last_timestamp).p50
        except InsufficientData:
            continue
        if value > 0 and math.isfinite(value):
            out[name] = math.log(value)
    return out


def own_centre(parts: Components, rates: Mapping[str, float]) -> float | None:
    """The run's own robust rate alone (``Components.rate_center``: warm-up, spikes,
    periodic passes and a neighbour's arrival handled) once it has dropped its first
    interval; before that, the baselines' reading (``RATES``) where both answer.

    Why: a job never seen on this node type has no prior worth blending, and once the
    warm-up interval is out the robust rate reads the run better than a plain mean.
    With one or two intervals it keeps the first (start-up included) at full or ¼
    weight without a learned warm-up excess, where Keras' mean skips it.
    """
    if parts.rate is None:
        return None
    if parts.rate[3] >= DROP_FIRST_FROM:
        return parts.rate_center
    if "keras" in rates and "linear" in rates:
        return 0.5 * rates["keras"] + 0.5 * rates["linear"]
    return parts.rate_center


def own_discount(parts: Components, rates: Mapping[str, float]) -> float | None:
    """How much longer Keras' mean reads the rest of the run than its robust rate does
    (log; negative where the robust rate is the slower), or None before the robust
    rate has dropped its first interval.

    Why: the calibration's positive P50 shift puts back, for every run of a situation,
    the cost of the slow epochs (evaluation passes, a neighbour's spikes) the robust
    rate discounts; this is what the run's own epochs say that cost is. A run whose
    epochs were steady has nothing to put back, whatever the recent past's runs had:
    where one job filled the replay its bias moved every other job's centre (MLPerf
    with every run a job of its own, v2.0–v2.1 at 25 %: 1.25× the best baseline
    without this limit, 0.94× with it; neutral on v0.5–v1.1;
    docs/forecasting-evidence.md, "Calibration and quality").
    """
    if parts.rate is None or parts.rate[3] < DROP_FIRST_FROM or "keras" not in rates:
        return None
    return rates["keras"] - parts.rate_center


def centre(option: Option, candidates: Mapping[str, float]) -> float | None:
    """The option's log centre, or None when one of its candidates is missing.

    A self-checked option whose run has no trust (no analogs, or too few epochs to
    check them) is the option itself.
    """
    total = 0.0
    for name, share in option:
        if name == SELF_CHECK:
            continue
        value = candidates.get(name)
        if value is None:
            return None
        total += share * value
    if (SELF_CHECK, 0.0) in option and SELF_CHECK in candidates and "analog" in candidates:
        return checked_centre(total, candidates["analog"], candidates[SELF_CHECK])
    return total


def candidates(
    blend: float,
    rates: Mapping[str, float],
    analog: AnalogEstimate | None,
    trust: float | None = None,
    parts: Components | None = None,
) -> dict[str, float]:
    """Every candidate's log remaining seconds for one run (``blend`` the blend's
    centre, ``rates`` its ``rate_candidates``, the run's own rate from ``parts``), and
    the analogs' self-check ``trust`` (``SELF_CHECK``)."""
    out = {"blend": blend, **rates}
    if parts is not None and (own := own_centre(parts, rates)) is not None:
        out["own"] = own
    if analog is not None:
        out["analog"] = analog.log_remaining
        if analog.log_at_their_pace is not None:
            out[AT_THEIR_PACE] = analog.log_at_their_pace
        if analog.log_weighed is not None:
            out[WEIGHED] = analog.log_weighed
        if trust is not None:
            out[SELF_CHECK] = trust
    return out


def with_option(
    r: Residual, option: Option, cands: Mapping[str, float], analog: AnalogEstimate | None
) -> Residual:
    """``r`` with the centre of ``option`` (the blend's where a candidate is missing)
    and, for the analogs' share, their spread in place of the blend's sigma."""
    c = centre(option, cands)
    if c is None:
        return r
    # the analogs' share of the centre, the self-check's trust included: their
    # spread measures how this configuration's runs differ, and the calibration
    # of a centre set by the analogs is in its units (``POWERS``). With
    # the option's own share only, a trusted analog centre kept the blend's sigma,
    # one unit for steady and noisy configurations alike (MLPerf fixture at 50 %: 0.68)
    share = sum(w for name, w in option if name in ANALOG_SHARES)
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
    return r.moved(c, sigma, r.shift_cap)


def configuration(run: Run) -> str:
    """What a run's configuration is without its job: ``<gpus>x<gpu_model>`` (the
    ``node_type`` feature where the GPU model is unknown) and the batch size; empty
    where neither is known.

    Why no job name: ``choose`` asks whether one block of alike runs decided a choice
    for runs without analogs, which are other jobs'. On a cluster where nothing repeats
    every job name is new, but a benchmark's runs still share their hardware and batch
    size (MLPerf: eight A100s at batch size 56 were the largest block of a replay).
    """
    model = run.features.get("gpu_model")
    gpus = number(run.features.get("gpus"))
    if isinstance(model, str) and model:
        hardware = f"{gpus:g}x{model}" if gpus > 0 else model
    else:
        value = run.features.get("node_type")
        hardware = value if isinstance(value, str) else ""
    batch = number(run.features.get("batch_size"))
    size = f"{batch:g}" if batch > 0 else ""
    return f"{hardware}|{size}" if hardware or size else ""


def largest(keys: Sequence[str]) -> str:
    """The most frequent non-empty key of ``keys`` (the first one seen among equals),
    or empty when there is none."""
    top = Counter(key for key in keys if key).most_common(1)
    return top[0][0] if top else ""


def halves(mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``mask`` split into its first and its second half of selected samples (the
    older and the newer, for samples in time order)."""
    idx = np.flatnonzero(mask)
    older = np.zeros(len(mask), dtype=bool)
    older[idx[: len(idx) // 2]] = True
    return older, mask & ~older


def choose(
    points: Sequence[float],
    actual: Sequence[float],
    candidates: Sequence[Mapping[str, float]],
    options: Sequence[Option],
    *,
    all_points: Sequence[float],
    default: Option = BLEND,
    min_samples: int = 20,
    margin: float = 0.1,
    shift_prior: float = 20.0,
    both_halves: bool = False,
    caps: Sequence[float | None] | None = None,
    configurations: Sequence[str] | None = None,
) -> dict[float, Option]:
    """Per point, the option with the lowest median absolute error (after the bin's
    shift, ``calibration.bias_shift``, held to each sample's ``caps`` where given, as
    calibration will apply it) on the replayed samples.

    An option must answer every sample of its bin to compete (a missing candidate
    falls back to the blend in use, so an option is scored as it would be published).
    ``default`` stays unless another is better by ``margin``, with ``both_halves`` on
    the older and the newer half of the samples (their order is time order) too, and
    with ``configurations`` (each sample's ``configuration``) on the samples of every
    configuration but the most frequent one as well; a point with fewer than
    ``min_samples`` samples takes the choice made on the points of ``SPAN_POINTS``
    pooled, a late one the choice of the bin before it (``calibration.with_late_bins``).
    """
    pts = np.asarray(points, dtype=float)
    act = np.asarray(actual, dtype=float)
    n = len(pts)
    errs = np.full((len(options), n), np.nan)
    bins = bin_index(pts, caps)  # the same bins for every option
    for i, option in enumerate(options):
        c = np.array(
            [cand["blend"] if (x := centre(option, cand)) is None else x for cand in candidates],
            dtype=float,
        )
        errs[i] = shifted_errors(pts, act - c, shift_prior, bins=bins)
    i_default = list(options).index(default)
    others: np.ndarray | None = None
    if configurations is not None:
        keys = list(configurations)
        most = largest(keys)
        if most:  # none known: no configuration can have filled the replay
            others = np.array([key != most for key in keys], dtype=bool)

    def beats(scores: np.ndarray, best: int) -> bool:
        return bool(scores[best] < (1.0 - margin) * scores[i_default])

    def score(sels: Sequence[np.ndarray]) -> np.ndarray:
        return np.mean([np.median(errs[:, sel], axis=1) for sel in sels], axis=0)

    def pick(sels: Sequence[np.ndarray]) -> Option:
        """The best option on the samples of ``sels`` (one mask per point, their
        median errors averaged) where it beats the default by ``margin`` there, with
        ``both_halves`` on the older and on the newer half of each mask too, and with
        ``configurations`` on each mask without the most frequent configuration (none
        left: the default stays)."""
        whole = score(sels)
        best = int(np.argmin(whole))
        if not beats(whole, best):
            return default
        if both_halves:
            older, newer = zip(*(halves(sel) for sel in sels), strict=True)
            if not (beats(score(older), best) and beats(score(newer), best)):
                return default
        if others is not None:
            rest = [sel & others for sel in sels if (sel & others).any()]
            if not (rest and beats(score(rest), best)):
                return default
        return options[best]

    enough = [p for p in all_points if p in SPAN_POINTS and (pts == p).sum() >= min_samples]
    pooled = default
    if enough:
        pooled = pick([pts == p for p in enough])
    own = with_late_bins(
        {p: pick([pts == p]) for p in all_points if (pts == p).sum() >= min_samples}
    )
    return {p: own.get(p, pooled) for p in all_points}
