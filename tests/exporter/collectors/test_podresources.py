"""PodResourcesSource against a real gRPC server speaking the kubelet proto on a unix socket."""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpu_eta.exporter.collectors import CollectorError
from gpu_eta.exporter.collectors.podresources import PodResourcesSource
from gpu_eta.exporter.readings import Allocation
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


def test_resource_prefixes_select_other_resources(server: PodResourcesServer) -> None:
    source = PodResourcesSource(server.socket_path, resource_prefixes=("example.com/",))
    try:
        assert source.poll() == (
            Allocation("kube-system", "other", "c", "example.com/fpga", "fpga0"),
        )
    finally:
        source.close()


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
