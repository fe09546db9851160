"""Simulated backend: readings over time, lifetimes, reload on change, determinism."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from gpu_eta.exporter import simulated_node
from gpu_eta.exporter.scenario import ScenarioError
from gpu_eta.exporter.simulated_node import SimulatedNode
from tests.support.clock import Clock

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "scenarios" / "small.yaml"
GIB = 2**30


def _node(tmp_path: Path, at: float) -> tuple[SimulatedNode, Clock, Path]:
    path = tmp_path / "scenario.yaml"
    shutil.copy(FIXTURE, path)
    clock = Clock(at)
    return SimulatedNode(path, clock=clock), clock, path


def test_devices_processes_and_mig(tmp_path: Path) -> None:
    node, _, _ = _node(tmp_path, 1000 + 60)  # 60 s after the anchor
    poll = node.gpus.poll()
    by_key = {(d.index, d.gpu_instance_id): d for d in poll.devices}
    assert set(by_key) == {(0, None), (1, None), (2, 1), (2, 2)}
    assert by_key[(0, None)].utilization_ratio == 0.9
    assert by_key[(0, None)].memory_used_bytes == 8 * GIB
    # time-sliced GPU: sum of its two running processes (the idle holder runs none)
    assert by_key[(1, None)].utilization_ratio == pytest.approx(0.75)
    assert by_key[(1, None)].memory_used_bytes == 3 * GIB
    mig = by_key[(2, 2)]
    assert mig.mig_uuids == ("MIG-aaaaaaaa-0000-0000-0000-000000000002",)
    assert mig.memory_total_bytes == 20 * GIB
    assert mig.uuid == "GPU-22222222-2222-2222-2222-222222222222"
    # NVML measures no utilisation under MIG: neither the instance's nor its processes'
    # (the real collector gets NOT_SUPPORTED and reports None), however busy the profile
    assert mig.utilization_ratio is None and by_key[(2, 1)].utilization_ratio is None
    assert mig.memory_used_bytes == 10 * GIB
    on_mig = [s for s in poll.processes if s.gpu_instance_id is not None]
    assert on_mig and all(s.utilization_ratio is None for s in on_mig)
    assert all(s.utilization_ratio is not None for s in poll.processes if s.gpu_instance_id is None)
    assert {s.pid for s in poll.processes} == {101, 102, 103, 104}
    assert poll.failures == ()
    assert poll.driver_version == "550.54.15"


def test_pod_lifetimes(tmp_path: Path) -> None:
    node, clock, _ = _node(tmp_path, 1000 + 10)
    names = {p.name for p in node.pods.poll()}
    assert "train-a" in names and "late" not in names
    clock.now = 1000 + 150
    names = {p.name for p in node.pods.poll()}
    assert "train-a" not in names and "late" in names
    assert 101 not in {s.pid for s in node.gpus.poll().processes}
    assert all(a.pod != "train-a" for a in node.allocations.poll())


def test_pod_meta_and_by_ip(tmp_path: Path) -> None:
    node, _, _ = _node(tmp_path, 1000 + 10)
    pod = node.pods.by_ip("127.0.0.11")
    assert pod is not None and pod.name == "train-a"
    assert pod.start_timestamp == 1000
    assert pod.deadline_timestamp == 1050
    assert node.pods.by_ip("127.0.0.99") is None
    refs = node.processes.resolve([101, 999])
    assert set(refs) == {101}
    assert refs[101].container_id == pod.container_ids["trainer"]
    assert refs[101].pod_uid == pod.uid


def test_allocations_use_kubelet_id_forms(tmp_path: Path) -> None:
    node, _, _ = _node(tmp_path, 1000 + 60)
    allocs = {(a.pod, a.device_id, a.resource_name) for a in node.allocations.poll()}
    assert (
        "idle-holder",
        "GPU-11111111-1111-1111-1111-111111111111::1",
        "nvidia.com/gpu",
    ) in allocs
    assert (
        "mig-user",
        "MIG-aaaaaaaa-0000-0000-0000-000000000002",
        "nvidia.com/mig-3g.20gb",
    ) in allocs
    assert ("train-a", "0", "nvidia.com/gpu") in allocs
    assert len({a for a in allocs if "GPU-1111" in a[1]}) == 3


def test_host_memory_follows_profile_and_pod_filter(tmp_path: Path) -> None:
    node, clock, _ = _node(tmp_path, 1000 + 5)
    pods = node.pods.poll()
    mem = node.host_memory.poll(pods)
    assert [(m.pod, m.working_set_bytes, m.limit_bytes) for m in mem] == [("train-a", GIB, 4 * GIB)]
    clock.now = 1000 + 20
    assert node.host_memory.poll(pods)[0].working_set_bytes == 2 * GIB
    assert node.host_memory.poll(()) == ()


def test_failure_window_reports_device_failure(tmp_path: Path) -> None:
    node, _, _ = _node(tmp_path, 1000 + 550)
    poll = node.gpus.poll()
    assert [(f.index, f.reason) for f in poll.failures] == [(2, "gpu_lost")]
    assert all(d.index != 2 for d in poll.devices)
    assert 104 not in {s.pid for s in poll.processes}


def test_reload_on_change_and_keep_previous_on_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    node, _, path = _node(tmp_path, 1000 + 60)
    assert len(node.pods.poll()) == 5
    text = path.read_text()
    # drop the last pod (mig-user) and bump mtime so the change is seen even within 1 ns
    path.write_text(text[: text.index("  - namespace: ml\n    name: mig-user")])
    os.utime(path, ns=(1, 2))
    assert len(node.pods.poll()) == 4
    path.write_text("pods: [{name: Bad_Name}]\n")
    os.utime(path, ns=(3, 4))
    with caplog.at_level("ERROR"):
        assert len(node.pods.poll()) == 4
        assert len(node.pods.poll()) == 4
    errors = [r for r in caplog.records if "scenario reload failed" in r.getMessage()]
    assert len(errors) == 1, "logged once per state change"
    path.unlink()
    assert len(node.pods.poll()) == 4


def test_a_reload_failing_in_any_way_keeps_the_previous_scenario_and_retries(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whatever the failure, the previous scenario stays, the failure is logged with the
    documented line, and the file is read again later (its stamp is not taken as seen)."""
    node, _, path = _node(tmp_path, 1000 + 60)
    assert len(node.pods.poll()) == 5
    path.write_text("pods: [{name: a, start_seconds: 1" + "0" * 400 + ", containers: [{name: c}]}]")
    os.utime(path, ns=(1, 2))
    with caplog.at_level("ERROR"):
        assert len(node.pods.poll()) == 5
    errors = [r.getMessage() for r in caplog.records]
    assert any("scenario reload failed, keeping the previous one" in m for m in errors), errors
    caplog.clear()

    def boom(_path: Path) -> None:
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(simulated_node, "load_scenario", boom)
    path.write_text("gpus: [{}]\npods: [{name: a, containers: [{name: c}]}]\n")
    os.utime(path, ns=(3, 4))
    with caplog.at_level("ERROR"):
        assert len(node.pods.poll()) == 5
    errors = [r.getMessage() for r in caplog.records]
    assert any("scenario reload failed" in m and "disk on fire" in m for m in errors), errors
    monkeypatch.undo()
    # the same file, unchanged since the failure, is read again and now loads
    assert len(node.pods.poll()) == 1


