"""PodResourcesSource against a real gRPC server speaking the kubelet proto on a unix socket."""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpu_eta.common.gpu_resources import KSM_GPU_RESOURCES as GPU_RESOURCES
from gpu_eta.common.k8s_names import ksm_label
from gpu_eta.exporter._proto import api_pb2
from gpu_eta.exporter.attribution import attribute, unresolved_allocations
from gpu_eta.exporter.collectors import CollectorError
from gpu_eta.exporter.collectors.podresources import (
    MAX_ALLOCATIONS,
    PodResourcesSource,
    allocations_from_response,
    is_gpu_resource,
)
from gpu_eta.exporter.exposition import SnapshotExposition
from gpu_eta.exporter.readings import (
    Allocation,
    ContainerRef,
    DeviceReading,
    GpuPoll,
    PodMeta,
    ProcessSample,
)
from gpu_eta.exporter.scheduler import Scheduler, Sources
from gpu_eta.exporter.snapshot import Snapshot, SnapshotHolder
from tests.support.doc_signatures import code_defaults, documented_defaults
from tests.support.podresources_server import PodResourcesServer

UUID0 = "GPU-0a1b2c3d-0000-4000-8000-000000000000"
UUID1 = "GPU-0a1b2c3d-1111-4000-8000-000000000001"
MIG = "MIG-5c3e7d51-2222-5a0b-9e6c-000000000002"

ALLOCATIONS = {
    ("ml", "train-a"): {"trainer": [("nvidia.com/gpu", [UUID0])]},
    ("ml", "train-b"): {"trainer": [("nvidia.com/gpu", ["3"])], "sidecar": []},
    ("hub", "jupyter-ann"): {"notebook": [("nvidia.com/mig-1g.10gb", [MIG])]},
    ("hub", "jupyter-bob"): {
        "notebook": [("nvidia.com/gpu.shared", [f"{UUID1}::0"]), ("cpu.example/x", ["c0"])]
    },
    ("kube-system", "other"): {"c": [("example.com/fpga", ["fpga0"])]},
}


