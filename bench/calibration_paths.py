"""Which calibration each gpu-eta forecast took, and how often its P10–P90 held.

    python bench/calibration_paths.py                      # every corpus, a few minutes
    python bench/calibration_paths.py --corpus cpu-shared --limit 300
    python bench/calibration_paths.py --corpus mlperf-choose --first 400  # a young cluster

Why: P10–P90 coverage is published per corpus and point (bench/forecast_accuracy.py),
but a miss there comes from one of several calibrations: the situation's own (new
job, job prior, analogs; analogs of one run, ``analog:one``: docs/forecasting-model.md,
"Calibration and quality"), everyone's
where the situation has too few residuals at the point, or the envelope of both. This
replays the same corpora the same way (``forecaster.evaluate.Replay``, every forecast
made as of the moment, the model knowing only runs that ended before) and prints,
per point, situation and path, how many forecasts took it, their coverage, the shares
below P10 and above P90, and the median number of residuals the situation's own
calibration had at that point. Figures to read, not a claim: the paths of a small
corpus rest on a few dozen forecasts.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from forecast_accuracy import add_corpus_arguments, first_runs, selected_corpora

from gpu_eta.forecaster.calibration import POINTS, Calibrator, point_label, progress_point
from gpu_eta.forecaster.estimators.eta_model import ONE_ANALOG, EtaModel
from gpu_eta.forecaster.evaluate import Replay, replay_events
from gpu_eta.forecaster.runs import Run

OWN, EVERYONE, ENVELOPE = "own", "everyone's", "envelope"


@dataclass
class Tally:
    """Forecasts of one (point, situation, path): hits, tail misses, own residuals."""

    n: int = 0
    hits: int = 0
    below: int = 0
    above: int = 0
    own_n: list[int] = field(default_factory=list)


class Counting(EtaModel):
    """``EtaModel`` that remembers the situation and calibration path of its last
    forecast (``_calibration`` is the one place ``predict`` picks them)."""

    last: tuple[str, str, int] | None = None

    def _calibration(
        self, name: str, point: float, analogs: int | None = None
    ) -> tuple[Calibrator, Calibrator | None]:
        calibrator, own = super()._calibration(name, point, analogs)
        path = OWN if calibrator is own else EVERYONE if own is None else ENVELOPE
        if calibrator is self.calibrators_.get(ONE_ANALOG):  # analogs of one run: own kind
            name = ONE_ANALOG
        # the situation's own residuals at the point, whether or not ``predict`` uses
        # its calibration (runs with analogs short of them take everyone's alone)
        situation = self.calibrators_.get(name)
        self.last = (name, path, 0 if situation is None else situation.n_.get(point, 0))
        return calibrator, own


def tally_paths(runs: Sequence[Run], refit_fraction: float = 0.05) -> dict[tuple, Tally]:
    """Every moment of ``runs`` forecast as ``backtest`` replays it, tallied by
    (point, situation, path)."""
    replay = Replay(runs, lambda: Counting(random_state=0), refit_fraction)
    out: dict[tuple, Tally] = defaultdict(Tally)
    for ts, _point, part, run in replay_events(runs):
        model = replay.model_at(ts)
        model.last = None
        forecast = model.predict(part, ts)
        if model.last is None:  # no epoch left to forecast: nothing was calibrated
            continue
        name, path, own_n = model.last
        truth = run.last_timestamp - part.last_timestamp
        t = out[(progress_point(part.progress_ratio), name, path)]
        t.n += 1
        t.hits += forecast.p10 <= truth <= forecast.p90
        t.below += truth < forecast.p10
        t.above += truth > forecast.p90
        t.own_n.append(own_n)
    return out


def report(name: str, tallies: dict[tuple, Tally]) -> str:
    lines = [
        f"**{name}**",
        "",
        "| point | situation | calibration | forecasts | coverage | below P10 | above P90 "
        "| own residuals (median) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for point in POINTS:
        for key in sorted(k for k in tallies if k[0] == point):
            t = tallies[key]
            label = point_label(point)
            lines.append(
                f"| {label} | {key[1]} | {key[2]} | {t.n:,} | {t.hits / t.n:.1%} "
                f"| {t.below / t.n:.1%} | {t.above / t.n:.1%} "
                f"| {statistics.median(t.own_n):g} |"
            )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_corpus_arguments(parser)
    parser.add_argument(
        "--first", type=int, metavar="N", help="only the first N runs by start: a young cluster"
    )
    args = parser.parse_args(argv)
    if args.first is not None and args.first < 1:
        parser.error("--first must be ≥ 1")
    corpora = selected_corpora(parser, args)
    for corpus in corpora:
        merged: dict[tuple, Tally] = defaultdict(Tally)
        for part in corpus.parts:
            if args.first is not None:
                part = first_runs(part, args.first)
            for key, t in tally_paths(part, args.refit_fraction).items():
                m = merged[key]
                m.n, m.hits = m.n + t.n, m.hits + t.hits
                m.below, m.above = m.below + t.below, m.above + t.above
                m.own_n.extend(t.own_n)
        print(report(corpus.name, merged), end="\n\n", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
