"""Holds the latest immutable ``Snapshot``; the scheduler swaps it, scrapes read it.

A ``Snapshot`` is frozen, so publishing a new one is a single reference assignment
(atomic in CPython): a scrape that started on the old snapshot renders it whole, the
next one sees the new one, and neither ever waits for collection. The lock only
orders writers with ``wait_for_newer`` (tests and ``/healthz`` readiness).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from exporter.readings import Snapshot


class SnapshotHolder:
    """The snapshot ``/metrics`` serves, plus its age."""

    def __init__(self, initial: Snapshot, clock: Callable[[], float] = time.time) -> None:
        self._snapshot = initial
        self._clock = clock
        self._changed = threading.Condition()
        self._generation = 0

    def get(self) -> Snapshot:
        """The current snapshot (never None; the initial one is empty)."""
        return self._snapshot

    @property
    def generation(self) -> int:
        """How many snapshots were published (0: only the initial empty one)."""
        return self._generation

    def set(self, snapshot: Snapshot) -> None:
        """Publish a new snapshot."""
        with self._changed:
            self._snapshot = snapshot
            self._generation += 1
            self._changed.notify_all()

    def age_seconds(self, snapshot: Snapshot | None = None) -> float:
        """Seconds since ``snapshot`` (default: the served one) was built, never negative.

        The one clock for snapshot ages: ``/healthz`` and the exposition's
        ``gpu_eta_exporter_snapshot_age_seconds`` both ask here. A scrape passes the
        snapshot it renders, so a swap between its ``get()`` and this call cannot
        pair one snapshot's series with another's age.
        """
        snap = self._snapshot if snapshot is None else snapshot
        return max(0.0, self._clock() - snap.timestamp)

    def wait_for_newer(self, generation: int, timeout: float) -> bool:
        """Block until a snapshot newer than ``generation`` is published, or time out."""
        with self._changed:
            return self._changed.wait_for(lambda: self._generation > generation, timeout)
