"""Configurations that outlive a software release: the newer rounds after the older.

    python bench/cross_release.py            # both replays, ~10 minutes

Why: ``bench/forecast_accuracy.py`` replays each MLPerf split on its own, so a
configuration (submitter, benchmark, system name, batch size, GPU count) that also ran
in an older round meets its older runs only within a split. A cluster keeps its
history across upgrades, so this replays v0.5–v1.1 and then v2.0–v2.1 in one history
(``evaluate.backtest``, the model knowing only runs that ended before each moment) and
scores the v2.0–v2.1 moments beside the same moments replayed with v2.0–v2.1 alone:
apart for the runs of configurations that ran in both (their earlier runs are another
release's) and for all others. The latest-campaign rule (``estimators/campaign.py``)
is what this measures; docs/forecasting-evidence.md keeps its figures.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from forecast_accuracy import GPU_ETA, find_mlperf, score_rows, split_mlperf, without_copies

from gpu_eta.forecaster.calibration import POINTS
from gpu_eta.forecaster.estimators.analog import identity
from gpu_eta.forecaster.evaluate import Scored, backtest, run_labels
from gpu_eta.forecaster.runs import Run, run_key
from gpu_eta.forecaster.runs_csv import read_runs_file

AFTER, ALONE = "after the older runs", "the newer alone"
BOTH, OTHERS = "ran in both", "all others"


def summary(scored: Sequence[Scored]) -> list[str]:
    """Per point: gpu-eta's median error, its P10–P90 coverage and the moments
    (``forecast_accuracy.score_rows``, the published table's figures)."""
    cells = []
    for row in score_rows(scored):
        err, cov = row.cells.get(GPU_ETA), row.coverage
        if err is None or cov is None:
            cells.append("–")
            continue
        cells.append(f"{err.median:.2%}, {cov.median:.0%} (n={row.n:,})")
    return cells


def replays(old: Sequence[Run], new: Sequence[Run]) -> dict[tuple[str, str], list[Scored]]:
    """The newer runs' scored moments, replayed after the older runs and alone, each
    parted into those of configurations that also ran among the older and the rest."""
    older = {identity(r) for r in old} - {None}
    out: dict[tuple[str, str], list[Scored]] = {}
    for name, runs in ((AFTER, [*old, *new]), (ALONE, list(new))):
        # a moment names its run as the replay reports it (``run_labels``: the run_id,
        # or namespace/…/run_id where two runs share one)
        labels = run_labels(runs)
        cross = {labels[run_key(r)] for r in new if identity(r) in older}
        new_ids = {labels[run_key(r)] for r in new}
        scored = [s for s in backtest(runs).scored if s.run_id in new_ids]
        out[name, BOTH] = [s for s in scored if s.run_id in cross]
        out[name, OTHERS] = [s for s in scored if s.run_id not in cross]
    return out


def table(parts: dict[tuple[str, str], list[Scored]]) -> list[str]:
    """Markdown lines: one row per replay and part (``summary``)."""
    head = ["replay", "runs", *(f"{p:.0%}" if p else "start" for p in POINTS)]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for (name, part), scored in parts.items():
        lines.append("| " + " | ".join([name, part, *summary(scored)]) + " |")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mlperf", type=Path, default=None, help="the MLPerf runs file")
    args = parser.parse_args(argv)
    if args.mlperf is not None and not args.mlperf.is_file():
        parser.error(f"--mlperf {args.mlperf}: no such file")
    path = find_mlperf(args.mlperf)
    if path is None:
        print("MLPerf runs not found (--mlperf PATH)", file=sys.stderr)
        return 2
    split = split_mlperf(read_runs_file(path).runs)
    old = without_copies(split["mlperf-choose"])
    new = without_copies(split["mlperf-confirm"])
    parts = replays(old, new)
    print(
        f"v2.0–v2.1 runs: {len(new):,}, of configurations that also ran in v0.5–v1.1: "
        f"{len({s.run_id for s in parts[ALONE, BOTH]}):,}\n"
    )
    print("median abs. error of the remaining time, P10–P90 coverage (moments)\n")
    print("\n".join(table(parts)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
