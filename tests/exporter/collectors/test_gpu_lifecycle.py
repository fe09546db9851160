"""The exporter through the NVIDIA driver's lifecycle, on the NVML fake of
test_gpu.py made able to lose its driver and get it back (as GPU Operator's
driver manager does on an upgrade, or a node boots before the driver is loaded):

- no driver at start: the source waits (no exit, no crash loop), the gpu collector
  reports failure and ``/healthz`` material stays healthy;
- the driver goes away: NVML is shut down at once (nothing of ours holds the
  driver: the fake's init count drops to 0) and every known device reads
  ``gpu_eta_gpu_read_success`` 0;
- the driver comes back: NVML is initialised again and the devices read 1;
- the driver comes back upgraded: this process' NVML library is the old one, every
  ``nvmlInit`` answers LIB_RM_VERSION_MISMATCH, and after a grace ``/healthz``
  fails so that the kubelet restarts the container;
- an NVML call hangs (a GPU fallen off the bus): from the cycle that times out on,
  every known device reads ``gpu_eta_gpu_read_success`` 0 with no utilisation or
  memory of the poll before, and ``/metrics`` keeps answering.
"""

from __future__ import annotations

import itertools
import threading
import time
import types

import pynvml as real
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpu_eta.exporter.collectors import CollectorError
from gpu_eta.exporter.collectors import gpu as gpu_module
from gpu_eta.exporter.collectors.gpu import DRIVER_GONE_REASON, NvmlGpuSource, NvmlUnavailable
from gpu_eta.exporter.exposition import encode_text, render
from gpu_eta.exporter.readings import Allocation, GpuPoll
from gpu_eta.exporter.scheduler import Scheduler, Sources, _Tracker, _unread
from gpu_eta.exporter.snapshot import Snapshot, SnapshotHolder
from tests.exporter.collectors.test_gpu import Dev, fake_nvml

U0 = "GPU-00000000-0000-0000-0000-000000000000"
U1 = "GPU-11111111-1111-1111-1111-111111111111"


def driver_fake(loaded: bool, devices: list[Dev] | None = None) -> types.ModuleType:
    """fake_nvml with a driver that can be unloaded and loaded again, and upgraded;
    over ``devices``, two T4s (``U0`` at 40 %, ``U1``) unless given.

    ``nvmlInit`` fails with DRIVER_NOT_LOADED while it is away and counts
    references otherwise (like libnvidia-ml); every other call fails with
    UNINITIALIZED without a reference and DRIVER_NOT_LOADED while away.

    ``driver["version"]`` is the loaded kernel module's; the library's is the one it
    had when the fake was made, as pynvml loads ``libnvidia-ml.so.1`` once per
    process and never again (pynvml.py ``_LoadNvmlLibrary``: ``if (nvmlLib ==
    None)``). A driver loaded again at another version makes ``nvmlInit`` fail with
    NVML_ERROR_LIB_RM_VERSION_MISMATCH (18, "RM has detected an NVML/RM version
    mismatch.", pynvml.py ``NVMLError._errcode_to_string``), as nvidia-smi's "Failed
    to initialize NVML: Driver/library version mismatch" in a container kept across
    a driver upgrade (NVIDIA/nvidia-docker#365: "relaunch the containers after a
    driver upgrade").
    """
    if devices is None:
        devices = [Dev(U0, b"Tesla T4", index=0, util=40), Dev(U1, b"Tesla T4", index=1)]
    mod = fake_nvml(devices, mig_monitor=False)
    mod.driver = {"loaded": loaded, "refs": 0, "version": "550.54.15"}  # type: ignore[attr-defined]
    state = mod.driver
    library_version = state["version"]
    inner = {n: getattr(mod, n) for n in dir(mod) if n.startswith("nvml") and n != "nvmlInit"}

    def nvmlInit() -> None:
        mod.calls.append("nvmlInit")
        if not state["loaded"]:
            raise real.NVMLError(real.NVML_ERROR_DRIVER_NOT_LOADED)
        if state["version"] != library_version:
            raise real.NVMLError(real.NVML_ERROR_LIB_RM_VERSION_MISMATCH)
        state["refs"] += 1

    def nvmlShutdown() -> None:
        mod.calls.append("nvmlShutdown")
        if state["refs"] == 0:
            raise real.NVMLError(real.NVML_ERROR_UNINITIALIZED)
        state["refs"] -= 1

    def guarded(fn):
        def call(*args, **kwargs):
            if state["refs"] == 0:
                raise real.NVMLError(real.NVML_ERROR_UNINITIALIZED)
            if not state["loaded"]:
                raise real.NVMLError(real.NVML_ERROR_DRIVER_NOT_LOADED)
            return fn(*args, **kwargs)

        return call

    for name, fn in inner.items():
        if name != "nvmlShutdown" and callable(fn):
            setattr(mod, name, guarded(fn))
    mod.nvmlInit = nvmlInit
    mod.nvmlShutdown = nvmlShutdown
    return mod


