"""``POST /progress``: training code reports its progress to the node's exporter.

Trust comes from the network, not from the body: the sender is the pod whose IP is
the connection's source address (from the exporter's pod cache). A body cannot name
another pod; its optional ``container`` must be one of the sender pod's containers.
Order of checks, each answered with a one-line reason and counted by result:

1. source address is no pod on this node → 403 ``forbidden``
2. body over ``MAX_BODY_BYTES`` (or no Content-Length) → 413 ``too_large`` / 400
3. the pod exceeds its rate (token bucket per pod) → 429 ``rate_limited``
4. not a JSON object → 400 ``malformed``; bad value → 400 ``invalid``
5. stored → 200 ``accepted``

hostNetwork pods share the node's IP, so their address proves nothing. They are
refused unless the exporter runs with ``allow_host_network`` AND the pod carries
the annotation ``gpu-eta.io/progress-host-network: "true"`` AND exactly one such
annotated hostNetwork pod is on the node (otherwise the address is ambiguous).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from exporter.progress import MAX_BODY_BYTES, ReportError, parse_report
from exporter.progress_store import ProgressStore
from exporter.readings import PodMeta

log = logging.getLogger(__name__)

HOST_NETWORK_ANNOTATION = "gpu-eta.io/progress-host-network"
RESULTS = ("accepted", "malformed", "invalid", "forbidden", "too_large", "rate_limited")
DEFAULT_RATE_PER_SECOND = 10.0
DEFAULT_BURST = 20
MAX_CONNECTIONS = 64
REQUEST_TIMEOUT_SECONDS = 10.0


class _TokenBucket:
    """Per-pod rate limit: ``burst`` reports at once, refilled at ``rate`` per second."""

    __slots__ = ("stamp", "tokens")

    def __init__(self, burst: float, now: float):
        self.tokens = burst
        self.stamp = now


class ProgressListener:
    """A small threading HTTP server in a background thread, feeding a ProgressStore."""

    def __init__(
        self,
        host: str,
        port: int,
        store: ProgressStore,
        pod_by_ip: Callable[[str], PodMeta | None],
        pods: Callable[[], Sequence[PodMeta]],
        allow_host_network: bool = False,
        rate_per_second: float = DEFAULT_RATE_PER_SECOND,
        burst: int = DEFAULT_BURST,
        clock: Callable[[], float] = time.time,
    ):
        self.host = host
        self.port = port
        self.store = store
        self._pod_by_ip = pod_by_ip
        self._pods = pods
        self.allow_host_network = allow_host_network
        self._rate = float(rate_per_second)
        self._burst = float(burst)
        self._clock = clock
        self._counts = dict.fromkeys(RESULTS, 0)
        self._lock = threading.Lock()
        self._buckets: dict[tuple[str, str], _TokenBucket] = {}
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------------------

    def start(self) -> None:
        """Bind now (so callers can connect as soon as this returns), serve in a thread."""
        if self._server is not None:
            return
        self._server = _Server((self.host, self.port), _make_handler(self))
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.2},
            name="gpu-eta-progress-http",
            daemon=True,
        )
        self._thread.start()

    def stop(self) -> None:
        """Stop serving and close the socket; idempotent."""
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def counts(self) -> Mapping[str, int]:
        """Reports by result since start (``gpu_eta_exporter_progress_reports_total``)."""
        with self._lock:
            return dict(self._counts)

    # -- request logic (no HTTP here: testable on its own) ---------------------------

    def _count(self, result: str) -> None:
        with self._lock:
            self._counts[result] += 1

    def sender(self, address: str) -> tuple[PodMeta | None, str]:
        """The pod that owns ``address``, or None and the one-line reason for refusing."""
        try:
            pod = self._pod_by_ip(address)
        except Exception as err:  # the pod cache is someone else's code: never a 500
            log.warning("progress: pod lookup for %s failed: %s", address, err)
            return None, "pod lookup failed"
        if pod is None:
            return None, f"{address} is not a pod on this node"
        if not pod.host_network:
            return pod, ""
        if not self.allow_host_network:
            return None, "hostNetwork pods may not report (exporter option off)"
        candidates = [
            p
            for p in self._pods()
            if p.host_network
            and p.ip == address
            and p.annotations.get(HOST_NETWORK_ANNOTATION, "").lower() == "true"
        ]
        if len(candidates) != 1:
            return None, (
                f"hostNetwork: {len(candidates)} pods annotated {HOST_NETWORK_ANNOTATION}"
                " on this node (need exactly one)"
            )
        return candidates[0], ""

    def _allow(self, pod: PodMeta) -> bool:
        now = time.monotonic()
        key = (pod.namespace, pod.name)
        with self._lock:
            bucket = self._buckets.get(key)
            if bucket is None:
                if len(self._buckets) > 4096:
                    self._buckets.clear()
                bucket = self._buckets[key] = _TokenBucket(self._burst, now)
            bucket.tokens = min(self._burst, bucket.tokens + (now - bucket.stamp) * self._rate)
            bucket.stamp = now
            if bucket.tokens < 1.0:
                return False
            bucket.tokens -= 1.0
            return True

    def handle(
        self, address: str, length: int | None, read: Callable[[int], bytes]
    ) -> tuple[int, str]:
        """Decide one request: (HTTP status, one-line reason). Counts the result."""
        pod, reason = self.sender(address)
        if pod is None:
            self._count("forbidden")
            return 403, f"forbidden: {reason}"
        if length is None:
            self._count("malformed")
            return 411, "malformed: Content-Length required"
        if length > MAX_BODY_BYTES:
            self._count("too_large")
            return 413, f"too_large: body over {MAX_BODY_BYTES} bytes"
        if not self._allow(pod):
            self._count("rate_limited")
            return 429, f"rate_limited: over {self._rate:g} reports/s for this pod"
        body = read(length)
        now = self._clock()
        try:
            report = parse_report(body, now=now)
            containers = list(pod.container_ids)
            if report.container is not None and report.container in pod.container_ids:
                container = report.container
            elif containers:
                container = containers[0]
            else:  # container list unknown (no runtime ids yet): trust the label only
                container = report.container or ""
            progress = self.store.merge(pod.namespace, pod.name, container, "http", report, now)
        except ReportError as err:
            self._count(err.result)
            return 400, f"{err.result}: {err}"
        self._count("accepted")
        return 200, f"accepted: {pod.namespace}/{pod.name} run {progress.run_id}"


class _Server(ThreadingHTTPServer):
    """ThreadingHTTPServer with a bound on concurrent connections."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, address, handler):
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        super().__init__(address, handler)

    def process_request(self, request, client_address):
        if not self._slots.acquire(blocking=False):
            self.shutdown_request(request)  # over the bound: refuse cheaply
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request, client_address):
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()