@pytest.fixture
def sock_dir() -> Iterator[Path]:
    # unix socket paths are limited to ~107 bytes: keep the directory short.
    path = Path(tempfile.mkdtemp(prefix="pr-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def server(sock_dir: Path) -> Iterator[PodResourcesServer]:
    srv = PodResourcesServer(str(sock_dir / "kubelet.sock"), ALLOCATIONS)
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


def test_list_returns_all_four_device_id_forms(server: PodResourcesServer) -> None:
    source = PodResourcesSource(server.socket_path)
    try:
        got = set(source.poll())
    finally:
        source.close()
    assert got == {
        Allocation("ml", "train-a", "trainer", "nvidia.com/gpu", UUID0),
        Allocation("ml", "train-b", "trainer", "nvidia.com/gpu", "3"),
        Allocation("hub", "jupyter-ann", "notebook", "nvidia.com/mig-1g.10gb", MIG),
        Allocation("hub", "jupyter-bob", "notebook", "nvidia.com/gpu.shared", f"{UUID1}::0"),
    }


def _poll(server: PodResourcesServer, extra: tuple[str, ...] = ()) -> tuple[Allocation, ...]:
    source = PodResourcesSource(server.socket_path, extra_gpu_resources=extra)
    try:
        return source.poll()
    finally:
        source.close()


def test_extra_gpu_resources_are_kept_beside_the_gpu_ones(server: PodResourcesServer) -> None:
    got = set(_poll(server, ("example.com/fpga",)))
    assert Allocation("kube-system", "other", "c", "example.com/fpga", "fpga0") in got
    assert len(got) == 5


# A GPUDirect RDMA node: NVIDIA's Network Operator advertises its devices under
# nvidia.com/ too. The RDMA shared device plugin's ids are "0", "1"... (GPU indexes'
# form); the SR-IOV and host-device plugins' are PCI addresses.
UUID_A = "GPU-aaaaaaaa-0000-4000-8000-000000000000"
UUID_B = "GPU-bbbbbbbb-1111-4000-8000-000000000001"
RDMA_NODE = {
    ("ml", "trainer-a"): {"main": [("nvidia.com/gpu", [UUID_A])]},
    ("ml", "trainer-b"): {
        "main": [("nvidia.com/gpu", [UUID_B]), ("nvidia.com/rdma_shared_device_a", ["0"])]
    },
    ("net", "nic-only"): {"main": [("nvidia.com/hostdev", ["0000:3b:00.2"])]},
    ("net", "vf"): {"main": [("nvidia.com/sriov_netdevice", ["0000:3b:00.3"])]},
}
RDMA_GPUS = (
    DeviceReading(0, UUID_A, "A100", 0.9, 1, 2),
    DeviceReading(1, UUID_B, "A100", 0.9, 1, 2),
)
RDMA_PODS = (
    PodMeta("ml", "trainer-a", "u1", container_ids={"main": "a" * 64}),
    PodMeta("ml", "trainer-b", "u2", container_ids={"main": "b" * 64}),
    PodMeta("net", "nic-only", "u3"),
    PodMeta("net", "vf", "u4"),
)


def test_an_rdma_device_id_does_not_make_its_pod_a_gpu_holder(
    server: PodResourcesServer,
) -> None:
    """trainer-b holds GPU 1 and RDMA device "0": it must not be shown holding GPU 0
    (GPU 0 would look time-sliced between the two trainers)."""
    server.set_allocations(RDMA_NODE)
    gpu = GpuPoll(devices=RDMA_GPUS)
    rows = attribute(gpu, _poll(server), RDMA_PODS, None)
    assert {(r.index, r.pod) for r in rows if r.allocated} == {(0, "trainer-a"), (1, "trainer-b")}


def test_an_rdma_device_id_makes_no_idle_holder_beside_the_process_data(
    server: PodResourcesServer,
) -> None:
    """With processes resolved to containers, a made-up holder of GPU 0 is a row at
    0 % (it runs nothing there): a false GpuEtaGpuAllocatedIdle."""
    server.set_allocations(RDMA_NODE)
    gpu = GpuPoll(
        devices=RDMA_GPUS,
        processes=(
            ProcessSample(10, UUID_A, None, 5, 0.9),
            ProcessSample(11, UUID_B, None, 5, 0.9),
        ),
    )
    containers = {10: ContainerRef("a" * 64, "u1"), 11: ContainerRef("b" * 64, "u2")}
    rows = attribute(gpu, _poll(server), RDMA_PODS, containers)
    assert [(r.index, r.pod, r.utilization_ratio) for r in rows] == [
        (0, "trainer-a", 0.9),
        (1, "trainer-b", 0.9),
    ]


def test_network_operator_pci_devices_are_not_unresolved_gpu_allocations(
    server: PodResourcesServer,
) -> None:
    """hostdev and SR-IOV ids are PCI addresses: counted as GPU allocations they were
    unresolved for good, and GpuEtaExporterUnresolvedAllocations fired on every RDMA node."""
    server.set_allocations(RDMA_NODE)
    allocations = _poll(server)
    assert {a.resource_name for a in allocations} == {"nvidia.com/gpu"}
    assert unresolved_allocations(GpuPoll(devices=RDMA_GPUS), allocations) == ()


def test_a_renamed_time_slicing_resource_counts_only_when_named(
    server: PodResourcesServer,
) -> None:
    """A time-slicing config's ``rename: nvidia.com/a100-shared`` is a name of the
    site's own: a GPU only with --kubelet.gpu-resource, like dcgm-exporter's
    NvidiaResourceNames."""
    server.set_allocations(
        {("hub", "nb"): {"c": [("nvidia.com/a100-shared", [f"{UUID_A}::3"])]}, **RDMA_NODE}
    )
    assert [a.pod for a in _poll(server) if a.pod == "nb"] == []
    named = _poll(server, ("nvidia.com/a100-shared",))
    assert Allocation("hub", "nb", "c", "nvidia.com/a100-shared", f"{UUID_A}::3") in named
    pods = (*RDMA_PODS, PodMeta("hub", "nb", "u5"))
    rows = attribute(GpuPoll(devices=RDMA_GPUS), named, pods, None)
    assert {(r.index, r.pod) for r in rows} == {(0, "trainer-a"), (0, "nb"), (1, "trainer-b")}


def test_the_flag_reaches_the_source(server: PodResourcesServer) -> None:
    """``--kubelet.gpu-resource`` is what the collector built from the config keeps."""
    from gpu_eta.exporter.collectors.podresources import build
    from gpu_eta.exporter.collectors.registry import BuildContext
    from gpu_eta.exporter.main import parse_config

    server.set_allocations({("hub", "nb"): {"c": [("nvidia.com/a100-shared", [f"{UUID_A}::3"])]}})
    for argv, pods in (([], []), (["--kubelet.gpu-resource", "nvidia.com/a100-shared"], ["nb"])):
        cfg = parse_config(["--kubelet.socket", server.socket_path, *argv], env={})
        ctx = BuildContext(cfg=cfg, node="n")
        source = build(ctx)
        try:
            assert [a.pod for a in source.poll()] == pods
        finally:
            for close in ctx.closers:
                close()


def test_the_list_deadline_is_the_collection_timeout(
    server: PodResourcesServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The List is given up when the scheduler stops waiting for it
    (``--collection.timeout``), not later: with a fixed 5 s deadline beside the
    default 4 s timeout, a List of 4-5 s was read to its end only to be thrown away,
    the kubelet and the poll's thread kept busy into the next cycle (which then fails
    as "still running ... from an earlier cycle"). A List answered within the timeout
    is read. The kubelet here is the real gRPC server, slowed in its List handler."""
    from gpu_eta.exporter.collectors.podresources import build
    from gpu_eta.exporter.collectors.registry import BuildContext
    from gpu_eta.exporter.main import parse_config

    answer = server.response
    # a List of 30 s: read to its end, or to any deadline of 5 s, it is far past the
    # 4 s bound on the 1 s timeout however loaded the machine; cut short at the end
    delay_seconds = [30.0]
    done = threading.Event()

    def slow_response():  # the server's List handler calls it for its answer
        done.wait(delay_seconds[0])
        return answer()

    monkeypatch.setattr(server, "response", slow_response)
    argv = ["--kubelet.socket", server.socket_path, "--collection.timeout", "1s"]
    ctx = BuildContext(cfg=parse_config(argv, env={}), node="n")
    source = build(ctx)
    try:
        started = time.monotonic()
        with pytest.raises(CollectorError, match="DEADLINE_EXCEEDED"):
            source.poll()
        assert time.monotonic() - started < 4.0  # 1 s, not the List's 30 s
        delay_seconds[0] = 0.3
        assert len(source.poll()) == 4
    finally:
        done.set()
        for close in ctx.closers:
            close()


@pytest.mark.parametrize(
    ("name", "gpu"),
    [
        ("nvidia.com/gpu", True),
        ("nvidia.com/gpu.shared", True),  # time-slicing renameByDefault
        ("nvidia.com/mig-1g.10gb", True),
        ("nvidia.com/mig-1g.10gb.shared", True),
        ("nvidia.com/rdma_shared_device_a", False),
        ("nvidia.com/hostdev", False),
        ("nvidia.com/sriov_netdevice", False),
        ("nvidia.com/gpu-a100", False),  # a rename: only when named
        ("nvidia.com/gpu.product", False),  # a node label, never a resource
        ("amd.com/gpu", False),
    ],
)
def test_gpu_resources_match_the_forecasters(name: str, gpu: bool) -> None:
    """The resources the forecaster, top, rules and dashboards count as GPUs
    (kube-state-metrics spelling ``nvidia_com_gpu|nvidia_com_gpu_shared|nvidia_com_mig_.+``)."""
    assert is_gpu_resource(name) is gpu
    assert bool(re.fullmatch(GPU_RESOURCES, ksm_label(name))) is gpu


def test_the_documented_signature_has_the_codes_defaults() -> None:
    """docs/attribution.md shows ``PodResourcesSource``'s defaults: the ones it has."""
    assert documented_defaults("attribution.md", "PodResourcesSource") == code_defaults(
        PodResourcesSource
    )


def test_missing_socket_names_the_path(sock_dir: Path) -> None:
    path = str(sock_dir / "absent.sock")
    with pytest.raises(CollectorError, match=r"absent\.sock"):
        PodResourcesSource(path).poll()


def test_a_regular_file_is_not_a_socket(sock_dir: Path) -> None:
    path = sock_dir / "kubelet.sock"
    path.write_text("not a socket")
    with pytest.raises(CollectorError, match="not a socket"):
        PodResourcesSource(str(path)).poll()


def _poll_until_ok(source: PodResourcesSource, timeout_seconds: float = 30.0):
    deadline = time.monotonic() + timeout_seconds
    while True:
        try:
            return source.poll()
        except CollectorError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def test_survives_kubelet_restart_with_recreated_socket(server: PodResourcesServer) -> None:
    source = PodResourcesSource(server.socket_path, timeout_seconds=2.0)
    try:
        assert len(source.poll()) == 4
        server.stop()
        with pytest.raises(CollectorError, match="does not exist"):
            source.poll()
        # the kubelet comes back with different allocations on a new socket file
        server.set_allocations({("ml", "train-c"): {"t": [("nvidia.com/gpu", [UUID1])]}})
        server.start()
        assert _poll_until_ok(source) == (
            Allocation("ml", "train-c", "t", "nvidia.com/gpu", UUID1),
        )
    finally:
        source.close()


def test_dead_server_with_socket_left_behind_is_a_collector_error(
    server: PodResourcesServer,
) -> None:
    source = PodResourcesSource(server.socket_path, timeout_seconds=1.0)
    try:
        assert source.poll()
        # a crashed kubelet leaves the socket file with nobody listening
        server._server.stop(grace=None).wait(10)
        server._server = None
        import socket as _socket

        if not Path(server.socket_path).exists():
            s = _socket.socket(_socket.AF_UNIX)
            s.bind(server.socket_path)
            s.close()
        with pytest.raises(CollectorError, match=r"List on .* failed"):
            source.poll()
        server.start()
        assert len(_poll_until_ok(source)) == 4
    finally:
        source.close()


def test_oversized_and_empty_entries_are_skipped(server: PodResourcesServer) -> None:
    server.set_allocations(
        {
            ("ml", "x" * 300): {"c": [("nvidia.com/gpu", [UUID0])]},
            ("ml", "ok"): {"c": [("nvidia.com/gpu", ["", "G" * 300, UUID0])]},
        }
    )
    source = PodResourcesSource(server.socket_path)
    try:
        assert source.poll() == (Allocation("ml", "ok", "c", "nvidia.com/gpu", UUID0),)
    finally:
        source.close()


BAD_ENTRIES = {
    ("ml", "x" * 300): {"c": [("nvidia.com/gpu", [UUID0, UUID1])]},  # 2 ids of a bad pod
    ("ml", "ok"): {
        "": [("nvidia.com/gpu", [UUID1])],  # a container without a name
        "c": [("nvidia.com/gpu", ["", "G" * 300, UUID0]), ("example.com/fpga", [""])],
    },
}


def test_left_out_entries_are_counted_and_logged_once(
    server: PodResourcesServer, caplog: pytest.LogCaptureFixture
) -> None:
    """Each GPU device id the List names that is left out is counted by reason (the
    other resources' ids are no GPU's: not counted), per List, and logged once, when
    it starts and when it ends, not every poll."""
    server.set_allocations(BAD_ENTRIES)
    source = PodResourcesSource(server.socket_path)
    caplog.set_level(logging.INFO, logger="gpu_eta.exporter.collectors.podresources")
    try:
        for _ in range(3):
            assert source.poll() == (Allocation("ml", "ok", "c", "nvidia.com/gpu", UUID0),)
            assert source.counts() == {"invalid": 5, "over_limit": 0}
        warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1, caplog.text
        assert "5 GPU allocations" in warnings[0].getMessage()
        assert "x" * 300 not in caplog.text  # named, not echoed whole
        server.set_allocations(ALLOCATIONS)
        assert len(source.poll()) == 4
        assert source.counts() == {"invalid": 0, "over_limit": 0}
        assert len([r for r in caplog.records if r.levelno == logging.INFO]) == 1
    finally:
        source.close()


def test_allocations_over_the_limit_are_counted() -> None:
    """A List naming more than ``MAX_ALLOCATIONS`` GPU device ids is cut there, and the
    ids left out are counted (``over_limit``), not dropped unseen."""
    ids = [f"{UUID0}::{i}" for i in range(MAX_ALLOCATIONS + 7)]
    response = api_pb2.ListPodResourcesResponse(
        pod_resources=[
            api_pb2.PodResources(
                name="many",
                namespace="ml",
                containers=[
                    api_pb2.ContainerResources(
                        name="c",
                        devices=[
                            api_pb2.ContainerDevices(
                                resource_name="nvidia.com/gpu.shared", device_ids=ids
                            )
                        ],
                    )
                ],
            )
        ]
    )
    listing = allocations_from_response(response)
    assert len(listing.allocations) == MAX_ALLOCATIONS
    assert listing.allocations[-1].device_id == ids[MAX_ALLOCATIONS - 1]
    assert listing.skipped == {"invalid": 0, "over_limit": 7}


def test_left_out_entries_reach_metrics(server: PodResourcesServer) -> None:
    """The counts of the last List are published: the podresources source in the
    scheduler, its snapshot rendered as /metrics renders it."""
    server.set_allocations(BAD_ENTRIES)
    source = PodResourcesSource(server.socket_path)
    holder = SnapshotHolder(Snapshot(node="n1", timestamp=0))
    scheduler = Scheduler("n1", Sources(allocations=source), holder, timeout_seconds=5)
    try:
        holder.set(scheduler.collect_once())
    finally:
        source.close()
    text = SnapshotExposition(holder).exposition().decode()
    assert 'gpu_eta_exporter_allocations_skipped{node="n1",reason="invalid"} 5.0' in text
    assert 'gpu_eta_exporter_allocations_skipped{node="n1",reason="over_limit"} 0.0' in text


# -- grpc and protobuf are imported only where pod-resources is read ---------------

ROOT = Path(__file__).resolve().parents[3]

_SIMULATED_START = """
import json, sys
from gpu_eta.exporter.main import parse_config
from gpu_eta.exporter.runtime import Runtime
from gpu_eta.launch.prometheus import free_port

argv = ["--simulate", "", "--no-collector.logs", "--collection.interval", "60s"]
argv += ["--web.listen-address", f"127.0.0.1:{free_port()}"]
argv += ["--progress.listen-address", f"127.0.0.1:{free_port()}"]
runtime = Runtime(parse_config(argv, env={}), "test")
runtime.start()
try:
    statuses = {s.name: s.success for s in runtime.holder.get().collectors}
finally:
    runtime.stop()
# "google" alone is the namespace package finding google.protobuf imports: no code
loaded = sorted(m for m in sys.modules if m.startswith(("grpc", "google.")))
print(json.dumps({"podresources": statuses.get("podresources"), "loaded": loaded}))
"""


def test_a_simulated_start_imports_neither_grpc_nor_protobuf() -> None:
    """The simulated node stands in for the kubelet, so nothing reads pod-resources:
    grpc and protobuf (about 12 MB of RSS per exporter) stay unimported, while the
    podresources collector still runs (on the simulated allocations)."""
    proc = subprocess.run(
        [sys.executable, "-c", _SIMULATED_START],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.splitlines()[-1])
    assert result == {"podresources": True, "loaded": []}


_START_BLOCKED = """
import sys
sys.modules[sys.argv[1]] = None  # a module that cannot be imported
from gpu_eta.exporter.main import main
from gpu_eta.launch.prometheus import free_port

off = ["--no-collector.gpu", "--no-collector.kube", "--no-collector.progress", "--no-collector.logs"]
sys.exit(main([*off, "--kubelet.socket", sys.argv[2],
               "--web.listen-address", f"127.0.0.1:{free_port()}"]))
"""


def _start(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    """An exporter started by ``script`` (its stderr is the start-up error)."""
    return subprocess.run(
        [sys.executable, "-c", script, *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={**os.environ, "NODE_NAME": "n1"},
    )


@pytest.mark.parametrize("blocked", ["grpc", "grpc._cython.cygrpc", "google.protobuf"])
def test_without_grpc_reading_pod_resources_is_a_one_line_startup_error(
    server: PodResourcesServer, blocked: str
) -> None:
    """grpc or protobuf missing (or an import of theirs failing): the exporter that
    would read the kubelet's socket refuses to start with one line naming the flag
    that turns the collector off, not a traceback."""
    proc = _start(_START_BLOCKED, blocked, server.socket_path)
    assert proc.returncode == 1, proc.stderr
    assert re.fullmatch(
        r"gpu-eta exporter: collector podresources is not available in this build "
        r"\(gpu_eta\.exporter\.collectors\.podresources: [^\n]*\); "
        r"disable it with --no-collector\.podresources\n",
        proc.stderr,
    ), proc.stderr


_START_MISMATCHED = """
import sys, types
class Refuse:
    '''A protobuf too new for the generated stubs: their import raises TypeError.'''
    def find_spec(self, name, path=None, target=None):
        if name == "gpu_eta.exporter._proto.api_pb2":
            raise TypeError("Descriptors cannot be created directly.")
        return None
sys.meta_path.insert(0, Refuse())
from gpu_eta.exporter.main import main
from gpu_eta.launch.prometheus import free_port

off = ["--no-collector.gpu", "--no-collector.kube", "--no-collector.progress", "--no-collector.logs"]
sys.exit(main([*off, "--kubelet.socket", sys.argv[1],
               "--web.listen-address", f"127.0.0.1:{free_port()}"]))
"""


def test_stubs_a_protobuf_cannot_load_are_a_one_line_startup_error(
    server: PodResourcesServer,
) -> None:
    """A protobuf the generated stubs do not match (the most common broken protobuf)
    raises TypeError, not ImportError, as they load: that was a traceback."""
    proc = _start(_START_MISMATCHED, server.socket_path)
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    assert re.fullmatch(
        r"gpu-eta exporter: collector podresources is not available in this build "
        r"\(gpu_eta\.exporter\.collectors\.podresources: TypeError: Descriptors cannot be "
        r"created directly\.\); disable it with --no-collector\.podresources\n",
        proc.stderr,
    ), proc.stderr