def _by_uuid(text: str, name: str) -> dict[str, float]:
    out = {}
    for family in text_string_to_metric_families(text):
        if family.name == name:
            out.update({s.labels["UUID"]: s.value for s in family.samples})
    return out


def _read_success(snapshot: Snapshot) -> dict[str, float]:
    return _by_uuid(
        encode_text(render(snapshot, age_seconds=0.0)).decode(), "gpu_eta_gpu_read_success"
    )


def _collector_ok(snapshot: Snapshot) -> bool:
    return next(s for s in snapshot.collectors if s.name == "gpu").success


def test_without_wait_no_driver_is_still_the_one_line_startup_error() -> None:
    with pytest.raises(NvmlUnavailable):
        NvmlGpuSource(driver_fake(loaded=False)).open()


def test_driver_absent_then_loaded_then_gone_then_back() -> None:
    nv = driver_fake(loaded=False)
    source = NvmlGpuSource(nv, wait_for_driver=True)
    source.open()  # no exception: waits
    assert not source.driver_loaded
    holder = SnapshotHolder(Snapshot(node="n", timestamp=0))
    sched = Scheduler("n", Sources(gpu=source), holder, interval_seconds=60, timeout_seconds=5)

    # 1. no driver yet: the collector fails, nothing is served as read, nothing held
    with pytest.raises(CollectorError, match="waiting for the driver"):
        source.poll()
    snap = sched.collect_once()
    assert not _collector_ok(snap) and _read_success(snap) == {}
    assert nv.driver["refs"] == 0

    # 2. the driver loads: read on the next cycle
    nv.driver["loaded"] = True
    snap = sched.collect_once()
    assert _collector_ok(snap)
    assert _read_success(snap) == {U0: 1.0, U1: 1.0}
    assert {d.uuid for d in snap.devices} == {U0, U1} and nv.driver["refs"] == 1

    # 3. the driver goes away (upgrade): released at once, every device unread
    nv.driver["loaded"] = False
    poll = source.poll()
    assert {f.reason for f in poll.failures} == {DRIVER_GONE_REASON}
    # kept as last read (their holders keep their rows), nothing measured
    assert [(d.uuid, d.utilization_ratio, d.memory_used_bytes) for d in poll.devices] == [
        (U0, None, None),
        (U1, None, None),
    ]
    assert poll.processes == () and poll.process_list_failures == (U0, U1)
    assert nv.driver["refs"] == 0 and not source.driver_loaded
    snap = sched.collect_once()
    assert _collector_ok(snap)
    assert _read_success(snap) == {U0: 0.0, U1: 0.0}
    assert {d.uuid for d in snap.devices} == {U0, U1}
    assert {d.utilization_ratio for d in snap.devices} == {None}
    calls_before = nv.calls.count("nvmlInit")
    sched.collect_once()  # still away: tries again, holds nothing
    assert nv.calls.count("nvmlInit") == calls_before + 1 and nv.driver["refs"] == 0

    # 4. the driver is back: re-initialised, read again
    nv.driver["loaded"] = True
    snap = sched.collect_once()
    assert _read_success(snap) == {U0: 1.0, U1: 1.0} and nv.driver["refs"] == 1
    util = {d.uuid: d.utilization_ratio for d in snap.devices}
    assert util[U0] == pytest.approx(0.4)

    # 5. shutdown lets go exactly once
    source.close()
    source.close()
    assert nv.driver["refs"] == 0


