"""The metrics HTTP server of every program: ``/metrics``, ``/healthz`` (and
Prometheus' ``/-/healthy``), ``/readyz`` (and ``/-/ready``), a landing page; nothing else.

``/healthz`` is liveness (a restart would help when it fails), ``/readyz`` readiness
(the program has something to serve yet); a program that gives no readiness probe is
ready whenever it is alive.

It only renders: collection happens elsewhere (the exporter's scheduler, the
forecaster's cycle), so a scrape costs one render of cached state however often
Prometheus (or several) comes. ``render(accept)`` gets the request's ``Accept`` header
and returns the body and its content type (the exporter always answers the text
format 0.0.4, as node_exporter does; the forecaster negotiates OpenMetrics).

``/metrics`` is gzip-compressed for a client that accepts it (Prometheus always does:
a node at the progress store's bound serves ~16 MB of text, ~0.9 MB compressed), at
level 1: 0.04 s for 18 MB here, against seconds to send 18 MB over a busy link. Each
scrape's body is compressed anew: both programs' bodies carry values computed at the
scrape (the snapshot's age, the remaining times), so no two are the same.

Requests are handled in threads, at most ``MAX_CONNECTIONS`` connections at once and
``MAX_CONNECTIONS_PER_ADDRESS`` from one client address (one more is closed as it is
accepted, and counted). A request's line and headers must be in within
``IO_TIMEOUT_SECONDS`` of the connection's accept, or of the previous answer on a
kept-alive connection, in all: each read is given what is left of that deadline
(``_DeadlineReads``), not a timeout of its own that every byte starts over. Each write
of an answer is given ``IO_TIMEOUT_SECONDS``. So a client that sends half a request
and waits, or a byte every few seconds, holds a thread that long and no longer, and
from one address it holds at most its share of them: Prometheus scrapes over one or
two kept-alive connections per server, and several replicas and the kubelet's probes
come from addresses of their own. A failing render is logged and answered 500 (never
a traceback to the client), and request lines are logged at debug only.
"""

from __future__ import annotations

import gzip
import io
import logging
import socket
import sys
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

from gpu_eta.common.connection_slots import ConnectionSlots
from gpu_eta.common.listen_socket import listening_socket

log = logging.getLogger(__name__)

Health = Callable[[], tuple[bool, str]]
Render = Callable[[str], tuple[bytes, str]]
TEXT_FORMAT = "text/plain; version=0.0.4; charset=utf-8"
MAX_CONNECTIONS = 32
# Why 8: Prometheus keeps one or two connections per target, a scrape that times out
# may leave one more until the server notices, and the kubelet's liveness and
# readiness probes come from the node's address; 8 leaves room for all of that
# behind one address (a NAT) and still leaves 24 to the others.
MAX_CONNECTIONS_PER_ADDRESS = 8
IO_TIMEOUT_SECONDS = 10.0
GZIP_LEVEL = 1  # a scrape's text compresses ~18x at level 1; higher levels cost more CPU


def accepts_gzip(accept_encoding: str) -> bool:
    """Whether an ``Accept-Encoding`` header accepts gzip (RFC 9110: ``gzip`` or ``*``
    with a q-value above 0; ``gzip;q=0`` refuses it). Pure."""
    star = False
    for item in accept_encoding.split(","):
        coding, _, params = item.strip().partition(";")
        q = 1.0
        for param in params.split(";"):
            name, _, value = param.strip().partition("=")
            if name.strip().lower() == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
        coding = coding.strip().lower()
        if coding in ("gzip", "x-gzip"):
            return q > 0
        if coding == "*":
            star = q > 0
    return star


def landing_page(title: str, description: str) -> bytes:
    """The HTML ``/`` answers: the program's name and the two paths."""
    return (
        f"<!doctype html>\n<html><head><title>{title}</title></head>\n"
        f"<body><h1>{title}</h1>\n<p>{description}</p>\n"
        '<ul><li><a href="/metrics">/metrics</a></li><li><a href="/healthz">/healthz</a></li><li><a href="/readyz">/readyz</a></li></ul>\n'
        "</body></html>\n"
    ).encode()


