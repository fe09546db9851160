"""Rebuild ``history_v2.sqlite``: a history file written by the schema-2 forecaster.

Why a stored file: the migration test must open a file made by the code that shipped
schema 2, which followed a run reporting only steps in percent of them (plan 100,
feature ``progress_unit="steps"``). This script loads ``forecaster/history.py`` as of
commit ace9b9b (the last schema-2 version) from git and writes what that forecaster
stored: a finished step-only run and a running one (both in percent), a finished run
counted in epochs, and a run seeded from a CSV counting real steps.

    python tests/forecaster/data/make_history_v2.py tests/forecaster/data/history_v2.sqlite
"""

from __future__ import annotations

import sys
from pathlib import Path

from old_history import load_history

from gpu_eta.forecaster.runs import Run

SCHEMA_2_COMMIT = "ace9b9b"


def main(path: str) -> None:
    h = load_history(SCHEMA_2_COMMIT, "history_schema_2")
    assert h.SCHEMA_VERSION == 2
    Path(path).unlink(missing_ok=True)
    store = h.HistoryStore.open(path)
    steps = {"job_name": "bert", "namespace": "ml", "progress_unit": "steps"}
    common = {"namespace": "ml", "container": "main", "node": "n1", "epochs_planned": 100.0}
    store.record(
        [
            h.RunUpdate(  # 1,000 steps planned, seen at 25 / 50 / 100 %
                run_id="steps-done",
                start_timestamp=1000.0,
                epoch_ends=((25.0, 1100.0), (50.0, 1200.0), (100.0, 1400.0)),
                pod="bert-a",
                features=steps,
                seen_timestamp=1400.0,
                **common,
            ),
            h.RunUpdate(
                run_id="epochs-done",
                start_timestamp=1000.0,
                epoch_ends=((1.0, 1100.0), (2.0, 1200.0)),
                pod="cnn-a",
                features={"job_name": "cnn", "namespace": "ml"},
                seen_timestamp=1200.0,
                **{**common, "epochs_planned": 2.0},
            ),
        ]
    )
    store.finish(
        [("ml", "bert-a", "main", "steps-done"), ("ml", "cnn-a", "main", "epochs-done")], 1500.0
    )
    store.record(  # 2,000 steps planned, seen at 10 / 20 % (200 and 400 steps)
        [
            h.RunUpdate(
                run_id="steps-live",
                start_timestamp=2000.0,
                epoch_ends=((10.0, 2100.0), (20.0, 2200.0)),
                pod="bert-b",
                features=steps,
                seen_timestamp=2200.0,
                **common,
            )
        ]
    )
    # a run seeded from a CSV that counts real steps (plan 3,000): not schema 2's percent
    store.import_finished(
        [
            Run(
                "csv-steps",
                3000.0,
                ((0.0, 500.0), (1500.0, 600.0), (3000.0, 700.0)),
                {"job_name": "bert", "namespace": "ml", "progress_unit": "steps"},
                completed=True,
                namespace="ml",
            )
        ]
    )
    store.set_meta("last_query_timestamp", "2200.0")
    store.close()


if __name__ == "__main__":
    main(sys.argv[1])