def test_mig_holders_keep_their_rows_while_the_driver_is_away() -> None:
    """The MIG manager or a driver upgrade unloads the driver under a MIG node: the
    holders of its instances, named by ``MIG-…`` and ``<i>:<j>`` ids that no whole
    GPU answers, keep their allocated rows with their use unknown, and are not
    counted unresolved (an alert would blame the device plugin)."""
    mig_a = Dev("MIG-aaaaaaaa-0000-0000-0000-000000000000", "NVIDIA A100 MIG 3g.20gb")
    mig_a.gpu_instance_id, mig_a.used = 1, 4 * 2**30
    mig_b = Dev("MIG-bbbbbbbb-0000-0000-0000-000000000000", "NVIDIA A100 MIG 3g.20gb")
    mig_b.gpu_instance_id = 2
    parent = Dev(U0, "NVIDIA A100", mig_mode=real.NVML_DEVICE_MIG_ENABLE)
    parent.migs = {0: mig_a, 1: mig_b}
    nv = driver_fake(loaded=True, devices=[parent])
    source = NvmlGpuSource(nv, wait_for_driver=True)
    source.open()
    allocations = (
        Allocation("ml", "a", "main", "nvidia.com/mig-3g.20gb", mig_a.uuid),
        Allocation("ml", "b", "main", "nvidia.com/mig-3g.20gb", "0:1"),
    )
    sched = Scheduler(
        "n",
        Sources(gpu=source, allocations=types.SimpleNamespace(poll=lambda: allocations)),
        SnapshotHolder(Snapshot(node="n", timestamp=0)),
        timeout_seconds=5,
    )

    def rows(snap: Snapshot) -> list[tuple[str, int | None, bool, int | None]]:
        return [(r.pod, r.gpu_instance_id, r.allocated, r.memory_used_bytes) for r in snap.pod_gpus]

    snap = sched.collect_once()
    assert rows(snap) == [("a", 1, True, 4 * 2**30), ("b", 2, True, 0)]
    assert snap.unresolved_allocations == 0

    nv.driver["loaded"] = False
    for _ in range(2):  # the poll that finds it gone, and one while it stays away
        snap = sched.collect_once()
        assert _collector_ok(snap) and _read_success(snap) == {U0: 0.0}
        assert {f.reason for f in snap.failures} == {DRIVER_GONE_REASON}
        assert rows(snap) == [("a", 1, True, None), ("b", 2, True, None)]
        assert snap.unresolved_allocations == 0
        text = encode_text(render(snap, age_seconds=0.0)).decode()
        assert "gpu_eta_gpu_memory_used_bytes{" not in text

    nv.driver["loaded"] = True
    snap = sched.collect_once()
    assert _read_success(snap) == {U0: 1.0}
    assert rows(snap) == [("a", 1, True, 4 * 2**30), ("b", 2, True, 0)]


def test_real_exporter_without_a_driver_waits_instead_of_exiting(tmp_path) -> None:
    """The whole exporter, real pynvml, on this machine (no NVIDIA driver): with
    --nvml.wait-for-driver it keeps running, /healthz answers ok (no restart by the
    liveness probe) and the gpu collector says it is failing."""
    import requests

    from gpu_eta.launch.prometheus import free_port
    from tests.support.inprocess import main_in_thread, scrape_until

    port = free_port()
    with main_in_thread(_exporter_args(port, "--nvml.wait-for-driver")) as result:
        text = scrape_until(port, 'collector="gpu"')
        assert 'gpu_eta_exporter_collector_success{collector="gpu",node="gpu-node-1"} 0.0' in text
        assert "gpu_eta_gpu_read_success{" not in text
        for _ in range(3):  # several cycles later: still up, still healthy
            assert requests.get(f"http://127.0.0.1:{port}/healthz", timeout=5).text == "ok\n"
        assert result == []  # main has not returned
    assert result == [0]


def hanging_fake() -> tuple[types.ModuleType, threading.Event, threading.Event]:
    """fake_nvml whose ``nvmlDeviceGetUtilizationRates`` blocks once ``hang`` is set,
    until ``release`` is: as on a GPU fallen off the bus (Xid 79), where an NVML call
    can block for minutes (nvidia-smi stuck in D state: leptonai/gpud PR #117)."""
    nv = fake_nvml([Dev(U0, b"Tesla T4", index=0, util=40), Dev(U1, b"Tesla T4", index=1)])
    hang, release = threading.Event(), threading.Event()
    utilisation = nv.nvmlDeviceGetUtilizationRates

    def blocking(handle):
        if hang.is_set():
            release.wait(60)
        return utilisation(handle)

    nv.nvmlDeviceGetUtilizationRates = blocking
    return nv, hang, release


