"""The collection loop: runs every collector off the scrape path, builds snapshots.

Each cycle runs the enabled collectors, each in a daemon thread of its own with a
timeout, joins their readings (``gpu_eta.exporter.attribution.attribute``) into one
immutable ``Snapshot`` and swaps it into the ``SnapshotHolder`` that ``/metrics``
renders. This is the boundary of the error flow (docs/exporter.md):

- a collector that raises or times out never breaks the cycle: its status says
  success=0, its error counter grows, the failure is logged once per state change
  (and again when it recovers), and its last good data is kept — except the
  readings that are measurements, not state: while the ``gpu`` collector fails,
  every device of its last good poll is published unread (``_unread``), a
  collector whose tracker does not ``keep_last`` (``hostmemory``) publishes none,
  and the kept allocations of ``podresources`` lose the pods the pod watch shows
  gone since (``Scheduler._kept``);
- a ``families`` collector's family that would break the scrape (it does not encode,
  or takes a family name exported already: ``checked_families``) is skipped, its
  other families served, and the collector reads failing (``_Partial``); output that
  is no families at all fails it as a raise does, so one collector's bug never costs
  the other series;
- ``NoData`` is expected absence: success, empty data, a debug line;
- a collector still running from an earlier cycle (a hung NFS read, a stuck gRPC
  call) is not started twice: it is reported failing until it returns.

Stage 1 runs ``gpu``, ``podresources``, ``kube``, ``logs`` and ``progress`` (the
HTTP endpoint: is it serving, what did it count) concurrently; stage 2 runs
``cgroup`` (needs the pids from ``gpu``), ``hostmemory`` (needs the pods from
``kube``) and the progress-store read (drops progress of pods gone for longer than
the store's grace, ends the plan-less HTTP runs of pods that succeeded, then reads the
store), so a cycle takes about two timeouts at worst.

The store read is a step of the cycle, not a collector: it has no
``gpu_eta_exporter_collector_*`` series (both progress sources write the store; its
failure is neither's), but it runs under the same timeout, keeps its last good
progress when it fails and logs once per change of cause.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Any, Protocol

from gpu_eta.exporter.attribution import attribute as attribute_rows
from gpu_eta.exporter.attribution import (
    finished_pods,
    kept_allocations,
    unresolved_allocations,
)
from gpu_eta.exporter.collectors import (
    AllocationSource,
    FamilySource,
    GpuSource,
    HostMemorySource,
    NoData,
    PodSource,
    ProcessResolver,
)
from gpu_eta.exporter.exposition import (
    CheckedFamilies,
    builtin_family_names,
    checked_families,
    family_names,
)
from gpu_eta.exporter.readings import (
    Allocation,
    CollectorStatus,
    ContainerRef,
    DeviceFailure,
    GpuPoll,
    HostMemory,
    PodGpuRow,
    PodMeta,
    Progress,
    unread_poll,
)
from gpu_eta.exporter.snapshot import CollectorFamilies, Snapshot, SnapshotHolder

log = logging.getLogger(__name__)

MAX_ERROR_CHARS = 300


class WatchStatus(Protocol):
    """What the scheduler reads of ``gpu_eta.exporter.collectors.kube.KubeStatus``."""

    connected: bool
    last_sync_timestamp: float | None


class ProgressStoreLike(Protocol):
    """What the scheduler needs of ``gpu_eta.exporter.progress_store.ProgressStore``."""

    def snapshot(self) -> tuple[Progress, ...]: ...

    def retain(
        self,
        live: Mapping[tuple[str, str], str],
        now: float,
        wait_seconds: float = 1.0,
        started: Mapping[tuple[str, str], float] | None = None,
    ) -> None: ...

    def end_finished(self, succeeded: Iterable[tuple[str, str]], now: float) -> int: ...


class Counting(Protocol):
    """A progress source that counts what it ingested (listener, log collector)."""

    def counts(self) -> Mapping[str, int]: ...


class LogPoller(Counting, Protocol):
    """``gpu_eta.exporter.collectors.logs.LogProgressCollector``: ``skipped_fields()``
    the free-form fields it left out of stored reports, as the endpoint's."""

    def poll(self) -> None: ...

    def skipped_fields(self) -> int: ...


