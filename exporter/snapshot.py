"""Holds the latest immutable ``Snapshot``; the scheduler swaps it, scrapes read it.

A ``Snapshot`` is frozen, so publishing a new one is a single reference assignment
(atomic in CPython): a scrape that started on the old snapshot renders it whole, the
next one sees the new one, and neither ever waits for collection: no lock.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from gpu_eta.exporter.readings import Snapshot


class SnapshotHolder:
    """The snapshot ``/metrics`` serves, plus its age."""

    def __init__(self, initial: Snapshot, clock: Callable[[], float] = time.time) -> None:
        self._snapshot = initial
        self._clock = clock

    def get(self) -> Snapshot:
        """The current snapshot (never None; the initial one is empty)."""
        return self._snapshot

    def set(self, snapshot: Snapshot) -> None:
        """Publish a new snapshot."""
        self._snapshot = snapshot

    def age_seconds(self, snapshot: Snapshot | None = None) -> float:
        """Seconds since ``snapshot`` (default: the served one) was built, never negative.

        The one clock for snapshot ages: ``/healthz`` and the exposition's
        ``gpu_eta_exporter_snapshot_age_seconds`` both ask here. A scrape passes the
        snapshot it renders, so a swap between its ``get()`` and this call cannot
        pair one snapshot's series with another's age.
        """
        snap = self._snapshot if snapshot is None else snapshot
        return max(0.0, self._clock() - snap.timestamp)