def test_a_hung_nvml_call_publishes_every_known_device_unread() -> None:
    nv, hang, release = hanging_fake()
    source = NvmlGpuSource(nv)
    source.open()
    holder = SnapshotHolder(Snapshot(node="n", timestamp=0))
    # the pod holding GPU 0: its share must not freeze at the last good 40 %
    pods = types.SimpleNamespace(poll=lambda: (Allocation("ns", "p", "c", "nvidia.com/gpu", U0),))
    sched = Scheduler(
        "n", Sources(gpu=source, allocations=pods), holder, interval_seconds=60, timeout_seconds=0.3
    )
    try:
        snap = sched.collect_once()
        assert _read_success(snap) == {U0: 1.0, U1: 1.0}
        assert [r.utilization_ratio for r in snap.pod_gpus] == [pytest.approx(0.4)]
        assert snap.unresolved_allocations == 0

        hang.set()
        for expected_error in ("timed out after 0.3s", "still running after 0.3s"):
            snap = sched.collect_once()
            status = next(s for s in snap.collectors if s.name == "gpu")
            assert not status.success and expected_error in status.last_error
            text = encode_text(render(snap, age_seconds=0.0)).decode()
            assert _by_uuid(text, "gpu_eta_gpu_read_success") == {U0: 0.0, U1: 0.0}
            assert {f.reason for f in snap.failures} == {"timeout"}
            for name in ("gpu_eta_gpu_utilization_ratio", "gpu_eta_gpu_memory_used_bytes"):
                assert _by_uuid(text, name) == {}, name
            # the holder keeps its allocated row, its use unknown (no series), not 40 %
            assert [(r.uuid, r.allocated, r.utilization_ratio) for r in snap.pod_gpus] == [
                (U0, True, None)
            ]
            # an unread device is no reason to call its allocations unresolved: the count
            # of the last good read is kept (0 here), as the allocations are
            assert snap.unresolved_allocations == 0

        hang.clear()
        release.set()  # the hung call returns; the next cycle polls again
        deadline = time.monotonic() + 10
        while _read_success(snap) != {U0: 1.0, U1: 1.0} and time.monotonic() < deadline:
            time.sleep(0.05)
            snap = sched.collect_once()
        assert _read_success(snap) == {U0: 1.0, U1: 1.0}
        assert [r.utilization_ratio for r in snap.pod_gpus] == [pytest.approx(0.4)]
    finally:
        release.set()
        sched.stop()


def test_a_failing_gpu_poll_publishes_every_known_device_unread() -> None:
    """Not only a hang: a poll that raises (the device count failing) reads nothing."""
    nv = driver_fake(loaded=True)
    source = NvmlGpuSource(nv)
    source.open()
    sched = Scheduler(
        "n", Sources(gpu=source), SnapshotHolder(Snapshot(node="n", timestamp=0)), timeout_seconds=5
    )
    assert _read_success(sched.collect_once()) == {U0: 1.0, U1: 1.0}
    count = nv.nvmlDeviceGetCount

    def broken() -> int:
        raise real.NVMLError(real.NVML_ERROR_UNKNOWN)

    nv.nvmlDeviceGetCount = broken
    snap = sched.collect_once()
    assert _read_success(snap) == {U0: 0.0, U1: 0.0}
    # the devices keep their series but the measurements (the free-GPU rules and
    # panels count gpu_eta_gpu_info; a MIG holder is matched through its device)
    text = encode_text(render(snap, age_seconds=0.0)).decode()
    for name in ("gpu_eta_gpu_info", "gpu_eta_gpu_memory_total_bytes", "gpu_eta_gpu_pods"):
        assert set(_by_uuid(text, name)) == {U0, U1}, name
    for name in ("gpu_eta_gpu_utilization_ratio", "gpu_eta_gpu_memory_used_bytes"):
        assert _by_uuid(text, name) == {}, name
    # the unread devices' process lists are unknown: no process is not "idle"

    tracker = _Tracker("gpu")
    tracker.fail("CollectorError: x", 0.1)
    last = GpuPoll(devices=snap.devices)
    assert set(_unread(last, tracker).process_list_failures) == {U0, U1}
    assert {(f.reason, f.detail) for f in snap.failures} == {
        ("poll_failed", "CollectorError: NVML device count failed: Unknown Error")
    }
    nv.nvmlDeviceGetCount = count
    assert _read_success(sched.collect_once()) == {U0: 1.0, U1: 1.0}


@pytest.fixture
def gpu_collector(monkeypatch: pytest.MonkeyPatch) -> list[types.ModuleType]:
    """The registry's own ``gpu`` build, its ``NvmlGpuSource`` over the fake the test
    puts in the list (the whole exporter, its NVML faked), the mismatch grace cut
    to a few 200 ms cycles (the default is a minute)."""
    fakes: list[types.ModuleType] = []

    def source(**kw) -> NvmlGpuSource:
        return NvmlGpuSource(fakes[0], mismatch_grace_seconds=0.5, **kw)

    monkeypatch.setattr(gpu_module, "NvmlGpuSource", source)
    return fakes