class ProgressEndpoint(Protocol):
    """``gpu_eta.exporter.progress_http.ProgressListener``: ``poll()`` returns the reports
    counted by result, or raises when the endpoint no longer serves; ``skipped_fields()``
    the free-form fields it left out of stored reports."""

    def poll(self) -> Mapping[str, int]: ...

    def skipped_fields(self) -> int: ...


# an internal step of the cycle: its tracker (not published), the job, its empty value
_Step = tuple["_Tracker", Callable[[], Any], Any]

# containers None: no process data at all (cgroup collector off or never read); then
# the finished pods, and the pods whose allocations are kept unconfirmed
Attribute = Callable[
    [
        GpuPoll,
        Sequence[Allocation],
        Sequence[PodMeta],
        Mapping[int, ContainerRef] | None,
        Collection[tuple[str, str]] | None,
        Collection[tuple[str, str]],
    ],
    tuple[PodGpuRow, ...],
]


# The Sources field that holds a collector of each kind (``registry.KINDS``).
SLOTS = {
    "gpu": "gpu",
    "allocations": "allocations",
    "pods": "pods",
    "logs": "logs",
    "progress": "progress_listener",
    "processes": "processes",
    "host_memory": "host_memory",
}


def _default_names() -> dict[str, str]:
    # the built-in collectors' names; the runtime sets them from the registry
    return {
        "gpu": "gpu",
        "allocations": "podresources",
        "pods": "kube",
        "logs": "logs",
        "progress_listener": "progress",
        "processes": "cgroup",
        "host_memory": "hostmemory",
    }


@dataclass
class Sources:
    """The enabled sources; None means the collector is switched off. ``names``: the
    collector name each field's source publishes its status under; ``families``:
    collectors with their own series, by name."""

    gpu: GpuSource | None = None
    allocations: AllocationSource | None = None
    pods: PodSource | None = None
    processes: ProcessResolver | None = None
    host_memory: HostMemorySource | None = None
    progress_store: ProgressStoreLike | None = None
    progress_listener: ProgressEndpoint | None = None  # the "progress" collector
    logs: LogPoller | None = None
    families: dict[str, FamilySource] = field(default_factory=dict)
    names: dict[str, str] = field(default_factory=_default_names)


class _Tracker:
    """Status of one collector (or internal step) across cycles; logs on state
    changes only. ``kind`` names it in those lines ("collector", "step")."""

    def __init__(self, name: str, kind: str = "collector") -> None:
        self.name = name
        self.kind = kind
        self.success = False
        self.duration_seconds = 0.0
        self.last_success_timestamp: float | None = None
        self.errors_total = 0
        self.last_error = ""
        self.ever_ran = False
        self.data: Any = None
        self.has_data = False
        self.inflight: Future | None = None
        self.timed_out = False  # the last failure: a run past the timeout (or still on)
        # whether a failed run serves the last good data (state that changes rarely) or
        # none (a measurement, untrue exactly while its read hangs: ``_settle``)
        self.keep_last = True
        # the last run failed but gave part of its data, kept fresh (``_Partial``)
        self.partial = False

    def ok(self, data: Any, duration: float, now: float) -> None:
        if self.ever_ran and not self.success:
            log.info("%s %s recovered", self.kind, self.name)
        self.success, self.duration_seconds, self.last_success_timestamp = True, duration, now
        self.last_error = ""
        self.data, self.has_data, self.ever_ran = data, True, True
        self.partial = False

    def fail(self, error: str, duration: float, *, timed_out: bool = False) -> None:
        error = error[:MAX_ERROR_CHARS]
        if self.success or not self.ever_ran or error != self.last_error:
            log.error("%s %s failed: %s", self.kind, self.name, error)
        self.success, self.duration_seconds, self.ever_ran = False, duration, True
        self.timed_out = timed_out
        self.errors_total += 1
        self.last_error = error
        self.partial = False

    def partly(self, data: Any, error: str, duration: float) -> None:
        """A failed run that still gave ``data``: failing as ``fail`` says (success 0,
        an error, logged once per cause), its data served and kept as the last good."""
        self.fail(error, duration)
        self.data, self.has_data, self.partial = data, True, True

    def status(self) -> CollectorStatus:
        return CollectorStatus(
            self.name,
            self.success,
            self.duration_seconds,
            self.last_success_timestamp,
            self.errors_total,
            self.last_error,
        )


