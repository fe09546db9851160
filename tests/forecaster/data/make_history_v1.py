"""Rebuild ``history_v1.sqlite``: a history file written by the schema-1 forecaster.

Why a stored file: the migration test must open a file made by the code that
shipped schema 1, not by a re-creation of its SQL. This script loads
``forecaster/history.py`` as of commit 00cfa04 (the last schema-1 version) from git
and writes a seeded run, two finished live runs and one running run with epoch ends.

    python tests/forecaster/data/make_history_v1.py tests/forecaster/data/history_v1.sqlite
"""

from __future__ import annotations

import sys
from pathlib import Path

from old_history import load_history

from gpu_eta.forecaster.runs import Run

SCHEMA_1_COMMIT = "00cfa04"


def main(path: str) -> None:
    h = load_history(SCHEMA_1_COMMIT, "history_schema_1")
    assert h.SCHEMA_VERSION == 1
    Path(path).unlink(missing_ok=True)
    store = h.HistoryStore.open(path)
    seed = Run(
        "seed-1",
        3,
        ((0, 100.0), (1, 200.0), (2, 300.0), (3, 400.0)),
        {"job_name": "cnn", "namespace": "ml"},
        namespace="ml",
    )
    store.import_finished([seed])
    common = {"namespace": "ml", "container": "main", "node": "n1"}
    store.record(
        [
            h.RunUpdate(
                run_id="done-1",
                epochs_planned=2,
                start_timestamp=1000.0,
                epoch_ends=((1, 1100.0), (2, 1200.0)),
                pod="train-a",
                features={"job_name": "train"},
                util_mean=0.8,
                weight_seconds=60.0,
                seen_timestamp=1200.0,
                **common,
            ),
            h.RunUpdate(
                run_id="gone-1",
                epochs_planned=5,
                start_timestamp=1000.0,
                epoch_ends=((1, 1150.0),),
                pod="train-b",
                seen_timestamp=1150.0,
                **common,
            ),
        ]
    )
    store.finish(["done-1", "gone-1"], 1300.0)
    live = {
        "run_id": "live-1",
        "epochs_planned": 10,
        "start_timestamp": 2000.0,
        "namespace": "ml",
        "pod": "train-c",
        "container": "main",
        "node": "n2",
        "features": {"job_name": "train", "batch_size": 64.0},
        "weight_seconds": 120.0,
        "memory_mean": 0.25,
    }
    store.record(
        [
            h.RunUpdate(
                epoch_ends=((1, 2100.0), (2, 2200.0)), util_mean=0.5, seen_timestamp=2200.0, **live
            )
        ]
    )
    store.record(
        [h.RunUpdate(epoch_ends=((3, 2300.0),), util_mean=1.0, seen_timestamp=2300.0, **live)]
    )
    store.set_meta("last_query_timestamp", "2300.0")
    store.close()


if __name__ == "__main__":
    main(sys.argv[1])
