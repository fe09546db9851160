"""gpu_eta.exporter.progress_http: one pod pipelining requests cannot grow the exporter's
memory nor hold back other pods' reports.

Real sockets on loopback source addresses, the real listener in its thread. The
latency a flood costs another pod is measured in ``bench/progress_flood.py``; here
only behaviour: what is answered to a client that does not read, and in which order
two clients are served.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from gpu_eta.exporter import progress_http
from gpu_eta.exporter.progress_http import ProgressListener
from gpu_eta.exporter.progress_store import ProgressStore
from gpu_eta.exporter.readings import PodMeta

POD_A = PodMeta("team-a", "trainer-a", "uid-a", ip="127.0.0.2", container_ids={"main": "c1"})
POD_B = PodMeta("team-b", "trainer-b", "uid-b", ip="127.0.0.3", container_ids={"main": "c3"})
HEALTH = b"GET /healthz HTTP/1.1\r\n\r\n"
BODY = b'{"epoch": 1, "epochs": 3}'
POST = b"POST /progress HTTP/1.1\r\nContent-Length: %d\r\n\r\n%s" % (len(BODY), BODY)


def _started(pods: list[PodMeta], **kw: float) -> ProgressListener:
    """A listener on a free loopback port whose pods (by source IP) are ``pods``."""
    lst = ProgressListener(
        "127.0.0.1",
        0,
        ProgressStore(),
        lambda ip: next((p for p in pods if p.ip == ip), None),
        lambda: pods,
        **kw,
    )
    lst.start()
    return lst


@pytest.fixture
def listener() -> Iterator[ProgressListener]:
    lst = _started([POD_A, POD_B])
    try:
        yield lst
    finally:
        lst.stop()


def test_a_client_that_never_reads_is_answered_a_bounded_amount(listener, monkeypatch):
    """Answers the peer does not read are not buffered without end: reading stops
    while the transport holds ``MAX_UNSENT_BYTES`` of them. Before, 120 MB of
    pipelined ``GET /healthz`` grew the exporter from 43 to 250 MB (every answer held
    in user space). What the kernel buffers besides (up to ``tcp_wmem``'s maximum)
    is not the exporter's memory; the transport's own buffer is, and is watched here
    while the flood runs."""
    monkeypatch.setattr(progress_http, "REQUEST_TIMEOUT_SECONDS", 2.0)
    monkeypatch.setattr(progress_http, "HEADER_TIMEOUT_SECONDS", 2.0)
    monkeypatch.setattr(progress_http, "IDLE_TIMEOUT_SECONDS", 2.0)
    monkeypatch.setattr(progress_http, "MAX_UNSTORED_IN_A_ROW", 10**9)  # not closed for that
    n_requests = 200_000  # 5 MB of requests, 16 MB of answers if all were answered
    flood = socket.create_connection(
        ("127.0.0.1", listener.port), timeout=60, source_address=("127.0.0.2", 0)
    )
    flood.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)

    def send() -> None:  # the listener cuts the flood (the test's point): a reset ends it
        with contextlib.suppress(OSError):
            flood.sendall(HEALTH * n_requests)

    sender = threading.Thread(target=send, daemon=True)
    largest, last, since = 0, -1, time.monotonic()
    try:
        sender.start()  # blocks once the listener stops reading: in a thread
        deadline = time.monotonic() + 60
        # until answering has stalled for 0.5 s with the transport's buffer seen: on a
        # loaded machine the listener may not answer at all for 0.5 s at first, and a
        # watch that stopped then saw nothing (a CI run failed so, ``0 < 0``)
        while time.monotonic() < deadline and (largest == 0 or time.monotonic() - since < 0.5):
            for conn in list(listener._server.connections):
                if conn.ip == "127.0.0.2" and conn.transport is not None:
                    largest = max(largest, conn.transport.get_write_buffer_size())
            answered = listener.counts()["health"]
            if answered != last:
                last, since = answered, time.monotonic()
            time.sleep(0.005)
        assert last < n_requests  # the flood was held back, not answered whole
        assert 0 < largest <= progress_http.MAX_UNSENT_BYTES + 1024, largest
        # and the connection does not hold its slot for ever: the deadline passes
        # with nothing read, and it is cut
        deadline = time.monotonic() + 10
        while listener.counts()["timeout"] == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert listener.counts()["timeout"] == 1
        while listener._server.connections and time.monotonic() < deadline:
            time.sleep(0.05)  # its slot freed once the loop has run connection_lost
        assert not listener._server.connections
    finally:
        flood.close()
        sender.join(timeout=10)


def test_another_pods_report_is_answered_before_a_floods_backlog(listener, monkeypatch):
    """A connection is answered a few requests at a time, then the others get their
    turn: a pod's one report is not queued behind thousands another pod pipelined
    (before: a read of up to 256 KiB, ~10,000 small requests, answered in one go)."""
    n_requests = 5000
    monkeypatch.setattr(progress_http, "MAX_UNSTORED_IN_A_ROW", 10**9)  # not closed for that
    flood = socket.create_connection(
        ("127.0.0.1", listener.port), timeout=30, source_address=("127.0.0.2", 0)
    )
    other = socket.create_connection(
        ("127.0.0.1", listener.port), timeout=30, source_address=("127.0.0.3", 0)
    )
    received = bytearray()

    def read_all() -> None:  # the flood reads its answers: no send buffer fills
        while received.count(b"ok\n") < n_requests:
            chunk = flood.recv(1 << 20)
            if not chunk:
                return
            received.extend(chunk)

    reader = threading.Thread(target=read_all, daemon=True)
    try:
        other.sendall(POST[:-1])  # all but its last byte: its turn comes after the flood's
        time.sleep(0.2)
        reader.start()
        flood.sendall(HEALTH * n_requests)
        other.sendall(POST[-1:])
        answer = other.recv(4096)
        health_before = listener.counts()["health"]
        assert answer.startswith(b"HTTP/1.1 200 "), answer
        assert health_before < n_requests // 2, health_before
        reader.join(timeout=30)
        assert listener.counts()["health"] == n_requests  # the flood is still served
    finally:
        flood.close()
        other.close()


def read_until_closed(s: socket.socket) -> bytes:
    data = b""
    while chunk := s.recv(65536):
        data += chunk
    return data


def test_pipelined_requests_are_all_answered_before_a_half_close_closes(listener):
    """Answered over several turns, every request sent before ``shutdown(SHUT_WR)``
    still gets its answer."""
    with socket.create_connection(
        ("127.0.0.1", listener.port), timeout=10, source_address=("127.0.0.3", 0)
    ) as s:
        s.sendall(POST + HEALTH * 40)
        s.shutdown(socket.SHUT_WR)
        answers = read_until_closed(s)
    assert answers.count(b"HTTP/1.1 200 ") == 41


@pytest.mark.parametrize("kind", ["health", "rate_limited"])
def test_a_connection_storing_nothing_for_many_answers_is_closed(kind):
    """``MAX_UNSTORED_IN_A_ROW`` answers in a row that store no report (``/healthz``,
    refusals such as 429) and the connection is closed, its last answer saying so: a
    client honouring ``Retry-After`` never gets there, a flood pays a new connection."""
    lst = _started([POD_A], rate_per_second=0.001, burst=3)
    limit = progress_http.MAX_UNSTORED_IN_A_ROW
    try:
        with socket.create_connection(
            ("127.0.0.1", lst.port), timeout=10, source_address=("127.0.0.2", 0)
        ) as s:
            s.sendall((HEALTH if kind == "health" else POST) * (limit + 50))
            answers = read_until_closed(s).split(b"HTTP/1.1 ")[1:]
        stored = 0 if kind == "health" else 3
        assert len(answers) == stored + limit
        assert b"Connection: close" in answers[-1]
        assert not any(b"Connection: close" in a for a in answers[:-1])
        assert lst.counts()[kind] == limit
    finally:
        lst.stop()


def _connection_of(lst: ProgressListener, port: int) -> progress_http._Connection | None:
    """The listener's connection from the client's ``port``, once it has accepted it."""
    for c in list(lst._server.connections):
        if c.transport is not None and c.transport.get_extra_info("peername")[1] == port:
            return c
    return None


def _with_answers_unsent(lst: ProgressListener, s: socket.socket) -> progress_http._Connection:
    """Pipeline requests on ``s`` (which reads nothing) until the listener holds some
    answers it cannot send yet, fewer than the ``MAX_UNSENT_BYTES`` that pause reading."""
    port = s.getsockname()[1]
    deadline = time.monotonic() + 20  # accepted by the listener's loop (a loaded machine)
    while not (conn := _connection_of(lst, port)):
        assert time.monotonic() < deadline, "the listener never accepted the connection"
        time.sleep(0.01)
    # the kernel's buffers hold what fits (autotuned up to MBs on loopback): small ones,
    # so the answers past them are soon held by the listener itself
    conn.transport.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    deadline = time.monotonic() + 20
    while not (conn.transport.get_write_buffer_size() > 0 and not conn.write_paused):
        assert time.monotonic() < deadline and not conn.write_paused
        s.sendall(HEALTH * 20 + POST)
        time.sleep(0.01)
    return conn


@pytest.mark.parametrize("how", ["idle", "connection_close", "late", "half_close"])
def test_a_connection_closed_with_answers_unread_frees_its_slot(monkeypatch, how):
    """Closed by the listener (idle deadline, the client's ``Connection: close``, 408)
    or by a half-close while answers are still unsent (fewer than pause reading), the
    connection is cut once its client has not read them within
    ``IDLE_TIMEOUT_SECONDS``, counted ``timeout``. Before, ``transport.close()`` waited
    for ever to send them: the slot stayed taken, uncounted, and a pod doing so on
    its 8 connections could not report any more."""
    for name in ("IDLE_TIMEOUT_SECONDS", "HEADER_TIMEOUT_SECONDS", "REQUEST_TIMEOUT_SECONDS"):
        monkeypatch.setattr(progress_http, name, 1.0)
    lst = _started([POD_A], rate_per_second=10_000, burst=10_000)
    s = socket.create_connection(
        ("127.0.0.1", lst.port), timeout=10, source_address=("127.0.0.2", 0)
    )
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        time.sleep(0.05)  # accepted
        _with_answers_unsent(lst, s)
        if how == "connection_close":
            s.sendall(b"GET /healthz HTTP/1.1\r\nConnection: close\r\n\r\n")
        elif how == "late":
            s.sendall(HEALTH[:5])  # its headers never complete: 408, then closed
        elif how == "half_close":
            s.shutdown(socket.SHUT_WR)
        deadline = time.monotonic() + 8
        while lst._server.connections and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not lst._server.connections, "the slot is still held"
        assert lst._server.slots.by_address() == {}
        timeouts = lst.counts()["timeout"]
        assert timeouts == (2 if how == "late" else 1), timeouts  # a 408 is counted too
    finally:
        s.close()
        lst.stop()
