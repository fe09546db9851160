"""Metrics server over real HTTP: /metrics, /healthz, 404, render failure → 500."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest
import requests

from gpu_eta.common import metrics_http
from gpu_eta.common.metrics_http import TEXT_FORMAT, MetricsServer
from gpu_eta.exporter.exposition import SnapshotExposition
from gpu_eta.exporter.readings import DeviceReading
from gpu_eta.exporter.snapshot import Snapshot, SnapshotHolder
from tests.support.net import dribble_until_cut, has_ipv6_loopback, read_answer


@pytest.fixture
def served() -> Iterator[tuple[str, dict]]:
    holder = SnapshotHolder(
        Snapshot(node="n1", timestamp=0, devices=(DeviceReading(0, "GPU-a", "T4", 0.25, 1, 2),))
    )
    collector = SnapshotExposition(holder, version="9")
    state = {"healthy": (True, "ok"), "broken": False}

    def body() -> bytes:
        if state["broken"]:
            raise RuntimeError("boom")
        return collector.exposition()

    server = MetricsServer(
        "127.0.0.1", 0, lambda accept: (body(), TEXT_FORMAT), lambda: state["healthy"]
    )
    server.start()
    try:
        yield f"http://127.0.0.1:{server.port}", state
    finally:
        server.stop()


def test_metrics_text_format(served) -> None:
    url, _ = served
    resp = requests.get(f"{url}/metrics", timeout=10)
    assert resp.status_code == 200
    assert resp.headers["Content-Type"].startswith("text/plain; version=0.0.4")
    assert 'gpu_eta_gpu_utilization_ratio{UUID="GPU-a",gpu="0",node="n1"} 0.25' in resp.text


def test_text_format_even_when_openmetrics_is_preferred(served) -> None:
    """Prometheus asks for OpenMetrics first; the text format is what we serve."""
    url, _ = served
    accept = "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"
    resp = requests.get(f"{url}/metrics", headers={"Accept": accept}, timeout=10)
    assert resp.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert "# EOF" not in resp.text


def test_healthz_and_landing_and_404(served) -> None:
    url, state = served
    assert requests.get(f"{url}/healthz", timeout=10).text == "ok\n"
    state["healthy"] = (False, "snapshot is 99.0s old")
    resp = requests.get(f"{url}/healthz", timeout=10)
    assert resp.status_code == 503 and "99.0s" in resp.text
    assert "/metrics" in requests.get(f"{url}/", timeout=10).text
    assert requests.get(f"{url}/nope", timeout=10).status_code == 404


def test_a_raising_collector_gives_500_not_a_dead_server(served) -> None:
    url, state = served

    state["broken"] = True
    resp = requests.get(f"{url}/metrics", timeout=10)
    assert resp.status_code == 500 and "boom" not in resp.text
    assert requests.get(f"{url}/healthz", timeout=10).status_code == 200


def test_port_in_use_raises_oserror(served) -> None:
    url, _ = served
    port = int(url.rsplit(":", 1)[1])
    other = MetricsServer("127.0.0.1", port, lambda accept: (b"", TEXT_FORMAT))
    with pytest.raises(OSError):
        other.start()
    other.stop()


def test_every_address_means_ipv4_and_ipv6_where_the_node_has_ipv6() -> None:
    """``:PORT`` (the default host) is reachable from an IPv6-only cluster's Prometheus
    as from an IPv4 one; ``[::1]:PORT`` binds IPv6 alone."""
    import socket

    if not (socket.has_dualstack_ipv6() and has_ipv6_loopback()):
        pytest.skip("this machine has no usable IPv6")
    server = MetricsServer("", 0, lambda accept: (b"up 1\n", TEXT_FORMAT))
    server.start()
    try:
        for url in (f"http://127.0.0.1:{server.port}", f"http://[::1]:{server.port}"):
            assert requests.get(f"{url}/metrics", timeout=5).text == "up 1\n", url
    finally:
        server.stop()
    only_v6 = MetricsServer("::1", 0, lambda accept: (b"up 1\n", TEXT_FORMAT))
    only_v6.start()
    try:
        assert requests.get(f"http://[::1]:{only_v6.port}/healthz", timeout=5).ok
        with pytest.raises(requests.ConnectionError):
            requests.get(f"http://127.0.0.1:{only_v6.port}/healthz", timeout=5)
    finally:
        only_v6.stop()


def _started(
    monkeypatch: pytest.MonkeyPatch, body: bytes = b"up 1\n", **limits: float
) -> MetricsServer:
    """A started server rendering ``body``, with the module's limits (read at start)
    set first: ``MAX_CONNECTIONS=3`` and the like."""
    for name, value in limits.items():
        monkeypatch.setattr(metrics_http, name, value)
    server = MetricsServer("127.0.0.1", 0, lambda accept: (body, TEXT_FORMAT))
    server.start()
    return server


def test_connections_are_capped_and_idle_ones_closed(monkeypatch: pytest.MonkeyPatch) -> None:
    """A client holding many connections with half a request line each: at most
    ``MAX_CONNECTIONS`` get a thread, the others are closed as they are accepted, and
    the held ones are closed after ``IO_TIMEOUT_SECONDS`` without a byte; then a scrape
    is answered again."""
    server = _started(monkeypatch, MAX_CONNECTIONS=3, IO_TIMEOUT_SECONDS=0.5)
    held: list[socket.socket] = []
    try:
        before = threading.active_count()
        for _ in range(40):
            sock = socket.create_connection(("127.0.0.1", server.port), timeout=5)
            sock.sendall(b"GET /metrics HTTP/1.1\r\n")
            held.append(sock)
        time.sleep(0.2)
        assert threading.active_count() - before <= 3
        closed = 0
        for sock in held[3:]:
            sock.settimeout(2)
            closed += sock.recv(1) == b""  # closed at accept
        assert closed == 37
        started = time.monotonic()
        for sock in held[:3]:
            sock.settimeout(30)  # a server never giving up: 30 s, far past the bound
            assert sock.recv(1) == b""  # the server gave up on the request line
        assert time.monotonic() - started < 2  # its 0.5 s I/O timeout
        assert requests.get(f"http://127.0.0.1:{server.port}/metrics", timeout=5).text == "up 1\n"
    finally:
        for sock in held:
            sock.close()
        server.stop()


def test_a_request_dribbled_a_byte_at_a_time_is_cut_at_its_deadline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The request line and headers must be in within ``IO_TIMEOUT_SECONDS`` of the
    connection's accept (or its previous answer), however often bytes come: a byte
    every so often held a thread for as long as the sender liked, and 32 such
    connections took /metrics, /healthz and /readyz down for good."""
    server = _started(monkeypatch, IO_TIMEOUT_SECONDS=1.0)
    try:
        cut_after = dribble_until_cut("127.0.0.1", server.port, 4.0, 0.25)
        assert cut_after is not None, "a request dribbled over 4 s was still being read"
        assert 0.9 <= cut_after < 1.8
        assert requests.get(f"http://127.0.0.1:{server.port}/metrics", timeout=5).text == "up 1\n"
    finally:
        server.stop()


