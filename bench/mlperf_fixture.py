"""Build the MLPerf fixture of the recorded-run tests from the development set.

    python bench/mlperf_fixture.py [--mlperf PATH/runs.csv.gz] [--out FILE]

writes ``tests/fixtures/runs/mlperf_v2_sample.csv.gz``: real MLPerf Training v2.0–v2.1
runs (public result logs, Apache-2.0), copied row for row from ``runs.csv.gz`` with their
run ids prefixed ``mlperf-``. The recipe is fixed and seeded, so the file can be built
again and checked:

* rounds v2.0–v2.1 only (runs that started on or after 2022-01-01 UTC): the model's
  constants were chosen on v0.5–v1.1;
* a run that repeats another exactly (same identity, same progress points at the same
  timestamps: results published again in a later round's repository) is left out, the
  lowest run id kept; counted twice it would weigh twice in every figure;
* per benchmark (job name), up to ``CONFIGS_PER_JOB`` configurations (namespace, job,
  node type, batch size, GPU count) that ran at least 5 times, their first
  ``RUNS_PER_CONFIG`` runs: most runs then have earlier runs of their configuration, as
  on a cluster that re-runs its jobs, and the first run of each has none (unet3d's
  configurations ran 40 times each; a cap keeps one benchmark from filling the file);
* every run whose configuration ran once.

Why a few hundred runs: the tests assert P10–P90 coverage in 77–85 % at each point, and
with ~100 moments a point the sampling error of a coverage is ±4 points, the band's
half-width; with ~300 it is ±2.3.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import io
import random
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

from forecast_accuracy import CONFIRM_FROM, find_mlperf

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "tests" / "fixtures" / "runs" / "mlperf_v2_sample.csv.gz"
SEED = 2022
CONFIGS_PER_JOB = 6
MIN_RUNS = 5
RUNS_PER_CONFIG = 10
CONFIG_COLUMNS = ("namespace", "job_name", "node_type", "batch_size", "gpus")

Rows = list[dict[str, str]]


def runs_of(rows: Iterable[dict[str, str]]) -> dict[str, Rows]:
    """Rows grouped by run id, in file order."""
    out: dict[str, Rows] = {}
    for row in rows:
        out.setdefault(row["run_id"], []).append(row)
    return out


def without_copies(runs: dict[str, Rows]) -> dict[str, Rows]:
    """Every run but those repeating a lower-numbered run exactly (identity and every
    progress point with its timestamp)."""
    seen: set[tuple] = set()
    out = {}
    for run_id in sorted(runs, key=int):
        rows = runs[run_id]
        key = (
            tuple(rows[0][c] for c in CONFIG_COLUMNS),
            tuple((r["epoch"], r["timestamp_seconds"]) for r in rows),
        )
        if key not in seen:
            seen.add(key)
            out[run_id] = rows
    return out


def pick(runs: dict[str, Rows], seed: int = SEED) -> list[str]:
    """The run ids of the recipe (module docstring), sorted by run id."""
    configs: dict[tuple[str, ...], list[str]] = {}
    for run_id, rows in runs.items():
        configs.setdefault(tuple(rows[0][c] for c in CONFIG_COLUMNS), []).append(run_id)
    rng = random.Random(seed)
    chosen: list[str] = []
    by_job: dict[str, list[tuple[str, ...]]] = {}
    for key, ids in configs.items():
        if len(ids) >= MIN_RUNS:
            by_job.setdefault(key[1], []).append(key)
    for job in sorted(by_job):
        keys = sorted(by_job[job])
        for key in rng.sample(keys, min(CONFIGS_PER_JOB, len(keys))):
            chosen.extend(sorted(configs[key], key=int)[:RUNS_PER_CONFIG])
    chosen.extend(ids[0] for ids in configs.values() if len(ids) == 1)
    return sorted(chosen, key=int)


def started_from(runs: dict[str, Rows], start: float) -> dict[str, Rows]:
    """The runs whose first point is at or after ``start`` (Unix seconds)."""
    return {k: v for k, v in runs.items() if min(float(r["timestamp_seconds"]) for r in v) >= start}


def write(path: Path, header: Sequence[str], runs: dict[str, Rows], ids: Sequence[str]) -> None:
    """The chosen runs, ids prefixed ``mlperf-``, gzip-compressed without a timestamp
    or a file name in the header (the same input gives the same bytes, wherever
    written)."""
    text = io.StringIO()
    writer = csv.DictWriter(text, header, lineterminator="\n")
    writer.writeheader()
    for run_id in ids:
        for row in runs[run_id]:
            writer.writerow({**row, "run_id": f"mlperf-{run_id}"})
    with open(path, "wb") as raw, gzip.GzipFile(filename="", fileobj=raw, mode="wb", mtime=0) as gz:
        gz.write(text.getvalue().encode())


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mlperf", type=Path, help="the development set (runs.csv.gz)")
    parser.add_argument("--out", type=Path, default=OUT, help="the fixture to write")
    args = parser.parse_args(argv)
    mlperf = find_mlperf(args.mlperf)
    if mlperf is None or not mlperf.exists():
        print(
            f"error: {mlperf or 'the development set'} not found (pass --mlperf)", file=sys.stderr
        )
        return 2
    with gzip.open(mlperf, "rt", newline="") as f:
        reader = csv.DictReader(f)
        header = list(reader.fieldnames or [])
        everything = runs_of(reader)
    recent = started_from(everything, CONFIRM_FROM)
    distinct = without_copies(recent)
    ids = pick(distinct)
    write(args.out, header, distinct, ids)
    print(
        f"{len(recent)} runs of v2.0–v2.1, {len(recent) - len(distinct)} exact copies left out; "
        f"wrote {len(ids)} runs to {args.out}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
