"""A real ProgressListener on loopback that knows exactly one pod, for the report tests.

``test_client.py`` and ``test_callbacks*.py`` all post progress as one pod (bound to its
loopback address) and read back what the listener stored.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from gpu_eta.exporter.progress_http import ProgressListener
from gpu_eta.exporter.progress_journal import read_journal
from gpu_eta.exporter.progress_runs import RUN_BURST
from gpu_eta.exporter.progress_store import ProgressStore
from gpu_eta.exporter.readings import PodMeta


@contextmanager
def listening_for(
    pod: PodMeta, store: ProgressStore | None = None, port: int = 0, **options: Any
) -> Iterator[ProgressListener]:
    """A started listener on ``port`` (a free one by default) resolving only ``pod.ip``;
    stopped on exit. ``options`` are the listener's (``rate_per_second``, ``burst``...)."""
    lst = ProgressListener(
        "127.0.0.1",
        port,
        store if store is not None else ProgressStore(),
        lambda ip: pod if ip == pod.ip else None,
        lambda: [pod],
        **options,
    )
    lst.start()
    try:
        yield lst
    finally:
        lst.stop()


def url(lst: ProgressListener) -> str:
    """The listener's progress endpoint."""
    return f"http://127.0.0.1:{lst.port}/progress"


def journaling_store(directory: Path, run_burst: int = RUN_BURST) -> ProgressStore:
    """A store with a state file in ``directory`` that journals every merged report
    (and never compacts the journal during a test): ``journaled`` reads them back.
    ``run_burst``: the runs its container may start at once (``progress_runs``)."""
    return ProgressStore(
        directory / "progress.json", save_interval_seconds=3600, run_burst=run_burst
    )


def journaled(store: ProgressStore) -> list[dict]:
    """Every row ``store`` journaled, oldest first: the stored state after each report.
    The client waits for each answer, and the answer for the row's fsync, so there is
    one row per accepted report."""
    assert store.journal is not None
    data = store.journal.path.read_bytes()
    return [row for _, row in read_journal(data)[0] if isinstance(row, dict)]