def test_a_slow_request_within_the_deadline_and_a_kept_alive_one_are_answered(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each request of a kept-alive connection has a deadline of its own (counted from
    the previous answer), and the answer's writes are not cut by what was left of the
    request's reads. (Three requests take ~2.4 s: longer than one deadline.)"""
    server = _started(monkeypatch, b"up 1\n" * 5000, IO_TIMEOUT_SECONDS=1.0)
    try:
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
            for _ in range(3):
                request = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"
                time.sleep(0.3)  # idle, kept alive (the first: just accepted)
                for i in range(0, len(request), 4):  # then ~0.5 s of the 1 s left
                    sock.sendall(request[i : i + 4])
                    time.sleep(0.5 / (len(request) / 4))
                answer = read_answer(sock)
                assert answer.startswith(b"HTTP/1.1 200"), answer[:80]
                assert answer.endswith(b"up 1\n" * 5000)
    finally:
        server.stop()


def test_one_address_holds_at_most_its_share_of_the_connections(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A client from one address cannot take every connection: past
    ``MAX_CONNECTIONS_PER_ADDRESS`` its connections are closed at accept, and a
    scrape from another address is answered while it holds its share."""
    server = _started(monkeypatch, MAX_CONNECTIONS=6, MAX_CONNECTIONS_PER_ADDRESS=2)
    held: list[socket.socket] = []
    try:
        for source in ("127.0.0.2",) * 5 + ("127.0.0.3",) * 2:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind((source, 0))
            sock.settimeout(5)
            sock.connect(("127.0.0.1", server.port))
            sock.sendall(b"GET /metrics HTTP/1.1\r\n")
            held.append(sock)
        time.sleep(0.2)
        open_ones = []
        for sock in held:
            sock.settimeout(0.3)
            try:
                open_ones.append(sock.recv(1) != b"")
            except TimeoutError:
                open_ones.append(True)  # still held by the server
        assert open_ones == [True, True, False, False, False, True, True]
        assert requests.get(f"http://127.0.0.1:{server.port}/metrics", timeout=5).text == "up 1\n"
        assert server.refused == 3
    finally:
        for sock in held:
            sock.close()
        server.stop()


@pytest.mark.parametrize(
    ("header", "gzip_ok"),
    [
        ("gzip", True),
        ("gzip, deflate", True),
        ("deflate, gzip;q=0.5", True),
        ("GZIP", True),
        ("x-gzip", True),
        ("*", True),
        ("gzip;q=0", False),
        ("gzip; q=0.0, identity", False),
        ("*;q=0", False),
        ("identity", False),
        ("", False),
        ("br, zstd", False),
        ("gzip;q=junk", False),
    ],
)
def test_accept_encoding_is_read_as_rfc_9110_says(header: str, gzip_ok: bool) -> None:
    assert metrics_http.accepts_gzip(header) is gzip_ok


def _get(url: str, method: str = "GET", **headers: str) -> tuple[int, dict[str, str], bytes]:
    """One request over a plain connection: ``requests`` would decode gzip itself."""
    import http.client
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    try:
        conn.request(method, parts.path, headers=headers)
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def test_metrics_are_gzipped_for_a_client_that_accepts_it(served) -> None:
    """Prometheus sends ``Accept-Encoding: gzip`` on every scrape: a node's 16 MB of
    text at the progress store's bound is ~0.9 MB gzipped."""
    import gzip

    url, _ = served
    _, plain_headers, plain = _get(f"{url}/metrics")
    assert "content-encoding" not in plain_headers and b"gpu_eta_gpu_utilization_ratio" in plain
    assert plain_headers["vary"] == "Accept-Encoding"
    status, headers, packed = _get(f"{url}/metrics", **{"Accept-Encoding": "gzip"})
    assert status == 200 and headers["content-encoding"] == "gzip"
    assert headers["vary"] == "Accept-Encoding"
    assert int(headers["content-length"]) == len(packed) < len(plain)
    line = b'gpu_eta_gpu_utilization_ratio{UUID="GPU-a",gpu="0",node="n1"} 0.25'
    unpacked = gzip.decompress(packed)  # the snapshot's age line differs between scrapes
    assert line in unpacked and line in plain and unpacked.count(b"\n") == plain.count(b"\n")
    refused = _get(f"{url}/metrics", **{"Accept-Encoding": "gzip;q=0"})[1]
    assert "content-encoding" not in refused
    head = _get(f"{url}/metrics", "HEAD", **{"Accept-Encoding": "gzip"})[1]
    assert head["content-encoding"] == "gzip" and int(head["content-length"]) > 0
    # probes and the landing page are never encoded
    assert "content-encoding" not in _get(f"{url}/healthz", **{"Accept-Encoding": "gzip"})[1]
