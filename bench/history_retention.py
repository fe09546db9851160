"""Benchmark: the history file over weeks of churn, with and without ``--history.retention``.

Simulated days of a busy cluster: ``--runs-per-day`` runs under unique pod names (a
university cluster's sweeps), half reported epoch by epoch (5-40 epochs), half in
steps (10-60 points), ~1 KiB each in the file. They go through the real store as a
cycle sends them: a retention pass (``HistoryStore.retain``, which ``record`` runs
first when given the cycle's time), then ``record`` and ``finish``, ``--cycle-runs``
runs a cycle. Printed for each setting, at each checkpoint day: finished runs, the
file's MiB and the MiB free inside it, the retention pass's mean and slowest ms and
``count_finished``'s µs; after the last day, the time to open the file (its
``quick_check`` included) and ``quick_check`` alone. Settings run in the same
invocation so they compare on the same machine state.

    python bench/history_retention.py [--runs-per-day 5000] [--days 60]
        [--retention-days 0,30] [--keep-runs 100000] [--cycle-runs 50]
"""

from __future__ import annotations

import argparse
import os
import random
import sqlite3
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from flag_types import at_least

from gpu_eta.forecaster.history import HistoryStore
from gpu_eta.forecaster.history_space import Retention
from gpu_eta.forecaster.runs import RunUpdate, run_key

DAY = 86400.0
T0 = 1_760_000_000.0
MIB = 1024 * 1024


def churned_runs(i: int, now: float, rng: random.Random) -> RunUpdate:
    """Run ``i``, ending at ``now``: epoch by epoch (even ``i``) or in steps, one point a
    minute (odd), under a pod name no other run has."""
    job = f"sweep-{i % 200}"
    namespace = f"user-{i % 300}"
    features: dict[str, str | float] = {
        "namespace": namespace,
        "job_name": job,
        "gpus": 1.0,
        "gpu_model": "NVIDIA A100-SXM4-40GB",
    }
    if i % 2 == 0:
        n = rng.randint(5, 40)
        start = now - 30.0 * n
        ends = tuple((float(e), start + 30.0 * e) for e in range(1, n + 1))
        planned = float(n)
        features["batch_size"] = 64.0
    else:
        n = rng.randint(10, 60)
        start = now - 60.0 * n
        ends = tuple((1000.0 * e, start + 60.0 * e) for e in range(1, n + 1))
        planned = 1000.0 * n
        features.update(batch_size=32.0, progress_unit="steps")
    return RunUpdate(
        run_id=f"{job}-{i:08x}-run",
        epochs_planned=planned,
        start_timestamp=start,
        epoch_ends=ends,
        namespace=namespace,
        pod=f"{job}-{i:08x}-{rng.randrange(16**5):05x}",
        container="main",
        node=f"gpu-node-{i % 40}",
        features=features,
        util_mean=0.5,
        memory_mean=0.3,
        weight_seconds=60.0,
        seen_timestamp=now,
    )


@dataclass(frozen=True)
class Checkpoint:
    """The file after ``day`` simulated days."""

    day: int
    finished: int
    file_mib: float
    free_mib: float
    pass_mean_ms: float
    pass_max_ms: float
    count_us: float


def simulate(
    db: Path,
    days: int,
    runs_per_day: int,
    cycle_runs: int,
    retention: Retention | None,
    checkpoints: set[int],
) -> Iterator[Checkpoint]:
    """Churn ``days`` days through a store at ``db``; a ``Checkpoint`` at each day of
    ``checkpoints`` (the store's cycles run in this process)."""
    store = HistoryStore.open(db, retention=retention)
    rng = random.Random(0)
    cycles_per_day = max(1, runs_per_day // cycle_runs)
    step = DAY / cycles_per_day
    i = 0
    passes: list[float] = []
    try:
        for day in range(1, days + 1):
            for c in range(cycles_per_day):
                now = T0 + (day - 1) * DAY + c * step
                ups = [churned_runs(i + k, now, rng) for k in range(cycle_runs)]
                i += cycle_runs
                started = time.perf_counter()
                store.retain(now)
                passes.append(time.perf_counter() - started)
                store.record(ups)
                store.finish([run_key(u) for u in ups], now + 1.0)
            if day in checkpoints:
                started = time.perf_counter()
                finished = store.count_finished()
                count = time.perf_counter() - started
                space = store.space()
                assert space is not None
                yield Checkpoint(
                    day,
                    finished,
                    space.file_bytes / MIB,
                    space.free_bytes / MIB,
                    1e3 * sum(passes) / len(passes),
                    1e3 * max(passes),
                    1e6 * count,
                )
                passes = []
    finally:
        store.close()


def open_cost(db: Path) -> tuple[float, float]:
    """Seconds to open the store (its ``quick_check`` included) and for ``quick_check``
    alone, on the file as left."""
    started = time.perf_counter()
    HistoryStore.open(db).close()
    opened = time.perf_counter() - started
    conn = sqlite3.connect(db)
    try:
        started = time.perf_counter()
        conn.execute("PRAGMA quick_check").fetchone()
        checked = time.perf_counter() - started
    finally:
        conn.close()
    return opened, checked


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs-per-day", type=at_least(1), default=5000)
    p.add_argument("--days", type=at_least(1), default=60)
    p.add_argument(
        "--retention-days",
        default="0,30",
        help="comma-separated --history.retention values in days to compare (0: none)",
    )
    p.add_argument(
        "--keep-runs", type=at_least(1), default=100_000, help="the floor (--model.fit-runs)"
    )
    p.add_argument("--cycle-runs", type=at_least(1), default=50, help="runs finishing per cycle")
    p.add_argument(
        "--every", type=at_least(1), default=10, help="a checkpoint every this many days"
    )
    args = p.parse_args(argv)
    checkpoints = set(range(args.every, args.days + 1, args.every)) | {args.days}
    print(
        f"{args.runs_per_day:,} runs a day for {args.days} days, {args.cycle_runs} a cycle; "
        f"floor {args.keep_runs:,} runs"
    )
    print("retention | day | finished | file MiB | free MiB | pass ms mean/max | count µs")
    for days in (int(v) for v in args.retention_days.split(",")):
        retention = Retention(days * DAY, keep_runs=args.keep_runs) if days else None
        label = f"{days} d" if days else "none"
        with tempfile.TemporaryDirectory() as tmp:
            db = Path(tmp) / "history.sqlite"
            for cp in simulate(
                db, args.days, args.runs_per_day, args.cycle_runs, retention, checkpoints
            ):
                print(
                    f"{label} | {cp.day} | {cp.finished:,} | {cp.file_mib:.1f} | "
                    f"{cp.free_mib:.1f} | {cp.pass_mean_ms:.2f}/{cp.pass_max_ms:.1f} | "
                    f"{cp.count_us:.1f}",
                    flush=True,
                )
            opened, checked = open_cost(db)
            print(
                f"{label}: open {opened * 1e3:.0f} ms, of which quick_check "
                f"{checked * 1e3:.0f} ms; file {os.path.getsize(db) / MIB:.1f} MiB",
                flush=True,
            )


if __name__ == "__main__":
    main()
