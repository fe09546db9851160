"""Runs whose total is unknown: gpu-eta given a plan guessed from the identity's past.

Every forecast needs the run's planned total (``epochs_planned``: the epochs, steps or
samples at which it ends), but a run trained to a quality target (MLPerf) or with
early stopping does not know it. The MLPerf development file's plan is each run's
realised total, so hiding it measures what such runs would get. This bench replays a
corpus exactly as ``bench/forecast_accuracy.py`` does (``evaluate.Replay`` and
``replay_events``: the model knows only runs that ended before each moment, and is
fitted on their true totals — a finished run's total is known) and at every scored
moment asks gpu-eta twice: with the run's true plan (the reference) and with the plan
*estimated* from the earlier completed runs of the same identity (namespace + job +
node type, ``evaluate.identity_key``; ``estimate_plan``). The moments are still those
at 10/25/50/75/90/95 % of the *true* total, as the scorer sees them.

Beside it:

* what needs no plan: ``identity median`` (median duration of the identity's earlier
  completed runs minus the time elapsed, ``forecast_accuracy.IdentityMedian``), the
  same over the durations the run has not yet reached (``IdentityLeft``: the plan
  estimate's rule on times) and ``history match`` (every earlier run of the job);
* the rate baselines (Keras' mean, ``predict_linear``, tqdm's EMA, elapsed/progress)
  given the same estimated plan: what a progress bar would say with the same guess.

``est. ÷ best`` is gpu-eta's median error with the estimated plan over the best of
the no-plan baselines on the same moments (bootstrap interval over runs, as
``forecast_accuracy.score_rows``); ``true ÷ best`` the same with the true plan.
Coverage: the true remaining time inside gpu-eta's P10–P90 with the estimated plan,
inside the interval from its P10 at the 10th percentile of the identity's totals to its
P90 at the 90th (``interval_over_plans``: what carrying the plan's uncertainty into
the interval would give), and with the true plan. A moment whose identity
had no earlier completed run gets no estimate and no forecast; they are counted, and
with ``--fallback`` forecast from the earlier runs of the same job name and batch size
on other identities (another table: only the history match answers there).

    python bench/unknown_plan.py --limit 300                 # a quick look
    python bench/unknown_plan.py --corpus mlperf-choose      # one split, 5–6 min
    python bench/unknown_plan.py --fallback --json out.json  # every figure

Why a bench: it measures a feature not built (forecasting runs that report no total),
to decide whether to build it; nothing here is a property to test.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import statistics
import sys
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from forecast_accuracy import (
    IDENTITY_MEDIAN,
    Cell,
    IdentityMedian,
    Row,
    find_mlperf,
    job_of,
    load_corpora,
    score_rows,
)

from gpu_eta.forecaster.calibration import point_label
from gpu_eta.forecaster.estimators import BASELINES, make_estimator
from gpu_eta.forecaster.estimators.base import InsufficientData
from gpu_eta.forecaster.estimators.baselines import HistoryMatch
from gpu_eta.forecaster.evaluate import GPU_ETA, Replay, Scored, identity_key, replay_events
from gpu_eta.forecaster.forecast import Forecast
from gpu_eta.forecaster.runs import Run

VARIABLE = ("bert", "rnnt", "dlrm", "unet3d", "maskrcnn")
"""The benchmarks whose realised totals vary between repeats (the data's README)."""
FIXED = ("resnet", "ssd", "retinanet")
"""Those whose totals are nearly fixed."""
IDENTITY_LEFT = "identity_left"
NO_PLAN = ("history_match", IDENTITY_MEDIAN, IDENTITY_LEFT)
"""The yardsticks that need no plan."""
RATE = tuple(name for name in BASELINES if name != "history_match")
"""The baselines that need a plan: given the estimated one."""


# -- the plan estimate ---------------------------------------------------------------


def realised_total(run: Run) -> float:
    """A finished run's total: its last progress value."""
    return run.epoch_times[-1][0]


def last_step(run: Run) -> float:
    """The progress between ``run``'s last two points (its last one if it has one)."""
    times = run.epoch_times
    if len(times) < 2:
        return times[-1][0]
    return times[-1][0] - times[-2][0]


@dataclass(frozen=True)
class PlanGuess:
    """A plan estimated for a running run, and the rule that gave it."""

    plan: float
    rule: str  # "median", "passed" (median of the totals above the progress), "beyond"
    n: int  # earlier totals read
    lo: float  # the 10th and 90th percentiles of the totals it was the median of
    hi: float


def estimate_plan(totals: Sequence[float], done: float, step: float) -> PlanGuess | None:
    """The plan of a run at progress ``done`` from the realised ``totals`` of earlier
    completed runs like it: their median; once the run has passed some of them, the
    median of those it has not reached (a run still going will not end at a total it
    is already past); past all of them, ``done + step`` (one more interval like its
    last: it ends soon). None without an earlier total.

    Why the median of the totals not reached rather than the largest: it is the same
    rule as the plain median restricted to what is still possible, and the largest
    total alone follows one outlier. ``lo`` and ``hi``: the ``RANGE`` percentiles of
    the same totals (the plan itself beyond them all), for an interval that carries
    the plan's uncertainty (``interval_over_plans``).
    """
    if not totals:
        return None
    above = [t for t in totals if t > done]
    if not above:
        plan = done + step if step > 0 else 2.0 * done
        return PlanGuess(plan, "beyond", len(totals), plan, plan)
    lo, hi = (float(q) for q in np.quantile(above, RANGE))
    rule = "median" if len(above) == len(totals) else "passed"
    return PlanGuess(float(statistics.median(above)), rule, len(totals), lo, hi)


RANGE = (0.1, 0.9)
"""The percentiles of the earlier totals the plan-range interval is read at."""


def interval_over_plans(at_plan: Forecast, at_lo: Forecast, at_hi: Forecast) -> tuple[float, float]:
    """P10–P90 of a run whose total is uncertain: from the lower of the P10s with the
    guessed plan and with the low total, to the higher of the P90s with the guessed
    plan and with the high total.

    Why: gpu-eta's interval holds the uncertainty of the run's speed for a known total;
    with a guessed total the truth also moves with the total, by as much as the
    identity's totals differ."""
    return min(at_plan.p10, at_lo.p10), max(at_plan.p90, at_hi.p90)


def job_batch_key(run: Run) -> tuple[str, str] | None:
    """The fallback's key: job name and batch size (None without a job name)."""
    job = run.features.get("job_name")
    if not (isinstance(job, str) and job):
        return None
    batch = run.features.get("batch_size")
    return job, f"{batch:g}" if isinstance(batch, float | int) else str(batch or "")


class Totals:
    """The realised totals of the completed runs of a history that only grows (the
    ``Replay.by_end`` prefixes), by identity and by job + batch size."""

    def __init__(self) -> None:
        self._seen = 0
        self.by_identity: dict[tuple[str, ...], list[float]] = {}
        self.by_job_batch: dict[tuple[str, str], list[float]] = {}

    def fit(self, history: Sequence[Run]) -> Totals:
        if len(history) < self._seen:  # not a grown prefix: start again
            self.__init__()
        for run in history[self._seen :]:
            if run.completed is not True:
                continue
            key, fallback = identity_key(run), job_batch_key(run)
            if key is not None:
                self.by_identity.setdefault(key, []).append(realised_total(run))
            if fallback is not None:
                self.by_job_batch.setdefault(fallback, []).append(realised_total(run))
        self._seen = len(history)
        return self

    def guess(self, part: Run, fallback: bool = False) -> tuple[PlanGuess | None, str]:
        """``part``'s plan from its identity's totals, else (with ``fallback``) from its
        job + batch size's; and which ("identity", "job+batch" or "")."""
        key = identity_key(part)
        totals = self.by_identity.get(key, []) if key is not None else []
        source = "identity"
        if not totals and fallback:
            other = job_batch_key(part)
            totals = self.by_job_batch.get(other, []) if other is not None else []
            source = "job+batch"
        found = estimate_plan(totals, part.epochs_done, last_step(part))
        return found, source if found is not None else ""


class IdentityLeft(IdentityMedian):
    """The identity median with the plan estimate's rule on durations: the median of
    the earlier completed runs' durations longer than the time elapsed, minus it; past
    them all, the run's last interval again.

    Why: the plan estimate drops the totals a run has passed (``estimate_plan``), and
    the same knowledge — the run has not ended yet — needs no plan; without this
    yardstick a late gain of the estimated plan over the identity median (which says
    0 s once the run outlasts it) would be credited to gpu-eta.
    """

    method = IDENTITY_LEFT

    def predict(self, run: Run, now: float, stalled: bool = False) -> Forecast:
        key = identity_key(run)
        durations = self.durations_.get(key) if key is not None else None
        if not durations:
            raise InsufficientData("identity median: no earlier completed run of this identity")
        elapsed = now - run.start_timestamp
        times = run.epoch_times
        last = times[-1][1] - times[-2][1] if len(times) > 1 else 0.0
        left = remaining_after(durations, elapsed, last)
        return Forecast(left, left, left, method=self.method)


def remaining_after(durations: Sequence[float], elapsed: float, last: float) -> float:
    """The median of ``durations`` longer than ``elapsed``, minus it; ``last`` past them
    all (the estimate's rule on times, ``estimate_plan``)."""
    longer = [d for d in durations if d > elapsed]
    return float(statistics.median(longer)) - elapsed if longer else max(last, 0.0)


def with_plan(part: Run, plan: float) -> Run:
    """``part`` as a run that reports ``plan`` for its total."""
    return replace(part, epochs_planned=plan)


# -- the replay ----------------------------------------------------------------------


@dataclass
class Moment:
    """One scored moment: absolute % errors by method, and the plan guessed."""

    run_id: str
    job: str
    point: float
    source: str  # "identity", "job+batch"
    rule: str
    plan_error: float  # |estimated / true − 1|
    errors: dict[str, float]  # gpu_eta_true, gpu_eta, no-plan and rate baselines
    covered_true: bool
    covered: bool
    covered_range: bool  # inside ``interval_over_plans``
    width: float  # P90 ÷ P10 with the guessed plan
    width_range: float  # the same of ``interval_over_plans``
    earlier: int  # earlier totals read


@dataclass
class Replayed:
    moments: list[Moment] = field(default_factory=list)
    no_history: Counter[float] = field(default_factory=Counter)  # point -> unforecast moments
    events: int = 0
    seconds: float = 0.0


def replay(runs: Sequence[Run], fallback: bool = False, report_every: int = 0) -> Replayed:
    """Every scored moment of ``runs`` (``replay_events``), forecast with the true and
    the estimated plan, with every baseline; moments without an earlier total counted."""
    began = time.perf_counter()
    out = Replayed()
    model_replay = Replay(runs)
    history_match = HistoryMatch().fit([])
    identity_median = IdentityMedian()
    identity_left = IdentityLeft()
    rate = {name: make_estimator(name).fit([]) for name in RATE}
    totals = Totals()
    fitted_k = -1
    events = replay_events(runs)
    out.events = len(events)
    for i, (ts, point, part, run) in enumerate(events):
        if report_every and i % report_every == 0:
            print(f"  {i:,}/{len(events):,} moments", file=sys.stderr, flush=True)
        k = model_replay.ended_before(ts)
        if k != fitted_k:
            history_match.update(model_replay.by_end[max(fitted_k, 0) : k])
            identity_median.fit(model_replay.by_end[:k])
            identity_left.fit(model_replay.by_end[:k])
            totals.fit(model_replay.by_end[:k])
            fitted_k = k
        model = model_replay.model_at(ts)  # every moment, as backtest: the same refits
        truth = run.last_timestamp - part.last_timestamp
        guess, source = totals.guess(part, fallback)
        if guess is None or source != "identity":
            out.no_history[point] += 1
        if guess is None:
            continue
        guessed = with_plan(part, guess.plan)
        true_f = model.predict(part, ts)
        est_f = model.predict(guessed, ts)
        lo_f = est_f if guess.lo == guess.plan else model.predict(with_plan(part, guess.lo), ts)
        hi_f = est_f if guess.hi == guess.plan else model.predict(with_plan(part, guess.hi), ts)
        low, high = interval_over_plans(est_f, lo_f, hi_f)
        got = {"gpu_eta_true": true_f.p50, GPU_ETA: est_f.p50}
        for name, est in (
            ("history_match", history_match),
            (IDENTITY_MEDIAN, identity_median),
            (IDENTITY_LEFT, identity_left),
        ):
            with contextlib.suppress(InsufficientData):
                got[name] = est.predict(part, ts).p50  # neither reads the plan here
        for name, est in rate.items():
            with contextlib.suppress(InsufficientData):
                got[name] = est.predict(guessed, ts).p50
        out.moments.append(
            Moment(
                run.run_id,
                job_of(run),
                point,
                source,
                guess.rule,
                abs(guess.plan / run.epochs_planned - 1.0),
                {name: abs(p50 - truth) / truth for name, p50 in got.items()},
                true_f.p10 <= truth <= true_f.p90,
                est_f.p10 <= truth <= est_f.p90,
                low <= truth <= high,
                ratio(est_f.p90, est_f.p10),
                ratio(high, low),
                guess.n,
            )
        )
    out.seconds = time.perf_counter() - began
    return out


def ratio(hi: float, lo: float) -> float:
    return hi / lo if lo > 0 else math.inf


# -- scoring -------------------------------------------------------------------------


def as_scored(moments: Iterable[Moment], ours: str, covered: str) -> list[Scored]:
    """``moments`` as ``forecast_accuracy.score_rows`` reads them: gpu-eta (the run
    with the plan ``ours`` names) beside the no-plan baselines only, so its ``best`` is
    the better of those."""
    return [
        Scored(
            m.run_id,
            m.point,
            {GPU_ETA: m.errors[ours], **{k: m.errors[k] for k in NO_PLAN if k in m.errors}},
            getattr(m, covered),
            m.earlier,
        )
        for m in moments
    ]


@dataclass
class Line:
    """One point's figures."""

    point: float
    n: int
    medians: dict[str, float]
    est: Row  # gpu-eta with the estimated plan against the no-plan baselines
    true: Row  # gpu-eta with the true plan against them
    range_coverage: float  # inside ``interval_over_plans``


COLUMNS = (
    ("gpu_eta_true", "gpu-eta, true plan"),
    (GPU_ETA, "gpu-eta, est. plan"),
    (IDENTITY_MEDIAN, "identity median"),
    (IDENTITY_LEFT, "identity median, not reached"),
    ("history_match", "history match"),
    ("keras_mean", "Keras mean, est."),
    ("predict_linear", "predict_linear, est."),
)


def lines(moments: Sequence[Moment]) -> list[Line]:
    est_rows = score_rows(as_scored(moments, GPU_ETA, "covered"), methods=NO_PLAN)
    true_rows = score_rows(as_scored(moments, "gpu_eta_true", "covered_true"), methods=NO_PLAN)
    out = []
    for est, true in zip(est_rows, true_rows, strict=True):
        at = [m for m in moments if m.point == est.point]
        medians = {}
        for name, _label in (*COLUMNS, ("tqdm_ema", ""), ("cumulative_mean", "")):
            errs = [m.errors[name] for m in at if name in m.errors]
            if errs:
                medians[name] = float(np.median(errs))
        covered = float(np.mean([m.covered_range for m in at])) if at else math.nan
        out.append(Line(est.point, len(at), medians, est, true, covered))
    return out


def _pct(x: float | None) -> str:
    return "–" if x is None or not math.isfinite(x) else f"{x:.1%}"


def _cell(c: Cell | None, fmt: str) -> str:
    if c is None or not math.isfinite(c.median):
        return "–"
    if fmt == "ratio":
        return f"{c.median:.2f}× ({c.lo:.2f}–{c.hi:.2f})"
    if fmt == "share":
        return f"{c.median:.0%} ({c.lo:.0%}–{c.hi:.0%})"
    return f"{c.median:.0%}"


SHORT = {
    IDENTITY_MEDIAN: "identity median",
    IDENTITY_LEFT: "not reached",
    "history_match": "history match",
}


def table(moments: Sequence[Moment]) -> list[str]:
    """Rows are points: every method's median error, the ratios and coverage."""
    head = [
        "point",
        "n",
        *(name for _k, name in COLUMNS),
        "est. ÷ best no-plan (which)",
        "true ÷ best",
        "est. closer",
        "coverage est. / plan range / true",
    ]
    out = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for line in lines(moments):
        if not line.n:
            continue
        cells = [point_label(line.point), f"{line.n:,}"]
        cells += [_pct(line.medians.get(k)) for k, _name in COLUMNS]
        which = f" ({SHORT.get(line.est.best, line.est.best)})" if line.est.ratio else ""
        cells.append(_cell(line.est.ratio, "ratio") + which)
        cells.append(_cell(line.true.ratio, "ratio"))
        cells.append(_cell(line.est.closer, "share"))
        cells.append(
            f"{_cell(line.est.coverage, 'pct')} / {line.range_coverage:.0%} / "
            f"{_cell(line.true.coverage, 'pct')}"
        )
        out.append("| " + " | ".join(cells) + " |")
    return out


def spread(runs: Sequence[Run], job: str) -> float:
    """The median, over identities of ``job`` with two runs or more, of their largest
    realised total ÷ their smallest."""
    by: dict[tuple[str, ...] | None, list[float]] = {}
    for run in runs:
        if job_of(run) == job:
            by.setdefault(identity_key(run), []).append(realised_total(run))
    ratios = [max(v) / min(v) for v in by.values() if len(v) > 1 and min(v) > 0]
    return float(np.median(ratios)) if ratios else math.nan


BY_JOB_POINTS = (0.1, 0.25, 0.5, 0.75, 0.9)


def job_table(moments: Sequence[Moment], runs: Sequence[Run], min_moments: int = 30) -> list[str]:
    """One line per benchmark: the spread of its totals, the plan estimate's median
    error, the median error of gpu-eta with the estimated and the true plan and of the
    two identity medians over the moments at 10–90 %, and per point gpu-eta's ratio to the best no-plan baseline with the
    estimated plan (and the true one), and the estimated plan's coverage."""
    head = ["job", "moments", "totals max÷min", "plan error"]
    head.append("error est. / true / id. median / not reached")
    head += list(map(point_label, BY_JOB_POINTS))
    out = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    jobs = Counter(m.job for m in moments)
    for job in sorted(j for j, n in jobs.items() if n >= min_moments):
        mine = [m for m in moments if m.job == job]
        plan_error = float(np.median([m.plan_error for m in mine]))
        by_point = {line.point: line for line in lines(mine)}
        cells = [f"`{job}`", f"{len(mine):,}", f"{spread(runs, job):.2f}", _pct(plan_error)]
        inside = [m for m in mine if BY_JOB_POINTS[0] <= m.point <= BY_JOB_POINTS[-1]]
        cells.append(
            " / ".join(
                _pct(_median(m.errors[k] for m in inside if k in m.errors))
                for k in (GPU_ETA, "gpu_eta_true", IDENTITY_MEDIAN, IDENTITY_LEFT)
            )
        )
        for point in BY_JOB_POINTS:
            line = by_point.get(point)
            if line is None or line.est.ratio is None or line.true.ratio is None:
                cells.append("–")
                continue
            cov = line.est.coverage.median if line.est.coverage else math.nan
            cells.append(
                f"{line.est.ratio.median:.2f}× ({line.true.ratio.median:.2f}×), "
                f"cov. {cov:.0%} / {line.range_coverage:.0%}"
            )
        out.append("| " + " | ".join(cells) + " |")
    return out


def group(moments: Sequence[Moment], jobs: Sequence[str] | None) -> list[Moment]:
    """The moments of ``jobs`` (None: of every job in neither ``VARIABLE`` nor ``FIXED``)."""
    if jobs is None:
        return [m for m in moments if m.job not in VARIABLE + FIXED]
    return [m for m in moments if m.job in jobs]


def counts(res: Replayed, moments: Sequence[Moment]) -> str:
    rules = Counter(m.rule for m in moments)
    unforecast = sum(res.no_history.values())
    return (
        f"{res.events:,} moments: {len(moments):,} with an earlier completed run of the "
        f"identity (forecast), {unforecast:,} without (no forecast: "
        f"{unforecast / max(res.events, 1):.0%}). Plan estimate: the median of the "
        f"identity's earlier totals at {rules['median']:,} moments, the median of those "
        f"not yet reached at {rules['passed']:,}, one interval beyond the progress (past "
        f"every earlier total) at {rules['beyond']:,}; its median error "
        f"{_pct(_median(m.plan_error for m in moments))}. Median P90 ÷ P10: "
        f"{_median(m.width for m in moments):.2f} with the estimated plan, "
        f"{_median(m.width_range for m in moments):.2f} over the plan range."
    )


def _median(values: Iterable[float]) -> float:
    values = list(values)
    return float(np.median(values)) if values else math.nan


def report(name: str, description: str, runs: Sequence[Run], res: Replayed) -> str:
    own = [m for m in res.moments if m.source == "identity"]
    out = [f"**{name}** — {description}: {len(runs):,} runs, {res.seconds:.0f} s", ""]
    out += [counts(res, own), ""]
    out += table(own)
    for title, jobs in (
        (f"variable totals ({', '.join(VARIABLE)})", VARIABLE),
        (f"fixed totals ({', '.join(FIXED)})", FIXED),
        ("the other benchmarks", None),
    ):
        mine = group(own, jobs)
        if mine:
            out += ["", f"*{name}, {title}:*", "", *table(mine)]
    out += [
        "",
        f"*{name} by benchmark: gpu-eta with the estimated plan ÷ best no-plan baseline "
        "(with the true plan), P10–P90 coverage with the estimated plan / over the plan range:*",
        "",
        *job_table(own, runs),
    ]
    borrowed = [m for m in res.moments if m.source == "job+batch"]
    if borrowed:
        out += [
            "",
            f"*{name}, moments with no earlier run of the identity, plan from the same "
            f"job + batch size elsewhere (--fallback; {len(borrowed):,} moments, plan error "
            f"{_pct(float(np.median([m.plan_error for m in borrowed])))}):*",
            "",
            *table(borrowed),
        ]
    return "\n".join(out) + "\n"


def as_json(res: Replayed) -> dict:
    return {
        "events": res.events,
        "seconds": res.seconds,
        "no_history": {str(p): n for p, n in res.no_history.items()},
        "moments": [m.__dict__ for m in res.moments],
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mlperf", type=Path, help="the MLPerf runs file (runs.csv.gz)")
    parser.add_argument(
        "--corpus",
        action="append",
        help="only this corpus (repeatable; default: mlperf-choose and mlperf-confirm)",
    )
    parser.add_argument(
        "--limit", type=int, help="at most this many runs per corpus (whole identities)"
    )
    parser.add_argument(
        "--fallback",
        action="store_true",
        help="with no earlier run of the identity, estimate from the same job + batch size",
    )
    parser.add_argument("--json", type=Path, help="also write every moment as JSON here")
    parser.add_argument(
        "--progress", type=int, default=0, metavar="N", help="say on stderr every N moments"
    )
    args = parser.parse_args(argv)
    if args.limit is not None and args.limit < 1:
        parser.error("--limit must be ≥ 1")
    wanted = args.corpus or ["mlperf-choose", "mlperf-confirm"]
    corpora = [c for c in load_corpora(find_mlperf(args.mlperf), args.limit) if c.name in wanted]
    if not corpora:
        parser.error(f"none of {', '.join(wanted)} found (is --mlperf right?)")
    saved = {}
    print(
        "Median absolute error of the remaining time, % of the true remaining time; "
        "`est.`: with the plan estimated from the identity's earlier totals, `true`: with "
        "the run's realised total; ratios over the best of the no-plan baselines (identity "
        "median, the same over durations not yet reached, history match) on the same moments (90 % bootstrap interval over runs)."
        + (
            f" At most {args.limit:,} runs per corpus (`--limit {args.limit}`)."
            if args.limit
            else ""
        )
        + "\n"
    )
    for corpus in corpora:
        runs = [run for part in corpus.parts for run in part]
        res = Replayed()
        for part in corpus.parts:
            one = replay(part, args.fallback, args.progress)
            res.moments += one.moments
            res.no_history += one.no_history
            res.events += one.events
            res.seconds += one.seconds
        description = corpus.description + (
            f" ({corpus.copies:,} exact copies left out)" if corpus.copies else ""
        )
        print(report(corpus.name, description, runs, res), flush=True)
        saved[corpus.name] = as_json(res)
    if args.json is not None:
        args.json.write_text(json.dumps(saved) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
