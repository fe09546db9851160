"""Benchmark: the forecaster's memory for a history of long runs, with and without
``--model.fit-points``.

A history file of ``--runs`` finished runs, each reported epoch by epoch for
``--epochs`` epochs (such runs keep every point: ``runs.HISTORY_POINTS``), is written
once; then, each in a fresh child process, the store is opened, the runs the model
would fit on are read (``HistoryStore.finished(fit_runs, fit_points)``, as the service
does at start) and ``EtaModel`` is fitted on them. Printed per setting: runs and points
read, read and fit seconds, and the child's peak RSS. The settings run in the same
invocation so they compare on the same machine state (ratios, not absolutes).

    python bench/history_memory.py [--runs 20000] [--epochs 300] [--fit-points 0,2000000]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cluster_data import history_batches
from flag_types import at_least

from gpu_eta.forecaster.config import CycleSettings
from gpu_eta.forecaster.runs import Run

FIT_RUNS = CycleSettings().fit_runs  # the service's --model.fit-runs default


def long_runs(n: int, epochs: int, now: float, seed: int = 1) -> list[Run]:
    """``n`` finished runs of ``epochs`` epochs each, one epoch end per epoch: the
    cluster benchmarks' history (``cluster_data.history_batches``) with that plan."""
    return [run for part in history_batches(n, now, seed=seed, epochs=epochs) for run in part]


def child(db: Path, fit_points: int) -> dict:
    """Open ``db``, read what the service would fit on, fit: figures of this process."""
    from gpu_eta.forecaster.estimators.eta_model import EtaModel
    from gpu_eta.forecaster.history import HistoryStore

    started = time.perf_counter()
    store = HistoryStore.open(db)
    runs = store.finished(FIT_RUNS, fit_points or None)
    read = time.perf_counter() - started
    started = time.perf_counter()
    EtaModel(random_state=0).fit(runs)
    fit = time.perf_counter() - started
    store.close()
    return {
        "runs": len(runs),
        "points": sum(len(r.epoch_times) for r in runs),
        "read_s": read,
        "fit_s": fit,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=at_least(1), default=20_000)
    p.add_argument("--epochs", type=at_least(1), default=300)
    p.add_argument(
        "--fit-points",
        default=f"0,{CycleSettings().fit_points}",
        help="comma-separated --model.fit-points values to compare (0: no bound; "
        "the service's default by default)",
    )
    p.add_argument("--child", nargs=2, metavar=("DB", "POINTS"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(child(Path(args.child[0]), int(args.child[1]))))
        return
    from gpu_eta.forecaster.history import HistoryStore

    settings = [int(v) for v in args.fit_points.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "history.sqlite"
        started = time.perf_counter()
        store = HistoryStore.open(db)
        store.import_finished(long_runs(args.runs, args.epochs, time.time()))
        store.close()
        print(
            f"history: {args.runs:,} finished runs of {args.epochs} epochs "
            f"({args.runs * (args.epochs + 1):,} points), written in "
            f"{time.perf_counter() - started:.1f} s; --model.fit-runs {FIT_RUNS:,}"
        )
        print("--model.fit-points | runs read | points read | read s | fit s | peak RSS MiB")
        for points in settings:
            out = subprocess.run(
                [sys.executable, __file__, "--child", str(db), str(points)],
                check=True,
                capture_output=True,
                text=True,
            )
            r = json.loads(out.stdout.strip().splitlines()[-1])
            label = f"{points:,}" if points else "0 (no bound)"
            print(
                f"{label} | {r['runs']:,} | {r['points']:,} | {r['read_s']:.1f} | "
                f"{r['fit_s']:.1f} | {r['peak_rss_mib']:.0f}"
            )


if __name__ == "__main__":
    main()
