"""A small local Kubernetes API server fake: pods list + watch, on loopback HTTP.

No real API server can run on the test machines (see TESTING.md), so this serves
what one serves for ``GET /api/v1/pods``, byte-shaped as the real thing:

- list: ``{"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion":
  "N"}, "items": [...]}``;
- ``watch=true``: HTTP 200 with ``Transfer-Encoding: chunked``, one JSON event per
  line ``{"type": "ADDED"|"MODIFIED"|"DELETED"|"BOOKMARK"|"ERROR", "object": {...}}``;
  a ``resourceVersion`` older than the compaction floor gets the real server's
  ``ERROR`` event with a ``Status`` of ``code: 410, reason: Expired`` or, while
  ``expire_watch_status`` is set, that ``Status`` as an HTTP 410 answer instead of
  the stream (what the server sends when the storage refuses the watch before it
  starts); ``expire_every_watch`` expires every watch from a resourceVersion, a
  freshly listed one's too; ``expired_watches`` counts them all; watches end
  cleanly after ``timeoutSeconds``, as the real server's ``GetTimeoutForWatch``
  ends them; without it, or with ``0``, after a random time between
  ``min_request_timeout_seconds`` (the server's ``--min-request-timeout``, 1800 s by
  default) and twice that; ``resourceVersion`` absent or ``"0"`` ("any
  version") starts with synthetic ADDED events for every current pod and is never
  expired (nor counted), as the real server serves it from its watch cache;
- ``fieldSelector=spec.nodeName=<node>`` filters both (other selectors get 400);
- ``limit=N`` pages a list as the real server does: at most N items in
  ``(namespace, name)`` order and, while more remain, ``metadata.continue`` (and,
  without a selector, ``remainingItemCount``); the next page is
  ``continue=<token>`` (400 with a ``resourceVersion`` other than ``"0"``, and for
  a token that is not one), and a token older
  than the compaction floor gets the real server's 410 ``Status`` (reason
  ``Expired``), as does every token while ``expire_continue`` is set (a list
  slower than the compaction window); ``list_pages`` records the item count of
  every page served. A page is encoded from the stored pods themselves, under the
  store's lock: serving it leaves no pod object behind in this process (a client
  test here may count the pod objects alive);
- ``GET /apis/batch/v1/namespaces/<ns>/jobs/<name>``: a Job added with ``add_job``,
  else the real server's 404 ``Status``; with ``jobs_forbidden`` its 403 ``Status``
  (what a service account without ``get`` on ``jobs.batch`` receives); the next
  GETs answered, one each, with the statuses queued in ``job_failures`` (403, 429, 500,
  503: the ``Status`` the API server sends then); each answered
  after ``job_delay_seconds`` (a real API server's round trip, 0 by default).

A connection stays open for the next request after an answer, a watch's clean end
included (Go's HTTP server keeps it alive, so a client re-watches on it at once).
``stop()`` kills the server abruptly (open watches and idle connections see their
connection drop, as when an API server dies) and holds its port, bound and not
listening (connections are refused, as by a dead server, and no other test's server
is given the port meanwhile: with five test workers binding ports, one once answered
the stopped API's clients 404); ``start()`` brings it back on the same port with the
same store, as a restarted API server backed by the same etcd; ``close()`` (and leaving
a ``with``) stops it and gives the port up.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import json
import random
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from gpu_eta.launch.prometheus import free_port

# what the API server answers a GET with when it fails it (k8s.io/apimachinery
# ``NewTooManyRequests``, ``NewInternalError``, ``NewServiceUnavailable``): status -> reason,
# message
JOB_FAILURES: dict[int, tuple[str, str]] = {
    429: ("TooManyRequests", "Too many requests, please try again later."),
    500: ("InternalError", "Internal error occurred: etcdserver: request timed out"),
    503: ("ServiceUnavailable", "the server is currently unable to handle the request"),
}


def make_pod(
    name: str,
    namespace: str = "default",
    *,
    uid: str,
    node: str = "node-a",
    ip: str | None = "10.0.0.10",
    containers: dict[str, str] | None = None,
    phase: str = "Running",
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    start_time: str | None = "2026-11-21T05:00:00Z",
    owner: tuple[str, str] | None = ("Job", "train"),
    host_network: bool = False,
    active_deadline_seconds: int | None = None,
    exit_codes: dict[str, int] | None = None,
) -> dict[str, Any]:
    """A pod object shaped like the API's (only the fields gpu-eta reads, plus a few more).

    ``exit_codes``: containers whose state is terminated, with that exit code (as the
    kubelet writes it once a container's process ended; the others are running)."""
    containers = containers if containers is not None else {"main": "containerd://" + "ab" * 32}
    meta: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "uid": uid,
        "creationTimestamp": "2026-11-21T04:59:58Z",
        "labels": labels or {},
    }
    if annotations:
        meta["annotations"] = annotations
    if owner:
        meta["ownerReferences"] = [
            {
                "apiVersion": "batch/v1",
                "kind": owner[0],
                "name": owner[1],
                "uid": "99999999-0000-4000-8000-000000000000",
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
    spec: dict[str, Any] = {
        "nodeName": node,
        "containers": [{"name": c, "image": "python:3.11"} for c in containers],
        "restartPolicy": "Never",
    }
    if host_network:
        spec["hostNetwork"] = True
    if active_deadline_seconds is not None:
        spec["activeDeadlineSeconds"] = active_deadline_seconds
    status: dict[str, Any] = {"phase": phase, "hostIP": "192.168.1.10"}
    if ip:
        status["podIP"] = ip
        status["podIPs"] = [{"ip": ip}]
    if start_time:
        status["startTime"] = start_time
    exit_codes = exit_codes or {}
    status["containerStatuses"] = [
        {
            "name": c,
            "containerID": cid,
            "image": "python:3.11",
            "ready": c not in exit_codes,
            "restartCount": 0,
            "state": (
                {
                    "terminated": {
                        "exitCode": exit_codes[c],
                        "reason": "Completed" if exit_codes[c] == 0 else "Error",
                        "startedAt": start_time,
                        "finishedAt": "2026-11-21T06:00:00Z",
                        "containerID": cid,
                    }
                }
                if c in exit_codes
                else {"running": {"startedAt": start_time}}
            ),
        }
        for c, cid in containers.items()
        if cid
    ]
    return {"metadata": meta, "spec": spec, "status": status}


def make_job(
    name: str,
    namespace: str = "default",
    *,
    uid: str = "99999999-0000-4000-8000-000000000000",
    active_deadline_seconds: int | None = 3600,
    start_time: str | None = "2026-11-21T04:59:50Z",
) -> dict[str, Any]:
    """A ``batch/v1`` Job object shaped like the API's (the fields gpu-eta reads and a
    few more); its default uid is the one ``make_pod``'s owner reference names."""
    spec: dict[str, Any] = {
        "parallelism": 1,
        "completions": 1,
        "backoffLimit": 0,
        "template": {"spec": {"containers": [{"name": "main", "image": "python:3.11"}]}},
    }
    if active_deadline_seconds is not None:
        spec["activeDeadlineSeconds"] = active_deadline_seconds
    status: dict[str, Any] = {"active": 1, "ready": 1}
    if start_time is not None:
        status["startTime"] = start_time
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid,
            "creationTimestamp": "2026-11-21T04:59:50Z",
            "labels": {"job-name": name},
        },
        "spec": spec,
        "status": status,
    }


