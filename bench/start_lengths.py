"""A run's whole length from its analogs, before its first progress point.

    python bench/start_lengths.py            # both MLPerf splits, a few seconds

Why: at the start of a run the analog forecast (``estimators/analog.py``) is the median
of its configuration's earlier runs' lengths, each scaled to this run's plan. This
prints, per MLPerf split and benchmark, the median error of that median under two
readings: the whole length × the ratio of plans (``T_i · P / P_i``), and the start-up
as it was with only the work after the analog's first progress point scaled
(``analog.start_seconds``). The analogs are the ≤ 10 latest runs of the configuration
that ended before the run started, without the model's choice, calibration or the
latest-campaign rule: the readings themselves. docs/forecasting-evidence.md
("Analogs") keeps its figures.
"""

from __future__ import annotations

import argparse
import bisect
import statistics
import sys
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path

from forecast_accuracy import find_mlperf, split_mlperf, without_copies

from gpu_eta.forecaster.estimators.analog import (
    MAX_ANALOGS,
    Curve,
    curve,
    identity,
    start_seconds,
    unit_of,
)
from gpu_eta.forecaster.runs import Run
from gpu_eta.forecaster.runs_csv import read_runs_file

Reading = Callable[[Run, Curve], float]
READINGS: dict[str, Reading] = {
    "ratio of plans": lambda run, c: c.total * run.epochs_planned / c.planned,
    "start-up as it was": lambda run, c: start_seconds(run.epochs_planned, unit_of(run), c),
}


def errors(runs: Sequence[Run]) -> dict[str, dict[str, list[float]]]:
    """Per reading and job name ("" for all): each run's absolute % error of the median
    of its analogs' readings of its whole length (runs with at least one analog)."""
    groups: dict[tuple[str, ...], list[Run]] = defaultdict(list)
    for run in runs:
        if (key := identity(run)) is not None:
            groups[key].append(run)
    out: dict[str, dict[str, list[float]]] = {name: defaultdict(list) for name in READINGS}
    for group in groups.values():
        finished = sorted(
            (r for r in group if r.completed is not False and len(r.epoch_times) >= 2),
            key=lambda r: r.last_timestamp,
        )
        ends = [r.last_timestamp for r in finished]
        for run in group:
            n = bisect.bisect_left(ends, run.start_timestamp)
            curves = [curve(a) for a in finished[max(0, n - MAX_ANALOGS) : n]]
            truth = run.last_timestamp - run.start_timestamp
            if not curves or truth <= 0:
                continue
            job = str(run.features.get("job_name", ""))
            for name, read in READINGS.items():
                guess = statistics.median(read(run, c) for c in curves)
                err = abs(guess - truth) / truth * 100.0
                out[name][""].append(err)
                out[name][job].append(err)
    return out


def table(split: str, errs: dict[str, dict[str, list[float]]]) -> list[str]:
    """A markdown table: per job (all first), runs and each reading's median error."""
    names = list(READINGS)
    lines = [
        f"**{split}**",
        "",
        "| job | runs | " + " | ".join(names) + " |",
        "| --- | --- | " + " | ".join("---" for _ in names) + " |",
    ]
    first = errs[names[0]]
    for job in sorted(first, key=lambda j: (j != "", j)):
        cells = [f"{statistics.median(errs[name][job]):.2f} %" for name in names]
        label = "all" if job == "" else f"`{job}`"
        lines.append(f"| {label} | {len(first[job]):,} | " + " | ".join(cells) + " |")
    return [*lines, ""]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mlperf", type=Path, help="the MLPerf runs file (runs.csv.gz)")
    args = parser.parse_args(argv)
    if args.mlperf is not None and not args.mlperf.is_file():
        parser.error(f"--mlperf {args.mlperf}: no such file")
    path = find_mlperf(args.mlperf)
    if path is None:
        print("start_lengths: no MLPerf runs file (--mlperf PATH)", file=sys.stderr)
        return 2
    runs = without_copies(read_runs_file(path).runs)
    for split, part in split_mlperf(runs).items():
        print("\n".join(table(split, errors(part))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
