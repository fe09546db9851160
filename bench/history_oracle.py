"""Can a configuration's own past reach 0.7× the best baseline? A feasibility yardstick.

Issue 10 aims at gpu-eta ≤ 0.7× the best rate baseline at every progress point where
earlier runs of the same namespace + job + node type exist, and names a check that
fits nothing: the **history pace**, remaining = elapsed × the median, over earlier
completed runs of the same identity, of (their remaining ÷ their elapsed) at the
run's fraction of its plan. This bench replays a corpus exactly as
``bench/forecast_accuracy.py`` does (its corpora, its ``run_corpus`` replay, its
``score_rows`` medians and bootstrap intervals, the same best baseline) with the
history pace scored beside gpu-eta, and prints per point, on the moments whose run
had an earlier completed run of its identity (where the pace answers):

* the best baseline there (``forecast_accuracy.METHODS``, picked after the fact as
  the published tables do) and its median error;
* gpu-eta ÷ best and history pace ÷ best, with 90 % bootstrap intervals over runs;
* the same two ratios against the better of Keras' mean and ``predict_linear`` alone
  (``RATE_BASELINES``, the issue's "best rate baseline").

Where the history pace itself is above 0.7×, a configuration's past read this way
does not carry a forecaster to the target on that corpus; where it is well below
gpu-eta, gpu-eta leaves something of that past unread. ::

    python bench/history_oracle.py --corpus cpu-dedicated
    python bench/history_oracle.py --corpus mlperf-choose     # a few minutes

Why a bench and not a test: figures to read before aiming a change, with their
uncertainty; ``tests/bench/test_history_oracle.py`` checks the maths on runs whose
answer is known.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from forecast_accuracy import (
    SHORT,
    CorpusResult,
    GrowingFit,
    Row,
    _ratio,
    add_corpus_arguments,
    run_corpus,
    score_rows,
    selected_corpora,
)

from gpu_eta.forecaster.calibration import POINTS, point_label
from gpu_eta.forecaster.estimators.base import InsufficientData
from gpu_eta.forecaster.evaluate import GPU_ETA, Scored, identity_key
from gpu_eta.forecaster.forecast import Forecast
from gpu_eta.forecaster.runs import Run

HISTORY_PACE = "history_pace"
RATE_BASELINES = ("keras_mean", "predict_linear")
"""Issue 10's "best rate baseline": Keras' mean skipping the first interval and
``predict_linear``; the published tables' best is over every baseline
(``forecast_accuracy.METHODS``), which includes tqdm's EMA and the identity median."""
TARGET = 0.7
"""Issue 10's aim where history exists: ≤ 0.7× the best baseline at every point."""

Trajectory = tuple[np.ndarray, np.ndarray]
"""A completed run's path: the fraction of its plan done at each progress point and
the seconds since its start at which each was reached (both increasing)."""


# -- the maths (pure) ----------------------------------------------------------------


def trajectory(run: Run) -> Trajectory | None:
    """``run``'s path (``Trajectory``), or None where it cannot be a yardstick (not
    completed, no plan, no progress point)."""
    if run.completed is not True or run.epochs_planned <= 0 or not run.epoch_times:
        return None
    done = np.array([e for e, _t in run.epoch_times], dtype=float) / run.epochs_planned
    took = np.array([t for _e, t in run.epoch_times], dtype=float) - run.start_timestamp
    return done, took


def paced_remaining(
    elapsed_seconds: float, fraction: float, earlier: Sequence[Trajectory]
) -> float | None:
    """Remaining seconds as ``elapsed_seconds`` × the median over ``earlier`` of the
    time each took after reaching ``fraction`` of its plan ÷ the time it took to reach
    it (read between its points by linear interpolation); None when nothing has
    elapsed or no earlier run had spent time by then (no pace to scale)."""
    ratios = []
    for done, took in earlier:
        before = float(np.interp(fraction, done, took))
        if before > 0:
            ratios.append((float(took[-1]) - before) / before)
    if not ratios or elapsed_seconds <= 0:
        return None
    return elapsed_seconds * statistics.median(ratios)