class FakeKubeAPI:
    """Start with ``start()``; always ``stop()`` (idempotent)."""

    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self.requests: list[tuple[str, dict[str, str]]] = []
        self.list_pages: list[int] = []  # items in each list answer (one per page)
        self._cond = threading.Condition()
        self._pods: dict[tuple[str, str], dict[str, Any]] = {}
        self._jobs: dict[tuple[str, str], dict[str, Any]] = {}
        self.jobs_forbidden = False  # answer Job GETs 403, as without the RBAC rule
        self.job_delay_seconds = 0.0  # wait this long before answering a Job GET
        # HTTP statuses to answer the next Job GETs with, one each (403, ``JOB_FAILURES``)
        self.job_failures: list[int] = []
        # the server's --min-request-timeout: a watch without timeoutSeconds (or 0)
        # ends after a random time between it and twice it
        self.min_request_timeout_seconds = 1800.0
        self.expire_continue = False  # answer every continue token 410 Expired
        # answer a watch from a compacted resourceVersion HTTP 410, not 200 + ERROR event
        self.expire_watch_status = False
        self.expired_watches = 0  # watches answered 410 Expired, either way
        # answer every watch from a resourceVersion 410 Expired, a freshly listed one's
        # too (a storage whose watch cache refuses what its list served); "0" is any
        # version, never too old
        self.expire_every_watch = False
        self._events: list[tuple[int, str, dict[str, Any]]] = []
        # bookmarks asked for so far: a count, not events, so that one asked after a
        # compaction (which clears the events) still reaches the open watches
        self._bookmarks = 0
        self._rv = 100
        self._floor = 0
        self._generation = 0
        self._ends = 0
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._held: socket.socket | None = None  # the port while stopped (``stop``)
        self._conns: set[socket.socket] = set()  # open watches
        self._sockets: set[socket.socket] = set()  # every open connection, idle ones too

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # -- store ------------------------------------------------------------------------

    def _record(self, kind: str, obj: dict[str, Any]) -> None:
        self._rv += 1
        obj = copy.deepcopy(obj)
        obj["metadata"]["resourceVersion"] = str(self._rv)
        if kind == "DELETED":
            self._pods.pop((obj["metadata"]["namespace"], obj["metadata"]["name"]), None)
        else:
            self._pods[(obj["metadata"]["namespace"], obj["metadata"]["name"])] = obj
        self._events.append((self._rv, kind, obj))
        self._cond.notify_all()

    def add_pod(self, pod: dict[str, Any]) -> None:
        with self._cond:
            self._record("ADDED", pod)

    def update_pod(self, pod: dict[str, Any]) -> None:
        with self._cond:
            self._record("MODIFIED", pod)

    def delete_pod(self, namespace: str, name: str) -> None:
        with self._cond:
            self._record("DELETED", self._pods[(namespace, name)])

    def compact(self) -> None:
        """Forget history: watches from any earlier resourceVersion get 410 Gone.

        etcd's revision moves on with every object in the cluster, so the current
        version also advances past everything this client has seen.
        """
        with self._cond:
            self._rv += 1
            self._floor = self._rv
            self._events.clear()

    def bookmark(self) -> None:
        """Ask open watches that allowed bookmarks to send one now."""
        with self._cond:
            self._bookmarks += 1
            self._cond.notify_all()

    def end_watches(self) -> None:
        """End open watches cleanly, as their timeout would (``timeoutSeconds``)."""
        with self._cond:
            self._ends += 1
            self._cond.notify_all()

    def current_version(self) -> int:
        """The store's resourceVersion now (etcd's revision)."""
        with self._cond:
            return self._rv

    def open_watches(self) -> int:
        with self._cond:
            return len(self._conns)

    def add_job(self, job: dict[str, Any]) -> None:
        """Serve a Job at ``GET /apis/batch/v1/namespaces/<ns>/jobs/<name>``."""
        with self._cond:
            self._jobs[(job["metadata"]["namespace"], job["metadata"]["name"])] = copy.deepcopy(job)

    def job_gets(self) -> int:
        return sum(1 for path, _ in self.requests if path.startswith("/apis/batch/v1/"))

    def count(self, watch: bool) -> int:
        """Pod lists (``watch=False``) or pod watches served so far."""
        return sum(
            1
            for path, q in self.requests
            if path == "/api/v1/pods" and (q.get("watch") in ("true", "1")) == watch
        )

    # -- lifecycle --------------------------------------------------------------------

    def start(self) -> FakeKubeAPI:
        fake = self

        class Handler(_Handler):
            api = fake

        self._release_port()
        deadline = time.monotonic() + 30
        while True:
            try:
                server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        server.daemon_threads = True
        with self._cond:
            self._generation += 1
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Die abruptly: stop accepting, drop every open connection mid-stream."""
        server, self._server = self._server, None
        if server is None:
            return
        with self._cond:
            self._generation += 1
            self._cond.notify_all()
            conns = list(self._sockets)
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        server.shutdown()
        server.server_close()
        if self._thread is not None:
            self._thread.join(10)
        self._hold_port()

    def close(self) -> None:
        """Stop for good: the port is given up."""
        self.stop()
        self._release_port()

    def _hold_port(self) -> None:
        """Keep the port bound, not listening, until ``start`` or ``close``.

        SO_REUSEADDR: the dropped connections' TIME_WAIT would refuse the bind
        otherwise; a port picked by ``bind(port 0)`` elsewhere is still never this one
        (Linux avoids a port any socket is bound to while free ones remain)."""
        held = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            held.bind(("127.0.0.1", self.port))
        except OSError:  # taken already: nothing to hold
            held.close()
            return
        self._held = held

    def _release_port(self) -> None:
        held, self._held = self._held, None
        if held is not None:
            held.close()

    def __enter__(self) -> FakeKubeAPI:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Handler(BaseHTTPRequestHandler):
    api: FakeKubeAPI
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def setup(self) -> None:
        super().setup()
        with self.api._cond:
            self.api._sockets.add(self.connection)

    def finish(self) -> None:
        with self.api._cond:
            self.api._sockets.discard(self.connection)
        super().finish()

    def _json(self, code: int, body: dict[str, Any]) -> None:
        self._send(code, json.dumps(body).encode())

    def _send(self, code: int, data: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _status(self, code: int, reason: str, message: str) -> None:
        self._json(
            code,
            {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Failure",
                "message": message,
                "reason": reason,
                "code": code,
            },
        )

    def do_GET(self) -> None:
        api = self.api
        parts = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        api.requests.append((parts.path, query))
        if parts.path.startswith("/apis/batch/v1/namespaces/"):
            self._job(parts.path)
            return
        if parts.path != "/api/v1/pods":
            self._status(
                404, "NotFound", f"the server could not find the requested resource {parts.path}"
            )
            return
        node = None
        selector = query.get("fieldSelector", "")
        if selector:
            if not selector.startswith("spec.nodeName="):
                self._status(400, "BadRequest", f"unsupported field selector {selector!r}")
                return
            node = selector.split("=", 1)[1]
        if query.get("watch") in ("true", "1"):
            self._watch(node, query)
        else:
            self._list(node, query)

    def _list(self, node: str | None, query: dict[str, str]) -> None:
        """A pod list, or one page of it (``limit``/``continue``), as the API answers."""
        api = self.api
        limit = int(query.get("limit") or 0)
        after: tuple[str, str] | None = None
        with api._cond:
            rv = api._rv
            if query.get("continue"):
                continued = self._continued(query)
                if continued is None:
                    return
                if continued[0] < api._floor or api.expire_continue:
                    self._status(
                        410,
                        "Expired",
                        "The provided continue parameter is too old to display a consistent "
                        "list result. You can start a new list without the continue parameter.",
                    )
                    return
                rv, after = continued[0], continued[1:]
            keys = sorted(
                key
                for key, pod in api._pods.items()
                if (node is None or pod["spec"].get("nodeName") == node)
                and (after is None or key > after)
            )
            page = keys[:limit] if limit else keys
            metadata: dict[str, Any] = {"resourceVersion": str(rv)}
            if len(page) < len(keys):
                last = {"rv": rv, "namespace": page[-1][0], "name": page[-1][1]}
                metadata["continue"] = base64.b64encode(json.dumps(last).encode()).decode()
                if not (query.get("fieldSelector") or query.get("labelSelector")):
                    # the server counts what remains only when no selector filters it
                    metadata["remainingItemCount"] = len(keys) - len(page)
            items = [api._pods[key] for key in page]  # encoded here, while no pod changes
            document = {"kind": "PodList", "apiVersion": "v1", "metadata": metadata, "items": items}
            body = json.dumps(document).encode()
        api.list_pages.append(len(page))
        self._send(200, body)

    def _continued(self, query: dict[str, str]) -> tuple[int, str, str] | None:
        """A list's ``continue`` token as (resourceVersion, namespace, name) of the last
        pod served; None once answered 400 as the real server answers a
        ``resourceVersion`` other than ``"0"`` beside a token, or a token that is none."""
        version = query.get("resourceVersion", "")
        if version not in ("", "0"):
            self._status(
                400, "BadRequest", "specifying resource version is not allowed when using continue"
            )
            return None
        try:
            token = json.loads(base64.b64decode(query["continue"], validate=True))
            return int(token["rv"]), str(token["namespace"]), str(token["name"])
        except (ValueError, TypeError, KeyError) as err:  # binascii.Error is a ValueError
            self._status(400, "BadRequest", f"invalid continue token: {err}")
            return None

    def _job(self, path: str) -> None:
        """``GET /apis/batch/v1/namespaces/<ns>/jobs/<name>`` as the API server answers."""
        segments = path.split("/")  # "", apis, batch, v1, namespaces, ns, jobs, name
        if len(segments) != 8 or segments[6] != "jobs":
            self._status(
                404, "NotFound", f"the server could not find the requested resource {path}"
            )
            return
        namespace, name = segments[5], segments[7]
        time.sleep(self.api.job_delay_seconds)
        with self.api._cond:
            failure = self.api.job_failures.pop(0) if self.api.job_failures else None
        if failure is not None and failure != 403:
            reason, message = JOB_FAILURES[failure]
            self._status(failure, reason, message)
            return
        if failure == 403 or self.api.jobs_forbidden:
            self._status(
                403,
                "Forbidden",
                f'jobs.batch "{name}" is forbidden: User '
                '"system:serviceaccount:gpu-eta:gpu-eta-exporter" cannot get resource "jobs" '
                f'in API group "batch" in the namespace "{namespace}"',
            )
            return
        with self.api._cond:
            job = copy.deepcopy(self.api._jobs.get((namespace, name)))
        if job is None:
            self._status(404, "NotFound", f'jobs.batch "{name}" not found')
            return
        self._json(200, {"kind": "Job", "apiVersion": "batch/v1", **job})

    def _chunk(self, event: dict[str, Any]) -> None:
        data = json.dumps(event).encode() + b"\n"
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _watch(self, node: str | None, query: dict[str, str]) -> None:
        api = self.api
        timeout = float(query.get("timeoutSeconds") or 0)
        if timeout == 0:  # GetTimeoutForWatch: the server picks one, spreading the load
            timeout = api.min_request_timeout_seconds * (random.random() + 1.0)
        bookmarks = query.get("allowWatchBookmarks") in ("true", "1")
        rv_text = query.get("resourceVersion", "0") or "0"
        version = int(rv_text)
        with api._cond:  # "0": any version, never too old
            expired = version > 0 and (version < api._floor or api.expire_every_watch)
            floor = api._floor
            if expired:
                api.expired_watches += 1
        if expired and api.expire_watch_status:
            self._status(410, "Expired", f"too old resource version: {rv_text} ({floor})")
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        with api._cond:
            api._conns.add(self.connection)
            generation = api._generation
            ends = api._ends
        ended = False  # cleanly, with the final chunk: the connection stays open
        try:
            start = int(rv_text)
            pending: list[dict[str, Any]] = []
            with api._cond:
                if start == 0:
                    start = api._rv
                    pending = [
                        {"type": "ADDED", "object": self._typed(p)}
                        for p in api._pods.values()
                        if node is None or p["spec"].get("nodeName") == node
                    ]
                elif expired:
                    pending = [
                        {
                            "type": "ERROR",
                            "object": {
                                "kind": "Status",
                                "apiVersion": "v1",
                                "metadata": {},
                                "status": "Failure",
                                "message": f"too old resource version: {start} ({floor})",
                                "reason": "Expired",
                                "code": 410,
                            },
                        }
                    ]
                    start = -1
            for event in pending:
                self._chunk(event)
            if start < 0:
                self._end()
                ended = True
                return
            deadline = time.monotonic() + timeout
            sent_upto = start
            bookmark_seen = api._bookmarks
            while True:
                with api._cond:
                    while True:
                        if api._generation != generation:
                            return  # killed: drop the connection without a final chunk
                        if api._ends != ends:
                            remaining = 0.0
                            fresh, marks = [], False
                            break
                        fresh = [e for e in api._events if e[0] > sent_upto]
                        marks = api._bookmarks != bookmark_seen
                        remaining = deadline - time.monotonic()
                        if fresh or marks or remaining <= 0:
                            break
                        api._cond.wait(min(remaining, 0.5))
                    bookmark_seen = api._bookmarks
                if remaining <= 0 and not fresh and not marks:
                    self._end()
                    ended = True
                    return
                for rv, kind, obj in fresh:
                    sent_upto = rv
                    if node is None or obj["spec"].get("nodeName") == node:
                        self._chunk({"type": kind, "object": self._typed(obj)})
                if marks and bookmarks:
                    self._chunk(
                        {
                            "type": "BOOKMARK",
                            "object": {
                                "kind": "Pod",
                                "apiVersion": "v1",
                                "metadata": {"resourceVersion": str(api._rv)},
                            },
                        }
                    )
        except (BrokenPipeError, ConnectionResetError, OSError):
            return
        finally:
            with api._cond:
                api._conns.discard(self.connection)
            self.close_connection = not ended

    @staticmethod
    def _typed(obj: dict[str, Any]) -> dict[str, Any]:
        out = {"kind": "Pod", "apiVersion": "v1"}
        out.update(copy.deepcopy(obj))
        return out

    def _end(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()