def always_healthy() -> tuple[bool, str]:
    """``/healthz`` of a program whose being up is its health."""
    return True, "ok"


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 64

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self._slots = ConnectionSlots()
        self.refused = 0  # connections closed at accept: over either cap

    def process_request(self, request: object, client_address: object) -> None:
        """A thread for the connection while fewer than ``MAX_CONNECTIONS`` are open
        and fewer than ``MAX_CONNECTIONS_PER_ADDRESS`` from its address; else it is
        closed at once."""
        address = _address(client_address)
        if not self._slots.admit(address, MAX_CONNECTIONS, MAX_CONNECTIONS_PER_ADDRESS):
            self.refused += 1
            if self.refused in (1, 10, 100) or self.refused % 1000 == 0:
                log.warning(
                    "metrics server: %d connection(s) refused: %d open in all or %d from "
                    "the address (the last from %s)",
                    self.refused,
                    MAX_CONNECTIONS,
                    MAX_CONNECTIONS_PER_ADDRESS,
                    address,
                )
            self.shutdown_request(request)  # type: ignore[arg-type]
            return
        try:
            super().process_request(request, client_address)  # type: ignore[arg-type]
        except BaseException:
            self._slots.release(address)
            raise

    def process_request_thread(self, request: object, client_address: object) -> None:
        try:
            super().process_request_thread(request, client_address)  # type: ignore[arg-type]
        finally:
            self._slots.release(_address(client_address))

    def handle_error(self, request: object, client_address: object) -> None:
        """A client gone before its answer is written is logged at debug (socketserver's
        default prints a traceback on stderr for each); anything else with its traceback."""
        if isinstance(sys.exc_info()[1], ConnectionError):
            log.debug("metrics server: %s went away before its answer", _address(client_address))
            return
        log.exception("metrics server: serving %s failed", _address(client_address))


def _address(client_address: object) -> str:
    """The host part of a peer address (``(host, port)`` or IPv6's 4-tuple)."""
    if isinstance(client_address, tuple) and client_address:
        return str(client_address[0])
    return str(client_address)


class _DeadlineReads(io.RawIOBase):
    """A connection's reads, each timed out at its request's ``deadline`` (monotonic
    seconds) rather than after a timeout of its own; its writes keep the socket's own.

    Why: ``BaseHTTPRequestHandler`` gives each socket read the handler's ``timeout``,
    which every byte that arrives starts over: with it, a byte every few seconds keeps
    a request line and its headers being read for as long as the client likes, and 32
    such connections hold every thread, so /metrics, /healthz and /readyz answer nobody
    and the failing liveness probe gets the pod restarted. ``deadline`` starts
    ``timeout_seconds`` from now; the handler sets it again for each request.
    """

    def __init__(self, sock: socket.socket, timeout_seconds: float) -> None:
        super().__init__()
        self._sock = sock
        self._write_timeout = timeout_seconds
        self.deadline = time.monotonic() + timeout_seconds

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("request not complete by its deadline")
        self._sock.settimeout(left)
        try:
            return self._sock.recv_into(buffer)
        finally:
            self._sock.settimeout(self._write_timeout)  # the answer's writes