def scored_as(scored: Sequence[Scored], name: str) -> list[Scored]:
    """``scored`` with ``name``'s errors in gpu-eta's place, the moments ``name`` did
    not answer left out. Why: ``score_rows`` gives gpu-eta's ratio to the best
    baseline with its bootstrap interval; scored as gpu-eta, a yardstick gets the
    same figures, on the same moments, against the same best."""
    return [
        replace(s, errors={**s.errors, GPU_ETA: s.errors[name]}) for s in scored if name in s.errors
    ]


def with_history(scored: Sequence[Scored], name: str = HISTORY_PACE) -> list[Scored]:
    """The moments whose run had an earlier run of its identity ended before them and
    that ``name`` answered (it needs a completed one): the points every column of the
    table is scored on."""
    return [s for s in scored if s.earlier_same_identity >= 1 and name in s.errors]


# -- the yardstick as an estimator (for the replay) ------------------------------------


class HistoryPace(GrowingFit):
    """``paced_remaining`` over the earlier completed runs of the run's identity
    (``identity_key``: namespace + job + node type), minus the time since the run's
    last progress point; ``InsufficientData`` where it has nothing to read."""

    method = HISTORY_PACE

    def forget(self) -> None:
        self.paths_: dict[tuple[str, ...], list[Trajectory]] = {}

    def learn(self, run: Run) -> None:
        key, path = identity_key(run), trajectory(run)
        if key is not None and path is not None:
            self.paths_.setdefault(key, []).append(path)

    def predict(self, run: Run, now: float, stalled: bool = False) -> Forecast:
        key = identity_key(run)
        earlier = self.paths_.get(key, []) if key is not None else []
        left = paced_remaining(
            run.last_timestamp - run.start_timestamp, run.progress_ratio, earlier
        )
        if left is None:
            raise InsufficientData("history pace: no earlier run of this identity to read")
        left = max(0.0, left - (now - run.last_timestamp))
        return Forecast(left, left, left, method=self.method)


# -- output ----------------------------------------------------------------------------


def pace_table(scored: Sequence[Scored]) -> list[str]:
    """Markdown: per point, the moments with history (``with_history``), the best
    baseline there and its median error, gpu-eta ÷ best and history pace ÷ best; then
    the same two ratios against the better of issue 10's two rate baselines alone
    (``RATE_BASELINES``)."""
    pool = with_history(scored)
    paced = scored_as(pool, HISTORY_PACE)
    columns: list[list[Row]] = [
        score_rows(pool),
        score_rows(paced),
        score_rows(pool, methods=RATE_BASELINES),
        score_rows(paced, methods=RATE_BASELINES),
    ]
    head = ["point", "n", "best baseline", "its error", "gpu-eta ÷ best", "history pace ÷ best"]
    head += ["gpu-eta ÷ best rate", "history pace ÷ best rate"]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for eta, pace, eta_rate, pace_rate in zip(*columns, strict=True):
        if eta.point == POINTS[0] or not eta.n or eta.best not in eta.cells:
            continue  # the start: nothing has elapsed, the pace has nothing to scale
        best = eta.cells[eta.best]
        cells = [point_label(eta.point), f"{eta.n:,}", SHORT.get(eta.best, eta.best)]
        cells += [f"{best.median:.1%}", _ratio(eta.ratio), _ratio(pace.ratio)]
        cells += [_ratio(eta_rate.ratio), _ratio(pace_rate.ratio)]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def report(res: CorpusResult) -> list[str]:
    """``res``'s table pooled, then one per file kind when it pools several."""
    c = res.corpus
    out = [f"**{c.name}** — {c.description}: {c.n_runs:,} runs", "", *pace_table(res.scored)]
    for kind in res.kind_names():
        at = [s for s, k in zip(res.scored, res.kinds, strict=True) if k == kind]
        out += ["", f"*{c.name}, `{kind}` only:*", "", *pace_table(at)]
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_corpus_arguments(parser)
    args = parser.parse_args(argv)
    corpora = selected_corpora(parser, args)
    print(
        "Runs with an earlier completed run of the same identity; median absolute error "
        "of the remaining time; ratios to the best baseline on the same moments, 90 % "
        f"bootstrap interval over runs (target ≤ {TARGET}×).\n"
    )
    for corpus in corpora:
        res = run_corpus(corpus, args.refit_fraction, yardsticks={HISTORY_PACE: HistoryPace})
        print("\n".join(report(res)), end="\n\n", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