def test_anchor_kept_across_reloads_without_start_timestamp(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(
        "gpus: [{index: 0}]\npods: [{name: a, start_seconds: 10, containers: [{name: c}]}]\n"
    )
    clock = Clock(5000)
    node = SimulatedNode(path, clock=clock)
    assert node.pods.poll() == ()
    clock.now = 5010
    assert node.pods.poll()[0].start_timestamp == 5010
    path.write_text(path.read_text() + "# touched\n")
    os.utime(path, ns=(7, 8))
    clock.now = 9000
    assert node.pods.poll()[0].start_timestamp == 5010


def test_same_second_same_readings(tmp_path: Path) -> None:
    a = SimulatedNode(None, clock=Clock(1_700_000_000.2))
    b = SimulatedNode(None, clock=Clock(1_700_000_000.2))
    assert a.gpus.poll() == b.gpus.poll()


def test_invalid_initial_file_raises(tmp_path: Path) -> None:
    path = tmp_path / "x.yaml"
    path.write_text("version: 9\n")
    with pytest.raises(ScenarioError, match="version"):
        SimulatedNode(path)


# --- by_ip: a per-scenario index, pods appearing and leaving over time ---------------

IP_REUSE = """\
version: 1
node: n
start_timestamp: 1000
gpus: [{index: 0}]
pods:
  - {name: first, ip: 10.0.0.1, start_seconds: 0, end_seconds: 100, containers: [{name: c}]}
  - {name: second, ip: 10.0.0.1, start_seconds: 100, end_seconds: 200, containers: [{name: c}]}
  - {name: overlap, ip: 10.0.0.1, start_seconds: 150, containers: [{name: c}]}
  - {name: hostnet, ip: 10.0.0.2, host_network: true, containers: [{name: c}]}
  - {name: later, ip: 10.0.0.3, start_seconds: 50, containers: [{name: c}]}
  - {name: noip, containers: [{name: c}]}
"""


def _brute_force(node: SimulatedNode, ip: str) -> str | None:
    """What by_ip answered before the index: scan every present pod, first match wins."""
    for pod in node.pods.poll():
        if pod.ip == ip and not pod.host_network:
            return pod.name
    return None


def test_by_ip_follows_lifetimes_and_ip_reuse(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(IP_REUSE)
    clock = Clock(990)
    node = SimulatedNode(path, clock=clock)
    want = {
        990: (None, None),
        1000: ("first", None),
        1049.999: ("first", None),
        1050: ("first", "later"),
        1099.999: ("first", "later"),
        1100: ("second", "later"),
        1150: ("second", "later"),  # overlap starts too: the first in scenario order wins
        1199.999: ("second", "later"),
        1200: ("overlap", "later"),
        5000: ("overlap", "later"),
    }
    for now, (on_1, on_3) in want.items():
        clock.now = now
        got = tuple(node.pods.by_ip(ip) for ip in ("10.0.0.1", "10.0.0.3"))
        assert tuple(p and p.name for p in got) == (on_1, on_3), now
        assert node.pods.by_ip("10.0.0.2") is None, "host-network pods own no IP"
        assert node.pods.by_ip("10.0.0.9") is None
        for ip in ("10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.9"):
            found = node.pods.by_ip(ip)
            assert (found.name if found else None) == _brute_force(node, ip)
    assert node.pods.index_builds == 1, "time passing never rebuilds the index"
    # a pod found by IP is the same record poll() returns
    assert node.pods.by_ip("10.0.0.3") in node.pods.poll()


def test_by_ip_index_is_rebuilt_on_reload_only(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(IP_REUSE)
    clock = Clock(1010)
    node = SimulatedNode(path, clock=clock)
    assert node.pods.by_ip("10.0.0.1").name == "first"
    for _ in range(50):
        node.pods.by_ip("10.0.0.1")
        node.pods.poll()
    assert node.pods.index_builds == 1
    # the demo rewrites the file: first moves to another IP, a new pod takes 10.0.0.1
    path.write_text(
        IP_REUSE.replace("{name: first, ip: 10.0.0.1", "{name: first, ip: 10.0.0.7").replace(
            "{name: noip,", "{name: newcomer, ip: 10.0.0.1,"
        )
    )
    os.utime(path, ns=(11, 12))
    assert node.pods.by_ip("10.0.0.7").name == "first"
    assert node.pods.by_ip("10.0.0.1").name == "newcomer"
    assert node.pods.index_builds == 2
    # an invalid rewrite keeps the previous scenario, and so the index
    path.write_text("pods: [{name: Bad_Name}]\n")
    os.utime(path, ns=(13, 14))
    assert node.pods.by_ip("10.0.0.1").name == "newcomer"
    assert node.pods.index_builds == 2


def test_by_ip_agrees_with_a_full_scan_on_the_fixture(tmp_path: Path) -> None:
    node, clock, _ = _node(tmp_path, 900)
    ips = [f"127.0.0.{i}" for i in range(10, 17)]
    for now in range(900, 1700, 7):
        clock.now = now
        for ip in ips:
            found = node.pods.by_ip(ip)
            assert (found.name if found else None) == _brute_force(node, ip), (now, ip)
