"""Rebuild the history files of older schemas that the migration tests open.

Why stored files: a migration test must open a file made by the code that shipped
that schema, not by a re-creation of its SQL. Each is written by ``forecaster/history.py``
as of the last commit with that schema (``SCHEMA_COMMITS``), loaded from git:

    python tests/forecaster/data/make_history.py 1 tests/forecaster/data/history_v1.sqlite
    python tests/forecaster/data/make_history.py 2 tests/forecaster/data/history_v2.sqlite
"""

from __future__ import annotations

import subprocess
import sys
import types
from pathlib import Path

from gpu_eta.forecaster.runs import Run

SCHEMA_COMMITS = {1: "00cfa04", 2: "ace9b9b"}


def load_history(commit: str, name: str) -> types.ModuleType:
    """``forecaster/history.py`` at ``commit``, loaded from git as module ``name``.

    Self-contained up to schema 3's first commits: since then the store imports
    ``history_file`` and ``history_rows``, which this would take from the installed
    code, not from ``commit``; a fixture of such a commit must load those from it too.
    """
    source = subprocess.run(
        ["git", "show", f"{commit}:forecaster/history.py"],
        check=True,
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[3],
    ).stdout
    # the package was ``forecaster`` before it became ``gpu_eta.forecaster``
    source = source.replace("from forecaster.", "from gpu_eta.forecaster.")
    module = types.ModuleType(name)
    sys.modules[module.__name__] = module
    exec(compile(source, f"{name}.py", "exec"), module.__dict__)
    return module


def schema_1(path: str) -> None:
    """A seeded run, two finished live runs and one running run with epoch ends."""
    h = load_history(SCHEMA_COMMITS[1], "history_schema_1")
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


def schema_2(path: str) -> None:
    """A finished step-only run and a running one, both in percent of their steps
    (plan 100, feature ``progress_unit="steps"``), a finished run counted in epochs, and a
    run seeded from a CSV counting real steps."""
    h = load_history(SCHEMA_COMMITS[2], "history_schema_2")
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
    {"1": schema_1, "2": schema_2}[sys.argv[1]](sys.argv[2])
