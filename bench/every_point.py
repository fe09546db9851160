"""gpu-eta at every progress point of a run, not only at the scored ones.

    python bench/every_point.py                      # both MLPerf splits, ~5 minutes
    python bench/forecast_accuracy.py --help         # the corpora (--corpus NAME)

Why: ``evaluate`` and ``bench/forecast_accuracy.py`` score each run at its start and at
the last progress point at or before each of ``calibration.POINTS``, which is where the
model's calibration replays past runs too (and once in a run's last interval, for its
own bin). A live run is forecast at every progress point; one between two of them (at
35 %) takes the nearer bin's calibration, fitted on moments that need not look like it. This
replays each corpus as ``evaluate`` does (``evaluate.Replay``: the model knows only
runs that ended before each moment) and scores every progress point of every
completed run — after the start, before the end, with time left — against the rate
baselines ``evaluate`` scores (tqdm's EMA, Keras' mean, the cumulative mean,
``predict_linear``), grouped by the share of the plan done.
Figures are reported, not asserted: docs/forecasting-evidence.md ("Near the end").
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
from forecast_accuracy import find_mlperf, load_corpora

from gpu_eta.forecaster.estimators import BASELINES as ALL_BASELINES
from gpu_eta.forecaster.estimators import make_estimator
from gpu_eta.forecaster.estimators.base import InsufficientData
from gpu_eta.forecaster.evaluate import Replay
from gpu_eta.forecaster.runs import Run

EDGES = (0.0, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1.0)
"""Progress ranges of the table: tenths, the first and last split in two (a run's
first and last intervals are where forecasts differ most)."""
BASELINES = tuple(name for name in ALL_BASELINES if name != "history_match")
"""The rate baselines (the history match answers a run's length, not its rate)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Moment:
    """One forecast: the share of the plan done, each method's absolute % error of the
    remaining time, whether gpu-eta's P10–P90 held it."""

    done: float
    errors: dict[str, float]
    covered: bool


def moments(runs: Iterable[Run]) -> list[tuple[float, Run, Run]]:
    """``(time, run as seen then, whole run)`` at every progress point of each
    completed run after its start and before its end with time left, in time order."""
    out = []
    for run in runs:
        if run.completed is not True:
            continue
        for k in range(2, len(run.epoch_times)):
            part = dataclasses.replace(run, epoch_times=run.epoch_times[:k], completed=None)
            if run.last_timestamp > part.last_timestamp:
                out.append((part.last_timestamp, part, run))
    out.sort(key=lambda m: (m[0], m[2].run_id, len(m[1].epoch_times)))
    return out


def score(runs: Sequence[Run]) -> list[Moment]:
    """Every moment of ``runs`` (``moments``) forecast by gpu-eta as it was then and by
    the rate baselines; a moment a baseline cannot answer is left out."""
    replay = Replay(runs)
    baselines = {name: make_estimator(name).fit([]) for name in BASELINES}
    out = []
    for ts, part, run in moments(runs):
        truth = run.last_timestamp - part.last_timestamp
        forecast = replay.model_at(ts).predict(part, ts)
        errors = {"gpu_eta": abs(forecast.p50 - truth) / truth}
        try:
            for name, est in baselines.items():
                errors[name] = abs(est.predict(part, ts).p50 - truth) / truth
        except InsufficientData:
            continue
        done = part.epochs_done / run.epochs_planned
        out.append(Moment(done, errors, forecast.p10 <= truth <= forecast.p90))
    return out


def table(scored: Sequence[Moment], edges: Sequence[float] = EDGES) -> list[str]:
    """Markdown lines: per progress range, the moments, each method's median error,
    gpu-eta over the best baseline and gpu-eta's P10–P90 coverage."""
    head = ["done", "n", "gpu-eta", *BASELINES, "gpu-eta ÷ best", "coverage"]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for lo, hi in itertools.pairwise(edges):
        at = [m for m in scored if lo <= m.done < hi]
        if not at:
            continue
        med = {k: float(np.median([m.errors[k] for m in at])) for k in ("gpu_eta", *BASELINES)}
        best = min(med[k] for k in BASELINES)
        ratio = f"{med['gpu_eta'] / best:.2f}×" if best > 0 else "–"
        cover = float(np.mean([m.covered for m in at]))
        cells = [f"{lo:.0%}–{hi:.0%}", f"{len(at):,}"]
        cells += [f"{med[k]:.2%}" for k in ("gpu_eta", *BASELINES)]
        cells += [ratio, f"{cover:.1%}"]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mlperf", type=Path, default=None, help="the MLPerf runs file")
    parser.add_argument(
        "--corpus",
        action="append",
        help="a corpus of bench/forecast_accuracy.py (repeatable; default: both MLPerf splits)",
    )
    args = parser.parse_args(argv)
    wanted = args.corpus or ["mlperf-choose", "mlperf-confirm"]
    corpora = {c.name: c for c in load_corpora(find_mlperf(args.mlperf), None)}
    missing = [name for name in wanted if name not in corpora]
    if missing:
        print(f"no corpus {', '.join(missing)} (MLPerf runs: --mlperf PATH)", file=sys.stderr)
        return 2
    for name in wanted:
        scored = [m for part in corpora[name].parts for m in score(part)]
        print(f"**{name}**: {len(scored):,} moments\n")
        print("\n".join(table(scored)) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