def _exporter_args(port: int, *extra: str) -> list[str]:
    """The whole exporter with the gpu and progress collectors only, on loopback."""
    from tests.support.inprocess import local_args

    return [
        "--no-collector.kube",
        "--no-collector.podresources",
        "--no-collector.logs",
        "--no-collector.cgroup",
        "--no-collector.hostmemory",
        "--node-name",
        "gpu-node-1",
        *local_args(port),
        *extra,
    ]


def test_real_exporter_answers_metrics_while_nvml_hangs(gpu_collector) -> None:
    """The whole exporter while an NVML call hangs: /metrics answers every scrape,
    the devices read 0 and /healthz stays ok (the collection loop goes on)."""
    import requests

    from gpu_eta.launch.prometheus import free_port
    from tests.support.inprocess import main_in_thread, scrape_until

    nv, hang, release = hanging_fake()
    gpu_collector.append(nv)
    port = free_port()
    try:
        with main_in_thread(_exporter_args(port, "--collection.timeout", "100ms")) as result:
            good = scrape_until(port, 'gpu_eta_gpu_read_success{UUID="' + U0)
            assert _by_uuid(good, "gpu_eta_gpu_read_success") == {U0: 1.0, U1: 1.0}
            hang.set()
            text = scrape_until(
                port, 'gpu_eta_gpu_read_success{UUID="' + U0 + '",gpu="0",node="gpu-node-1"} 0.0'
            )
            assert _by_uuid(text, "gpu_eta_gpu_read_success") == {U0: 0.0, U1: 0.0}, text
            assert _by_uuid(text, "gpu_eta_gpu_utilization_ratio") == {}
            for _ in range(5):  # several cycles into the hang: still answering, still live
                assert requests.get(f"http://127.0.0.1:{port}/metrics", timeout=5).ok
                assert requests.get(f"http://127.0.0.1:{port}/healthz", timeout=5).text == "ok\n"
            assert result == []
    finally:
        release.set()


def test_real_exporter_serves_while_nvml_init_hangs(gpu_collector) -> None:
    """``nvmlInit`` blocking at start (the RM lock held by a stuck process, a GPU in a
    bad state): /healthz and /metrics answer within seconds, the gpu collector
    failing; once the call returns the GPUs are read."""
    import requests

    from gpu_eta.launch.prometheus import free_port
    from tests.support.inprocess import main_in_thread, scrape_until

    nv = fake_nvml([Dev(U0, b"Tesla T4", index=0, util=40)])
    release = threading.Event()
    init = nv.nvmlInit

    def blocking() -> None:
        release.wait(60)
        init()

    nv.nvmlInit = blocking
    gpu_collector.append(nv)
    port = free_port()
    try:
        with main_in_thread(_exporter_args(port, "--collection.timeout", "500ms")) as result:
            text = scrape_until(port, 'gpu_eta_exporter_collector_success{collector="gpu"', 10)
            assert 'gpu_eta_exporter_collector_success{collector="gpu",node="gpu-node-1"} 0.0' in (
                text
            ), text
            health = requests.get(f"http://127.0.0.1:{port}/healthz", timeout=5)
            assert health.text == "ok\n"
            release.set()
            text = scrape_until(port, 'gpu_eta_gpu_read_success{UUID="' + U0)
            assert _by_uuid(text, "gpu_eta_gpu_read_success") == {U0: 1.0}
            assert result == []
    finally:
        release.set()


def test_real_exporter_refused_by_nvml_at_start_exits_with_one_line(gpu_collector) -> None:
    """An ``nvmlInit`` that answers at start, refusing (no permission on the device
    nodes), still ends the start with its one line: the first collection's answer
    is read before serving, as the no-driver line is (tests/exporter/test_main.py)."""
    from gpu_eta.launch.prometheus import free_port
    from tests.support.inprocess import main_in_thread

    gpu_collector.append(fake_nvml([], init_error=real.NVML_ERROR_NO_PERMISSION))
    port = free_port()
    with main_in_thread(_exporter_args(port)) as result:
        deadline = time.monotonic() + 20
        while not result and time.monotonic() < deadline:
            time.sleep(0.05)
    assert result == [1]


