"""``POST /progress``: training code reports its progress to the node's exporter.

Trust comes from the network, not from the body: the sender is the pod whose IP is
the connection's source address (from the exporter's pod cache). A body cannot name
another pod; its optional ``container`` must be one of the sender pod's containers.
Order of checks, each answered with a one-line reason and counted by result:

1. source address is no pod on this node → 403 ``forbidden``, at accept (nothing read)
2. no Content-Length → 411 ``malformed``; body over ``MAX_BODY_BYTES`` → 413 ``too_large``
3. the pod exceeds its rate (token bucket per pod) → 429 ``rate_limited``
4. not a JSON object → 400 ``malformed``; bad value → 400 ``invalid``
5. it would start a run beyond its container's cap on new runs
   (``exporter.progress_runs``) → 429 ``too_many_runs``; it is of a named run that a
   later start of its ``run_id`` replaced (``progress.superseded``) → 409 ``superseded``
6. stored → 200 ``accepted``; with a state file only once the report is on disk
   (``exporter.progress_journal``), or 503 ``not_persisted`` if that write failed

Both 429s carry ``Retry-After``: the whole seconds until the bucket that refused has a
token again (``progress_runs.retry_after``). The 503 carries none: its report was
applied (in memory), and the disk recovers on its own schedule, not the sender's; a
sender holding back would only leave its progress stale meanwhile.

Protocol-level answers are counted too (``PROGRESS_RESULTS``): 404, 405, 408 (header
or request deadline missed), 431, 500, and GET ``/healthz``; so is a connection reset at
accept because it is over ``MAX_CONNECTIONS`` or ``MAX_CONNECTIONS_PER_ADDRESS``
(``too_many_connections``: it gets no answer).

hostNetwork pods share the node's IP, so their address proves nothing. They are
refused unless the exporter runs with ``allow_host_network`` AND the pod carries
the annotation ``gpu-eta.io/progress-host-network: "true"`` AND exactly one such
annotated hostNetwork pod that has not finished is on the node (otherwise the
address is ambiguous).

Addresses: an empty listen host (``:9843``, the default) listens on every address
of both families when the node has IPv6 (one dual-stack socket), on IPv4 only when
it has not; ``[::]:9843`` is dual-stack too. An IPv4 sender seen on an IPv6 socket
(``::ffff:10.1.2.3``) is looked up as ``10.1.2.3``, the form the pod cache holds.

The HTTP side is a minimal HTTP/1.1 reader on asyncio (one thread for all
connections, keep-alive, bounded headers/bodies/connections, each connection a fair
share of the loop: ``_Connection``); the decision for a request is
``ProgressListener.handle``, plain code without sockets.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import NamedTuple

from gpu_eta.common.connection_slots import ConnectionSlots
from gpu_eta.common.listen_socket import listening_socket
from gpu_eta.exporter.collectors import CollectorError
from gpu_eta.exporter.progress import (
    MAX_BODY_BYTES,
    ReportError,
    beyond_run_names,
    parse_report,
    skipped_note,
)
from gpu_eta.exporter.progress_runs import TokenBuckets, retry_after
from gpu_eta.exporter.progress_store import ProgressStore
from gpu_eta.exporter.readings import PodMeta, pod_finished
from gpu_eta.exporter.snapshot import PROGRESS_RESULTS

log = logging.getLogger(__name__)

HOST_NETWORK_ANNOTATION = "gpu-eta.io/progress-host-network"
DEFAULT_RATE_PER_SECOND = 10.0
DEFAULT_BURST = 20
MAX_CONNECTIONS = 1024
MAX_HEADER_BYTES = 8192
MAX_CONNECTIONS_PER_ADDRESS = 8
# Deadlines per request, from its first byte: the headers, then the whole request.
# Not reset by each byte (a byte every 2 s would hold a slot for ever otherwise).
HEADER_TIMEOUT_SECONDS = 5.0
REQUEST_TIMEOUT_SECONDS = 10.0
# A kept-alive connection with no request in progress is closed after this.
IDLE_TIMEOUT_SECONDS = 10.0
# One connection's share of the event loop: at most READ_BYTES read at once, at most
# MAX_REQUESTS_PER_TURN of its requests answered before every other connection has
# had its turn, and at most MAX_UNSENT_BYTES of answers its peer has not read held in
# memory (then nothing more is read from it until the peer reads). Why: a pod
# pipelining requests without reading the answers grew the exporter without bound
# (43 → 250 MB for 120 MB of ``GET /healthz``, the chart's limit 384Mi), and one read
# of 256 KiB (~10,000 small requests) answered in one go held every other pod's
# report back for seconds (bench/progress_flood.py).
READ_BYTES = 16 * 1024
MAX_REQUESTS_PER_TURN = 8
MAX_UNSENT_BYTES = 64 * 1024
# A connection whose answers store nothing this many times in a row (``GET /healthz``,
# any refusal: a 429 among them) is closed after the last, which says so. A client
# honouring ``Retry-After`` never gets near; one that keeps sending on regardless pays
# a new connection (and its handshake) every so many answers instead of holding one.
MAX_UNSTORED_IN_A_ROW = 100
# A connection refused at accept gets its 403, then its request is read and dropped
# for at most this long (closing at once would reset it before the client reads the
# 403); at most MAX_REFUSED_LINGERING such connections at once, the rest are reset.
REFUSED_LINGER_SECONDS = 1.0
MAX_REFUSED_LINGERING = 64
# A refused report is logged (WARNING, naming the pod or address and why) at most once
# per sender and result in this long; at most MAX_REFUSAL_KEYS senders are remembered
# (the least recently logged forgotten first). Why: the counter says how many reports a
# node refuses, not whose; a user's "my job shows no progress" needs the pod, and the
# client's own warning is in the pod's log, which the admin may not read.
REFUSAL_LOG_SECONDS = 600.0
MAX_REFUSAL_KEYS = 1024
MAX_LOGGED_REASON_CHARS = 200
# and at most REFUSAL_LOG_BURST such lines at once, then one every
# REFUSAL_LOG_REFILL_SECONDS over every sender: many senders (a scan of the port from
# many addresses) cost log lines at a fixed rate, the rest counted in the next line
REFUSAL_LOG_BURST = 20
REFUSAL_LOG_REFILL_SECONDS = 3.0


# Pods whose rate-limit bucket is kept at most (least recently reporting forgotten first)
MAX_RATE_KEYS = 4096
# Addresses whose pod lookup is cached at most (the oldest looked up forgotten first)
MAX_LOOKUPS = 4096


class Answer(NamedTuple):
    """The answer to one request: its status, one-line text and, for a refusal whose
    wait is known (both 429s), the ``Retry-After`` in whole seconds."""

    status: int
    text: str
    retry_after: int | None = None


class AddressIndex(NamedTuple):
    """One pod list by address, for the senders the pod cache names no pod for
    (``ProgressListener.sender``): how many pods that send from their own IP (not
    hostNetwork, not finished) have each address, and the running hostNetwork pods
    on each. Made once per list the pod source hands out (``pods``: that list)."""

    pods: Sequence[PodMeta]
    own: Mapping[str, int]
    host_network: Mapping[str, tuple[PodMeta, ...]]


def address_index(pods: Sequence[PodMeta]) -> AddressIndex:
    """``pods`` by address (``AddressIndex``). Pure."""
    own: dict[str, int] = {}
    host_network: dict[str, list[PodMeta]] = {}
    for pod in pods:
        if pod.ip is None or pod_finished(pod):
            continue
        if pod.host_network:
            host_network.setdefault(pod.ip, []).append(pod)
        else:
            own[pod.ip] = own.get(pod.ip, 0) + 1
    return AddressIndex(pods, own, {ip: tuple(on) for ip, on in host_network.items()})


def _who(pod: PodMeta) -> str:
    """How a pod is named in the refusal log: ``namespace/name``."""
    return f"{pod.namespace}/{pod.name}"


class ProgressListener:
    """An asyncio HTTP endpoint in a background thread, feeding a ProgressStore.

    One event-loop thread instead of a thread per connection: every pod keeps one
    connection open, and a thread each would cost more in GIL hand-offs than the
    requests themselves (see ``bench/progress_ingest.py``).
    """

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
        lookup_ttl_seconds: float = 1.0,
    ):
        self.host = host
        self.port = port
        self.store = store
        self._pod_by_ip = pod_by_ip
        self._pods = pods
        self.allow_host_network = allow_host_network
        if not 0 < rate_per_second < math.inf:
            raise ValueError(f"rate_per_second must be > 0, got {rate_per_second!r}")
        self._rate = float(rate_per_second)
        self._burst = float(burst)
        self._clock = clock
        self._counts = dict.fromkeys(PROGRESS_RESULTS, 0)
        self._skipped_fields = 0  # free-form fields left out of stored reports
        self._lock = threading.Lock()
        # per pod: ``burst`` reports at once, refilled at ``rate_per_second``
        self._buckets = TokenBuckets(self._burst, 1.0 / self._rate, MAX_RATE_KEYS)
        # address -> (expiry, pod): the pod cache is asked at most once a second per
        # address; pods do not change IPs faster than the pod watch reports them
        # (the oldest entry dropped past MAX_LOOKUPS, not the whole cache: a scan from
        # many addresses must not send every pod's next report to the pod cache)
        self._lookups: OrderedDict[str, tuple[float, PodMeta | None]] = OrderedDict()
        self._lookup_ttl = lookup_ttl_seconds
        self._index: AddressIndex | None = None  # ``_address_index``
        self._server: _Server | None = None
        # a line per (sender, result) per REFUSAL_LOG_SECONDS, and the addresses' budget
        self._refusal_keys = TokenBuckets(1, REFUSAL_LOG_SECONDS, MAX_REFUSAL_KEYS)
        self._refusal_lines = TokenBuckets(REFUSAL_LOG_BURST, REFUSAL_LOG_REFILL_SECONDS, 1)
        self._refusals_unlogged = 0  # refusals due a line the budget did not allow

    # -- lifecycle -------------------------------------------------------------------

    def start(self) -> None:
        """Bind now (so callers can connect as soon as this returns), serve in a thread."""
        if self._server is not None:
            return
        self._server = _Server(self, self.host, self.port)
        self.port = self._server.port

    def stop(self) -> None:
        """Stop serving and close the socket; idempotent."""
        server, self._server = self._server, None
        if server is not None:
            server.close()

    def counts(self) -> Mapping[str, int]:
        """Reports by result since start (``gpu_eta_exporter_progress_reports_total``)."""
        with self._lock:
            return dict(self._counts)

    def skipped_fields(self) -> int:
        """Free-form fields left out of reports whose progress was stored, since start
        (``gpu_eta_exporter_progress_fields_skipped_total``): a value over 1e15, not a
        number, an invalid name, beyond 16 names of the report (``progress.parse_report``)
        or a new name of a run that holds 16 (``progress.merged_metrics``)."""
        with self._lock:
            return self._skipped_fields

    def poll(self) -> Mapping[str, int]:
        """The ``progress`` collector's run: ``counts()`` while the endpoint serves.

        Raises ``CollectorError`` when it does not (never started, stopped, or its
        event-loop thread ended on a bug), so pods' reports being refused at the
        socket shows as ``collector_success{collector="progress"} 0``.
        """
        server = self._server
        if server is None or not server.thread.is_alive():
            raise CollectorError(f"progress endpoint on {self.host}:{self.port} is not serving")
        self._say_unlogged()
        return self.counts()

    def _say_unlogged(self) -> None:
        """One line for the refusals the log budget left unlogged since the last line,
        once it allows one: after a burst with no later refusal they were never said."""
        with self._lock:
            unlogged = self._refusals_unlogged
            if not unlogged or not self._refusal_lines.take("all", time.monotonic()):
                return
            self._refusals_unlogged = 0
        log.warning(
            "progress: %d refusals from addresses that are no pod not logged (log budget: "
            "%d lines, then one every %gs); the counter has them all",
            unlogged,
            REFUSAL_LOG_BURST,
            REFUSAL_LOG_REFILL_SECONDS,
        )

    # -- request logic (no HTTP here: testable on its own) ---------------------------

    def _count(self, result: str) -> None:
        with self._lock:
            self._counts[result] += 1

    def _refused(
        self,
        sender: str,
        result: str,
        status: int,
        text: str,
        pod: bool = False,
        retry_after: int | None = None,
        logged: str | None = None,
    ) -> Answer:
        """Count a refusal, log it (rate-limited, ``REFUSAL_LOG_SECONDS``) and return
        the answer. ``sender`` is the pod (``namespace/name``, ``pod`` True) or, when
        none, the address. Only address senders share the line budget
        (``REFUSAL_LOG_BURST``): a pod is one of this node's, and many addresses (a
        scan, pods elsewhere posting to this node) must not take every line from it.
        ``logged`` is what the log says instead of ``text`` when the answer names what
        the sender wrote (a free-form key, for the sender to find): bodies are never
        logged. Either is logged as a bounded repr."""
        self._count(result)
        now = time.monotonic()
        key = (sender, result)
        unlogged = 0
        with self._lock:
            # due when its window has passed (``wait_seconds`` also keeps the key as
            # recently used: remembered by its latest refusal, logged or not)
            due = self._refusal_keys.wait_seconds(key, now) == 0
            if due and not pod and not self._refusal_lines.take("all", now):
                self._refusals_unlogged += 1
                due = False
            if due:
                self._refusal_keys.take(key, now)
                if not pod:  # an address's line carries the addresses' count
                    unlogged, self._refusals_unlogged = self._refusals_unlogged, 0
        if due:
            log.warning(
                "progress: refused from %s (%s): %r (logged at most every %gs per sender "
                "and reason%s)",
                sender,
                result,
                (text if logged is None else logged)[:MAX_LOGGED_REASON_CHARS],
                REFUSAL_LOG_SECONDS,
                f"; {unlogged} refusals from addresses not logged before this (log budget)"
                if unlogged
                else "",
            )
        return Answer(status, text, retry_after)

    def sender(self, address: str) -> tuple[PodMeta | None, str]:
        """The pod that owns ``address``, or None and the one-line reason for refusing."""
        address = peer_address(address)
        now = time.monotonic()
        cached = self._lookups.get(address)
        if cached is not None and cached[0] > now:
            pod = cached[1]
        else:
            try:
                pod = self._pod_by_ip(address)
            except Exception as err:  # the pod cache is someone else's code: never a 500
                log.warning("progress: pod lookup for %s failed: %s", address, err)
                return None, "pod lookup failed"
            self._lookups[address] = (now + self._lookup_ttl, pod)
            self._lookups.move_to_end(address)
            while len(self._lookups) > MAX_LOOKUPS:
                self._lookups.popitem(last=False)
        if pod is not None and not pod.host_network:
            return pod, ""
        if pod is None:
            sharing = self._pods_sharing(address)
            if sharing > 1:
                return None, f"{address} is the address of {sharing} pods on this node"
        # The pod caches index pod IPs only (kube.py and simulated_node.py leave
        # hostNetwork pods out: their IP is the node's, shared), so a hostNetwork
        # sender is looked up among all pods here.
        if not self.allow_host_network:
            if pod is None:
                return None, f"{address} is not a pod on this node"
            return None, "hostNetwork pods may not report (exporter option off)"
        # Finished pods (Succeeded/Failed, kept listed by a Job without
        # ``ttlSecondsAfterFinished``) run nothing that could report: counted, one
        # finished annotated pod refused every later one on the node "need exactly one".
        on_address = self._address_index().host_network.get(address, ())
        if pod is None and not on_address:
            return None, f"{address} is not a pod on this node"
        candidates = [
            p
            for p in on_address
            if p.annotations.get(HOST_NETWORK_ANNOTATION, "").lower() == "true"
        ]
        if len(candidates) != 1:
            return None, (
                f"hostNetwork: {len(candidates)} pods annotated {HOST_NETWORK_ANNOTATION}"
                " on this node (need exactly one)"
            )
        return candidates[0], ""

    def _pods_sharing(self, address: str) -> int:
        """How many pods that can send from their own IP (not hostNetwork, not
        finished) have ``address``: when the pod cache names none of several, they are
        alike (``kube._address_owners``) and the refusal says so, not "no pod"."""
        try:
            index = self._address_index()
        except Exception:  # no pod list yet: "not a pod on this node" stands
            return 0
        return index.own.get(address, 0)

    def _address_index(self) -> AddressIndex:
        """The pod list now, by address (``address_index``): made again only when the
        pod source hands out another list. Why: every request of a sender the pod
        cache has no own-IP pod for (a hostNetwork pod, each connection of an address
        of no pod) read the whole list, twice for a hostNetwork pod (~17 µs at 500
        pods, a fifth of the listener's time per request). A tuple is the same list
        while it is the same object (the pod caches hand out a new one per change);
        any other sequence may change in place, so it is indexed at every call."""
        pods = self._pods()
        index = self._index  # one read: the event loop and a caller's thread may swap it
        if index is None or index.pods is not pods or not isinstance(pods, tuple):
            index = address_index(pods)
            self._index = index
        return index

    def _over_rate(self, pod: PodMeta) -> int | None:
        """None when ``pod`` may send a report now (it takes a token), else the whole
        seconds until it may (the 429's ``Retry-After``)."""
        key, now = (pod.namespace, pod.name), time.monotonic()
        with self._lock:
            if self._buckets.take(key, now):
                return None
            return retry_after(self._buckets.wait_seconds(key, now))

    def handle(
        self,
        address: str,
        length: int | None,
        body: bytes,
        on_durable: Callable[[bool], None] | None = None,
    ) -> Answer:
        """Decide one request: (HTTP status, one-line reason, ``Retry-After``). Counts
        the result.

        ``length`` is the request's Content-Length (None when absent) and ``body`` the
        bytes the connection buffered for it (empty when over the limit or absent):
        the size checks go by the declared length, so an oversized request is refused
        without its body ever being read.

        With ``on_durable`` and a journaled store, an accepted report is not counted
        here: the store calls ``on_durable(ok)`` once the report is on disk and the
        caller answers (and counts) then, 200 or 503.
        """
        pod, reason = self.sender(address)
        if pod is None:
            return self._refused(peer_address(address), "forbidden", 403, f"forbidden: {reason}")
        who = _who(pod)
        if length is None:
            return self._refused(
                who, "malformed", 411, "malformed: Content-Length required", pod=True
            )
        if length > MAX_BODY_BYTES:
            return self._refused(
                who, "too_large", 413, f"too_large: body over {MAX_BODY_BYTES} bytes", pod=True
            )
        wait = self._over_rate(pod)
        if wait is not None:
            return self._refused(
                who,
                "rate_limited",
                429,
                f"rate_limited: over {self._rate:g} reports/s for this pod (next in {wait} s)",
                pod=True,
                retry_after=wait,
            )
        now = self._clock()
        deferred = on_durable is not None and self.store.journaled
        try:
            # no ``now``: the store holds ``run_start`` to it, knowing the stored run
            # (a report continuing it may state a start ahead of a clock stepped back)
            report = parse_report(body)
            container = report_container(pod, report.container)
            progress = self.store.merge(
                pod.namespace,
                pod.name,
                container,
                "http",
                report,
                now,
                on_durable=on_durable if deferred else None,
            )
        except ReportError as err:  # 400; 409 superseded; 429 over its container's cap
            return self._refused(
                who,
                err.result,
                err.status,
                f"{err.result}: {err}",
                pod=True,
                retry_after=err.retry_after,
                logged=f"{err.result}: {err.logged}",
            )
        beyond = beyond_run_names(progress, report)
        if beyond:  # new names of a run that holds 16 already: left out like a bad one
            report = replace(report, skipped=(*report.skipped, *beyond))
        if report.skipped:
            with self._lock:
                self._skipped_fields += len(report.skipped)
        if not deferred:
            self._count("accepted")
        note = skipped_note(report)
        return Answer(200, f"accepted: {pod.namespace}/{pod.name} run {progress.run_id}{note}")


def report_container(pod: PodMeta, named: str | None) -> str:
    """The container a report from ``pod`` is filed under.

    The body's ``container`` when it is one of the pod's containers (its spec's
    names, known from the pod's creation; else those with a runtime id), else the
    pod's first container. With neither known, ``""``: a name the exporter cannot
    check must not become a label value and a store key, or one pod posting many
    names would fill the store and evict every other pod's progress (at most one row
    per pod this way). Why the spec: a container reporting in its first second,
    before the kubelet wrote its runtime id, was filed under ``""`` and its later
    reports under its name, two runs of one.
    """
    known = pod.containers or tuple(pod.container_ids)
    if named is not None and named in known:
        return named
    return known[0] if known else ""


def peer_address(address: str) -> str:
    """A connection's source address in the form the pod cache holds it.

    An IPv6 socket (dual-stack, or ``[::]``) sees an IPv4 sender as
    ``::ffff:10.1.2.3``; pods are indexed by ``10.1.2.3``, so without this every
    IPv4 pod was refused 403 there. IPv6 addresses come back compressed and in lower
    case (``fd00::1``), as Kubernetes writes pod IPs. Anything else is left as is.
    """
    if ":" not in address:
        return address
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address
    mapped = ip.ipv4_mapped if isinstance(ip, ipaddress.IPv6Address) else None
    return str(mapped if mapped is not None else ip)


_REASONS = {
    200: "OK",
    400: "Bad Request",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    408: "Request Timeout",
    409: "Conflict",
    411: "Length Required",
    413: "Content Too Large",
    429: "Too Many Requests",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    503: "Service Unavailable",
}


def content_length(values: list[str]) -> int | None:
    """The one Content-Length of a request, or ``ValueError``; None when absent.

    Strict, as RFC 9110 asks of a server: only ASCII digits (``int()`` would take
    ``+12``, ``1_2`` and spaces), at most 12 of them, and no second header with
    another or even the same value (a request smuggling trick).
    """
    if not values:
        return None
    if len(values) > 1:
        raise ValueError("more than one Content-Length")
    raw = values[0]
    if not (raw.isascii() and raw.isdigit()) or len(raw) > 12:
        raise ValueError(f"bad Content-Length {raw[:20]!r}")
    return int(raw)


class _Connection(asyncio.BufferedProtocol):
    """One client connection: a minimal HTTP/1.1 reader for ``POST /progress``.

    Only what the endpoint needs: a request line, headers (≤ ``MAX_HEADER_BYTES``),
    a Content-Length body (no chunked bodies), keep-alive. Everything else gets a
    one-line error and the connection is closed.

    Hygiene: a source address that is no pod here is answered 403 and closed at
    accept, before a byte is read; each request must bring its headers within
    ``HEADER_TIMEOUT_SECONDS`` and all of itself within ``REQUEST_TIMEOUT_SECONDS``
    of its first byte (408 otherwise); an idle kept-alive connection is closed after
    ``IDLE_TIMEOUT_SECONDS``. While an accepted report waits for the journal, the
    connection reads nothing more (answers stay in request order).

    Fair share (``READ_BYTES``, ``MAX_REQUESTS_PER_TURN``, ``MAX_UNSENT_BYTES``): reads
    are small, a turn answers a few requests and then gives the loop to the other
    connections (reading paused, the next turn queued with ``call_soon``), and while
    the peer leaves its answers unread (``pause_writing``) nothing more is read or
    answered. A peer that reads nothing until a deadline passes (the request's, or
    the idle one) is cut (``abort``) and counted ``timeout``: closing would wait for
    ever to send what it does not read. For the same reason every close goes through
    ``_close``: answers still unsent ``IDLE_TIMEOUT_SECONDS`` after it, the connection
    is cut and counted ``timeout`` too.
    """

    def __init__(self, listener: ProgressListener, server: _Server):
        self.listener = listener
        self.server = server
        self.buffer = bytearray()
        self.transport: asyncio.Transport | None = None
        self.ip = ""
        self.sender = ""  # the pod's namespace/name once admitted, else the address
        self.timer: asyncio.TimerHandle | None = None
        self.closer: asyncio.TimerHandle | None = None  # cuts a close its peer holds up
        self.counted = False
        self.request_started: float | None = None  # loop time of the request's first byte
        self.headers_done = False
        self.continued = False  # "100 Continue" sent for the request being read
        self.waiting = False  # an answer waits for the journal's fsync
        self.refused = False  # answered 403 at accept: what it sends is dropped
        self.paused = False  # reading paused while an answer waits (pipelining bound)
        self.write_paused = False  # the peer has MAX_UNSENT_BYTES of answers unread
        self.yielded = False  # this turn is over: the next one is queued (call_soon)
        self.unstored = 0  # answers in a row that stored no report
        self.eof = False  # the client is done sending (closed or half-closed its side)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername")
        self.ip = peer_address(peer[0]) if peer else ""
        if not self.server.admit(self.ip):
            # over MAX_CONNECTIONS or MAX_CONNECTIONS_PER_ADDRESS: reset, nothing read.
            # Counted: a pod whose reports cannot get in (a client leaking connections,
            # a flood filling the slots) shows in the metric, not only on the pod's side
            # Logged as the pod when it is one (the lookup is cached a second per address)
            pod, _reason = self.listener.sender(self.ip)
            self.listener._refused(
                _who(pod) if pod is not None else self.ip,
                "too_many_connections",
                0,
                "connection reset: over the connection caps",
                pod=pod is not None,
            )
            transport.abort()
            return
        self.counted = True
        self.server.connections.add(self)
        self.transport.set_write_buffer_limits(high=MAX_UNSENT_BYTES)  # type: ignore[union-attr]
        pod, reason = self.listener.sender(self.ip)
        if pod is not None:  # who its refusals are logged as (``_refuse``)
            self.sender = _who(pod)
        if pod is None:  # refused at accept: no request of it is ever parsed
            self.listener._refused(self.ip, "forbidden", 403, f"forbidden: {reason}")
            if self.server.lingering >= MAX_REFUSED_LINGERING:
                transport.abort()
                return
            self.refused = True
            self.server.lingering += 1
            self._reply(403, f"forbidden: {reason}", close=False, linger=True)
            if self.transport.can_write_eof():  # type: ignore[union-attr]
                try:
                    self.transport.write_eof()  # type: ignore[union-attr]
                except OSError:
                    # the peer went before its answer (a port scan, a TCP health
                    # check: ENOTCONN); raised, asyncio logged a traceback per client
                    transport.abort()
                    return
            self.timer = asyncio.get_running_loop().call_later(
                REFUSED_LINGER_SECONDS, transport.abort
            )
            return
        self._arm()

    def eof_received(self) -> bool | None:
        """The client is done sending: close our side too, once nothing is owed.

        A report waiting for the journal's fsync is owed its answer: the write side
        stays open until ``acked`` sends it, then the connection closes (``_close``,
        not the transport's own close on False: that one would wait for ever on a
        client that reads none of its answers). Why:
        a client that half-closes after its POST (``shutdown(SHUT_WR)``, as some
        one-shot clients do) got no answer at all, although its report was stored and
        counted accepted. Anything else complete was answered as it arrived; a
        request cut short by the EOF can never be completed.
        """
        self.eof = True
        if self.refused:
            return False  # its linger timer cuts it if the close is held up
        self._close_if_done()
        return True  # closed by ``_close``, which bounds the wait for unread answers

    def connection_lost(self, exc: Exception | None) -> None:
        for timer in (self.timer, self.closer):
            if timer is not None:
                timer.cancel()
        self.timer = self.closer = None
        if self.refused:
            self.refused = False
            self.server.lingering -= 1
        if self.counted:
            self.server.release(self.ip)
            self.server.connections.discard(self)
            self.counted = False

    def _arm(self) -> None:
        """(Re)start the one timer for the current phase: idle, headers or request."""
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if self.waiting or self.transport is None or self.transport.is_closing():
            return
        loop = asyncio.get_running_loop()
        if self.request_started is None:
            self.timer = loop.call_later(IDLE_TIMEOUT_SECONDS, self._idle)
            return
        limit = REQUEST_TIMEOUT_SECONDS if self.headers_done else HEADER_TIMEOUT_SECONDS
        self.timer = loop.call_at(self.request_started + limit, self._late)

    def _idle(self) -> None:
        if self.transport is None:
            return
        if self.write_paused:
            self._cut_unread(IDLE_TIMEOUT_SECONDS)
            return
        self._close()

    def _close(self) -> None:
        """Close once the answers written are sent, and cut the connection (counted
        ``timeout``) if its peer has not read them within ``IDLE_TIMEOUT_SECONDS``.
        Why: ``transport.close()`` waits for ever to send what the peer does not read,
        and ``connection_lost`` never runs: the slot stayed taken, uncounted, and a
        pod doing so on its 8 connections could report no more."""
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        transport.close()
        if transport.get_write_buffer_size() > 0 and self.closer is None:
            self.closer = asyncio.get_running_loop().call_later(
                IDLE_TIMEOUT_SECONDS, self._cut_unread, IDLE_TIMEOUT_SECONDS
            )

    def _late(self) -> None:
        if self.transport is None or self.transport.is_closing() or self.waiting:
            return
        what = "request" if self.headers_done else "headers"
        limit = REQUEST_TIMEOUT_SECONDS if self.headers_done else HEADER_TIMEOUT_SECONDS
        if self.write_paused:
            # the request was not late: it was never read, the peer reads no answers
            self._cut_unread(limit)
            return
        self._refuse(408, "timeout", f"timeout: {what} not complete within {limit:g}s")

    def _cut_unread(self, limit: float) -> None:
        """The peer has read none of its answers within ``limit``: count it and cut
        the connection (a close would wait for ever to send them)."""
        self.listener._refused(
            self.sender or self.ip,
            "timeout",
            408,
            f"timeout: answers not read within {limit:g}s (connection cut)",
            pod=bool(self.sender),
        )
        if self.transport is not None:
            self.transport.abort()

    # -- flow control: the fair share (class docstring) --------------------------------

    def _reading(self) -> None:
        """Read while nothing holds reading back: a full buffer behind an answer that
        waits for the journal (``paused``), unread answers (``write_paused``), a turn
        given up to the other connections (``yielded``). Both calls are no-ops when
        nothing changes."""
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        if self.paused or self.write_paused or self.yielded:
            transport.pause_reading()
        else:
            transport.resume_reading()

    def pause_writing(self) -> None:
        """The transport holds over ``MAX_UNSENT_BYTES`` the peer has not read."""
        self.write_paused = True
        self._reading()

    def resume_writing(self) -> None:
        """The peer has read its answers down to a quarter of the bound: go on, in a
        turn of its own (not inside the transport's write callback)."""
        self.write_paused = False
        self._queue_turn()

    def _queue_turn(self) -> None:
        """Give the loop to the other connections; this one goes on in ``_next_turn``."""
        if self.yielded or self.transport is None or self.transport.is_closing():
            return
        self.yielded = True
        self._reading()
        asyncio.get_running_loop().call_soon(self._next_turn)

    def _next_turn(self) -> None:
        self.yielded = False
        self._drain()
        self._reading()
        self._close_if_done()

    def get_buffer(self, sizehint: int) -> memoryview:
        """Where the transport reads into: the server's one buffer of ``READ_BYTES``
        (one loop thread; ``buffer_updated`` copies out before the next read)."""
        return self.server.read_buffer

    def buffer_updated(self, nbytes: int) -> None:
        self._received(self.server.read_buffer[:nbytes])

    def _reply(
        self,
        status: int,
        text: str,
        close: bool,
        linger: bool = False,
        retry_after: int | None = None,
    ) -> None:
        """Write one answer; ``close`` ends the connection after it (``linger``: the
        answer says so, but the caller closes later); ``retry_after`` in whole seconds."""
        assert self.transport is not None
        body = (text.replace("\n", " ")[:300] + "\n").encode("utf-8", "replace")
        head = (
            f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}\r\n"
            "Content-Type: text/plain; charset=utf-8\r\n"
            f"Content-Length: {len(body)}\r\n"
            + (f"Retry-After: {retry_after}\r\n" if retry_after is not None else "")
            + ("Connection: close\r\n" if close or linger else "")
            + "\r\n"
        )
        self.transport.write(head.encode("ascii") + body)
        if close:
            self._close()

    def _refuse(self, status: int, result: str, text: str) -> bool:
        self.listener._refused(self.sender or self.ip, result, status, text, pod=bool(self.sender))
        self._reply(status, text, close=True)
        return False

    def _received(self, data: memoryview) -> None:
        if self.refused or self.transport is None or self.transport.is_closing():
            return
        if self.waiting:  # pipelined behind an answer that waits for the journal
            self.buffer += data
            if len(self.buffer) > MAX_HEADER_BYTES + MAX_BODY_BYTES and not self.paused:
                self.paused = True  # bounded: stop reading until the answer is out
                self._reading()
            return
        if self.request_started is None and data:
            self.request_started = asyncio.get_running_loop().time()
            self.headers_done = False
            self.continued = False
            self._arm()
        self.buffer += data
        self._drain()

    def _drain(self) -> None:
        """Answer the complete requests buffered, ``MAX_REQUESTS_PER_TURN`` at most
        (then the next turn is queued), none while the peer leaves answers unread."""
        for _ in range(MAX_REQUESTS_PER_TURN):
            if (
                self.transport is None
                or self.transport.is_closing()
                or self.waiting
                or self.write_paused
                or not self.buffer
            ):
                return
            if not self._one_request():
                return
        if self.buffer and not self.waiting and not self.write_paused:
            self._queue_turn()

    def _next_request(self) -> None:
        """The previous request is answered: time what is buffered as the next one."""
        self.request_started = asyncio.get_running_loop().time() if self.buffer else None
        self.headers_done = False
        self.continued = False
        self._arm()

    def _one_request(self) -> bool:
        """Handle one buffered request if complete; False when more bytes are needed."""
        buf = self.buffer
        end = buf.find(b"\r\n\r\n")
        if end < 0:
            if len(buf) > MAX_HEADER_BYTES:
                return self._refuse(431, "headers_too_large", "malformed: headers too large")
            return False
        if end > MAX_HEADER_BYTES:
            return self._refuse(431, "headers_too_large", "malformed: headers too large")
        if not self.headers_done:
            self.headers_done = True
            self._arm()  # the header deadline is met: the request deadline runs on
        lines = bytes(buf[:end]).decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            return self._refuse(400, "malformed", "malformed: bad request line")
        method, target, version = parts
        headers: dict[str, list[str]] = {}
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if not sep or not name or name != name.strip():
                return self._refuse(400, "malformed", "malformed: bad header")
            headers.setdefault(name.lower(), []).append(value.strip())
        connection = (headers.get("connection") or [""])[-1].lower()
        close = connection == "close" or (version == "HTTP/1.0" and connection != "keep-alive")
        if method == "GET" and target == "/healthz":
            # A body would be read as the next request (a report smuggled past whatever
            # looked at this one): refused and the connection closed, as for any
            # framing this reader does not take. Why not read it and drop it: a probe
            # never sends one, and ``Content-Length: 0`` (some clients send it on
            # every request) is still accepted.
            try:
                length = content_length(headers.get("content-length", []))
            except ValueError as err:
                return self._refuse(400, "malformed", f"malformed: {err}")
            if length or "transfer-encoding" in headers:
                return self._refuse(400, "malformed", "malformed: GET /healthz takes no body")
            del buf[: end + 4]
            self.listener._count("health")
            close = self._stored_nothing(close)
            self._reply(200, "ok", close)
            self._next_request()
            return not close
        if method != "POST":
            return self._refuse(405, "method_not_allowed", "method not allowed: POST /progress")
        if target.split("?", 1)[0] != "/progress":
            return self._refuse(404, "not_found", "not found: POST /progress")
        if "transfer-encoding" in headers:
            return self._refuse(411, "malformed", "malformed: chunked bodies not accepted")
        try:
            length = content_length(headers.get("content-length", []))
        except ValueError as err:
            return self._refuse(400, "malformed", f"malformed: {err}")
        start = end + 4
        if length is not None and length <= MAX_BODY_BYTES and len(buf) < start + length:
            expects = any(v.lower() == "100-continue" for v in headers.get("expect", []))
            # HTTP/1.0 has no 100 Continue: the expectation is ignored (RFC 9110 10.1.1)
            expects = expects and version == "HTTP/1.1"
            if expects and not self.continued and self.transport is not None:
                # curl and others wait up to 1 s for this before sending a body
                self.continued = True
                self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            return False  # wait for the rest of the body
        body = (
            bytes(buf[start : start + length])
            if length is not None and length <= MAX_BODY_BYTES
            else b""
        )
        ack = _Ack(self, close) if self.listener.store.journaled else None
        try:
            status, text, wait = self.listener.handle(
                self.ip, length, body, on_durable=ack.fire if ack is not None else None
            )
        except Exception as err:  # a bug must not kill the event loop
            log.error("progress: request failed: %s", str(err).splitlines()[0][:200])
            self.listener._count("error")
            status, text, wait = 500, "internal error", None
        if length is None or length > MAX_BODY_BYTES:
            self._reply(status, text, close=True)  # body not read: the stream is unusable
            return False
        del buf[: start + length]
        if status == 200:
            self.unstored = 0
        else:
            close = self._stored_nothing(close)
        if status == 200 and ack is not None:
            # answered once the journal has the report on disk (``_Ack``)
            self.waiting = True
            ack.text = text
            self._arm()
            return False
        self._reply(status, text, close, retry_after=wait)
        self._next_request()
        return not close

    def _stored_nothing(self, close: bool) -> bool:
        """An answer that stores no report: whether to close after it (``close``, or
        ``MAX_UNSTORED_IN_A_ROW`` such answers in a row)."""
        self.unstored += 1
        return close or self.unstored >= MAX_UNSTORED_IN_A_ROW

    def acked(self, ok: bool, text: str, close: bool) -> None:
        """The journal answered for the report this connection waits on (loop thread)."""
        self.waiting = False
        transport = self.transport
        if transport is None or transport.is_closing():
            # the client is gone: count what it would have got
            self.listener._count("accepted" if ok else "not_persisted")
            return
        if ok:
            self.listener._count("accepted")
            self._reply(200, text, close)
        else:
            self.listener._count("not_persisted")
            self._reply(503, "not_persisted: applied, but the state file cannot be written", True)
            return
        if close:
            return
        self.paused = False
        self._next_request()
        self._drain()
        self._reading()
        self._close_if_done()

    def _close_if_done(self) -> None:
        """Half-closed by the client: close once every answer owed is written (none
        waits for the journal, for a turn or for the peer to read)."""
        transport = self.transport
        if (
            self.eof
            and not (self.waiting or self.yielded or self.write_paused)
            and transport is not None
            and not transport.is_closing()
        ):
            self._close()


class _Ack:
    """Carries the journal's word (from its thread) back to the connection's loop."""

    __slots__ = ("close", "conn", "text")

    def __init__(self, conn: _Connection, close: bool):
        self.conn = conn
        self.close = close
        self.text = ""

    def fire(self, ok: bool) -> None:
        self.conn.server.post_ack(self, ok)


class _Server:
    """The asyncio server in its own thread, with bounds on open connections.

    ``MAX_CONNECTIONS`` in all is generous (a node has a few hundred pods and each
    client keeps one connection); ``MAX_CONNECTIONS_PER_ADDRESS`` stops one pod from
    using up the slots.
    """

    def __init__(self, listener: ProgressListener, host: str, port: int):
        self.listener = listener
        self.sock = listening_socket(host, port, name="progress")
        self.sock.setblocking(False)
        self.port = int(self.sock.getsockname()[1])
        self.loop = asyncio.new_event_loop()
        self.slots = ConnectionSlots()  # open connections, in all and per address
        self.lingering = 0  # refused connections still open (see REFUSED_LINGER_SECONDS)
        self._ack_lock = threading.Lock()
        self._acks: list[tuple[_Ack, bool]] = []
        self._ack_scheduled = False
        self.connections: set[_Connection] = set()
        # every connection reads into this one (the loop's thread only): ``get_buffer``
        self.read_buffer = memoryview(bytearray(READ_BYTES))
        self._server: asyncio.base_events.Server | None = None
        self._ready = threading.Event()
        self.thread = threading.Thread(target=self._run, name="gpu-eta-progress-http", daemon=True)
        self.thread.start()
        self._ready.wait(timeout=10)

    def post_ack(self, ack: _Ack, ok: bool) -> None:
        """From the journal's thread: queue an answer; one loop wake-up per batch."""
        with self._ack_lock:
            self._acks.append((ack, ok))
            if self._ack_scheduled:
                return
            self._ack_scheduled = True
        if self.loop.is_closed():
            return
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile (shutdown)
            self.loop.call_soon_threadsafe(self._deliver_acks)

    def _deliver_acks(self) -> None:
        with self._ack_lock:
            acks, self._acks = self._acks, []
            self._ack_scheduled = False
        for ack, ok in acks:
            ack.conn.acked(ok, ack.text, ack.close)

    def admit(self, ip: str) -> bool:
        return self.slots.admit(ip, MAX_CONNECTIONS, MAX_CONNECTIONS_PER_ADDRESS)

    def release(self, ip: str) -> None:
        self.slots.release(ip)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)

        async def serve() -> None:
            self._server = await self.loop.create_server(
                lambda: _Connection(self.listener, self), sock=self.sock
            )

        try:
            self.loop.run_until_complete(serve())
        finally:
            self._ready.set()
        self.loop.run_forever()
        # stopping: close the server and every open connection, then the loop
        if self._server is not None:
            self._server.close()
        self.loop.run_until_complete(self.loop.shutdown_asyncgens())
        self.loop.close()

    def close(self) -> None:
        if self.loop.is_closed():
            return

        def stop() -> None:
            if self._server is not None:
                self._server.close()
            for conn in list(self.connections):
                if conn.transport is not None:
                    conn.transport.abort()
            self.loop.stop()

        self.loop.call_soon_threadsafe(stop)
        self.thread.join(timeout=10)
        self.sock.close()
