"""``Snapshot``, everything one ``/metrics`` answer renders, and ``SnapshotHolder``,
which holds the latest one: the scheduler swaps it, scrapes read it.

A ``Snapshot`` is frozen, so publishing a new one is a single reference assignment
(atomic in CPython): a scrape that started on the old snapshot renders it whole, the
next one sees the new one, and neither ever waits for collection: no lock.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, NamedTuple

from gpu_eta.exporter.readings import (
    CollectorStatus,
    DeviceFailure,
    DeviceReading,
    HostMemory,
    PodGpuRow,
    PodMeta,
    Progress,
)

# Every answer on the progress port is counted under one result (docs/metrics.md):
# the report outcomes, then the protocol-level answers with their status code, then
# the connections refused without one.
PROGRESS_RESULTS = (
    "accepted",  # 200
    "malformed",  # 400, 411
    "invalid",  # 400
    "forbidden",  # 403 (also a connection refused at accept: not a pod here)
    "too_large",  # 413
    "rate_limited",  # 429: over the pod's report rate
    "too_many_runs",  # 429: would start a run over its container's cap (progress_runs)
    "superseded",  # 409: of a named run a later start of its run_id replaced
    "not_found",  # 404
    "method_not_allowed",  # 405
    "timeout",  # 408: headers or the whole request not in within their deadline
    "headers_too_large",  # 431
    "error",  # 500
    "not_persisted",  # 503: applied but the state journal could not be written
    "health",  # 200 to GET /healthz
    "too_many_connections",  # no answer: a connection over the caps, reset at accept
)
# ``invalid``: recognised, but what it says breaks the wire format's rules (not stored)
# ``future``: stamped over 2 s past the exporter's clock (dated at the container's
# previous line, or skipped when there is none)
# ``undated``: a CRI timestamp that cannot be read (dated as a ``future`` line)
# ``too_many_runs``: would start a run over its container's cap (``progress_runs``): skipped
# ``superseded``: a marker line of a named run a later start of its run_id replaced: skipped
# ``malformed``: a line of a Docker json-file log (cri-dockerd) that is no such record
LOG_LINE_RESULTS = (
    "matched",
    "ignored",
    "oversize",
    "invalid",
    "future",
    "undated",
    "too_many_runs",
    "superseded",
    "malformed",
)
# Why the kubelet pod-resources List's GPU device ids are left out
# (``gpu_eta_exporter_allocations_skipped``): ``invalid``, an empty or oversized
# namespace, pod, container or resource name or id; ``over_limit``, past the cap of
# allocations one List may give (``podresources.MAX_ALLOCATIONS``)
ALLOCATION_SKIP_REASONS = ("invalid", "over_limit")
_EMPTY_I: Mapping[str, int] = MappingProxyType({})


class CollectorFamilies(NamedTuple):
    """A ``families`` collector's series in a snapshot: its metric families and each
    one's text, as the scheduler's check encoded it (``exposition.checked_families``).

    Why the text: the check must encode a family to know it does not break the scrape;
    serving that text spares encoding each family a second time per cycle.
    ``text`` None: not encoded yet (the exposition encodes the families)."""

    name: str
    families: tuple[Any, ...]  # prometheus_client ``Metric`` objects
    text: tuple[bytes, ...] | None = None  # one per family, in order


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything one ``/metrics`` answer renders. Immutable; swapped by reference."""

    node: str
    timestamp: float
    devices: tuple[DeviceReading, ...] = ()
    failures: tuple[DeviceFailure, ...] = ()
    pod_gpus: tuple[PodGpuRow, ...] = ()
    pods: tuple[PodMeta, ...] = ()
    host_memory: tuple[HostMemory, ...] = ()
    progress: tuple[Progress, ...] = ()
    collectors: tuple[CollectorStatus, ...] = ()
    # ingestion counters by result (see docs/metrics.md), cumulative since start
    progress_reports_total: Mapping[str, int] = field(default_factory=lambda: _EMPTY_I)
    log_lines_total: Mapping[str, int] = field(default_factory=lambda: _EMPTY_I)
    # free-form fields left out of stored progress reports; None without the endpoint
    progress_fields_skipped_total: int | None = None
    # the progress store's persistence, with a state file (None without one): whether
    # what it holds is on disk as promised, and its journal's size
    progress_persisted: bool | None = None
    progress_journal_bytes: int | None = None
    # the pod watch's freshness, ``(connected, last_sync_timestamp)``: poll() serves a
    # cache while the API server is away, so collector success alone cannot show the
    # outage. None when the pod source is no watch (the simulator) or is switched off.
    kube_watch: tuple[bool, float | None] | None = None
    # GPU device ids the last kubelet pod-resources List left out, by reason
    # (``ALLOCATION_SKIP_REASONS``); empty without that source's counts
    allocations_skipped: Mapping[str, int] = field(default_factory=lambda: _EMPTY_I)
    # kubelet allocations of this cycle that name no device NVML lists here (or a
    # malformed id): they get no pod series, so they are counted. None when not
    # computed (no gpu or podresources source, or no GPU reading yet).
    unresolved_allocations: int | None = None
    # collectors with their own series (registry kind "families"), in name order
    families: tuple[CollectorFamilies, ...] = ()


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
