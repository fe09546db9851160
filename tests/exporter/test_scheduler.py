"""Scheduler: failures become statuses, last good data is kept, timeouts, the loop."""

from __future__ import annotations

import logging
import threading
import time
from types import SimpleNamespace

import pytest

from gpu_eta.exporter.collectors import CollectorError, NoData
from gpu_eta.exporter.exposition import SnapshotExposition
from gpu_eta.exporter.progress import Report
from gpu_eta.exporter.progress_store import DEFAULT_GONE_GRACE_SECONDS, ProgressStore
from gpu_eta.exporter.readings import (
    Allocation,
    ContainerRef,
    DeviceReading,
    GpuPoll,
    HostMemory,
    PodMeta,
    ProcessSample,
    Progress,
)
from gpu_eta.exporter.scheduler import KEPT_ALLOCATION_GRACE_SECONDS, Scheduler, Sources
from gpu_eta.exporter.snapshot import Snapshot, SnapshotHolder
from tests.support.kubeapi import make_pod
from tests.support.node_sources import real_node_sources, wait_for

GPU = GpuPoll(
    devices=(DeviceReading(0, "GPU-a", "T4", 0.5, 10, 100),),
    processes=(ProcessSample(42, "GPU-a", None, 10, 0.5),),
)
POD = PodMeta("ns", "p", "uid-1", ip="10.0.0.1", container_ids={"c": "cid"})
# a Job's pod whose containers exited 0 (no runtime ids: a finished one has no cgroup)
DONE = PodMeta("ns", "done", "uid-2", phase="Succeeded")
# one container exited 0, another still runs: the pod has not succeeded, nothing ends
PART = PodMeta("ns", "part", "uid-3", phase="Running")


class Source:
    """A scripted source: returns ``value`` or raises what ``fail`` holds."""

    def __init__(self, value, fail: BaseException | None = None, delay: float = 0.0) -> None:
        self.value = value
        self.fail = fail
        self.delay = delay
        self.calls = 0
        self.release = threading.Event()

    def poll(self, *args):
        self.calls += 1
        self.args = args
        if self.delay:
            self.release.wait(self.delay)
        if self.fail is not None:
            raise self.fail
        return self.value

    def resolve(self, pids):
        self.pids = list(pids)
        return self.poll()


def _scheduler(sources: Sources, **kw) -> tuple[Scheduler, SnapshotHolder]:
    holder = SnapshotHolder(Snapshot(node="n", timestamp=0))
    sched = Scheduler(
        "n",
        sources,
        holder,
        interval_seconds=kw.pop("interval", 0.1),
        timeout_seconds=kw.pop("timeout", 2.0),
        **kw,
    )
    return sched, holder


def _status(snap: Snapshot, name: str):
    return next(s for s in snap.collectors if s.name == name)


def test_full_cycle_joins_sources() -> None:
    store_calls = []

    class Store:
        def snapshot(self):
            return (Progress("ns", "p", "c", "r", 1, 2, "http", epoch=1),)

        def retain(self, live, now, started=None):
            store_calls.append((dict(live), now))

        def end_finished(self, finished, now):
            store_calls.append(("ended", list(finished), now))
            return 0

    class Listener:
        def poll(self):
            return {"accepted": 2}

        def skipped_fields(self):
            return 3

    cgroup = Source({42: ContainerRef("cid", "uid-1")})
    hostmem = Source((HostMemory("ns", "p", "c", 5),))
    sched, holder = _scheduler(
        Sources(
            gpu=Source(GPU),
            allocations=Source((Allocation("ns", "p", "c", "nvidia.com/gpu", "GPU-a"),)),
            pods=Source((POD, DONE, PART)),
            processes=cgroup,
            host_memory=hostmem,
            progress_store=Store(),
            progress_listener=Listener(),
        ),
        clock=lambda: 1234.5,
    )
    snap = sched.collect_once()
    assert holder.get() is snap
    assert cgroup.pids == [42]
    assert hostmem.args == ((POD, DONE, PART),)
    # gone pods dropped first, then the runs of the pods that succeeded ended
    assert store_calls == [
        ({("ns", "p"): "uid-1", ("ns", "done"): "uid-2", ("ns", "part"): "uid-3"}, 1234.5),
        ("ended", [("ns", "done")], 1234.5),
    ]
    (row,) = snap.pod_gpus
    assert (row.pod, row.container, row.allocated, row.utilization_ratio) == ("p", "c", True, 0.5)
    assert snap.progress[0].epoch == 1
    assert snap.progress_reports_total == {"accepted": 2}
    assert snap.progress_fields_skipped_total == 3
    assert {s.name for s in snap.collectors} == {
        "gpu",
        "podresources",
        "kube",
        "cgroup",
        "hostmemory",
        "progress",
    }
    assert all(s.success for s in snap.collectors)


def test_failing_collector_keeps_last_good_data_and_counts(
    caplog: pytest.LogCaptureFixture,
) -> None:
    pods = Source((POD,))
    sched, _ = _scheduler(Sources(gpu=Source(GPU), pods=pods))
    sched.collect_once()
    pods.fail = CollectorError("API server unreachable")
    with caplog.at_level(logging.INFO, logger="gpu_eta.exporter.scheduler"):
        snap1 = sched.collect_once()
        snap2 = sched.collect_once()
    assert snap2.pods == (POD,), "last good pods kept"
    status = _status(snap2, "kube")
    assert not status.success and status.errors_total == 2
    assert "API server unreachable" in status.last_error
    assert status.last_success_timestamp is not None
    assert _status(snap1, "gpu").success
    failed = [r for r in caplog.records if "failed" in r.getMessage()]
    assert len(failed) == 1, "logged once per state change"
    pods.fail = None
    with caplog.at_level(logging.INFO, logger="gpu_eta.exporter.scheduler"):
        snap3 = sched.collect_once()
    assert _status(snap3, "kube").success and _status(snap3, "kube").errors_total == 2
    assert any("recovered" in r.getMessage() for r in caplog.records)