def _describe(err: BaseException) -> str:
    text = str(err).strip().splitlines()[0] if str(err).strip() else ""
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


class Scheduler:
    """Builds a ``Snapshot`` every ``interval_seconds`` in a background thread."""

    def __init__(
        self,
        node: str,
        sources: Sources,
        holder: SnapshotHolder,
        *,
        interval_seconds: float = 5.0,
        timeout_seconds: float = 4.0,
        attribute: Attribute | None = None,
        clock: Callable[[], float] = time.time,
        prepare: Callable[[Snapshot], None] | None = None,
    ) -> None:
        if attribute is None:
            attribute = attribute_rows
        self.node = node
        self.sources = sources
        self.holder = holder
        self.interval_seconds = interval_seconds
        self.timeout_seconds = timeout_seconds
        self._attribute = attribute
        self._clock = clock
        self._prepare = prepare
        self._trackers: dict[str, _Tracker] = {}  # collectors: their statuses are published
        self._store_step = _Tracker("progress-store read", kind="step")
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._cycle_lock = threading.Lock()
        self._attribution_error = ""
        self._failing_devices: dict[tuple[int, str | None], str] = {}
        self._unresolved: set[tuple[str, str]] = set()  # (device id, reason) logged
        # the count last computed from a good gpu read: published while the gpu
        # collector fails (its devices unread), as dropping it would turn a node with
        # unresolved allocations "holders known" and count their GPUs free
        self._last_unresolved: int | None = None

    # -- one collector ---------------------------------------------------------------

    def _tracker(self, name: str) -> _Tracker:
        if name not in self._trackers:
            self._trackers[name] = _Tracker(name)
        return self._trackers[name]

    def _submit(self, tracker: _Tracker, fn: Callable[[], Any]) -> tuple[Future | None, float]:
        started = time.monotonic()
        if tracker.inflight is not None and not tracker.inflight.done():
            return None, started
        future = _run_detached(fn, f"gpu-eta-{tracker.kind}-{tracker.name}")
        tracker.inflight = future
        return future, started

    def _settle(
        self,
        tracker: _Tracker,
        future: Future | None,
        started: float,
        empty: Any,
        check: Callable[[Any], Any] | None = None,
    ) -> Any:
        """Wait for one collector; record its outcome; return its (or last good) data.
        ``check`` turns a result into the data kept, or raises: the run failed."""
        if future is None:
            tracker.fail(
                f"still running after {self.timeout_seconds:g}s timeout from an earlier cycle",
                time.monotonic() - started,
                timed_out=True,
            )
        else:
            remaining = max(0.0, self.timeout_seconds - (time.monotonic() - started))
            try:
                data = future.result(timeout=remaining)
                if check is not None:
                    data = check(data)
            except FutureTimeout:
                tracker.fail(
                    f"timed out after {self.timeout_seconds:g}s",
                    time.monotonic() - started,
                    timed_out=True,
                )
            except NoData as err:
                log.debug("%s %s: no data: %s", tracker.kind, tracker.name, err)
                tracker.ok(empty, time.monotonic() - started, self._clock())
            except _Partial as err:
                tracker.partly(err.data, str(err), time.monotonic() - started)
            except Exception as err:  # the boundary: any failure becomes a status
                log.debug("%s %s raised", tracker.kind, tracker.name, exc_info=True)
                tracker.fail(_describe(err), time.monotonic() - started)
            else:
                tracker.ok(data, time.monotonic() - started, self._clock())
        if tracker.has_data and (tracker.success or tracker.partial or tracker.keep_last):
            return tracker.data
        return empty

    def _run_stage(
        self,
        jobs: Mapping[str, tuple[Callable[[], Any], Any]],
        steps: Sequence[_Step] = (),
        checks: Mapping[str, Callable[[Any], Any]] | None = None,
    ) -> dict[str, Any]:
        """Run the named collectors and the internal ``steps`` concurrently; their
        results (or last good data) by collector name, then by step tracker name.
        ``checks``: by collector name, run on its result in ``jobs``' order (``_settle``)."""
        checks = checks or {}
        runs = [(self._tracker(name), fn, empty) for name, (fn, empty) in jobs.items()]
        runs.extend(steps)
        submitted = [(tracker, self._submit(tracker, fn), empty) for tracker, fn, empty in runs]
        return {
            tracker.name: self._settle(tracker, future, started, empty, checks.get(tracker.name))
            for tracker, (future, started), empty in submitted
        }

    # -- one cycle -------------------------------------------------------------------

    def collect_once(self) -> Snapshot:
        """Run one cycle, swap the new snapshot in, and return it."""
        with self._cycle_lock:
            snapshot = self._cycle()
        if self._prepare is not None:
            try:  # e.g. encode the exposition text before any scrape needs it
                self._prepare(snapshot)
            except Exception:
                log.exception("preparing the snapshot failed")
        self.holder.set(snapshot)
        return snapshot

    def _cycle(self) -> Snapshot:
        src = self.sources
        n = src.names
        stage1: dict[str, tuple[Callable[[], Any], Any]] = {}
        if src.gpu is not None:
            stage1[n["gpu"]] = (src.gpu.poll, GpuPoll(devices=()))
        if src.allocations is not None:
            stage1[n["allocations"]] = (src.allocations.poll, ())
        if src.pods is not None:
            stage1[n["pods"]] = (src.pods.poll, ())
        if src.logs is not None:
            stage1[n["logs"]] = (src.logs.poll, None)
        if src.progress_listener is not None:
            stage1[n["progress_listener"]] = (src.progress_listener.poll, {})
        taken = set(builtin_family_names())  # family names written so far this cycle
        for name in sorted(src.families):
            stage1[name] = (src.families[name].poll, ())
        got = self._run_stage(stage1, checks={name: _claim(taken) for name in src.families})
        gpu: GpuPoll = got.get(n["gpu"], GpuPoll(devices=()))
        gpu_ok = src.gpu is not None and self._trackers[n["gpu"]].success
        if src.gpu is not None and not gpu_ok:
            gpu = _unread(gpu, self._trackers[n["gpu"]])
        allocations: tuple[Allocation, ...] = tuple(got.get(n["allocations"], ()))
        pods: tuple[PodMeta, ...] = tuple(got.get(n["pods"], ()))
        kube_known = n["pods"] in self._trackers and self._trackers[n["pods"]].has_data
        kube_watch, kube_complete = _watch_status(src.pods)

        stage2: dict[str, tuple[Callable[[], Any], Any]] = {}
        if src.processes is not None:
            pids = sorted({s.pid for s in gpu.processes})
            resolver = src.processes
            stage2[n["processes"]] = (lambda: dict(resolver.resolve(pids)), {})
        if src.host_memory is not None:
            memory_source = src.host_memory
            stage2[n["host_memory"]] = (lambda: tuple(memory_source.poll(pods)), ())
            # Working sets are measurements: none while the read fails or hangs, not
            # the last good ones. A hung cgroup read (a stuck NFS or overlay read, a
            # cgroupfs stall) is exactly when they stop being true (a job climbing to
            # its limit looked flat), and no consumer joins a staleness series: the
            # forecaster's memory feature (avg_over_time of working set over limit) and
            # the Training job panel read these alone. Absent, the series go stale,
            # avg_over_time uses only samples really read, the panel shows a gap, and
            # collector_success{collector="hostmemory"} 0 says why. The limit goes
            # too (the same read); pods keep their series (they come from kube).
            self._tracker(n["host_memory"]).keep_last = False
        steps: list[_Step] = []
        store = src.progress_store
        if store is not None:

            def read_progress() -> tuple[Progress, ...]:
                if kube_known:  # never drop progress because the pod list is unknown
                    # by uid: a pod recreated under a gone pod's name ends its grace
                    store.retain(
                        {(p.namespace, p.name): p.uid for p in pods},
                        self._clock(),
                        started={
                            (p.namespace, p.name): p.start_timestamp
                            for p in pods
                            if p.start_timestamp is not None
                        },
                    )
                    # a pod that succeeded ended its plan-less HTTP runs (docs/progress.md)
                    store.end_finished(
                        ((p.namespace, p.name) for p in pods if p.phase == "Succeeded"),
                        self._clock(),
                    )
                return tuple(store.snapshot())

            steps.append((self._store_step, read_progress, ()))
        got2 = self._run_stage(stage2, steps)
        # No resolver, or one that never answered: no process data, which attribution
        # must not read as "no process" (that would publish every holder as idle).
        # A resolver failing now keeps its last good map: pids it does not name make
        # their device's split unknown in attribution.
        containers: Mapping[int, ContainerRef] | None = None
        if src.processes is not None and self._trackers[n["processes"]].has_data:
            containers = got2.get(n["processes"], {})
        host_memory: tuple[HostMemory, ...] = ()
        if src.host_memory is not None:
            host_memory = got2[n["host_memory"]]
        progress: tuple[Progress, ...] = got2.get(self._store_step.name, ())

        if gpu_ok:
            self._log_device_failures(gpu)
        pod_gpus: tuple[PodGpuRow, ...] = ()
        unresolved: int | None = None
        if src.gpu is not None:
            # a finished pod's allocations are dropped in attribution; from a pod list
            # that may be stale its "finished" may be the old object of a pod re-created
            # under the same name that now holds the GPU: then every allocation counts
            # (so do finished pods a full cache let go: the same rule)
            finished: frozenset[tuple[str, str]] = frozenset()
            if _fresh(kube_watch, self._clock()):
                outside = _finished_outside(src.pods) if kube_known else ()
                finished = finished_pods(pods, outside)
            allocations, unconfirmed = self._kept(
                allocations, pods, kube_known and kube_complete, kube_watch
            )
            try:
                pod_gpus = self._attribute(
                    gpu, allocations, pods, containers, finished, unconfirmed
                )
                # not while the gpu collector fails: nothing was read this cycle
                # (``_unread`` has the last good poll's devices, none before the
                # first); the last count stands then
                if src.allocations is not None and gpu_ok:
                    self._last_unresolved = self._count_unresolved(gpu, allocations, finished)
            except Exception as err:  # pure code should not raise; never lose the cycle
                msg = _describe(err)
                if msg != self._attribution_error:
                    log.error("attribution failed: %s", msg)
                self._attribution_error = msg
            else:
                self._attribution_error = ""
            # the last count stands through a failed attribution too: absent, the node
            # would read "holders known" and its unresolved holders' GPUs free
            unresolved = self._last_unresolved

        statuses = tuple(t.status() for _, t in sorted(self._trackers.items()))
        return Snapshot(
            node=self.node,
            timestamp=self._clock(),
            devices=gpu.devices,
            failures=gpu.failures,
            pod_gpus=pod_gpus,
            pods=pods,
            host_memory=host_memory,
            progress=progress,
            collectors=statuses,
            progress_reports_total=dict(got.get(n["progress_listener"], {})),
            progress_fields_skipped_total=_skipped_fields(src.progress_listener, src.logs),
            # a store without a state file (or a stand-in) has neither: no series
            progress_persisted=getattr(src.progress_store, "persisted", None),
            progress_journal_bytes=getattr(src.progress_store, "journal_bytes", None),
            log_lines_total=_counts(src.logs),
            allocations_skipped=_counts(src.allocations),
            kube_watch=kube_watch,
            unresolved_allocations=unresolved,
            families=self._families(got, taken),
        )

    def _families(self, got: Mapping[str, Any], taken: set[str]) -> tuple[CollectorFamilies, ...]:
        """Each families collector's families for the snapshot, by name, with the text
        the check encoded (served as is). A run that succeeded (or gave part of its
        families) was checked and its names claimed (``_claim``); a failing one serves
        its last good families less those under a name taken since (by the built-ins or
        another collector, which the check then refused it): a name twice is a scrape
        Prometheus rejects whole."""
        out = []
        for name in sorted(self.sources.families):
            # a run's ``checked_families`` (``_claim``); () for none (NoData, never read)
            checked = got.get(name) or CheckedFamilies((), ())
            families, text = checked.families, checked.text
            tracker = self._trackers[name]
            if not (tracker.success or tracker.partial):
                kept = [
                    (m, t)
                    for m, t in zip(families, text, strict=True)
                    if not family_names(m) & taken
                ]
                families, text = tuple(m for m, _ in kept), tuple(t for _, t in kept)
                taken.update(n for m in families for n in family_names(m))
            out.append(CollectorFamilies(name, families, text))
        return tuple(out)

    def _kept(
        self,
        allocations: tuple[Allocation, ...],
        pods: tuple[PodMeta, ...],
        kube_known: bool,
        kube_watch: tuple[bool, float | None] | None,
    ) -> tuple[tuple[Allocation, ...], frozenset[tuple[str, str]]]:
        """The allocations to attribute and the pods among them the pod list cannot
        confirm: all of them, all confirmed, while ``podresources`` reads; while it
        fails, its last good read less the pods gone since (``kept_allocations``).

        Why: the kept read is state, but a pod deleted since kept its row and, with no
        process, was its GPU's idle holder at 0 % for as long as the socket failed
        (GpuEtaGpuAllocatedIdle, ETAs for a pod that no longer exists).
        """
        n = self.sources.names
        tracker = self._trackers.get(n["allocations"])
        if tracker is None or tracker.success or tracker.last_success_timestamp is None:
            return allocations, frozenset()
        now = self._clock()
        listed: float | None = None
        if kube_known and _fresh(kube_watch, now):
            if kube_watch is None:  # a plain list: as of its last good poll
                listed = self._trackers[n["pods"]].last_success_timestamp
            else:
                connected, last_sync = kube_watch
                listed = now if connected else last_sync
        return kept_allocations(
            allocations,
            pods,
            read_timestamp=tracker.last_success_timestamp,
            listed_timestamp=listed,
            grace_seconds=KEPT_ALLOCATION_GRACE_SECONDS,
        )

    def _count_unresolved(
        self,
        gpu: GpuPoll,
        allocations: Sequence[Allocation],
        finished: Collection[tuple[str, str]],
    ) -> int:
        """How many allocations name no device here; a warning for each new (device
        id, reason), not every cycle: the count is in the metric every scrape.

        Such an allocation gets no pod series, so without this a container holding
        a GPU the exporter cannot name (an id form it does not know, a device NVML
        does not list) would silently look like no holder at all.
        """
        found = unresolved_allocations(gpu, allocations, finished)
        now = {(alloc.device_id, reason) for alloc, reason in found}
        for alloc, reason in found:
            key = (alloc.device_id, reason)
            if key not in self._unresolved:
                log.warning(
                    "allocation of %s to %s/%s container %s is not attributed: %s",
                    alloc.resource_name,
                    alloc.namespace,
                    alloc.pod,
                    alloc.container,
                    reason,
                )
                self._unresolved.add(key)
        self._unresolved &= now  # forget ids gone, so one that returns is logged again
        return len(found)

    def _log_device_failures(self, gpu: GpuPoll) -> None:
        """One error line when a device starts failing (or its reason changes), one
        info line when it reads again: the metric says it every scrape, the log once."""
        now = {(f.index, f.uuid): f for f in gpu.failures}
        for key, failure in now.items():
            if self._failing_devices.get(key) != failure.reason:
                log.error(
                    "GPU %d (%s) cannot be read: %s%s",
                    failure.index,
                    failure.uuid or "uuid unknown",
                    failure.reason,
                    f" ({failure.detail})" if failure.detail else "",
                )
        for key in self._failing_devices.keys() - now.keys():
            log.info("GPU %d (%s) reads again", key[0], key[1] or "uuid unknown")
        self._failing_devices = {key: f.reason for key, f in now.items()}

    # -- loop ------------------------------------------------------------------------

    def start(self) -> None:
        """Run a first cycle now (so the first scrape has data), then loop in a thread."""
        self.collect_once()
        self._thread = threading.Thread(target=self._loop, name="gpu-eta-scheduler", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        next_at = time.monotonic() + self.interval_seconds
        while not self._stop.wait(max(0.0, next_at - time.monotonic())):
            try:
                self.collect_once()
            except Exception:  # a bug here must not end collection for good
                log.exception("collection cycle failed")
            next_at += self.interval_seconds
            now = time.monotonic()
            if next_at < now:  # fell behind: skip missed ticks instead of bursting
                next_at = now + self.interval_seconds

    def alive(self) -> bool:
        """Whether the loop thread runs (``/healthz``)."""
        return self._thread is not None and self._thread.is_alive()

    def stop(self) -> None:
        """Stop the loop; collectors still running are abandoned: they run in daemon
        threads (``_run_detached``), which neither this nor the interpreter's exit
        waits for."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.interval_seconds + self.timeout_seconds * 2 + 1)


def _run_detached(fn: Callable[[], Any], name: str) -> Future:
    """Run ``fn`` in a new daemon thread; its ``Future``.

    Why not a ``ThreadPoolExecutor``: its workers are not daemon threads, and Python
    (3.9 and later) joins them when the interpreter exits, so a collector stuck in a
    hung NFS read or a gRPC call without a deadline kept the process alive after
    SIGTERM for as long as it hung, past the pod's grace period, until the kubelet's
    SIGKILL. A daemon thread is abandoned at exit (the progress store is saved
    before: ``Runtime.stop``). A pool's queue would also let stuck runs hold every
    worker and starve the other collectors. No pool is needed to bound the threads:
    a collector still running from an earlier cycle is not started again
    (``Scheduler._submit``), so there is at most one thread per collector or step.
    """
    future: Future = Future()

    def run() -> None:
        if not future.set_running_or_notify_cancel():
            return
        try:
            result = fn()
        except BaseException as err:  # delivered to the waiter, as an executor does
            future.set_exception(err)
        else:
            future.set_result(result)

    try:
        threading.Thread(target=run, name=name, daemon=True).start()
    except RuntimeError as err:  # cannot start a thread: this run fails, not the cycle
        future.set_exception(err)
    return future


UNREAD_TIMEOUT_REASON = "timeout"
UNREAD_FAILED_REASON = "poll_failed"


def _unread(last: GpuPoll, tracker: _Tracker) -> GpuPoll:
    """The GPU readings of a cycle whose ``gpu`` poll failed or overran the timeout:
    every device of the last good poll ``last`` unread (``DeviceFailure`` with reason
    ``timeout`` or ``poll_failed``), none of its figures or processes: the devices are
    kept as read (index, UUID, model, MIG instance, memory size) with utilisation and
    memory used unknown and their process lists marked unknown (``process_list_failures``),
    so attribution does not take "no process" for "idle".

    Why not the last good poll, as other collectors keep theirs: utilisation, memory
    and processes are measurements, and a hung NVML call (a GPU fallen off the bus:
    an Xid 79 can block NVML for minutes) is exactly when they stop being true.
    Served on, a lost GPU looked healthy and busy with ``gpu_eta_gpu_read_success``
    1, its holders' shares froze and GpuEtaGpuReadFailing never fired. Unread, the
    devices keep their series (index, UUID: the DCGM join, the holders' allocated
    rows, a MIG instance's holders matched by its ``MIG-…`` or ``<i>:<j>`` id,
    ``gpu_eta_gpu_info`` that the free-GPU rules and panels count) and attribution makes
    their holders' use unknown. Allocations, pods and
    the pid→container map are kept: they are state that changes rarely, and a
    kubelet restart must not blank the GPU owners.
    """
    reason = UNREAD_TIMEOUT_REASON if tracker.timed_out else UNREAD_FAILED_REASON
    known = {(d.index, d.uuid) for d in last.devices}
    known |= {(f.index, f.uuid) for f in last.failures}
    failures = tuple(
        DeviceFailure(index, uuid, reason, tracker.last_error[:200])
        for index, uuid in sorted(known, key=lambda key: (key[0], key[1] or ""))
    )
    return unread_poll(last.devices, failures, last.driver_version)


class _Partial(Exception):
    """A run's result of which a check kept part (``data``): the collector fails
    (``_Tracker.partly``) with this message, and ``data`` is served."""

    def __init__(self, data: Any, message: str) -> None:
        super().__init__(message)
        self.data = data


def _claim(taken: set[str]) -> Callable[[Any], CheckedFamilies]:
    """The check of a families collector's result (``Scheduler._settle``): its families
    as ``checked_families`` lets them through (with their text), their names added to
    ``taken``. A family
    it skips raises ``_Partial`` with the others (served, the collector failing with
    the first skipped family's reason, logged once per change of cause: a bug shows on
    ``collector_success``, its good series stay); output that is no families raises
    ``FamiliesError``, which fails the collector instead of every scrape. One ``taken``
    per cycle, used in the collectors' name order: of two collectors with one family
    name, the first keeps it."""

    def check(result: Any) -> CheckedFamilies:
        checked = checked_families(result, taken)
        families, skipped = checked.families, checked.skipped
        taken.update(n for metric in families for n in family_names(metric))
        if skipped:
            more = f" (and {len(skipped) - 1} more)" if len(skipped) > 1 else ""
            total = len(families) + len(skipped)
            raise _Partial(
                checked, f"skipped {len(skipped)} of {total} families: {skipped[0]}{more}"
            )
        return checked

    return check


def _skipped_fields(*sources: ProgressEndpoint | LogPoller | None) -> int | None:
    """The free-form fields the progress sources present (endpoint, log reader) left
    out of stored reports, added up: one count however a report came. None without
    either (no series)."""
    present = [source for source in sources if source is not None]
    if not present:
        return None
    total = 0
    for source in present:
        try:
            total += int(source.skipped_fields())
        except Exception as err:
            log.debug("skipped_fields() failed: %s", err)
    return total


def _counts(source: object) -> Mapping[str, int]:
    """A source's counts by result; none from a source that counts nothing (the
    simulated node's allocations) or whose ``counts()`` fails."""
    counts = getattr(source, "counts", None)
    if counts is None:
        return {}
    try:
        return dict(counts())
    except Exception as err:
        log.debug("counts() failed: %s", err)
        return {}


STALE_POD_LIST_SECONDS = 120.0
"""A pod watch neither connected nor synced for this long may hold objects of pods
deleted since (``_fresh``). Why not shorter: a watch reconnects now and then (server
timeouts), and a list a minute old still knows which pods finished."""


KEPT_ALLOCATION_GRACE_SECONDS = 30.0
"""How long past the last good pod-resources read the pod list must be complete before
a pod it does not hold loses its kept allocation (``kept_allocations``)."""


def _fresh(watch: tuple[bool, float | None] | None, now: float) -> bool:
    """Whether a pod list's phases can be trusted to say which pods finished: always for
    a source that is no watch (``watch`` None: the simulator, a fixed list); for a watch,
    while it is connected or synced within ``STALE_POD_LIST_SECONDS``."""
    if watch is None:
        return True
    connected, last_sync = watch
    return connected or (last_sync is not None and now - last_sync <= STALE_POD_LIST_SECONDS)


def _finished_outside(pods: PodSource | None) -> tuple[tuple[str, str, str], ...]:
    """(namespace, name, uid) of finished pods a capped pod cache let go
    (``KubePodSource.finished_outside``), for attribution to drop their allocations
    as it drops those of finished pods it holds; () for a source without such a
    record or one that cannot be read (it never fails the cycle)."""
    read = getattr(pods, "finished_outside", None)
    if pods is None or not callable(read):
        return ()
    try:
        return tuple(read())
    except Exception as err:
        log.debug("kube finished_outside() failed: %s", err)
        return ()


def _watch_status(
    pods: PodSource | None,
) -> tuple[tuple[bool, float | None] | None, bool]:
    """From one ``status()`` of a pod source that is a watch (``KubePodSource``):
    ``(connected, last_sync_timestamp)``, None for the simulator, a disabled source, or
    a status that cannot be read (it never fails the cycle); and whether its cache holds
    every running pod of the node (``complete``; True for a source without a status,
    False for one that cannot be read). A cache that refused a running pod at
    ``--kube.max-pods`` cannot say a pod missing from it is gone: kept allocations are
    then neither dropped nor confirmed by it."""
    status_fn = getattr(pods, "status", None)
    if pods is None or not callable(status_fn):
        return None, True
    try:
        status: WatchStatus = status_fn()
        last = status.last_sync_timestamp
        watch = bool(status.connected), None if last is None else float(last)
        return watch, bool(getattr(status, "complete", True))
    except Exception as err:
        log.debug("kube status() failed: %s", err)
        return None, False
