"""A new round's first runs of each configuration: interval coverage by how many runs
of the same identity had ended before the moment.

    python bench/cold_start.py --mlperf /work/shared/data/mlperf-dev/runs.csv.gz
    python bench/cold_start.py --split mlperf-choose --round v0.5   # one round, quickly
    python bench/cold_start.py --round v1.1 --by-situation   # its first runs, by kind

Why: each MLPerf round replayed alone (``forecast_accuracy.py --by-round``, how a
newer round's file is judged by ``evaluate --runs``) starts with an empty history, so
its first runs of each configuration are forecast from none, one or two earlier runs
of it, with a calibration that has seen few such forecasts. The published by-round
coverage pools them with the rest; this replays the same rounds the same way
(``forecast_accuracy.by_round`` and ``run_corpus``, the same scored moments) and
splits each round's start, 10 % and 25 % moments by the number of earlier ended runs
of the same namespace + job + node type (``Scored.earlier_same_identity``, as
``evaluate`` counts it): 0, 1, 2, 3–4, 5+. Per cell: moments, P10–P90 coverage, the
shares below P10 and above P90, the median absolute % error of P50, the median
P90 ÷ P10, and the situation and calibration path most of its forecasts took
(``calibration_paths.Counting``) with the median number of residuals its situation's
own calibration had at the point. Figures to read, not a claim: a round's cells with
one or two earlier runs hold a few dozen moments.
"""

from __future__ import annotations

import argparse
import functools
import math
import statistics
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from calibration_paths import Counting
from forecast_accuracy import (
    MLPERF_SPLITS,
    ROUNDS,
    CorpusResult,
    by_round,
    find_mlperf,
    load_corpora,
    run_corpus,
)

from gpu_eta.forecaster.calibration import point_label
from gpu_eta.forecaster.evaluate import GPU_ETA, Prediction, Scored
from gpu_eta.forecaster.forecast import Forecast
from gpu_eta.forecaster.runs import Run

POINTS_SHOWN = (0.0, 0.1, 0.25)
BUCKETS = ((0, 0, "0"), (1, 1, "1"), (2, 2, "2"), (3, 4, "3–4"), (5, math.inf, "5+"))
"""(fewest, most, label) earlier ended runs of the same identity."""
Path_ = tuple[str, str, int]  # situation, calibration path, own residuals at the point


def bucket(earlier: int) -> str:
    """The label of the bucket ``earlier`` ended runs of the identity fall in."""
    return next(label for low, high, label in BUCKETS if low <= earlier <= high)


class Logged(Counting):
    """``Counting`` that keeps the situation and calibration path of every forecast,
    by run id and moment, in a log shared by every refit of a replay.

    Keyed by the bare run id, which ``cells`` looks up under the scored moment's run
    label: the two agree where run ids are unique in the file, as in the MLPerf runs
    this bench reads (8,265 ids, no repeat); a file repeating ids would need the run's
    key mapped through ``run_labels``."""

    def __init__(self, log: dict[tuple[str, float], Path_], **kwargs: object) -> None:
        super().__init__(**kwargs)
        self.log = log

    def predict(self, run: Run, now: float, stalled: bool = False) -> Forecast:
        self.last = None  # ``fit`` calls ``_calibration`` too
        forecast = super().predict(run, now, stalled)
        if self.last is not None:
            self.log[(run.run_id, now)] = self.last
        return forecast


@dataclass
class Cell:
    """The scored moments of one (round, point, bucket)."""

    covered: list[bool] = field(default_factory=list)
    below: list[bool] = field(default_factory=list)
    errors: list[float] = field(default_factory=list)
    widths: list[float] = field(default_factory=list)
    paths: Counter[tuple[str, str]] = field(default_factory=Counter)
    own_n: list[int] = field(default_factory=list)

    def add(self, s: Scored, f: Prediction, path: Path_ | None) -> None:
        self.covered.append(s.covered)
        self.below.append(f.actual < f.p10)
        self.errors.append(s.errors[GPU_ETA])
        self.widths.append(f.p90 / f.p10 if f.p10 > 0 else math.inf)
        if path is not None:
            self.paths[path[:2]] += 1
            self.own_n.append(path[2])

    def line(self, label: str) -> str:
        n = len(self.covered)
        if not n:
            return f"| {label} | 0 |" + " – |" * 7
        cov = sum(self.covered) / n
        below = sum(self.below) / n
        above = max(0.0, 1.0 - cov - below)
        path = "–"
        if self.paths:
            (name, how), count = self.paths.most_common(1)[0]
            path = f"{name}, {how} ({count / n:.0%})"
        own = f"{statistics.median(self.own_n):g}" if self.own_n else "–"
        return (
            f"| {label} | {n:,} | {cov:.0%} | {below:.0%} | {above:.0%} "
            f"| {statistics.median(self.errors):.1%} | {statistics.median(self.widths):.2f} "
            f"| {path} | {own} |"
        )