def _make_handler(listener: ProgressListener) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive: the client reuses its connection
        timeout = REQUEST_TIMEOUT_SECONDS
        server_version = "gpu-eta-progress"
        sys_version = ""

        def log_message(self, format: str, *args: object) -> None:
            """Silent: never log request lines or bodies (they come from untrusted pods)."""

        def _reply(self, status: int, text: str, *, close: bool = False) -> None:
            data = (text.replace("\n", " ")[:300] + "\n").encode("utf-8", "replace")
            self.send_response(status)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            if close:
                self.send_header("Connection", "close")
                self.close_connection = True
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self) -> None:
            if self.path.split("?", 1)[0] != "/progress":
                self._reply(404, "not found: POST /progress", close=True)
                return
            if self.headers.get("Transfer-Encoding"):
                listener._count("malformed")
                self._reply(411, "malformed: chunked bodies not accepted", close=True)
                return
            raw = self.headers.get("Content-Length")
            try:
                length = int(raw) if raw is not None else None
                if length is not None and length < 0:
                    raise ValueError
            except ValueError:
                listener._count("malformed")
                self._reply(400, "malformed: bad Content-Length", close=True)
                return
            consumed = False

            def read(n: int) -> bytes:
                nonlocal consumed
                consumed = True
                return self.rfile.read(n)

            try:
                status, text = listener.handle(self.client_address[0], length, read)
            except Exception as err:  # a bug must not kill the listener thread
                log.error("progress: request failed: %s", err)
                status, text = 500, "internal error"
            self._reply(status, text, close=not consumed and bool(length))

        def do_GET(self) -> None:
            if self.path == "/healthz":
                self._reply(200, "ok")
            else:
                self._reply(405, "method not allowed: POST /progress", close=True)

    return Handler