def test_real_exporter_says_a_refusal_nvml_answers_after_its_poll_was_given_up(
    gpu_collector, capsys
) -> None:
    """``nvmlInit`` refusing (no permission on the device nodes) slower than the
    collection timeout: the start goes on (no answer yet), and the refusal, once it
    comes, is logged (ERROR, NVML's reason) once. Later polls ask NVML again (the
    device nodes may be fixed by then), one call at a time: a poll still blocked in
    ``nvmlInit`` is not started again, so no call begins before the one before it
    returned."""
    from gpu_eta.launch.prometheus import free_port
    from tests.support.inprocess import main_in_thread, scrape_until

    nv = fake_nvml([], init_error=real.NVML_ERROR_NO_PERMISSION)
    init, inits = nv.nvmlInit, []

    def slow() -> None:
        started = time.monotonic()
        time.sleep(1.0)  # past the 300 ms timeout every time
        inits.append((started, time.monotonic()))
        init()

    nv.nvmlInit = slow
    gpu_collector.append(nv)
    port = free_port()
    with main_in_thread(_exporter_args(port, "--collection.timeout", "300ms")) as result:
        scrape_until(port, 'gpu_eta_exporter_collector_success{collector="gpu"', 10)
        time.sleep(3.0)  # the first answer after 1 s, then more calls, one at a time
        assert result == []
    assert len(inits) >= 2, inits  # asked again after the late refusal
    assert all(b[0] >= a[1] for a, b in itertools.pairwise(inits)), inits  # never overlapping
    # the exporter's log (stderr): NVML's reason, once from the source
    said = [line for line in capsys.readouterr().err.splitlines() if "answered after" in line]
    assert len(said) == 1 and " ERROR gpu_eta.exporter.collectors.gpu: " in said[0], said
    assert "Permissions" in said[0] and "asked again at each poll" in said[0], said


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_driver_upgraded_under_the_exporter_asks_for_a_restart_after_a_grace(caplog) -> None:
    nv = driver_fake(loaded=True)
    clock = Clock()
    source = NvmlGpuSource(nv, wait_for_driver=True, mismatch_grace_seconds=60, monotonic=clock)
    source.open()
    assert {d.uuid for d in source.poll().devices} == {U0, U1}
    nv.driver["loaded"] = False  # the driver container stops: NVML released
    source.poll()
    nv.driver.update(loaded=True, version="570.86.10")  # the new driver is up
    for _ in range(2):  # three polls and 60 s: the upgrade itself may show it briefly
        with pytest.raises(CollectorError, match="NVML/RM version mismatch"):
            source.poll()
        clock.now += 30
    assert source.restart_reason() is None
    with pytest.raises(CollectorError):
        source.poll()
    reason = source.restart_reason()
    assert reason is not None and reason.startswith("NVML/RM version mismatch for 60s")
    assert [r.getMessage() for r in caplog.records if r.levelname == "ERROR"] == [
        f"{reason}: /healthz fails so that the container is restarted"
    ]
    # the mismatch ends (the old driver back): no restart wanted any more
    nv.driver["version"] = "550.54.15"
    assert {d.uuid for d in source.poll().devices} == {U0, U1}
    assert source.restart_reason() is None


def test_a_later_nvmlinit_failing_past_the_poll_timeout_is_logged_once(caplog) -> None:
    """The driver reloaded under the exporter and ``nvmlInit`` answering slower than
    the poll timeout: its failure is logged once (a WARNING; the scheduler gave the
    poll up, so its CollectorError is never seen), not at every poll, and NVML is
    asked again at each poll (a passing state, not the start's refusal)."""
    nv = driver_fake(loaded=True)
    clock = Clock()
    init = nv.nvmlInit

    def slow() -> None:
        clock.now += 10  # past the 4 s poll timeout
        init()

    nv.nvmlInit = slow
    source = NvmlGpuSource(nv, wait_for_driver=True, monotonic=clock, poll_timeout_seconds=4)
    assert {d.uuid for d in source.poll().devices} == {U0, U1}
    nv.driver["loaded"] = False
    source.poll()
    nv.driver.update(loaded=True, version="570.86.10")
    caplog.set_level("WARNING")
    for _ in range(3):
        with pytest.raises(CollectorError, match="version mismatch"):
            source.poll()
    late = [r for r in caplog.records if "past the 4s collection timeout" in r.getMessage()]
    assert [r.levelname for r in late] == ["WARNING"], caplog.text
    assert nv.calls.count("nvmlInit") == 4  # the first, then one per mismatched poll


def test_a_mismatch_cut_by_a_read_starts_its_grace_again() -> None:
    nv = driver_fake(loaded=True)
    clock = Clock()
    source = NvmlGpuSource(nv, wait_for_driver=True, mismatch_grace_seconds=60, monotonic=clock)
    source.open()
    source.poll()

    def poll_at(version: str) -> str:
        """One poll 40 s on, the driver at ``version``; a driver read before goes
        away first (NVML released), as an upgrade does."""
        if source.driver_loaded:
            nv.driver["loaded"] = False
            source.poll()
        nv.driver.update(loaded=True, version=version)
        clock.now += 40
        try:
            return f"read {len(source.poll().devices)}"
        except CollectorError:
            return "mismatch"

    old, new = "550.54.15", "570.86.10"
    seen = [poll_at(v) for v in (new, new, old, new, new)]
    assert seen == ["mismatch", "mismatch", "read 2", "mismatch", "mismatch"]
    # 4 mismatching polls over 160 s, but the last run is 2 polls and 40 s long
    assert source.restart_reason() is None
    assert poll_at(new) == "mismatch" and source.restart_reason() is not None


