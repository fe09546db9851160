"""The metrics HTTP server: ``/metrics``, ``/healthz``, a landing page; nothing else.

It only renders: collection happens in the scheduler, so a scrape costs one render
of the cached snapshot however often Prometheus (or several) comes. The progress
endpoint is a separate listener on its own port (``gpu_eta.exporter.progress_http``), so a
NetworkPolicy can open that one to pods without exposing metrics.

Requests are handled in threads; a failing render is logged and answered 500
(never a traceback to the client), and request lines are logged at debug only.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

log = logging.getLogger(__name__)

LANDING = b"""<!doctype html>
<html><head><title>gpu-eta exporter</title></head>
<body><h1>gpu-eta exporter</h1>
<p>Per-pod GPU, GPU memory, host memory and training progress metrics.</p>
<ul><li><a href="/metrics">/metrics</a></li><li><a href="/healthz">/healthz</a></li></ul>
</body></html>
"""

Health = Callable[[], tuple[bool, str]]
Body = Callable[[], bytes]
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 64


class MetricsServer:
    """Serves ``body()`` (the text exposition) over HTTP in a background thread.

    Always the Prometheus text format 0.0.4, as node_exporter serves by default:
    Prometheus accepts it whatever it asks for first.
    """

    def __init__(self, host: str, port: int, body: Body, health: Health) -> None:
        self.host = host
        self.port = port
        self._body = body
        self._health = health
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Bind now (``OSError`` if the address is taken), then serve in a thread."""
        server = _Server((self.host, self.port), _handler(self._body, self._health))
        self._server = server
        self.port = int(server.server_address[1])
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.2},
            name="gpu-eta-metrics-http",
            daemon=True,
        )
        self._thread.start()

    def stop(self) -> None:
        """Stop serving and release the port; idempotent."""
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None


def _handler(render: Body, health: Health) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "gpu-eta-exporter"
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            path = urlsplit(self.path).path
            if path == "/metrics":
                self._metrics()
            elif path == "/healthz":
                ok, why = health()
                self._send(200 if ok else 503, "text/plain; charset=utf-8", (why + "\n").encode())
            elif path == "/":
                self._send(200, "text/html; charset=utf-8", LANDING)
            else:
                self._send(404, "text/plain; charset=utf-8", b"not found\n")

        def do_HEAD(self) -> None:
            self.do_GET()

        def _metrics(self) -> None:
            try:
                body = render()
            except Exception:
                log.exception("rendering /metrics failed")
                self._send(500, "text/plain; charset=utf-8", b"rendering metrics failed\n")
                return
            self._send(200, CONTENT_TYPE, body)

        def _send(self, code: int, content_type: str, body: bytes) -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            log.debug("%s %s", self.address_string(), format % args)

    return Handler
