"""What the history keeps and the room it has: retention settings and the file's space.

Why: the store gains a row for every run that finishes, so a history that kept every
run would outgrow its volume (5,000 runs a day fill 1 GiB in about 200 days, ~26 with
runs of hundreds of step points), and a full volume fails every cycle's write and,
after a restart, the start's write probe. ``Retention`` says what
``HistoryStore.retain`` deletes; ``HistorySpace`` is the file's size, the free pages
inside it and its volume's room, read by ``space_of`` (the only I/O here) and
published (docs/metrics.md).

Deleting rows frees pages inside the file, which SQLite reuses before it grows the
file; it gives the volume nothing back (no ``VACUUM``: docs/forecaster.md, "History
file"). So the room that matters is the volume's available bytes plus the file's
free pages (``HistorySpace.room_bytes``), and retention keeps it above
``low_room_bytes`` by deleting old runs before the volume fills, since a full volume
leaves no room even for the rollback journal of a delete.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

# Runs deleted per transaction. Why 500: a run's rows sit in four indexes, two of them
# ordered by name, so deleting n runs rewrites up to ~2n index pages whose first
# images go to the rollback journal (~4 KiB each): 500 runs are a journal of a few MiB
# and a transaction of tens of milliseconds, while 5,000 runs finishing a day are ~4
# per one-minute cycle (bench/history_retention.py).
RETENTION_BATCH = 500
# The room (``HistorySpace.room_bytes``) below which retention deletes runs beyond the
# floor whatever their age: 64 MiB, or a tenth of a smaller volume. Why 64 MiB: every
# write needs its rollback journal on the volume (a cycle of 10,000 running runs
# journals ~10 MiB) and a delete needs one too, so the room must never run out;
# 64 MiB is 6 % of the chart's 1 GiB volume.
LOW_ROOM_BYTES = 64 * 1024 * 1024
# How long the mark of a completed run retention deleted (``HistoryStore.retain``)
# outlasts the last cycle that read the run's series, when a ``Retention`` says
# nothing: the default ``--history.lookback``. The service keeps marks for
# ``--history.retention`` (``config.history_retention``): a node's exporter down
# longer than a lookback publishes the run's series again.
LINGER_SECONDS = 6 * 3600.0


@dataclass(frozen=True, slots=True)
class Retention:
    """What ``HistoryStore.retain`` may delete: finished runs that finished more than
    ``max_age_seconds`` ago (or any age while the room is low), never one of the most
    recent ``keep_runs`` finished runs (0: no such floor), never a run seeded from a CSV
    (no pod, no container: the next start would import it again), never a running run;
    at most ``batch_runs`` per transaction. A completed run deleted leaves a mark of its
    key and start for ``linger_seconds`` after the last cycle that read its series
    (``HistoryStore.completed_starts``)."""

    max_age_seconds: float
    keep_runs: int = 0
    batch_runs: int = RETENTION_BATCH
    linger_seconds: float = LINGER_SECONDS

    def __post_init__(self) -> None:
        if not self.max_age_seconds > 0:  # NaN too
            raise ValueError(f"max_age_seconds must be > 0, got {self.max_age_seconds}")
        if not self.linger_seconds >= 0:
            raise ValueError(f"linger_seconds must be >= 0, got {self.linger_seconds}")
        if self.keep_runs < 0 or self.batch_runs < 1:
            raise ValueError(
                f"keep_runs must be >= 0 and batch_runs >= 1, got {self.keep_runs}, "
                f"{self.batch_runs}"
            )


@dataclass(frozen=True, slots=True)
class HistorySpace:
    """The history file's size and free pages, and its volume's available and total
    bytes (None where the file system does not say)."""

    file_bytes: int
    free_bytes: int
    available_bytes: int | None = None
    capacity_bytes: int | None = None

    @property
    def room_bytes(self) -> int | None:
        """Bytes the history can still take: the volume's available bytes and the
        file's free pages (reused before the file grows); None when unknown."""
        if self.available_bytes is None:
            return None
        return self.available_bytes + self.free_bytes

    @property
    def low(self) -> bool:
        """Whether the room is below ``low_room_bytes`` of the volume (False when
        unknown)."""
        room = self.room_bytes
        return room is not None and room < low_room_bytes(self.capacity_bytes)


def low_room_bytes(capacity_bytes: int | None) -> int:
    """``LOW_ROOM_BYTES``, or a tenth of a volume smaller than ten times that. Pure."""
    if capacity_bytes is None or capacity_bytes <= 0:
        return LOW_ROOM_BYTES
    return min(LOW_ROOM_BYTES, capacity_bytes // 10)


def space_of(path: str, free_bytes: int) -> HistorySpace | None:
    """The space of the history file at ``path`` holding ``free_bytes`` of free pages;
    None when it has no file (``:memory:``) or the file cannot be read (gone)."""
    if path == ":memory:":
        return None
    try:
        size = os.stat(path).st_size
    except OSError:
        return None
    try:
        vfs = os.statvfs(os.path.dirname(os.path.abspath(path)))
    except OSError:
        return HistorySpace(size, free_bytes)
    # f_bavail: the blocks an unprivileged process may use (the forecaster runs as one)
    return HistorySpace(size, free_bytes, vfs.f_bavail * vfs.f_frsize, vfs.f_blocks * vfs.f_frsize)