def test_a_mismatch_on_every_device_counts_as_one() -> None:
    """Initialised before the upgrade, each device call answering the mismatch: a
    poll of two such devices is one poll of the grace, not two, so the restart is
    asked for at the third poll, not before."""
    mismatch = {"nvmlDeviceGetHandleByIndex": real.NVML_ERROR_LIB_RM_VERSION_MISMATCH}
    nv = fake_nvml(
        [
            Dev(U0, b"Tesla T4", index=0, errors=dict(mismatch)),
            Dev(U1, b"Tesla T4", index=1, errors=dict(mismatch)),
        ]
    )
    clock = Clock()
    source = NvmlGpuSource(nv, mismatch_grace_seconds=0, monotonic=clock)
    source.open()
    poll = source.poll()  # the devices' series stay, unread, with their own reason
    assert [(f.index, f.reason) for f in poll.failures] == [
        (0, "version_mismatch"),
        (1, "version_mismatch"),
    ]
    assert source.restart_reason() is None
    source.poll()
    assert source.restart_reason() is None
    source.poll()
    assert source.restart_reason() is not None


def test_a_mismatch_after_the_gpus_were_read_asks_for_a_restart() -> None:
    """The driver upgraded after the GPUs were read: every device call answers the
    mismatch, and each device is kept as last read (its series, its holders' rows).
    Kept devices are none read: the grace runs, and the restart is asked for after
    it; one device read again withdraws it."""
    devs = [Dev(U0, b"Tesla T4", index=0), Dev(U1, b"Tesla T4", index=1)]
    clock = Clock()
    source = NvmlGpuSource(fake_nvml(devs), mismatch_grace_seconds=60, monotonic=clock)
    source.open()
    assert [d.uuid for d in source.poll().devices] == [U0, U1]
    for dev in devs:
        dev.errors["nvmlDeviceGetHandleByIndex"] = real.NVML_ERROR_LIB_RM_VERSION_MISMATCH
    for _ in range(2):  # 2 polls over 60 s: within the grace
        clock.now += 30
        poll = source.poll()
        assert [d.uuid for d in poll.devices] == [U0, U1]  # kept, unread
        assert {f.reason for f in poll.failures} == {"version_mismatch"}
        assert source.restart_reason() is None
    clock.now += 30
    source.poll()
    reason = source.restart_reason()
    assert reason is not None and reason.startswith("NVML/RM version mismatch for 60s")
    del devs[1].errors["nvmlDeviceGetHandleByIndex"]  # one device read: no mismatch run
    source.poll()
    assert source.restart_reason() is None


def test_a_mismatch_on_some_devices_only_asks_for_no_restart() -> None:
    """One device answering the mismatch beside one read is a device's answer, not
    the library outdated: no restart, however long it lasts."""
    bad = Dev(U1, b"Tesla T4", index=1)
    clock = Clock()
    source = NvmlGpuSource(
        fake_nvml([Dev(U0, b"Tesla T4", index=0), bad]), mismatch_grace_seconds=0, monotonic=clock
    )
    source.poll()
    bad.errors["nvmlDeviceGetHandleByIndex"] = real.NVML_ERROR_LIB_RM_VERSION_MISMATCH
    for _ in range(5):
        clock.now += 60
        assert [f.index for f in source.poll().failures] == [1]
    assert source.restart_reason() is None


def test_open_with_a_version_mismatch_waits_with_wait_for_driver() -> None:
    nv = fake_nvml([], init_error=real.NVML_ERROR_LIB_RM_VERSION_MISMATCH)
    with pytest.raises(NvmlUnavailable, match="version mismatch"):
        NvmlGpuSource(nv).open()
    NvmlGpuSource(nv, wait_for_driver=True).open()  # no exception: the polls decide