def cells(
    res: CorpusResult, log: dict[tuple[str, float], Path_]
) -> dict[tuple[str, float, str], Cell]:
    """``res``'s scored moments at ``POINTS_SHOWN`` by (round, point, bucket); the
    round ``"all"`` pools the split's rounds."""
    out: dict[tuple[str, float, str], Cell] = {}
    for s, kind, f in zip(res.scored, res.kinds, res.forecasts, strict=True):
        if s.point not in POINTS_SHOWN:
            continue
        path = log.get((s.run_id, f.timestamp_seconds))
        for where in (kind, "all"):
            for b in (bucket(s.earlier_same_identity), "any"):
                out.setdefault((where, s.point, b), Cell()).add(s, f, path)
    return out


def first_run_cells(
    res: CorpusResult, log: dict[tuple[str, float], Path_]
) -> dict[tuple[str, float, str], Cell]:
    """The moments of configurations with no earlier ended run (bucket 0) at
    ``POINTS_SHOWN``, by (round, point, label): each situation and calibration path
    (``"transfer, own"``), and each situation and job (``"transfer · unet3d"``, the job
    as ``forecast_accuracy.job_of`` names it, ``CorpusResult.jobs``). Why: a round's
    under-covered first runs are not one kind; which situation (``choice.situation``)
    and job miss is where a fix has to look."""
    out: dict[tuple[str, float, str], Cell] = {}
    for s, kind, f, job in zip(res.scored, res.kinds, res.forecasts, res.jobs, strict=True):
        if s.point not in POINTS_SHOWN or s.earlier_same_identity:
            continue
        path = log.get((s.run_id, f.timestamp_seconds))
        if path is None:
            continue
        for label in (f"{path[0]}, {path[1]}", f"{path[0]} · {job or '–'}"):
            out.setdefault((kind, s.point, label), Cell()).add(s, f, path)
    return out


def situation_table(name: str, by: dict[tuple[str, float, str], Cell]) -> str:
    """One Markdown table of ``first_run_cells``, each round's and point's largest first."""
    head = (
        "| round · point · situation, path or job | moments | coverage | below P10 "
        "| above P90 | median error | P90 ÷ P10 | most forecasts (situation, calibration) "
        "| own residuals |"
    )
    lines = [f"**{name}**, configurations never run before", "", head, "|" + " --- |" * 9]
    order = sorted(by.items(), key=lambda kv: (kv[0][0], kv[0][1], -len(kv[1].covered)))
    for (kind, point, label), cell in order:
        lines.append(cell.line(f"{kind} · {point_label(point)} · {label}"))
    return "\n".join(lines) + "\n"


def table(name: str, rounds: Sequence[str], by: dict[tuple[str, float, str], Cell]) -> str:
    """One Markdown table per split: round, point, bucket."""
    head = (
        "| round · point · earlier runs | moments | coverage | below P10 | above P90 "
        "| median error | P90 ÷ P10 | most forecasts (situation, calibration) "
        "| own residuals |"
    )
    lines = [f"**{name}**", "", head, "|" + " --- |" * 9]
    for where in (*rounds, "all"):
        for point in POINTS_SHOWN:
            for b in (*(label for _lo, _hi, label in BUCKETS), "any"):
                cell = by.get((where, point, b))
                if cell is not None:
                    lines.append(cell.line(f"{where} · {point_label(point)} · {b}"))
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mlperf", type=Path, help="the MLPerf runs file (runs.csv.gz)")
    parser.add_argument(
        "--split", action="append", choices=MLPERF_SPLITS, help="only this split (repeatable)"
    )
    parser.add_argument("--round", action="append", help="only this round, e.g. v0.5 (repeatable)")
    parser.add_argument(
        "--by-situation",
        action="store_true",
        help="also the configurations never run before, by situation, path and job",
    )
    args = parser.parse_args(argv)
    known = [label for label, _first, _last in ROUNDS]
    if args.round and (unknown := sorted(set(args.round) - set(known))):
        parser.error(f"--round {', '.join(unknown)}: not a round; have {', '.join(known)}")
    mlperf = find_mlperf(args.mlperf)
    if mlperf is None or not mlperf.exists():
        parser.error("--mlperf: the MLPerf runs file (runs.csv.gz) was not found")
    splits = args.split or MLPERF_SPLITS
    for corpus in load_corpora(mlperf, None):
        if corpus.name not in splits:
            continue
        corpus = by_round(corpus)
        if args.round:
            keep = [i for i, kind in enumerate(corpus.kinds) if kind in args.round]
            corpus.parts = [corpus.parts[i] for i in keep]
            corpus.kinds = tuple(corpus.kinds[i] for i in keep)
            if not keep:
                continue
        log: dict[tuple[str, float], Path_] = {}
        res = run_corpus(corpus, 0.05, model_factory=functools.partial(Logged, log, random_state=0))
        print(table(corpus.name, corpus.kinds, cells(res, log)), flush=True)
        if args.by_situation:
            print(situation_table(corpus.name, first_run_cells(res, log)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
