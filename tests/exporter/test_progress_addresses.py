"""Which senders the progress endpoint can hear and how their reports are keyed.

Real listeners on loopback: IPv4 pods on an IPv6 socket, IPv6 pods on the default
(empty host) address, the IPv4-only fallback, and a pod whose containers the pod
watch does not know yet.
"""

from __future__ import annotations

import errno
import json
import logging
import socket
from collections.abc import Iterator

import pytest

from gpu_eta.exporter.progress_http import ProgressListener
from gpu_eta.exporter.progress_store import ProgressStore
from gpu_eta.exporter.readings import PodMeta
from tests.support.net import has_ipv6_loopback, post_progress

POD4 = PodMeta("ml", "v4", "uid-4", ip="127.0.0.2", container_ids={"main": "c4"})
POD6 = PodMeta("ml", "v6", "uid-6", ip="::1", container_ids={"main": "c6"})
BODY = json.dumps({"epoch": 1, "epochs": 3}).encode()


def post(host: str, port: int, source: str) -> bytes:
    """One POST /progress of ``BODY`` from ``source`` to ``host:port``."""
    return post_progress(host, port, BODY, source)


def listen(host: str, store: ProgressStore | None = None) -> Iterator[ProgressListener]:
    by_ip = {POD4.ip: POD4, POD6.ip: POD6}
    lst = ProgressListener(host, 0, store or ProgressStore(), by_ip.get, lambda: [POD4, POD6])
    lst.start()
    try:
        yield lst
    finally:
        lst.stop()


def test_peer_addresses_take_the_form_the_pod_cache_holds():
    from gpu_eta.exporter.progress_http import peer_address

    assert peer_address("::ffff:10.1.2.3") == "10.1.2.3"
    assert peer_address("::FFFF:10.1.2.3") == "10.1.2.3"
    assert peer_address("10.1.2.3") == "10.1.2.3"
    assert peer_address("FD00:0:0::1") == "fd00::1"
    assert peer_address("not an address") == "not an address"
    assert peer_address("") == ""


def test_an_ipv4_pod_is_accepted_on_an_ipv6_socket():
    """``--progress.listen-address [::]:9843``: every IPv4 pod used to get 403."""
    if not has_ipv6_loopback():
        pytest.skip("no IPv6 on this machine")
    for lst in listen("::"):
        answer = post("127.0.0.1", lst.port, source=POD4.ip)
        assert answer.startswith(b"HTTP/1.1 200 "), answer
        assert [p.pod for p in lst.store.snapshot()] == ["v4"]


def test_the_default_address_hears_ipv4_and_ipv6_pods():
    """``:9843`` (empty host): IPv6 pods used to get connection refused."""
    if not has_ipv6_loopback():
        pytest.skip("no IPv6 on this machine: the IPv4-only path is tested below")
    for lst in listen(""):
        assert lst._server.sock.family == socket.AF_INET6
        assert post("127.0.0.1", lst.port, source=POD4.ip).startswith(b"HTTP/1.1 200 ")
        assert post("::1", lst.port, source=POD6.ip).startswith(b"HTTP/1.1 200 ")
        assert sorted(p.pod for p in lst.store.snapshot()) == ["v4", "v6"]


def test_without_ipv6_the_default_address_is_ipv4_only(monkeypatch):
    """A node without IPv6: ``socket.has_dualstack_ipv6()`` says so (what this
    machine cannot be made into for real, so that answer is replaced)."""
    monkeypatch.setattr(socket, "has_dualstack_ipv6", lambda: False)
    for lst in listen(""):
        assert lst._server.sock.family == socket.AF_INET
        assert post("127.0.0.1", lst.port, source=POD4.ip).startswith(b"HTTP/1.1 200 ")