def test_no_data_is_success_with_empty_data() -> None:
    sched, _ = _scheduler(Sources(allocations=Source(None, fail=NoData("nothing allocated"))))
    snap = sched.collect_once()
    assert _status(snap, "podresources").success
    assert _status(snap, "podresources").errors_total == 0


def test_unexpected_exception_is_contained() -> None:
    sched, _ = _scheduler(Sources(gpu=Source(GPU, fail=ZeroDivisionError("boom"))))
    snap = sched.collect_once()
    status = _status(snap, "gpu")
    assert not status.success and status.last_error == "ZeroDivisionError: boom"
    assert snap.devices == ()


def test_timeout_and_no_double_start() -> None:
    slow = Source((POD,), delay=30)
    sched, _ = _scheduler(Sources(pods=slow, gpu=Source(GPU)), timeout=1.0)
    try:
        started = time.monotonic()
        snap = sched.collect_once()
        assert time.monotonic() - started < 10
        assert "timed out after 1s" in _status(snap, "kube").last_error
        assert _status(snap, "gpu").success, "other collectors unaffected"
        snap = sched.collect_once()
        assert "still running" in _status(snap, "kube").last_error
        assert slow.calls == 1, "a hung collector is not started twice"
        slow.release.set()
        deadline = time.monotonic() + 10
        while slow.calls == 1 and time.monotonic() < deadline:
            time.sleep(0.05)
            snap = sched.collect_once()
        assert _status(snap, "kube").success
    finally:
        slow.release.set()
        sched.stop()


def test_progress_not_dropped_while_pods_unknown() -> None:
    retained = []

    class Store:
        def snapshot(self):
            return ()

        def retain(self, live, now, started=None):
            retained.append(list(live))

        def end_finished(self, finished, now):
            retained.append(list(finished))
            return 0

    sched, _ = _scheduler(
        Sources(pods=Source(None, fail=CollectorError("down")), progress_store=Store())
    )
    sched.collect_once()
    assert retained == []  # neither dropped nor ended on an unknown pod list


def test_attribution_bug_does_not_lose_the_cycle() -> None:
    def broken(*args):
        raise RuntimeError("bug")

    sched, _ = _scheduler(Sources(gpu=Source(GPU)), attribute=broken)
    snap = sched.collect_once()
    assert snap.devices == GPU.devices and snap.pod_gpus == ()


def test_loop_publishes_snapshots_and_stops() -> None:
    gpu = Source(GPU)
    sched, holder = _scheduler(Sources(gpu=gpu), interval=0.05)
    sched.start()
    try:
        first = holder.get()
        assert first.timestamp > 0, "first cycle runs before start() returns"
        published = [first]
        deadline = time.monotonic() + 20
        while len(published) < 3 and time.monotonic() < deadline:
            if holder.get() is not published[-1]:
                published.append(holder.get())
            time.sleep(0.01)
        assert len(published) >= 3, "the loop published two more snapshots"
        assert sched.alive()
    finally:
        sched.stop()
    assert not sched.alive()
    calls = gpu.calls
    time.sleep(0.2)
    assert gpu.calls == calls


def test_prepare_runs_before_publishing_and_may_fail() -> None:
    seen = []
    holder_box = {}

    def prepare(snap: Snapshot) -> None:
        seen.append(holder_box["holder"].get() is snap)
        raise RuntimeError("encoder bug")

    sched, holder = _scheduler(Sources(gpu=Source(GPU)), prepare=prepare)
    holder_box["holder"] = holder
    snap = sched.collect_once()
    assert seen == [False], "prepared before it became visible to scrapes"
    assert holder.get() is snap, "a failing prepare does not lose the snapshot"


@pytest.mark.parametrize(
    "name", ["gpu", "podresources", "kube", "cgroup", "hostmemory", "progress", "logs"]
)
def test_contract_any_raising_collector_is_success_zero_on_metrics(name: str) -> None:
    """node_exporter's contract, for every collector: a raise never fails /metrics."""
    from gpu_eta.exporter.exposition import SnapshotExposition

    class Store:
        def snapshot(self):
            return ()

        def retain(self, live, now, started=None):
            pass

        def end_finished(self, finished, now):
            return 0

    class Counter:
        def poll(self):
            if name == "progress":
                raise CollectorError("progress endpoint on 0.0.0.0:9401 is not serving")
            return {}

        def skipped_fields(self):
            return 0

    class Logs:
        def counts(self):
            return {}

        def poll(self):
            if name == "logs":
                raise PermissionError("/var/log/pods: permission denied")

    boom = CollectorError(f"{name} is down")
    sources = Sources(
        gpu=Source(GPU, fail=boom if name == "gpu" else None),
        allocations=Source((), fail=boom if name == "podresources" else None),
        pods=Source((POD,), fail=boom if name == "kube" else None),
        processes=Source({}, fail=boom if name == "cgroup" else None),
        host_memory=Source((), fail=boom if name == "hostmemory" else None),
        progress_store=Store(),
        progress_listener=Counter(),
        logs=Logs(),
    )
    sched, holder = _scheduler(sources)
    sched.collect_once()
    text = SnapshotExposition(holder).exposition().decode()
    sched.stop()
    assert f'gpu_eta_exporter_collector_success{{collector="{name}",node="n"}} 0.0' in text
    assert f'gpu_eta_exporter_collector_errors_total{{collector="{name}",node="n"}} 1.0' in text
    others = [c for c in COLLECTOR_NAMES if c != name]
    for other in others:
        assert f'gpu_eta_exporter_collector_success{{collector="{other}",node="n"}} 1.0' in text
    if name != "gpu":
        assert "gpu_eta_gpu_utilization_ratio{" in text


COLLECTOR_NAMES = ("gpu", "podresources", "kube", "cgroup", "hostmemory", "progress", "logs")