def test_real_exporter_fails_healthz_after_a_driver_upgrade(gpu_collector) -> None:
    """The whole exporter: the driver goes away and comes back upgraded; /healthz
    answers 503 naming the mismatch once its grace has passed, so the liveness probe
    (charts/gpu-eta, manifests/base: /healthz) has the kubelet restart the container,
    while /metrics still answers."""
    import requests

    from gpu_eta.launch.prometheus import free_port
    from tests.support.inprocess import main_in_thread, scrape_until

    nv = driver_fake(loaded=True)
    gpu_collector.append(nv)
    port = free_port()
    with main_in_thread(_exporter_args(port, "--nvml.wait-for-driver")) as result:
        good = scrape_until(port, 'gpu_eta_gpu_read_success{UUID="' + U0)
        assert _by_uuid(good, "gpu_eta_gpu_read_success") == {U0: 1.0, U1: 1.0}
        health = f"http://127.0.0.1:{port}/healthz"
        assert requests.get(health, timeout=5).text == "ok\n"
        nv.driver.update(loaded=False)
        scrape_until(
            port, 'gpu_eta_gpu_read_success{UUID="' + U0 + '",gpu="0",node="gpu-node-1"} 0.0'
        )
        nv.driver.update(loaded=True, version="570.86.10")
        deadline = time.monotonic() + 30
        answer = requests.get(health, timeout=5)
        while answer.status_code == 200 and time.monotonic() < deadline:
            time.sleep(0.1)
            answer = requests.get(health, timeout=5)
        assert answer.status_code == 503
        assert answer.text.startswith("NVML/RM version mismatch for "), answer.text
        assert "only a restart loads the new one" in answer.text
        text = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
        assert 'gpu_eta_exporter_collector_success{collector="gpu",node="gpu-node-1"} 0.0' in text
        assert result == []


def _slow_first_init(nv: types.ModuleType, clock: Clock, code: int) -> None:
    """The driver booting: the first ``nvmlInit`` answers ``code`` 30 s on (past a
    10 s poll timeout), every later one is the driver's own (ready)."""
    init, calls = nv.nvmlInit, []

    def slow() -> None:
        calls.append(clock.now)
        if len(calls) == 1:
            nv.calls.append("nvmlInit")
            clock.now += 30
            raise real.NVMLError(code)
        init()

    nv.nvmlInit = slow


@pytest.mark.parametrize("code", [real.NVML_ERROR_UNKNOWN, real.NVML_ERROR_NO_PERMISSION])
def test_a_first_nvmlinit_failing_past_the_poll_timeout_is_asked_again(code, caplog) -> None:
    """A node whose driver loads slowly at boot (with ``--nvml.wait-for-driver``: UNKNOWN,
    or NO_PERMISSION before udev fixes the device nodes): the first ``nvmlInit`` fails
    after the scheduler gave its poll up. Its failure is logged once, and the next poll
    asks NVML again and reads the GPUs: a failure answered that late ends no start, so
    it is no reason to stop asking (latched, the GPUs stayed unread until the pod was
    deleted by hand, /healthz ok)."""
    nv = driver_fake(loaded=True)
    clock = Clock()
    _slow_first_init(nv, clock, code)
    source = NvmlGpuSource(nv, wait_for_driver=True, monotonic=clock, poll_timeout_seconds=10)
    caplog.set_level("WARNING")
    with pytest.raises(CollectorError, match="NVML initialisation failed"):
        source.poll()
    clock.now += 100
    assert {d.uuid for d in source.poll().devices} == {U0, U1}
    assert nv.calls.count("nvmlInit") == 2
    assert source.startup_error() is None  # answered too late to end the start
    late = [r for r in caplog.records if "collection timeout" in r.getMessage()]
    assert [r.levelname for r in late] == ["ERROR"], caplog.text
    assert "asked again at each poll" in late[0].getMessage()


def test_a_first_mismatch_past_the_poll_timeout_still_asks_for_a_restart() -> None:
    """Without ``--nvml.wait-for-driver``, a version mismatch (the driver upgraded at
    boot) answered past the poll timeout: later polls ask NVML again, and a mismatch
    that lasts past its grace asks for the restart (``restart_reason``, /healthz)."""
    nv = driver_fake(loaded=True)
    nv.driver["version"] = "570.86.10"  # the library is the old one: every init mismatches
    clock = Clock()
    init = nv.nvmlInit

    def slow_once() -> None:
        if not nv.calls.count("nvmlInit"):
            clock.now += 30
        init()

    nv.nvmlInit = slow_once
    source = NvmlGpuSource(nv, mismatch_grace_seconds=60, monotonic=clock, poll_timeout_seconds=10)
    for _ in range(3):
        with pytest.raises(CollectorError, match="version mismatch"):
            source.poll()
        clock.now += 30
    assert nv.calls.count("nvmlInit") == 3
    reason = source.restart_reason()
    assert reason is not None and reason.startswith("NVML/RM version mismatch")
    assert source.startup_error() is None
