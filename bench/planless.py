"""Runs that report no planned total: how good the forecast from past durations is.

A live run without a planned total is forecast from the durations of its
configuration's earlier completed runs (``forecaster/planless.py``). This bench
replays every corpus of ``bench/forecast_accuracy.py`` in time order at the moments it
scores (start and 10–95 % of each completed run's realised total,
``evaluate.replay_events``), and at each asks ``DurationsFit.forecast`` as the service
does, the fit given the runs that completed before the moment (in end order). Beside it, the plain median of
those durations minus the time elapsed (what a person would guess; ``evaluate``'s
``configuration_median``: the accuracy tables' ``identity median``, keyed instead on the
configuration) and the P10–P90 coverage, by the number of durations the forecast had.
A second table per corpus takes the moments the configuration could not answer (no completed run of
it, or none longer than the time elapsed): how many its job's or the cluster's
durations answered (``planless.METHODS``), their error and coverage, and how many got
no forecast.

    python bench/planless.py --mlperf ../shared/data/mlperf-dev/runs.csv.gz

Prints a table per corpus; nothing is fitted, so it takes seconds. Why a bench: the
rule has no constant to choose; this measures what it gives (docs/forecasting.md,
"Runs whose total is unknown").
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parent))

from forecast_accuracy import (
    find_mlperf,
    load_corpora,
    refuse_docs_without_mlperf,
    replace_between_markers,
)

from gpu_eta.forecaster.calibration import POINTS, point_label
from gpu_eta.forecaster.evaluate import replay_events
from gpu_eta.forecaster.planless import METHODS, DurationsReplay
from gpu_eta.forecaster.runs import Run

DOC = Path(__file__).resolve().parents[1] / "docs" / "forecasting-evidence.md"
BEGIN, END = "<!-- planless-table:begin -->", "<!-- planless-table:end -->"
COMMAND = "python bench/planless.py --write-docs"
SIZES = ((1, 2), (3, 5), (6, 9), (10, 10**9))
"""Bands of the number of earlier durations."""


_R = TypeVar("_R", bound=tuple)
Moment = tuple[float, int, float, float, float, float]
"""``(point, n, error_ours, error_median, covered, truth)``."""
Coarser = tuple[float, str, float, float, bool]
"""``(point, method or "none", error, covered, borrowed)``; ``borrowed``: the level's own
spread was not yet measured and a coarser level's was used."""


def moments(runs: Sequence[Run], matched: bool = True) -> tuple[list[Moment], list[Coarser]]:
    """Per scored moment that had at least one earlier completed run of its
    configuration longer than the time elapsed, a ``Moment`` (errors in % of the true
    remaining time); per other moment, what the coarser levels gave (``Coarser``).
    ``matched`` False: the coarser levels' spreads measured on every run
    (``DurationsFit``)."""
    replay = DurationsReplay(runs, matched=matched)
    out: list[Moment] = []
    coarser: list[Coarser] = []
    for now, point, part, whole in replay_events(runs):
        truth = whole.last_timestamp - now  # > 0: replay_events yields no moment without time left
        fc = replay.forecast(part, now)  # as the service asks it
        if fc is None:
            coarser.append((point, "none", math.nan, math.nan, False))
            continue
        covered = float(fc.p10 <= truth <= fc.p90)
        error = abs(fc.p50 - truth) / truth * 100
        depth = METHODS.index(fc.method)
        if depth:  # its configuration could not answer
            borrowed = replay.spread.coarser[depth - 1] is None
            coarser.append((point, fc.method, error, covered, borrowed))
            continue
        plain = replay.configuration_median(part, now)
        assert plain is not None  # the configuration answered: it has durations
        left, n = plain
        out.append((point, n, error, abs(left - truth) / truth * 100, covered, truth))
    return out, coarser


def _by_point(rows: Sequence[_R]) -> Iterator[tuple[str, list[_R]]]:
    """Per scored point that has rows (a row's first field is its point): its label and
    its rows."""
    for point in POINTS:
        sel = [r for r in rows if r[0] == point]
        if sel:
            yield point_label(point), sel