def test_device_failures_are_logged_once_per_state_change(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from gpu_eta.exporter.readings import DeviceFailure

    lost = GpuPoll(
        devices=GPU.devices, failures=(DeviceFailure(1, "GPU-b", "gpu_lost", "GPU is lost"),)
    )
    gpu = Source(lost)
    sched, _ = _scheduler(Sources(gpu=gpu))
    with caplog.at_level(logging.INFO, logger="gpu_eta.exporter.scheduler"):
        sched.collect_once()
        sched.collect_once()
        gpu.value = GPU
        sched.collect_once()
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "GPU 1 (GPU-b) cannot be read: gpu_lost (GPU is lost)",
        "GPU 1 (GPU-b) reads again",
    ]


class FailingStore:
    """A progress store whose read fails while ``error`` is set."""

    def __init__(self) -> None:
        self.error: BaseException | None = None

    def snapshot(self):
        if self.error is not None:
            raise self.error
        return (Progress("ns", "p", "c", "r", 1, 2, "log", epoch=1),)

    def retain(self, live, now, started=None):
        pass

    def end_finished(self, finished, now):
        return 0


class NoLogs:
    def poll(self):
        return None

    def counts(self):
        return {"matched": 3}


@pytest.mark.parametrize("listener", [False, True])
def test_store_read_is_a_step_not_a_collector(
    listener: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """The store read fails no collector (neither source owns it), publishes no status
    of its own, keeps the last good progress and is logged once per change."""

    class Endpoint:
        def poll(self):
            return {"accepted": 1}

        def skipped_fields(self):
            return 0

    store = FailingStore()
    sched, _ = _scheduler(
        Sources(
            pods=Source((POD,)),
            progress_store=store,
            logs=NoLogs(),
            progress_listener=Endpoint() if listener else None,
        )
    )
    expected = {"kube", "logs", "progress"} if listener else {"kube", "logs"}
    good = sched.collect_once()
    store.error = OSError("state file unreadable")
    with caplog.at_level(logging.INFO, logger="gpu_eta.exporter.scheduler"):
        bad1 = sched.collect_once()
        bad2 = sched.collect_once()
        store.error = None
        sched.collect_once()
    for snap in (good, bad1, bad2):
        assert {s.name for s in snap.collectors} == expected
        assert all(s.success and s.errors_total == 0 for s in snap.collectors)
        assert snap.progress == good.progress and len(good.progress) == 1
        assert snap.log_lines_total == {"matched": 3}
    assert [r.getMessage() for r in caplog.records] == [
        "step progress-store read failed: OSError: state file unreadable",
        "step progress-store read recovered",
    ]
    sched.stop()


@pytest.mark.parametrize(("listener", "expected"), [(False, 2), (True, 5)])
def test_skipped_fields_add_the_log_readers_to_the_listeners(listener: bool, expected: int):
    """``gpu_eta_exporter_progress_fields_skipped_total`` counts the free-form fields
    left out of stored reports however they came: a node reading logs alone exports
    the log reader's count, one with the endpoint too the sum."""

    logs = SimpleNamespace(poll=lambda: None, counts=dict, skipped_fields=lambda: 2)
    endpoint = SimpleNamespace(poll=dict, skipped_fields=lambda: 3)
    sched, _ = _scheduler(
        Sources(
            progress_store=FailingStore(),
            logs=logs,
            progress_listener=endpoint if listener else None,
        )
    )
    assert sched.collect_once().progress_fields_skipped_total == expected
    sched.stop()


def test_progress_collector_is_the_endpoint_serving() -> None:
    """``progress`` fails when the endpoint stops serving, even while the store reads."""

    class Endpoint:
        serving = True

        def poll(self):
            if not self.serving:
                raise CollectorError("progress endpoint on 0.0.0.0:9401 is not serving")
            return {"accepted": 5}

        def skipped_fields(self):
            return 0

    endpoint = Endpoint()
    sched, _ = _scheduler(Sources(progress_store=FailingStore(), progress_listener=endpoint))
    snap = sched.collect_once()
    assert _status(snap, "progress").success and snap.progress_reports_total == {"accepted": 5}
    endpoint.serving = False
    snap = sched.collect_once()
    status = _status(snap, "progress")
    assert not status.success and "not serving" in status.last_error
    assert snap.progress_reports_total == {"accepted": 5}, "last good counts kept"
    assert len(snap.progress) == 1, "the store is still read"
    sched.stop()


def test_unresolved_allocations_are_counted_and_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An allocation naming no device here gets no pod row: the scheduler counts it
    (the gauge) and logs each new (device id, reason) once, not every cycle."""
    from gpu_eta.exporter.exposition import SnapshotExposition

    def alloc(pod: str, device_id: str) -> Allocation:
        return Allocation("ns", pod, "c", "nvidia.com/gpu", device_id)

    good, elsewhere, gke = alloc("p", "GPU-a"), alloc("q", "GPU-zz"), alloc("r", "nvidia0/gi1")
    allocations = Source((good, elsewhere, gke))
    sched, holder = _scheduler(Sources(gpu=Source(GPU), allocations=allocations))
    with caplog.at_level(logging.INFO, logger="gpu_eta.exporter.scheduler"):
        first = sched.collect_once()
        second = sched.collect_once()
        allocations.value = (good, gke)
        third = sched.collect_once()
        allocations.value = (good, elsewhere, gke)
        sched.collect_once()
    assert [s.unresolved_allocations for s in (first, second, third)] == [2, 2, 1]
    assert [r.pod for r in first.pod_gpus] == ["p"]
    text = SnapshotExposition(holder).exposition().decode()
    assert 'gpu_eta_exporter_unresolved_allocations{node="n"} 2.0' in text
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "allocation of nvidia.com/gpu to ns/q container c is not attributed: "
        "device id 'GPU-zz' matches no device on this node",
        "allocation of nvidia.com/gpu to ns/r container c is not attributed: "
        "unrecognised device id 'nvidia0/gi1'",
        "allocation of nvidia.com/gpu to ns/q container c is not attributed: "
        "device id 'GPU-zz' matches no device on this node",
    ]
    assert all(r.levelno == logging.WARNING for r in caplog.records)
    sched.stop()


def test_unresolved_allocations_kept_while_the_gpu_collector_fails() -> None:
    """While the gpu collector fails its devices are unread, so allocations cannot be
    resolved against them; the last count stays published: dropping the series would
    flip a node with unresolved allocations back to "holders known" (docs/alerts.md)
    and count the GPUs their pods hold as free. The next good read counts again."""
    from gpu_eta.exporter.exposition import SnapshotExposition

    good = Allocation("ns", "p", "c", "nvidia.com/gpu", "GPU-a")
    elsewhere = Allocation("ns", "q", "c", "nvidia.com/gpu", "GPU-zz")
    gpu, allocations = Source(GPU), Source((good, elsewhere))
    sched, holder = _scheduler(Sources(gpu=gpu, allocations=allocations))
    assert sched.collect_once().unresolved_allocations == 1
    gpu.fail = CollectorError("NVML down")
    failing = sched.collect_once()
    assert not _status(failing, "gpu").success
    assert failing.unresolved_allocations == 1
    text = SnapshotExposition(holder).exposition().decode()
    assert 'gpu_eta_exporter_unresolved_allocations{node="n"} 1.0' in text
    # nor does a failed attribution (pure code that should not raise) drop it
    gpu.fail = None

    def broken(*_args: object) -> None:
        raise ValueError("attribution bug")

    attribute, sched._attribute = sched._attribute, broken  # type: ignore[method-assign]
    assert sched.collect_once().unresolved_allocations == 1
    sched._attribute = attribute  # type: ignore[method-assign]
    allocations.value = (good,)
    assert sched.collect_once().unresolved_allocations == 0
    sched.stop()


def test_unresolved_allocations_unknown_without_both_sources() -> None:
    """No series when nothing can be resolved against: no podresources source, or no
    GPU reading yet (every allocation would look unresolved)."""
    allocations = Source((Allocation("ns", "p", "c", "nvidia.com/gpu", "GPU-a"),))
    no_alloc, _ = _scheduler(Sources(gpu=Source(GPU)))
    never_read, _ = _scheduler(
        Sources(gpu=Source(GPU, fail=CollectorError("NVML down")), allocations=allocations)
    )
    assert no_alloc.collect_once().unresolved_allocations is None
    assert never_read.collect_once().unresolved_allocations is None
    no_alloc.stop()
    never_read.stop()


def test_a_stored_progress_state_shows_whether_it_is_on_disk(tmp_path) -> None:
    """With a state file, the snapshot carries whether the store's progress is on disk
    as promised and its journal's size (the gauges of docs/metrics.md); without one,
    neither (no series)."""
    store = ProgressStore(state_path=tmp_path / "progress.json")
    try:
        sched, _ = _scheduler(Sources(progress_store=store))
        snap = sched.collect_once()
        assert snap.progress_persisted is True and snap.progress_journal_bytes == 0
        text = SnapshotExposition(SnapshotHolder(snap), version="1").exposition().decode()
        assert 'gpu_eta_exporter_progress_persisted{node="n"} 1' in text
        assert 'gpu_eta_exporter_progress_journal_bytes{node="n"} 0' in text
    finally:
        store.close()
    bare = _scheduler(Sources(progress_store=ProgressStore()))[0].collect_once()
    assert bare.progress_persisted is None and bare.progress_journal_bytes is None


class _Watch(Source):
    """A pod source that is a watch: ``status()`` as ``KubePodSource`` gives it."""

    def __init__(self, value, connected: bool, last_sync: float | None) -> None:
        super().__init__(value)
        self.connected, self.last_sync = connected, last_sync

    def status(self):
        class Status:
            connected = self.connected
            last_sync_timestamp = self.last_sync

        return Status()


@pytest.mark.parametrize(
    ("connected", "last_sync", "held"),
    [
        (True, 0.0, False),  # a live watch: the pod finished, its allocation is no holder
        (False, 1000.0 - 60, False),  # reconnecting, synced a minute ago: still trusted
        (False, 1000.0 - 600, True),  # down ten minutes: "finished" may be an old object
        (False, None, True),
    ],
)
def test_a_finished_pod_in_a_stale_pod_list_does_not_hide_its_names_holder(
    connected: bool, last_sync: float | None, held: bool
) -> None:
    """The pod list says ``ns/train`` succeeded, but the watch may have missed its
    deletion and the re-creation of a pod under its name, which the kubelet runs on the
    GPU: from a stale list the allocation counts (a row), never silently dropped."""
    old = PodMeta("ns", "train", "uid-old", phase="Succeeded")
    sched, _ = _scheduler(
        Sources(
            gpu=Source(GPU),
            allocations=Source((Allocation("ns", "train", "c", "nvidia.com/gpu", "GPU-a"),)),
            pods=_Watch((old,), connected, last_sync),
        ),
        clock=lambda: 1000.0,
    )
    snap = sched.collect_once()
    assert [(r.pod, r.allocated) for r in snap.pod_gpus] == ([("train", True)] if held else [])


class _CappedWatch(_Watch):
    """A watch whose full cache let a finished pod go (``finished_outside``)."""

    def __init__(self, value, connected: bool, last_sync: float | None, outside) -> None:
        super().__init__(value, connected, last_sync)
        self.outside = outside

    def finished_outside(self):
        return self.outside


@pytest.mark.parametrize(
    ("connected", "last_sync", "rows"),
    [
        (True, 0.0, [("new", 0.5)]),  # the finished pod a full cache let go holds nothing
        (False, 1000.0 - 60, [("new", 0.5)]),
        (False, 1000.0 - 600, [("new", None), ("old", None)]),  # stale: the same rule
    ],
)
def test_a_finished_pod_a_full_pod_cache_let_go_holds_no_gpu_while_the_watch_is_fresh(
    connected: bool, last_sync: float | None, rows
) -> None:
    """The kubelet still lists ``ns/old`` (finished, let go by the capped cache): from
    a fresh watch its allocation is dropped and ``ns/new`` holds the GPU alone; from a
    stale one "finished" may be an old object of a re-created pod, so it counts."""
    new = PodMeta("ns", "new", "uid-new")
    sched, _ = _scheduler(
        Sources(
            gpu=Source(GPU),
            allocations=Source(
                (
                    Allocation("ns", "old", "c", "nvidia.com/gpu", "GPU-a"),
                    Allocation("ns", "new", "c", "nvidia.com/gpu", "GPU-a"),
                )
            ),
            pods=_CappedWatch((new,), connected, last_sync, (("ns", "old", "uid-old"),)),
        ),
        clock=lambda: 1000.0,
    )
    snap = sched.collect_once()
    assert [(r.pod, r.utilization_ratio) for r in snap.pod_gpus] == rows


# -- allocations kept while pod-resources fails -----------------------------------------

KEPT_AT = 1_800_000_000.0
IDLE_GPU = GpuPoll(devices=(DeviceReading(0, "GPU-a", "T4", 0.0, 0, 100),))


class _KeptRead:
    """One pod, ``ns/p``, started before a good pod-resources read at ``KEPT_AT`` that
    gave it the idle GPU ``GPU-a``; after ``fail_socket()`` every read fails. The
    scheduler's clock is ``now[0]``; ``watch`` is the pod watch the test drives."""

    def __init__(self) -> None:
        self.now = [KEPT_AT]
        self.allocations = Source((Allocation("ns", "p", "c", "nvidia.com/gpu", "GPU-a"),))
        self.watch = _Watch((PodMeta("ns", "p", "u1", start_timestamp=KEPT_AT - 600),), True, None)
        self.sched, _ = _scheduler(
            Sources(gpu=Source(IDLE_GPU), allocations=self.allocations, pods=self.watch),
            clock=lambda: self.now[0],
        )
        first = self.sched.collect_once()
        assert _holders(first) == [("p", True, 0.0)]

    def fail_socket(self) -> None:
        self.allocations.fail = CollectorError("kubelet pod-resources List failed: UNAVAILABLE")


def _holders(snap: Snapshot) -> list[tuple[str, bool, float | None]]:
    return [(r.pod, r.allocated, r.utilization_ratio) for r in snap.pod_gpus]


@pytest.mark.parametrize("connected", [True, False])
def test_a_deleted_pod_loses_its_kept_allocation_while_the_kubelet_read_fails(
    connected: bool,
) -> None:
    """The kubelet's pod-resources socket stops answering and the pod is deleted: its
    kept allocation made it the idle GPU's holder at 0 % for as long as the socket
    failed (GpuEtaGpuAllocatedIdle, ETAs for a pod that is gone). Within the grace
    (the watch may not show a pod the kubelet just admitted) its row stays with its
    use unknown; once the pod list is complete past the read by the grace, the row
    goes. A watch synced a moment ago (not connected) counts from its last sync."""
    node = _KeptRead()
    node.fail_socket()
    node.watch.value, node.watch.connected = (), connected
    node.now[0] += 5
    node.watch.last_sync = node.now[0]  # the DELETED event
    within = node.sched.collect_once()
    assert not _status(within, "podresources").success
    assert _holders(within) == [("p", True, None)]
    node.now[0] += KEPT_ALLOCATION_GRACE_SECONDS + 10
    node.watch.last_sync = node.now[0] - 5  # a bookmark since
    after = node.sched.collect_once()
    assert not _status(after, "podresources").success
    assert after.pod_gpus == ()
    assert after.unresolved_allocations == 0


def test_a_live_pods_kept_allocation_keeps_its_use() -> None:
    """A pod the watch still lists, started before the last good read, still holds
    what the read said (the kubelet never moves a running pod's devices): its row and
    its use stay as they were while the socket fails."""
    node = _KeptRead()
    node.fail_socket()
    for _ in range(2):
        node.now[0] += KEPT_ALLOCATION_GRACE_SECONDS
        assert _holders(node.sched.collect_once()) == [("p", True, 0.0)]


def test_kept_allocations_from_a_stale_pod_list_stay_with_unknown_use() -> None:
    """A pod list neither connected nor synced for ten minutes cannot say who was
    deleted: every kept allocation stays (a row: someone may hold the GPU), none
    read as idle."""
    node = _KeptRead()
    node.fail_socket()
    node.watch.connected, node.watch.last_sync, node.watch.value = False, KEPT_AT, ()
    node.now[0] += 600
    assert _holders(node.sched.collect_once()) == [("p", True, None)]


def test_a_pod_deleted_while_the_kubelet_socket_is_down_from_real_sources() -> None:
    """The real chain: the kubelet's gRPC pod-resources server stops (its socket
    removed, as a restarting kubelet does), the API deletes ``ml/gone`` and the real
    pod watch sees it. While the socket stays down, ``ml/gone`` is dropped once the
    grace has passed and ``ml/live``, still running, keeps its GPU."""
    now = [KEPT_AT]
    allocations = {
        ("ml", "live"): {"main": [("nvidia.com/gpu", ["GPU-a"])]},
        ("ml", "gone"): {"main": [("nvidia.com/gpu", ["GPU-b"])]},
    }
    pods = [
        make_pod(name, "ml", uid=f"u-{name}", node="gpu-node", containers={"main": ""})
        for name in ("live", "gone")
    ]
    gpu = GpuPoll(
        devices=(
            DeviceReading(0, "GPU-a", "T4", 0.0, 0, 100),
            DeviceReading(1, "GPU-b", "T4", 0.0, 0, 100),
        )
    )
    with real_node_sources(allocations, pods, "gpu-node") as node:
        sched, _ = _scheduler(
            Sources(gpu=Source(gpu), allocations=node.allocations, pods=node.pods),
            clock=lambda: now[0],
        )
        assert [(r.pod, r.utilization_ratio) for r in sched.collect_once().pod_gpus] == [
            ("live", 0.0),
            ("gone", 0.0),
        ]
        node.kubelet.stop()
        node.api.delete_pod("ml", "gone")
        wait_for(lambda: [p.name for p in node.listed()] == ["live"])
        now[0] += KEPT_ALLOCATION_GRACE_SECONDS
        snap = sched.collect_once()
    assert not _status(snap, "podresources").success
    assert [(r.pod, r.allocated, r.utilization_ratio) for r in snap.pod_gpus] == [
        ("live", True, 0.0)
    ]


def test_a_running_pod_a_full_pod_cache_left_out_keeps_its_kept_gpu() -> None:
    """``--kube.max-pods`` 1 and two running pods: the cache holds one and the other
    is missing from it, not deleted. While the kubelet's socket is down, its kept
    allocation was dropped once the grace had passed (the cache read as the node's
    whole pod list): a busy GPU shown held by nobody. A cache that refused a running
    pod cannot say who is gone: every kept allocation stays, none confirmed."""
    now = [KEPT_AT]
    allocations = {
        ("ml", "a"): {"main": [("nvidia.com/gpu", ["GPU-a"])]},
        ("ml", "b"): {"main": [("nvidia.com/gpu", ["GPU-b"])]},
    }
    pods = [
        make_pod(name, "ml", uid=f"u-{name}", node="gpu-node", containers={"main": ""})
        for name in ("a", "b")
    ]
    gpu = GpuPoll(
        devices=(
            DeviceReading(0, "GPU-a", "T4", 0.0, 0, 100),
            DeviceReading(1, "GPU-b", "T4", 0.7, 5, 100),
        )
    )
    with real_node_sources(allocations, pods, "gpu-node", max_pods=1) as node:
        wait_for(lambda: len(node.listed()) == 1)
        sched, _ = _scheduler(
            Sources(gpu=Source(gpu), allocations=node.allocations, pods=node.pods),
            clock=lambda: now[0],
        )
        sched.collect_once()
        node.kubelet.stop()
        now[0] += KEPT_ALLOCATION_GRACE_SECONDS
        snap = sched.collect_once()
    assert not _status(snap, "podresources").success
    assert sorted(r.pod for r in snap.pod_gpus) == ["a", "b"]


# -- a pod deleted right after its final report ----------------------------------------

FINISHED_AT = 1_800_000_000.0


def _served(text: str, name: str, pod: str) -> list[str]:
    """The values of ``name`` for ``pod`` in an exposition."""
    return [
        line.rsplit(" ", 1)[1]
        for line in text.splitlines()
        if line.startswith(name + "{") and f'pod="{pod}"' in line
    ]


def test_a_gone_pods_final_report_is_served_until_a_scrape_can_see_it() -> None:
    """A Job deleted as soon as it finished (``ttlSecondsAfterFinished: 0``, Argo's
    ``podGC: OnPodCompletion``): its last report came seconds before the pod left the
    list, and Prometheus scrapes every 15-60 s. The final epoch must be in /metrics
    for the grace after the pod left, or the forecaster never sees the run complete;
    meanwhile the pod is no pod of the node (no pod_info, no GPU row), and after the
    grace its progress is dropped."""
    now = [FINISHED_AT]
    store = ProgressStore()
    allocation = Allocation("ns", "p", "c", "nvidia.com/gpu", "GPU-a")
    pods, allocations = Source((POD,)), Source((allocation,))
    sched, holder = _scheduler(
        Sources(gpu=Source(GPU), allocations=allocations, pods=pods, progress_store=store),
        clock=lambda: now[0],
    )
    store.merge("ns", "p", "c", "http", Report(run_id="r", epoch=9, epochs=10), now[0])
    sched.collect_once()  # scraped: epoch 9
    store.merge("ns", "p", "c", "http", Report(run_id="r", epoch=10, event="end"), now[0] + 1)
    pods.value, allocations.value = (), ()  # deleted at once, the kubelet let go of the GPU
    now[0] += 5
    sched.collect_once()  # the next collection, before the next scrape
    text = SnapshotExposition(holder, version="1").exposition().decode()
    assert _served(text, "gpu_eta_training_epoch", "p") == ["10.0"]
    assert _served(text, "gpu_eta_training_epochs_planned", "p") == ["10.0"]
    assert _served(text, "gpu_eta_pod_info", "p") == []
    assert holder.get().pod_gpus == ()
    now[0] += DEFAULT_GONE_GRACE_SECONDS - 5  # the grace counts from the first collection
    assert [p.epoch for p in sched.collect_once().progress] == [10.0]
    now[0] += 5
    assert sched.collect_once().progress == ()


# -- host memory is a measurement ------------------------------------------------------


@pytest.mark.parametrize("failure", ["raises", "hangs"])
def test_host_memory_is_absent_while_its_read_fails_or_hangs(failure: str) -> None:
    """A cgroup read that raises or hangs (a stuck overlay/NFS read, a cgroupfs stall)
    publishes no working set: the last good values are not served as if current.
    ``hostmemory`` says success 0 meanwhile, and the series return with the read."""
    hostmem = Source((HostMemory("ns", "p", "c", 5, 8),))
    sched, holder = _scheduler(Sources(pods=Source((POD,)), host_memory=hostmem), timeout=0.5)
    try:
        good = sched.collect_once()
        assert good.host_memory == (HostMemory("ns", "p", "c", 5, 8),)
        if failure == "raises":
            hostmem.fail = OSError("memory.stat: stale file handle")
        else:
            hostmem.delay = 30
        for _ in range(2):  # a read still hanging from an earlier cycle as well
            snap = sched.collect_once()
            assert snap.host_memory == ()
            assert not _status(snap, "hostmemory").success
            text = SnapshotExposition(holder, version="1").exposition().decode()
            assert "gpu_eta_pod_memory_working_set_bytes{" not in text
            assert "gpu_eta_pod_memory_limit_bytes{" not in text
            assert 'gpu_eta_exporter_collector_success{collector="hostmemory",node="n"} 0' in text
            assert _served(text, "gpu_eta_pod_info", "p") == ["1.0"], "the pod stays"
        hostmem.fail, hostmem.delay = None, 0.0
        hostmem.release.set()
        deadline = time.monotonic() + 10
        while not _status(snap, "hostmemory").success and time.monotonic() < deadline:
            time.sleep(0.05)
            snap = sched.collect_once()
        assert snap.host_memory == good.host_memory
    finally:
        hostmem.release.set()
        sched.stop()


# -- collectors with their own families (kind "families") ---------------------------


def _temperature(value: object = "0", name: str = "gpu_eta_test_temperature_celsius"):
    """One family as a contributor's collector builds it; ``value``: the gpu label's."""
    from prometheus_client.core import GaugeMetricFamily

    family = GaugeMetricFamily(name, "A test series", labels=["node", "gpu"])
    family.add_metric(["n", value], 42.0)
    return [family]


def _promtool_check(text: str) -> str:
    """promtool's verdict on an exposition: "" when Prometheus' parser takes it."""
    import subprocess

    from gpu_eta.launch.prometheus import find_binary

    proc = subprocess.run(
        [find_binary("promtool"), "check", "metrics"],
        input=text.encode(),
        capture_output=True,
        timeout=60,
    )
    return "" if proc.returncode == 0 else proc.stdout.decode() + proc.stderr.decode()


@pytest.mark.parametrize(
    ("output", "problem"),
    [
        (_temperature(0), "does not encode"),  # the gpu index as NVML gives it
        (None, "returned NoneType"),
        (_temperature(name="gpu_eta_gpu_info"), "gpu_eta_gpu_info is exported already"),
        (_temperature(name="process_open_fds"), "not one this exporter can export"),
    ],
    ids=["int-label-value", "none", "built-in-name", "process-name"],
)
def test_a_families_collectors_bad_output_fails_it_not_the_scrape(
    caplog: pytest.LogCaptureFixture, output: object, problem: str
) -> None:
    """Its output is dropped and it reads success 0, logged once; every other series
    is served and Prometheus' own parser (promtool) takes the scrape."""
    temperature = Source(output)
    sched, holder = _scheduler(Sources(gpu=Source(GPU), families={"temperature": temperature}))
    with caplog.at_level(logging.INFO, logger="gpu_eta.exporter.scheduler"):
        sched.collect_once()
        sched.collect_once()
    text = SnapshotExposition(holder).exposition().decode()
    assert 'gpu_eta_exporter_collector_success{collector="temperature",node="n"} 0.0' in text
    assert 'gpu_eta_exporter_collector_success{collector="gpu",node="n"} 1.0' in text
    assert 'gpu_eta_gpu_utilization_ratio{UUID="GPU-a",gpu="0",node="n"} 0.5' in text
    assert "A test series" not in text
    assert _promtool_check(text) == ""
    failed = [r.getMessage() for r in caplog.records if "temperature" in r.getMessage()]
    assert len(failed) == 1 and problem in failed[0], failed
    temperature.value = _temperature("0")  # fixed: served again, success 1
    sched.collect_once()
    text = SnapshotExposition(holder).exposition().decode()
    assert 'gpu_eta_test_temperature_celsius{gpu="0",node="n"} 42.0' in text
    assert 'gpu_eta_exporter_collector_success{collector="temperature",node="n"} 1.0' in text


def test_a_families_collectors_bad_family_is_skipped_and_its_others_served(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """One family that would break the scrape (a label value given as an int) among
    good ones: the good ones are served fresh, the bad one is skipped, and the
    collector reads failing (success 0, an error per cycle, logged once) so that the
    bug shows. Before, the one bad family failed all of the collector's output."""
    fan = _temperature("0", name="gpu_eta_test_fan_ratio")
    temperature = Source(fan + _temperature(0))
    sched, holder = _scheduler(Sources(families={"temperature": temperature}))
    with caplog.at_level(logging.INFO, logger="gpu_eta.exporter.scheduler"):
        sched.collect_once()
        fan[0].samples[0] = fan[0].samples[0]._replace(value=7.0)
        sched.collect_once()
    text = SnapshotExposition(holder).exposition().decode()
    assert 'gpu_eta_test_fan_ratio{gpu="0",node="n"} 7.0' in text  # this cycle's
    assert "gpu_eta_test_temperature_celsius" not in text
    assert 'gpu_eta_exporter_collector_success{collector="temperature",node="n"} 0.0' in text
    errors = 'gpu_eta_exporter_collector_errors_total{collector="temperature",node="n"} 2.0'
    assert errors in text  # one per cycle that skipped a family
    assert _promtool_check(text) == ""
    failed = [r.getMessage() for r in caplog.records if "temperature" in r.getMessage()]
    assert len(failed) == 1, failed
    assert "skipped 1 of 2 families" in failed[0] and "does not encode" in failed[0], failed
    temperature.value = fan + _temperature("0")  # fixed: all served, success 1
    sched.collect_once()
    text = SnapshotExposition(holder).exposition().decode()
    assert 'gpu_eta_test_temperature_celsius{gpu="0",node="n"} 42.0' in text
    assert 'gpu_eta_exporter_collector_success{collector="temperature",node="n"} 1.0' in text


def test_two_families_collectors_with_one_family_name_the_first_keeps_it() -> None:
    """A name twice gives a second HELP line, for which Prometheus rejects the scrape."""
    sources = Sources(
        families={"a_temp": Source(_temperature("0")), "b_temp": Source(_temperature("1"))}
    )
    sched, holder = _scheduler(sources)
    sched.collect_once()
    text = SnapshotExposition(holder).exposition().decode()
    assert text.count("# HELP gpu_eta_test_temperature_celsius ") == 1
    assert 'gpu_eta_test_temperature_celsius{gpu="0",node="n"} 42.0' in text
    assert 'gpu_eta_exporter_collector_success{collector="a_temp",node="n"} 1.0' in text
    assert 'gpu_eta_exporter_collector_success{collector="b_temp",node="n"} 0.0' in text
    assert _promtool_check(text) == ""


def test_a_failing_families_collectors_last_good_families_yield_a_name_taken_since() -> None:
    """Its last good families are kept while it fails, except one another collector
    now exports: that one is the other's."""
    first = Source(_temperature("0", name="gpu_eta_test_fan_ratio"))
    second = Source([])
    sched, holder = _scheduler(Sources(families={"a_fan": first, "b_fan": second}))
    sched.collect_once()
    second.value = _temperature("1")  # b_fan starts exporting the temperature
    first.value, first.fail = None, CollectorError("fan sensor gone")
    sched.collect_once()
    assert [(e.name, [m.name for m in e.families]) for e in holder.get().families] == [
        ("a_fan", ["gpu_eta_test_fan_ratio"]),
        ("b_fan", ["gpu_eta_test_temperature_celsius"]),
    ]
    # now a_fan's last good name is taken too: only b_fan's family is served
    second.value = _temperature("1") + _temperature("1", name="gpu_eta_test_fan_ratio")
    sched.collect_once()
    text = SnapshotExposition(holder).exposition().decode()
    assert text.count("# HELP gpu_eta_test_fan_ratio ") == 1
    assert 'gpu_eta_test_fan_ratio{gpu="1",node="n"} 42.0' in text
    assert _promtool_check(text) == ""


def _relayed_families() -> list:
    """A families collector's output of every kind the text format writes differently:
    a counter with its ``_created``, info, stateset, gaugehistogram, an untyped line
    read by prometheus_client's parser, a label value to escape."""
    from prometheus_client.core import (
        CounterMetricFamily,
        GaugeHistogramMetricFamily,
        InfoMetricFamily,
        StateSetMetricFamily,
    )
    from prometheus_client.parser import text_string_to_metric_families

    jobs = CounterMetricFamily("gpu_eta_test_jobs", "Jobs", labels=["q"])
    jobs.add_metric(['a"b\\c\nd'], 3.0, created=1700000000.0)
    return [
        jobs,
        InfoMetricFamily("gpu_eta_test_build", "Build", value={"version": "1"}),
        StateSetMetricFamily("gpu_eta_test_mode", "Mode", value={"a": True, "b": False}),
        GaugeHistogramMetricFamily(
            "gpu_eta_test_queue", "Queue", buckets=[("1", 1.0), ("+Inf", 2.0)], gsum_value=3.0
        ),
        *text_string_to_metric_families("# TYPE ext_temp untyped\next_temp 3\n"),
        *_temperature("0"),
    ]


def test_a_families_collectors_text_is_served_as_generate_latest_writes_it() -> None:
    """The exposition of a cycle with a families collector is byte for byte
    prometheus_client's ``generate_latest`` over ``render()`` of that snapshot."""
    from prometheus_client import CollectorRegistry, generate_latest

    from gpu_eta.exporter.exposition import render

    class Reference:  # prometheus_client's collector protocol over the pure render()
        def __init__(self, snapshot: Snapshot) -> None:
            self.snapshot = snapshot

        def collect(self) -> list:
            return render(self.snapshot, age_seconds=0.0, version="1.2.3")

    sources = Sources(gpu=Source(GPU), families={"relay": Source(_relayed_families())})
    holder = SnapshotHolder(Snapshot(node="n", timestamp=0), clock=lambda: 100.0)
    exposition = SnapshotExposition(holder, version="1.2.3")
    # wired as the runtime wires it; one clock: the snapshot is 0 s old when served
    sched = Scheduler("n", sources, holder, clock=lambda: 100.0, prepare=exposition.prepare)
    for _ in range(2):  # the second cycle: the same family objects, checked again
        registry = CollectorRegistry(auto_describe=False)
        registry.register(Reference(sched.collect_once()))
        text = exposition.exposition()
        assert 'gpu_eta_test_jobs_total{q="a\\"b\\\\c\\nd"} 3.0' in text.decode()
        assert text == generate_latest(registry)


def test_a_families_collectors_family_is_encoded_once_per_cycle() -> None:
    """The check encodes each family (a family that does not encode is skipped);
    that text is the one served: encoding it again for the exposition doubled the
    collector's cost per cycle."""
    from prometheus_client.metrics_core import Metric

    class Counted(Metric):
        """A family that counts the encodings of it (each reads its HELP text once)."""

        reads = 0

        @property
        def documentation(self) -> str:
            Counted.reads += 1
            return self._documentation

        @documentation.setter
        def documentation(self, value: str) -> None:
            self._documentation = value

    family = Counted("gpu_eta_test_fan_ratio", "A test series", "gauge")
    family.add_sample("gpu_eta_test_fan_ratio", {"gpu": "0"}, 0.5)
    holder = SnapshotHolder(Snapshot(node="n", timestamp=0))
    exposition = SnapshotExposition(holder)
    sched = Scheduler(
        "n", Sources(families={"fan": Source([family])}), holder, prepare=exposition.prepare
    )
    for cycle in (1, 2):
        sched.collect_once()
        assert b'gpu_eta_test_fan_ratio{gpu="0"} 0.5' in exposition.exposition()
        exposition.exposition()
        assert Counted.reads == cycle