def test_an_ipv6_socket_that_cannot_be_made_falls_back_to_ipv4(monkeypatch, caplog):
    """IPv6 announced but unusable (EAFNOSUPPORT at bind): one info line, IPv4."""
    real = socket.create_server

    def no_ipv6(address, *, family=socket.AF_INET, **kwargs):
        if family == socket.AF_INET6:
            raise OSError(errno.EAFNOSUPPORT, "Address family not supported by protocol")
        return real(address, family=family, **kwargs)

    monkeypatch.setattr(socket, "has_dualstack_ipv6", lambda: True)
    monkeypatch.setattr(socket, "create_server", no_ipv6)
    with caplog.at_level(logging.INFO, logger="gpu_eta.common.listen_socket"):
        for lst in listen(""):
            assert lst._server.sock.family == socket.AF_INET
            assert post("127.0.0.1", lst.port, source=POD4.ip).startswith(b"HTTP/1.1 200 ")
    assert "IPv4 only" in caplog.text


def test_a_port_in_use_is_an_error_not_a_fallback():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        lst = ProgressListener("", port, ProgressStore(), lambda ip: None, lambda: [])
        with pytest.raises(OSError) as err:
            lst.start()
        assert err.value.errno == errno.EADDRINUSE


# -- a pod whose containers are not known yet cannot mint store keys -----------------


def test_unchecked_container_names_file_under_one_row_per_pod():
    victim = PodMeta("team-v", "victim", "u0", ip="10.0.0.2", container_ids={"main": "c0"})
    unknown = PodMeta("team-e", "new", "u2", ip="10.0.0.4")  # no runtime ids in its status yet
    pods = {victim.ip: victim, unknown.ip: unknown}
    store = ProgressStore(max_entries=50)
    lst = ProgressListener(
        "127.0.0.1", 0, store, pods.get, lambda: list(pods.values()), burst=10**6
    )
    assert lst.handle(victim.ip, len(BODY), BODY)[0] == 200
    for i in range(200):
        body = json.dumps({"epoch": 1, "epochs": 3, "container": f"c{i}"}).encode()
        assert lst.handle(unknown.ip, len(body), body)[0] == 200
    rows = {(p.pod, p.container) for p in store.snapshot()}
    assert rows == {("victim", "main"), ("new", "")}
    # once the pod watch knows the containers, a named one is filed under its name
    known = PodMeta("team-e", "new", "u2", ip="10.0.0.4", container_ids={"a": "1", "b": "2"})
    pods[known.ip] = known
    lst._lookups.clear()
    body = json.dumps({"epoch": 1, "epochs": 3, "container": "b"}).encode()
    assert lst.handle(known.ip, len(body), body)[0] == 200
    assert ("new", "b") in {(p.pod, p.container) for p in store.snapshot()}


def test_a_container_reporting_before_its_runtime_id_keeps_one_row():
    """The spec's container names are known from the pod's creation: a report in the
    container's first second (no runtime id in the status yet) is filed under its
    name, as the later ones are: one run, not an orphan ``""`` row beside it."""
    early = PodMeta("ml", "trainer-pod", "u3", ip="10.0.0.5", containers=("sidecar", "trainer"))
    later = PodMeta(
        "ml",
        "trainer-pod",
        "u3",
        ip="10.0.0.5",
        containers=("sidecar", "trainer"),
        container_ids={"sidecar": "s1", "trainer": "t1"},
    )
    pods = {early.ip: early}
    store = ProgressStore()
    lst = ProgressListener("127.0.0.1", 0, store, pods.get, lambda: list(pods.values()))
    for epoch, pod in ((1, early), (3, later)):
        pods[pod.ip] = pod
        lst._lookups.clear()
        body = json.dumps({"epoch": epoch, "epochs": 5, "container": "trainer"}).encode()
        assert lst.handle(pod.ip, len(body), body)[0] == 200
    assert [(p.container, p.epoch) for p in store.snapshot()] == [("trainer", 3.0)]
    # a name not in the spec is not a label value: the pod's first container
    body = json.dumps({"epoch": 4, "epochs": 5, "container": "made-up"}).encode()
    assert lst.handle(later.ip, len(body), body)[0] == 200
    assert {p.container for p in store.snapshot()} == {"trainer", "sidecar"}