class MetricsServer:
    """Serves ``render(accept)`` over HTTP in a background thread."""

    def __init__(
        self,
        host: str,
        port: int,
        render: Render,
        health: Health = always_healthy,
        title: str = "gpu-eta",
        ready: Health | None = None,
        description: str = "",
    ) -> None:
        self.host = host
        self.port = port
        self._render = render
        self._health = health
        self._ready = ready if ready is not None else health
        self._landing = landing_page(title, description)
        self._name = title.replace(" ", "-")
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Bind now (``OSError`` if the address is taken), then serve in a thread.

        The socket is ``listening_socket``'s: an empty host listens on IPv4 and IPv6
        where the node has IPv6, so an IPv6-only cluster's Prometheus can scrape.
        """
        sock = listening_socket(self.host, self.port, _Server.request_queue_size, self._name)
        server = _Server(
            (self.host, self.port),
            _handler(self._render, self._health, self._ready, self._landing, self._name),
            bind_and_activate=False,
        )
        server.socket.close()  # the constructor's own (IPv4) socket, never bound
        server.socket = sock
        server.server_address = sock.getsockname()
        self._server = server
        self.port = int(server.server_address[1])
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.2},
            name="gpu-eta-metrics-http",
            daemon=True,
        )
        self._thread.start()

    @property
    def refused(self) -> int:
        """Connections closed as they were accepted (over a cap) since ``start``."""
        return self._server.refused if self._server is not None else 0

    def serve(self) -> MetricsServer:
        """``start()``, returning the server (for ``with``-less one-liners)."""
        self.start()
        return self

    def stop(self) -> None:
        """Stop serving and release the port; idempotent."""
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None


def _handler(
    render: Render, health: Health, ready: Health, landing: bytes, name: str
) -> type[BaseHTTPRequestHandler]:
    io_timeout = IO_TIMEOUT_SECONDS

    class Handler(BaseHTTPRequestHandler):
        server_version = name
        protocol_version = "HTTP/1.1"
        timeout = io_timeout  # each write; reads go by the request's deadline

        def setup(self) -> None:
            super().setup()
            self.rfile.close()  # the buffered reader over the socket's own reads
            self._reads = _DeadlineReads(self.connection, io_timeout)
            self.rfile = io.BufferedReader(self._reads)

        def handle_one_request(self) -> None:
            """The request line and headers within ``io_timeout`` of now: the accept,
            or the previous answer on a kept-alive connection (idle time counts)."""
            self._reads.deadline = time.monotonic() + io_timeout
            super().handle_one_request()

        def do_GET(self) -> None:
            path = urlsplit(self.path).path
            if path == "/metrics":
                self._metrics()
            elif path in ("/healthz", "/-/healthy", "/readyz", "/-/ready"):
                probe = health if path in ("/healthz", "/-/healthy") else ready
                try:
                    ok, why = probe()
                except Exception as err:  # a probe's bug is an unhealthy answer, not a 500
                    ok, why = False, f"probe failed: {type(err).__name__}"
                self._send(200 if ok else 503, "text/plain; charset=utf-8", (why + "\n").encode())
            elif path == "/":
                self._send(200, "text/html; charset=utf-8", landing)
            else:
                self._send(404, "text/plain; charset=utf-8", b"not found\n")

        def do_HEAD(self) -> None:
            self.do_GET()

        def _metrics(self) -> None:
            try:
                body, content_type = render(self.headers.get("Accept", ""))
            except Exception:
                log.exception("rendering /metrics failed")
                self._send(500, "text/plain; charset=utf-8", b"rendering metrics failed\n")
                return
            if accepts_gzip(self.headers.get("Accept-Encoding", "")):
                packed = gzip.compress(body, compresslevel=GZIP_LEVEL, mtime=0)
                self._send(200, content_type, packed, encoding="gzip")
            else:
                self._send(200, content_type, body, encoding="identity")

        def _send(
            self, code: int, content_type: str, body: bytes, encoding: str | None = None
        ) -> None:
            """``encoding``: /metrics' content coding, which varies by the request's
            Accept-Encoding (None: an answer that never varies)."""
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            if encoding is not None:
                self.send_header("Vary", "Accept-Encoding")
                if encoding != "identity":
                    self.send_header("Content-Encoding", encoding)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            log.debug("%s %s", self.address_string(), format % args)

    return Handler
