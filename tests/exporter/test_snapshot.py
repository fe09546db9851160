"""SnapshotHolder: swap by reference, age."""

from __future__ import annotations

import threading

from gpu_eta.exporter.snapshot import Snapshot, SnapshotHolder


def test_set_get_and_age() -> None:
    now = [100.0]
    holder = SnapshotHolder(Snapshot(node="n", timestamp=90.0), clock=lambda: now[0])
    assert holder.age_seconds() == 10.0
    new = Snapshot(node="n", timestamp=100.0)
    holder.set(new)
    assert holder.get() is new
    now[0] = 99.0  # clock stepped back: age never negative
    assert holder.age_seconds() == 0.0


def test_readers_never_see_a_partial_snapshot() -> None:
    holder = SnapshotHolder(Snapshot(node="n0", timestamp=0))
    stop = threading.Event()
    seen: list[bool] = []

    def reader() -> None:
        while not stop.is_set():
            snap = holder.get()
            seen.append(snap.node == f"n{int(snap.timestamp)}")

    thread = threading.Thread(target=reader)
    thread.start()
    for i in range(1, 2000):
        holder.set(Snapshot(node=f"n{i}", timestamp=float(i)))
    stop.set()
    thread.join()
    assert seen and all(seen)


def test_age_of_a_given_snapshot_on_the_holder_clock() -> None:
    """A scrape asks the age of the snapshot it renders, even if a newer one was
    published meanwhile."""
    holder = SnapshotHolder(Snapshot(node="n", timestamp=50.0), clock=lambda: 100.0)
    rendered = holder.get()
    holder.set(Snapshot(node="n", timestamp=99.0))
    assert holder.age_seconds(rendered) == 50.0
    assert holder.age_seconds() == 1.0