def table(rows: Sequence[Moment]) -> list[str]:
    """One line per point: moments, errors, ratio, coverage, coverage by band of n."""
    bands = " | ".join(f"coverage n {lo}–{hi}" if hi < 10**9 else f"n ≥ {lo}" for lo, hi in SIZES)
    lines = [
        f"| point | moments | durations rule | median duration | ratio | P10–P90 coverage | {bands} |",
        "| --- " * (6 + len(SIZES)) + "|",
    ]
    for label, sel in _by_point(rows):
        ours = statistics.median(r[2] for r in sel)
        plain = statistics.median(r[3] for r in sel)
        cover = statistics.fmean(r[4] for r in sel) * 100
        by_band = []
        for lo, hi in SIZES:
            band = [r[4] for r in sel if lo <= r[1] <= hi]
            by_band.append(f"{statistics.fmean(band) * 100:.0f} % ({len(band)})" if band else "–")
        ratio = ours / plain if plain > 0 else math.nan
        lines.append(
            f"| {label} | {len(sel):,} | {ours:.1f} % | {plain:.1f} % | {ratio:.2f}× | "
            f"{cover:.1f} % | " + " | ".join(by_band) + " |"
        )
    return lines


def coarser_table(rows: Sequence[Coarser]) -> list[str]:
    """One line per point: per coarser level, moments answered, median error and
    coverage; and the moments no level answered."""
    methods = METHODS[1:]
    head = " | ".join(f"`{m}`: moments, error, coverage" for m in methods)
    lines = [
        f"| point | moments | {head} | of them with a coarser level's spread | no forecast |",
        "| --- " * (4 + len(methods)) + "|",
    ]
    for label, sel in _by_point(rows):
        cells = []
        for method in methods:
            got = [r for r in sel if r[1] == method]
            if got:
                error = statistics.median(r[2] for r in got)
                cover = statistics.fmean(r[3] for r in got) * 100
                cells.append(f"{len(got):,}, {error:.0f} %, {cover:.0f} %")
            else:
                cells.append("–")
        borrowed = [r[3] for r in sel if r[4]]
        cells.append(
            f"{len(borrowed):,}, covered {statistics.fmean(borrowed) * 100:.0f} %"
            if borrowed
            else "–"
        )
        none = sum(1 for r in sel if r[1] == "none")
        lines.append(f"| {label} | {len(sel):,} | " + " | ".join(cells) + f" | {none:,} |")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mlperf", type=Path, help="the MLPerf runs file (runs.csv.gz)")
    parser.add_argument(
        "--write-docs", action="store_true", help=f"also write the tables into {DOC.name}"
    )
    parser.add_argument(
        "--every-run",
        action="store_true",
        help="measure the job's and the cluster's spreads on every run, not only on the "
        "runs new at every finer level (the variant not kept; tables not written)",
    )
    args = parser.parse_args(argv)
    corpora = load_corpora(find_mlperf(args.mlperf), None)
    if args.write_docs and not args.every_run:
        refuse_docs_without_mlperf(parser, corpora)
    out = []
    for corpus in corpora:
        rows: list[Moment] = []
        other: list[Coarser] = []
        for part in corpus.parts:
            got, coarser = moments(part, matched=not args.every_run)
            rows += got
            other += coarser
        out += [f"**{corpus.name}** — {corpus.description}: {len(rows):,} moments forecast", ""]
        out += [*table(rows), ""] if rows else ["(none: no run had an earlier completed one)", ""]
        if other:
            out += [
                f"*{corpus.name}, moments its configuration could not answer "
                "(no completed run of it longer than the time elapsed):*",
                "",
                *coarser_table(other),
                "",
            ]
    text = "\n".join(out)
    print(text, flush=True)
    if args.write_docs and not args.every_run:
        doc = DOC.read_text()
        DOC.write_text(
            replace_between_markers(
                doc, text, COMMAND, BEGIN, END, "## Runs whose total is unknown"
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
