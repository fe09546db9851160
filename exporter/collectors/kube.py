"""Pods of this node from the Kubernetes API: one list + watch, served from a cache.

Why a watch and not a list per poll: a list on every cycle from every node is the
load pattern the API server's docs warn about; one watch per node with
``fieldSelector=spec.nodeName=<node>`` costs the API server almost nothing and
tells us of a new pod within a second. Why a cache: the API server (or the
network to it) goes away during upgrades, but the pods on the node keep running
and keep holding GPUs; the exporter must keep attributing them. So ``poll()``
never blocks and never fails once a first list has succeeded; how fresh the cache
is, is reported by ``status()`` (``connected``, ``last_sync_timestamp``).

The loop (a daemon thread), client-go's reflector's: list → watch from the list's
resourceVersion (``allowWatchBookmarks``) → events update the cache → when the watch
ends on its server timeout (``watch_timeout_seconds``) watch again from the last
resourceVersion seen, an event's or a bookmark's. A list is sent only at start, on
a ``410 Gone`` (ERROR event or HTTP status: relisted at once; a second in a row,
each within a second of its watch's start, backs off first) and after any other
error (backed off exponentially, ``backoff_initial_seconds`` doubling to
``backoff_max_seconds``, then relisted); a list page's expired continue token (410)
starts the list again, at most ``LIST_RESTARTS`` times in a row. Never on a timer:
the list is the one costly request (``LIST_PAGE_PODS``), a watch resumed from a
resourceVersion is served from the API server's watch cache.
The HTTP stream is read by this module (the client's ``_preload_content=False``
response) so each event line is bounded in size before it is parsed. The client
raises ``ApiException`` for every answer outside 2xx, with ``_preload_content=False``
too (kubernetes>=29 all do; the tests' 403 and 410 answers check it): a response it
returns is a 2xx one, and statuses are read from the exception.

Job-level deadlines: a ``batch/v1`` Job's ``spec.activeDeadlineSeconds`` is not
copied to its pods, and it is how most people bound a training job. For a pod that
still runs whose controller is a Job, the watch thread GETs that Job (one GET per
Job, used for ``job_cache_seconds``; needs ``get`` on ``jobs.batch``) and the pod's
deadline is the earliest of its own, its annotation's and the Job's
``status.startTime + spec.activeDeadlineSeconds``. A finished pod's Job is never
read: no run of it is forecast, so its Job's deadline changes nothing anyone reads,
and a batch node keeps thousands of finished pods, each of its own Job (a relist
would GET them all). A second thread (``_refresh_jobs``) reads the Jobs of the cached
pods that still run again once their cache entry is older than
``job_cache_seconds`` (a Job GET before the Job controller set its ``startTime``, a
refused one, a changed deadline): no relist is needed for it, and the watch stays
open meanwhile (read between two watches, 100 Jobs would hold the watch closed
~4.7 s a pass, every pod event waiting that long). A refused or failed GET is logged
once per cause, keeps the Job's deadline last read (the cache is served while the API
is away, Jobs' deadlines included) and is asked again after ``JOB_RETRY_SECONDS``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import socket
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import replace
from datetime import datetime
from types import MappingProxyType
from typing import Any, NamedTuple

from gpu_eta.exporter.collectors import CollectorError, StartupError
from gpu_eta.exporter.collectors.registry import BuildContext, Collector, register
from gpu_eta.exporter.config import DEFAULT_KUBE_MAX_PODS
from gpu_eta.exporter.readings import PodMeta, pod_finished

__all__ = [
    "DEADLINE_ANNOTATION",
    "KubePodSource",
    "KubeStatus",
    "PodObjectError",
    "job_deadline_from_object",
    "job_owner",
    "parse_deadline",
    "pod_meta_from_object",
]

log = logging.getLogger(__name__)

DEADLINE_ANNOTATION = "gpu-eta.io/deadline"

# Bounds on what the API may make us hold. A node runs at most a few hundred pods
# (kubelet default 110); Kubernetes caps label values at 63 characters and keys at
# 253 + "/" + 63; annotations may be large (last-applied-configuration), so only
# short ones are kept.
MAX_PODS = DEFAULT_KUBE_MAX_PODS  # --kube.max-pods; finished pods give way first
# finished pods kept out of a full cache, remembered (namespace, name, uid) so that
# attribution still drops the allocations the kubelet lists for them; the latest ones
MAX_FINISHED_OUTSIDE = 4096
MAX_LABELS = 64
MAX_ANNOTATIONS = 64
MAX_LABEL_KEY_CHARS = 317
MAX_LABEL_VALUE_CHARS = 63
MAX_ANNOTATION_VALUE_CHARS = 4096
MAX_CONTAINERS = 64
MAX_NAME_CHARS = 253
MAX_CONTAINER_ID_CHARS = 128
MAX_EVENT_BYTES = 4 * 1024 * 1024  # one watch line (one pod object)
MAX_LIST_BYTES = 64 * 1024 * 1024  # one list, all its pages together
# Pods asked for per page of a list. Each page is parsed into the cache's small records
# before the next is asked for: a batch node keeps every finished Job pod without a TTL
# in the API, and a whole list of 6,000 of them parsed at once took the exporter past
# its 384Mi limit at each list. The list is asked with no resourceVersion, a
# consistent read from etcd, which honours limit; not as client-go's reflector first
# lists, with resourceVersion=0, which the API server answers from its watch cache
# and there may ignore limit: the whole list in one answer, the peak paging removes.
# That read is the costly request: etcd has no index on spec.nodeName, so each page
# of one node's list reads every pod of the cluster (API servers up to about 1.32
# send a limited list without resourceVersion to etcd). Hence a list only at start,
# on 410 and after an error (``_run``), never on a timer.
LIST_PAGE_PODS = 500
# timeoutSeconds of one watch, sent with every watch: the API server ends it then
# (apiserver ``GetTimeoutForWatch``; its ``--min-request-timeout``, 1800 s by default,
# times only a watch sent without one, at random between it and twice it) and the
# watch is resumed from the last resourceVersion (no list); a healthy watch thus
# syncs (clean end, ``last_sync_timestamp``) at least this often, which
# GpuEtaExporterKubeSyncStale's 600 s (rules/) counts on
WATCH_TIMEOUT_SECONDS = 300
# how long a Job's GET (its deadline) is used before it is asked again
JOB_CACHE_SECONDS = 300
# how long after a failed Job GET (refused, or no answer) it is asked again, at most
# ``job_cache_seconds``; meanwhile its pods keep the deadline last read. Why not a whole
# ``job_cache_seconds``: one 503 or 429 at a pod's first sight would leave it without
# its Job's deadline for five minutes; and a minute, not less, so that an API server
# throttling or away is not asked once a second for every Job
JOB_RETRY_SECONDS = 60.0
# the least time between two passes of the Job re-reads: a Job whose GET got no answer
# stays due while the Jobs API is paused (``_job_pause_until``), and must not make the
# thread spin
JOB_REFRESH_MIN_SECONDS = 1.0
MAX_CONTINUE_CHARS = 64 * 1024  # one page's continue token (the API's are ~100 characters)
# Times in a row a list starts again from its first page when a continue token expired
# (410) before it fails as any error does (logged, backed off). A token expires when
# the list is slower than the API server's compaction window (5 minutes); a list that
# always is would otherwise ask for first pages unthrottled. Not one unpaged list
# instead: that is the whole list parsed at once the paging exists to avoid.
LIST_RESTARTS = 2
MAX_ACTIVE_DEADLINE_SECONDS = 10**10  # ~300 years: beyond is not a deadline
MAX_JOB_BYTES = 1024 * 1024  # one Job object (its pod template included)

# (namespace, name, uid) of a pod's controlling Job
JobKey = tuple[str, str, str]


class PodObjectError(ValueError):
    """A pod object from the API is not shaped like a pod."""


class _Gone(Exception):
    """410: the watch's resourceVersion, or a list page's continue token, is too old."""


def _str(value: Any, limit: int = MAX_NAME_CHARS) -> str | None:
    if isinstance(value, str) and 0 < len(value) <= limit:
        return value
    return None


# the prefix of the labels and annotations gpu-eta itself reads (``gpu-eta.io/deadline``,
# ``gpu-eta.io/long-running``): kept before any other when a pod has more than the cap
OWN_KEY_PREFIX = "gpu-eta.io/"


def _bounded_map(value: Any, max_items: int, max_value_chars: int) -> Mapping[str, str]:
    """At most ``max_items`` string entries of ``value`` (a pod's labels or annotations),
    gpu-eta's own keys first. Why first: a pod with more than the cap (sidecar injectors
    and operators add dozens) would otherwise lose them by its object's key order, and
    with them its deadline or its opt-out of the occupancy alerts."""
    if not isinstance(value, dict):
        return MappingProxyType({})
    out: dict[str, str] = {}
    own = [(k, v) for k, v in value.items() if isinstance(k, str) and k.startswith(OWN_KEY_PREFIX)]
    for key, val in [*own, *value.items()]:
        if len(out) >= max_items:
            break
        if (
            isinstance(key, str)
            and isinstance(val, str)
            and 0 < len(key) <= MAX_LABEL_KEY_CHARS
            and len(val) <= max_value_chars
        ):
            out[key] = val
    return MappingProxyType(out)


def _parse_rfc3339(text: str) -> float | None:
    if not isinstance(text, str) or not 0 < len(text) <= 64:
        return None
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        return None
    return moment.timestamp()


def parse_deadline(text: str) -> float | None:
    """``gpu-eta.io/deadline``: unix seconds (``1763700000`` or ``1763700000.5``) or
    RFC 3339 with a zone (``2026-11-21T18:00:00Z``). None when it is neither."""
    if not isinstance(text, str) or not 0 < len(text) <= 64:
        return None
    stripped = text.strip()
    try:
        number = float(stripped)
    except ValueError:
        return _parse_rfc3339(stripped)
    if not math.isfinite(number) or number <= 0 or number > 1e11:
        return None
    return number


def _strip_runtime(container_id: Any) -> str | None:
    if not isinstance(container_id, str) or not 0 < len(container_id) <= MAX_CONTAINER_ID_CHARS:
        return None
    _, sep, rest = container_id.partition("://")
    return (rest if sep else container_id) or None


def _active_deadline(value: Any) -> int | None:
    valid = isinstance(value, int) and not isinstance(value, bool)
    return value if valid and 0 < value <= MAX_ACTIVE_DEADLINE_SECONDS else None


def job_owner(obj: Any) -> JobKey | None:
    """The ``batch`` Job that controls a pod object (its ``controller: true`` owner
    reference), as (namespace, name, uid); None for any other pod or a malformed one."""
    if not isinstance(obj, dict) or not isinstance(obj.get("metadata"), dict):
        return None
    meta = obj["metadata"]
    namespace, owners = _str(meta.get("namespace")), meta.get("ownerReferences")
    if namespace is None or not isinstance(owners, list):
        return None
    for ref in owners[:16]:
        if (
            isinstance(ref, dict)
            and ref.get("controller") is True
            and ref.get("kind") == "Job"
            and isinstance(ref.get("apiVersion"), str)
            and ref["apiVersion"].startswith("batch/")
        ):
            name, uid = _str(ref.get("name")), _str(ref.get("uid"), 128)
            return (namespace, name, uid) if name and uid else None
    return None


def job_deadline_from_object(obj: Any) -> float | None:
    """``status.startTime + spec.activeDeadlineSeconds`` of a Job object (the Job
    controller counts the deadline from the Job's start); None when either is
    missing or malformed. Never raises."""
    if not isinstance(obj, dict):
        return None
    spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
    status = obj.get("status") if isinstance(obj.get("status"), dict) else {}
    active = _active_deadline(spec.get("activeDeadlineSeconds"))
    start = _parse_rfc3339(status.get("startTime", ""))
    if active is None or start is None:
        return None
    return start + active


def pod_meta_from_object(obj: Any) -> PodMeta:
    """A ``PodMeta`` from one pod object as the API serves it (JSON decoded).

    Raises ``PodObjectError`` when namespace, name or uid is missing; every other
    field is optional and dropped when malformed or over its bound.
    """
    if not isinstance(obj, dict):
        raise PodObjectError("pod object is not a JSON object")
    meta = obj.get("metadata")
    spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
    status = obj.get("status") if isinstance(obj.get("status"), dict) else {}
    if not isinstance(meta, dict):
        raise PodObjectError("pod object has no metadata")
    namespace, name, uid = (
        _str(meta.get("namespace")),
        _str(meta.get("name")),
        _str(meta.get("uid"), 128),
    )
    if namespace is None or name is None or uid is None:
        raise PodObjectError("pod object lacks metadata.namespace, .name or .uid")

    owner_kind = owner_name = ""
    owners = meta.get("ownerReferences")
    if isinstance(owners, list) and owners:
        refs = [o for o in owners[:16] if isinstance(o, dict)]
        chosen = next((o for o in refs if o.get("controller") is True), refs[0] if refs else None)
        if chosen is not None:
            owner_kind = _str(chosen.get("kind")) or ""
            owner_name = _str(chosen.get("name")) or ""

    container_ids: dict[str, str] = {}
    for key in ("containerStatuses", "initContainerStatuses"):
        statuses = status.get(key)
        if not isinstance(statuses, list):
            continue
        for entry in statuses[:MAX_CONTAINERS]:
            if not isinstance(entry, dict):
                continue
            state = entry.get("state")
            if not isinstance(state, dict) or "running" not in state:
                # Only a running container has processes and a cgroup. A finished
                # one (every completed init container) has neither, nor has one
                # waiting to start again (CrashLoopBackOff), whose status keeps the
                # dead container's id; no state is the API's default, waiting.
                # Listed, each made host memory search all of /proc for it on
                # every cycle. The processes of a container started again run
                # under a new id the status gives once it runs; attribution finds
                # them by pod uid until then.
                continue
            cname = _str(entry.get("name"), 63)
            cid = _strip_runtime(entry.get("containerID"))
            if cname and cid and cname not in container_ids:
                container_ids[cname] = cid

    names = spec.get("containers")
    containers = tuple(
        dict.fromkeys(
            n
            for n in (
                _str(c.get("name"), 63)
                for c in (names[:MAX_CONTAINERS] if isinstance(names, list) else ())
                if isinstance(c, dict)
            )
            if n
        )
    )

    start = _parse_rfc3339(status.get("startTime", ""))
    annotations = _bounded_map(meta.get("annotations"), MAX_ANNOTATIONS, MAX_ANNOTATION_VALUE_CHARS)
    deadlines: list[float] = []
    active = _active_deadline(spec.get("activeDeadlineSeconds"))
    if start is not None and active is not None:
        deadlines.append(start + active)
    if DEADLINE_ANNOTATION in annotations:
        parsed = parse_deadline(annotations[DEADLINE_ANNOTATION])
        if parsed is None:
            log.debug(
                "ignoring invalid %s annotation on pod %s/%s", DEADLINE_ANNOTATION, namespace, name
            )
        else:
            deadlines.append(parsed)

    ip = _str(status.get("podIP"), 64)
    return PodMeta(
        namespace=namespace,
        name=name,
        uid=uid,
        ip=ip,
        host_network=spec.get("hostNetwork") is True,
        phase=_str(status.get("phase"), 32) or "Unknown",
        labels=_bounded_map(meta.get("labels"), MAX_LABELS, MAX_LABEL_VALUE_CHARS),
        annotations=annotations,
        start_timestamp=start,
        owner_kind=owner_kind,
        owner_name=owner_name,
        container_ids=MappingProxyType(container_ids),
        containers=containers,
        deadline_timestamp=min(deadlines) if deadlines else None,
    )


class _Addresses(NamedTuple):
    """What the cache keeps of a pod to decide which pod an address is
    (``_address_owners``)."""

    ips: tuple[str, ...]
    # metadata.deletionTimestamp set: the pod is terminating; its object stays Running
    # through the grace period while its IP may already be another pod's
    deleting: bool = False


def _addresses(obj: dict) -> _Addresses:
    """A pod object's IPs and whether it is being deleted."""
    meta = obj.get("metadata")
    deleting = isinstance(meta, dict) and meta.get("deletionTimestamp") is not None
    return _Addresses(_pod_ips(obj), deleting)


def _pod_ips(obj: dict) -> tuple[str, ...]:
    status = obj.get("status")
    if not isinstance(status, dict):
        return ()
    ips: list[str] = []
    if (ip := _str(status.get("podIP"), 64)) is not None:
        ips.append(ip)
    extra = status.get("podIPs")
    if isinstance(extra, list):
        for entry in extra[:4]:
            if isinstance(entry, dict) and (ip := _str(entry.get("ip"), 64)) and ip not in ips:
                ips.append(ip)
    return tuple(ips)


def _earliest(*deadlines: float | None) -> float | None:
    """The earliest of the deadlines given; None when none is."""
    known = [d for d in deadlines if d is not None]
    return min(known) if known else None


def _stopped(stop: threading.Event | None) -> bool:
    """Whether the thread holding ``stop`` was stopped: it then changes nothing the
    next ``start()``'s threads keep (None: a caller outside those threads)."""
    return stop is not None and stop.is_set()


def _continue_token(metadata: Mapping[str, Any]) -> str | None:
    """A list page's continue token; None on the last page (no ``continue``, or the
    empty one the API's omitempty never sends). ``CollectorError`` for one present but
    unusable: ending the list there would make the pods of the pages not read count as
    deleted, dropped from the cache and from the record of finished pods."""
    token = metadata.get("continue")
    if token is None or token == "":
        return None
    if not isinstance(token, str) or len(token) > MAX_CONTINUE_CHARS:
        raise CollectorError("kube: pod list page has an invalid continue token")
    return token


# One pod of a list, as the cache keeps it: its metadata, its addresses and its
# controlling Job (or None) — all a relist needs of the object, dropped page by page.
_Listed = tuple[PodMeta, _Addresses, "JobKey | None"]


def _listed(items: list[Any]) -> list[_Listed]:
    """The ``_Listed`` records of a list's pod objects; a malformed one is skipped."""
    out: list[_Listed] = []
    for obj in items:
        try:
            out.append((pod_meta_from_object(obj), _addresses(obj), job_owner(obj)))
        except PodObjectError as err:
            log.debug("kube: skipping pod object in list: %s", err)
    return out


def _address_owners(
    pods: Iterable[PodMeta], addresses: Mapping[str, _Addresses]
) -> dict[str, PodMeta]:
    """Each IP → the pod a progress report from it is filed under. Pure.

    Candidates are the pods that can send from their own IP: not hostNetwork (the
    node's address, shared: ``progress_http`` decides those), not finished. Where an
    IP has several (the CNI gave a pod's IP to another pod while the first one's object
    is still there), the one not being deleted wins, then the latest started: a
    terminating pod's object stays Running through its grace period, often after its
    IP went to a new pod, maybe another namespace's. Pods alike on both counts (the
    same start second, or none known) give the IP to neither: a report from there is
    refused rather than filed under a pod that may not have sent it. A terminating pod
    alone on its IP keeps it (its last report, its ``end``, is sent then).
    """
    best: dict[str, tuple[tuple[bool, float], PodMeta | None]] = {}
    for pod in pods:
        if pod.host_network or pod_finished(pod):
            continue
        record = addresses.get(pod.uid, _Addresses(()))
        start = pod.start_timestamp
        rank = (not record.deleting, -math.inf if start is None else start)
        for ip in record.ips:
            held = best.get(ip)
            if held is None or rank > held[0]:
                best[ip] = (rank, pod)
            elif rank == held[0]:
                best[ip] = (rank, None)  # alike: ambiguous, unless a better one comes
    return {ip: pod for ip, (_, pod) in best.items() if pod is not None}


# why a Job GET gave nothing to use -> what its warning tells the admin
JOB_FAILURE_HINTS = MappingProxyType(
    {
        "forbidden": "the exporter may not read Jobs: grant it get on jobs.batch, or set "
        "the gpu-eta.io/deadline annotation on the pod template",
        "refused": "the API server refused the read",
        "unanswered": "no answer from the API server",
        "invalid": "the answer is not a Job object",
    }
)


class _JobRead(NamedTuple):
    """One Job GET: the Job's deadline, or why there is none to use."""

    deadline: float | None
    error: str = ""  # "HTTP 503 Service Unavailable", "ConnectTimeoutError: ..."
    # "" when the answer is one to use (a Job, a 404, another Job of the name), else a
    # key of JOB_FAILURE_HINTS: the deadline last read is kept
    failure: str = ""


class KubeStatus:
    """How fresh the pod cache is (for logs and self-monitoring)."""

    __slots__ = ("complete", "connected", "last_error", "last_sync_timestamp", "listed", "pods")

    def __init__(
        self,
        listed: bool,
        connected: bool,
        last_sync_timestamp: float | None,
        last_error: str,
        pods: int,
        complete: bool = True,
    ) -> None:
        self.listed = listed  # a first list has succeeded; poll() serves a cache
        self.connected = connected  # a watch is open right now
        self.last_sync_timestamp = last_sync_timestamp  # last list, event or clean watch end
        self.last_error = last_error
        self.pods = pods
        # every running pod of the node is in the cache: none refused at --kube.max-pods
        # since the last list (a pod absent from the cache is then gone, not left out)
        self.complete = complete

    def __repr__(self) -> str:
        return (
            f"KubeStatus(listed={self.listed}, connected={self.connected}, "
            f"last_sync_timestamp={self.last_sync_timestamp}, pods={self.pods}, "
            f"complete={self.complete}, last_error={self.last_error!r})"
        )


class KubePodSource:
    """One watch on this node's pods, in a daemon thread; ``poll()`` serves its cache."""

    def __init__(
        self,
        node_name: str,
        kubeconfig: str | None = None,
        api_url: str | None = None,
        *,
        watch_timeout_seconds: float = WATCH_TIMEOUT_SECONDS,
        job_cache_seconds: float = JOB_CACHE_SECONDS,
        request_timeout_seconds: float = 10.0,
        backoff_initial_seconds: float = 1.0,
        backoff_max_seconds: float = 30.0,
        max_pods: int = MAX_PODS,
        job_deadlines: bool = True,
    ) -> None:
        if not node_name or len(node_name) > MAX_NAME_CHARS:
            raise CollectorError(
                "kube: a node name is required (set NODE_NAME from the downward API)"
            )
        if not 1 <= watch_timeout_seconds < math.inf:  # NaN fails too
            # the API takes whole seconds, and 0 would leave the watch's length to the
            # server's --min-request-timeout (30-60 min)
            raise CollectorError(
                f"kube: watch_timeout_seconds must be at least 1 and finite, "
                f"not {watch_timeout_seconds!r}"
            )
        if not 0 < job_cache_seconds < math.inf:  # NaN fails too
            # inf would never read a Job again (one read before its controller wrote
            # startTime would never give the pod a deadline) and overflows the re-read
            # thread's wait; NaN or 0 would read every Job on every pass
            raise CollectorError(
                f"kube: job_cache_seconds must be a finite number above 0, "
                f"not {job_cache_seconds!r}"
            )
        self.node_name = node_name
        self.kubeconfig = kubeconfig
        self.api_url = api_url
        self.watch_timeout_seconds = watch_timeout_seconds
        self.job_cache_seconds = job_cache_seconds
        self.request_timeout_seconds = request_timeout_seconds
        self.backoff_initial_seconds = backoff_initial_seconds
        self.backoff_max_seconds = backoff_max_seconds
        self.max_pods = max_pods
        self._lock = threading.Lock()
        # set by stop(); each start() makes a new one for the threads it starts, so a
        # thread a stop() could not wait for ends on its own instead of running on
        # beside the next start()'s (a cleared shared Event would set it going again)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._api: Any = None
        self._objects: dict[str, PodMeta] = {}
        # uid -> (namespace, name, uid) of finished pods the cap keeps out, oldest first
        self._outside: dict[str, tuple[str, str, str]] = {}
        self._ips: dict[str, _Addresses] = {}
        self._snapshot: tuple[PodMeta, ...] = ()
        self._by_ip: dict[str, PodMeta] = {}
        self._listed = False
        self._connected = False
        self._last_sync: float | None = None
        self._last_error = ""
        self._response: Any = None
        self._warned_full = False
        self._refused_running = False  # a running pod left out since the last list
        self._warned_finished = False
        self.job_deadlines = job_deadlines
        self._batch: Any = None
        self._refresher: threading.Thread | None = None
        # both threads (the watch's, the re-reads'); held for the bookkeeping only,
        # never across a GET: guards the three below
        self._jobs_lock = threading.Lock()
        # Job -> (deadline or None, monotonic time it is to be asked again)
        self._jobs: dict[JobKey, tuple[float | None, float]] = {}
        self._job_error = ""
        self._job_pause_until = 0.0  # after a network failure: no Job GETs until then
        # under ``_lock``: uid of each cached running pod a Job controls -> (its Job,
        # the pod's own deadline, the Job's not folded in), to read its Job again
        self._job_pods: dict[str, tuple[JobKey, float | None]] = {}
        self._refresh_error = ""

    # -- public face ----------------------------------------------------------------

    def start(self) -> KubePodSource:
        """Load the client configuration and start the watch thread.

        Raises ``CollectorError`` when no configuration can be loaded (no kubeconfig,
        not in a cluster); network trouble is retried in the thread instead.
        """
        if self._thread is not None:
            return self
        self._api = self._make_api()
        stop = self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, args=(stop,), name="kube-pod-watch", daemon=True
        )
        self._thread.start()
        if self.job_deadlines and self._batch is not None:
            self._refresher = threading.Thread(
                target=self._refresh_jobs, args=(stop,), name="kube-job-refresh", daemon=True
            )
            self._refresher.start()
        return self

    def poll(self) -> tuple[PodMeta, ...]:
        """The cached pods of this node. Never blocks on the API.

        Raises ``CollectorError`` only until the first list has succeeded (there is
        nothing to serve yet); afterwards an unreachable API keeps the cache (see
        ``status()`` for its freshness).
        """
        with self._lock:
            if not self._listed:
                cause = f": {self._last_error}" if self._last_error else ""
                raise CollectorError(f"kube: no pod list from the API server yet{cause}")
            return self._snapshot

    def by_ip(self, ip: str) -> PodMeta | None:
        """The non-terminated, non-hostNetwork pod with this IP (progress senders)."""
        with self._lock:
            return self._by_ip.get(ip)

    def finished_outside(self) -> tuple[tuple[str, str, str], ...]:
        """(namespace, name, uid) of finished pods of this node the cache does not hold
        (evicted from it or refused at ``--kube.max-pods``; the latest
        ``MAX_FINISHED_OUTSIDE``). Never blocks on the API.

        Why: the kubelet keeps listing a finished pod's allocations until the pod is
        deleted, and attribution drops them only for pods it knows finished; a pod
        unknown to it counts as live. Without this, a full cache made each finished
        pod it let go a phantom holder of the GPU its successor uses. A pod leaves
        the record when it is deleted (its event, or its absence from a relist) or
        enters the cache.
        """
        with self._lock:  # a copy, made once a cycle here, not at every watch event
            return tuple(self._outside.values())

    def status(self) -> KubeStatus:
        with self._lock:
            return KubeStatus(
                self._listed,
                self._connected,
                self._last_sync,
                self._last_error,
                len(self._objects),
                complete=not self._refused_running,
            )

    def stop(self, timeout_seconds: float = 10.0) -> None:
        """Stop the threads (closes an open watch) and wait for them, at most
        ``timeout_seconds``: a thread still in a request then ends on its own once it
        returns, and changes nothing after this (a later ``start()`` included)."""
        self._stop.set()
        self._abort_response()
        with self._lock:
            self._connected = False
        thread, self._thread = self._thread, None
        refresher, self._refresher = self._refresher, None
        deadline = time.monotonic() + timeout_seconds
        for each in (thread, refresher):
            if each is not None:
                each.join(max(0.0, deadline - time.monotonic()))

    # -- client ---------------------------------------------------------------------

    def _make_api(self) -> Any:
        try:
            from kubernetes import client, config
        except ImportError as err:  # pragma: no cover - dependency of the exporter extra
            raise CollectorError(f"kube: the kubernetes package is not installed ({err})") from None
        cfg = client.Configuration()
        try:
            if self.api_url:
                cfg.host = self.api_url.rstrip("/")
            elif self.kubeconfig:
                config.load_kube_config(config_file=self.kubeconfig, client_configuration=cfg)
            else:
                config.load_incluster_config(client_configuration=cfg)
        except Exception as err:
            where = self.kubeconfig or "in-cluster service account"
            raise CollectorError(
                f"kube: cannot load client configuration from {where}: {err}"
            ) from None
        # Our loop does its own backoff; urllib3's retries would only hide outages.
        cfg.retries = False
        api_client = client.ApiClient(cfg)
        self._batch = client.BatchV1Api(api_client)
        return client.CoreV1Api(api_client)

    def _selector(self) -> str:
        return f"spec.nodeName={self.node_name}"

    # -- cache ------------------------------------------------------------------------

    def _rebuild(self) -> None:
        """Copy-on-write views so poll() and by_ip() are O(1) and lock-short."""
        pods = sorted(self._objects.values(), key=lambda p: (p.namespace, p.name, p.uid))
        self._snapshot = tuple(pods)
        self._by_ip = _address_owners(pods, self._ips)

    def _keep_outside(self, meta: PodMeta) -> None:
        """Remember a finished pod the cache does not hold (lock held); the oldest
        record gives way beyond ``MAX_FINISHED_OUTSIDE``."""
        self._outside.pop(meta.uid, None)
        self._outside[meta.uid] = (meta.namespace, meta.name, meta.uid)
        while len(self._outside) > MAX_FINISHED_OUTSIDE:
            del self._outside[next(iter(self._outside))]

    def _replace_listed(self, parsed: list[_Listed], stop: threading.Event | None = None) -> None:
        """The cache becomes the listed pods (``_listed`` records of a whole list);
        unless ``stop`` (the listing thread's) is set: a list answered after a
        ``stop()`` must not overwrite the cache a next ``start()`` keeps."""
        # Over the cap, the pods that still run are kept before finished ones: Job
        # pods without a TTL stay in the API for good and must not crowd them out.
        live = [entry for entry in parsed if not pod_finished(entry[0])]
        done = [entry for entry in parsed if pod_finished(entry[0])]
        if len(live) > self.max_pods:
            self._warn_full()
        elif len(parsed) > self.max_pods:
            self._warn_finished()
        objects: dict[str, PodMeta] = {}
        ips: dict[str, _Addresses] = {}
        jobs: set[JobKey] = set()
        job_pods: dict[str, tuple[JobKey, float | None]] = {}
        kept = (live + done)[: self.max_pods]
        for meta, addresses, job in kept:
            if job is not None and not pod_finished(meta):
                job_pods[meta.uid] = (job, meta.deadline_timestamp)
                meta = self._with_job_deadline(meta, job, jobs)
            objects[meta.uid] = meta
            ips[meta.uid] = addresses
        # the list names every pod there is: the finished ones left out are the record
        # (those recorded before and now absent were deleted); the first ``fitted`` of
        # them found room after the live ones
        fitted = max(0, self.max_pods - len(live))
        outside = {
            meta.uid: (meta.namespace, meta.name, meta.uid)
            for meta, _, _ in done[fitted:][-MAX_FINISHED_OUTSIDE:]
        }
        # a relist is the one moment every Job still referenced is known
        with self._jobs_lock:
            self._jobs = {key: value for key, value in self._jobs.items() if key in jobs}
        with self._lock:
            if _stopped(stop):
                return
            self._objects, self._ips, self._outside = objects, ips, outside
            self._job_pods = job_pods
            self._refused_running = len(live) > self.max_pods
            self._listed = True
            self._last_sync = time.time()
            self._rebuild()

    def _apply(self, kind: str, obj: Any, stop: threading.Event | None = None) -> None:
        try:
            meta = pod_meta_from_object(obj)
        except PodObjectError as err:
            log.debug("kube: skipping %s event: %s", kind, err)
            return
        job, own_deadline = None, meta.deadline_timestamp
        if kind != "DELETED" and not pod_finished(meta):
            job = job_owner(obj)
            meta = self._with_job_deadline(meta, job, set())
        with self._lock:
            if _stopped(stop):
                return
            if kind == "DELETED":
                self._objects.pop(meta.uid, None)
                self._ips.pop(meta.uid, None)
                self._outside.pop(meta.uid, None)
                self._job_pods.pop(meta.uid, None)
            else:
                if meta.uid not in self._objects and not self._make_room(meta):
                    return  # only the record of finished pods left out changed
                self._outside.pop(meta.uid, None)
                self._objects[meta.uid] = meta
                self._ips[meta.uid] = _addresses(obj)
                if job is None:
                    self._job_pods.pop(meta.uid, None)
                else:
                    self._job_pods[meta.uid] = (job, own_deadline)
            self._last_sync = time.time()
            self._rebuild()

    # -- Job deadlines (watch thread; re-reads on their own thread) ---------------------

    def _with_job_deadline(self, meta: PodMeta, key: JobKey | None, seen: set[JobKey]) -> PodMeta:
        """``meta`` (a pod that still runs) with the deadline of its controlling Job
        ``key`` (``job_owner``) folded in (the earliest wins)."""
        if key is None or not self.job_deadlines or self._batch is None:
            return meta
        seen.add(key)
        deadline = _earliest(meta.deadline_timestamp, self._job_deadline(key))
        if deadline == meta.deadline_timestamp:
            return meta
        return replace(meta, deadline_timestamp=deadline)

    def _refresh_jobs(self, stop: threading.Event) -> None:
        """Read the Jobs of the running pods again as their GETs age (second thread).

        Why a thread of its own: the pod watch stays open while the Jobs are read (one
        round trip each), so pod events are seen meanwhile. Read between two watches,
        100 Jobs would hold the watch closed ~4.7 s a pass against the tests' API fake,
        every pod event of that time seen only after it. Ends when ``stop`` (this
        start's) is set.
        """
        wait = JOB_REFRESH_MIN_SECONDS
        while not stop.wait(wait):
            try:
                self._refresh_job_deadlines(stop)
                wait = self._next_refresh_seconds()
                message = ""
            except Exception as err:  # the boundary of this thread: keep it running
                wait = min(JOB_RETRY_SECONDS, self.job_cache_seconds)
                message = f"{type(err).__name__}: {err}"[:300]
            if message and message != self._refresh_error:
                log.warning("kube: reading Jobs again failed (%s); retrying", message)
            self._refresh_error = message

    def _next_refresh_seconds(self) -> float:
        """Seconds until the first running pod's Job is due to be asked again (a Job not
        read yet is due now), at least ``JOB_REFRESH_MIN_SECONDS`` and not before a
        pause ends, at most ``JOB_RETRY_SECONDS`` (or ``job_cache_seconds``): a Job
        first read by the watch thread after this is asked (a failed GET is due again
        after ``JOB_RETRY_SECONDS``) is then read again within that wait."""
        with self._lock:
            keys = {job for job, _ in self._job_pods.values()}
        now = time.monotonic()
        with self._jobs_lock:
            due = [self._jobs.get(key, (None, -math.inf))[1] for key in keys]
            paused = self._job_pause_until - now
        soonest = min(due, default=math.inf) - now
        most = min(JOB_RETRY_SECONDS, self.job_cache_seconds)
        return max(JOB_REFRESH_MIN_SECONDS, min(soonest, most), paused)

    def _refresh_job_deadlines(self, stop: threading.Event | None = None) -> None:
        """Read again the Jobs of the cached pods that still run that are due, and fold
        their deadlines in anew (``_refresh_jobs``).

        Why: a pod's Job is otherwise read only when the pod is listed or changes, and
        a running pod may not change for hours; its Job read once before the Job
        controller set ``status.startTime`` (no deadline yet), or refused, or given a
        new ``activeDeadlineSeconds``, would keep the pod's deadline wrong until the
        next list, and lists are sent only at start, on 410 and after errors. A pod the
        watch changed meanwhile (another Job, another own deadline, finished) keeps
        what the watch thread gave it.
        """
        with self._lock:
            pending = dict(self._job_pods)
        referenced = {job for job, _ in pending.values()}
        with self._jobs_lock:
            # a Job a new pod's event just read may be dropped here: read again, no harm
            self._jobs = {key: value for key, value in self._jobs.items() if key in referenced}
        folded = {
            uid: (entry, _earliest(entry[1], self._job_deadline(entry[0])))
            for uid, entry in pending.items()
            if not _stopped(stop)
        }
        with self._lock:
            if _stopped(stop):
                return
            changed = False
            for uid, (entry, deadline) in folded.items():
                meta = self._objects.get(uid)
                if meta is None or self._job_pods.get(uid) != entry or pod_finished(meta):
                    continue
                if meta.deadline_timestamp != deadline:
                    self._objects[uid] = replace(meta, deadline_timestamp=deadline)
                    changed = True
            if changed:
                self._rebuild()

    def _job_deadline(self, key: JobKey) -> float | None:
        """The Job's deadline, from the cache or one GET (used for
        ``job_cache_seconds``). A GET that fails keeps the deadline last read: the Job
        is the same while the API server is away or refuses (its deadline is as
        likely right as before, none is surely wrong); it is asked again after
        ``JOB_RETRY_SECONDS`` (at most ``job_cache_seconds``)."""
        now = time.monotonic()
        with self._jobs_lock:
            cached = self._jobs.get(key)
            if cached is not None and now < cached[1]:
                return cached[0]
            if now < self._job_pause_until:
                # the last GET did not get an answer: a relist of many Job pods must not
                # wait one timeout per Job; asked again after the pause
                return None if cached is None else cached[0]
        read = self._get_job(key)
        retry_seconds = min(JOB_RETRY_SECONDS, self.job_cache_seconds)
        with self._jobs_lock:
            previous = self._jobs.get(key)
            if read.failure == "unanswered":
                self._job_pause_until = time.monotonic() + retry_seconds
            if len(self._jobs) >= 2 * self.max_pods:  # bounded between lists and refreshes
                self._jobs.clear()
            if read.failure:
                deadline = None if previous is None else previous[0]
                self._jobs[key] = (deadline, now + retry_seconds)
            else:
                deadline = read.deadline
                self._jobs[key] = (deadline, now + self.job_cache_seconds)
            changed, self._job_error = read.error != self._job_error, read.error
        if read.failure and changed:  # once per change of cause
            log.warning(
                "kube: cannot read Job %s/%s (%s): %s; its pods keep the Job's deadline "
                "last read, if any, and it is asked again in %.0f s",
                key[0],
                key[1],
                read.error,
                JOB_FAILURE_HINTS[read.failure],
                retry_seconds,
            )
        return deadline

    def _get_job(self, key: JobKey) -> _JobRead:
        """GET one Job: its deadline, or why there is none to use (``_JobRead``)."""
        from kubernetes.client.exceptions import ApiException

        namespace, name, uid = key
        try:
            response = self._batch.read_namespaced_job(
                name,
                namespace,
                _preload_content=False,
                _request_timeout=self._timeouts(self.request_timeout_seconds),
            )
        except ApiException as err:
            if err.status == 404:
                return _JobRead(None)  # gone (finished and deleted): nothing to resolve
            failure = "forbidden" if err.status == 403 else "refused"
            return _JobRead(None, f"HTTP {err.status} {err.reason}", failure)
        except Exception as err:
            return _JobRead(None, f"{type(err).__name__}: {err}"[:300], "unanswered")
        try:
            body = response.read(MAX_JOB_BYTES + 1)
        except Exception as err:
            return _JobRead(None, f"{type(err).__name__}: {err}"[:300], "unanswered")
        finally:
            with contextlib.suppress(Exception):
                response.release_conn()
        if len(body) > MAX_JOB_BYTES:
            return _JobRead(None, f"Job object larger than {MAX_JOB_BYTES} bytes", "invalid")
        try:
            job = json.loads(body)
        except ValueError:
            return _JobRead(None, "answer is not JSON", "invalid")
        meta = job.get("metadata") if isinstance(job, dict) else None
        if not isinstance(meta, dict) or meta.get("uid") != uid:
            return _JobRead(None)  # another Job of the same name: not this pod's
        return _JobRead(job_deadline_from_object(job))

    def _make_room(self, meta: PodMeta) -> bool:
        """Whether a new pod may enter the full-or-not cache (lock held).

        At the cap, a pod that still runs takes the slot of the longest-cached
        finished pod: finished pods (Job pods without a TTL) are what piles up on
        a batch node, and a running pod left out would get no metadata, no
        attribution and no progress reports. A finished pod never displaces one.
        A finished pod left out (evicted or refused) is recorded
        (``finished_outside``): attribution must still know it finished.
        """
        if len(self._objects) < self.max_pods:
            return True
        if not pod_finished(meta):
            victim = next((uid for uid, m in self._objects.items() if pod_finished(m)), None)
            if victim is not None:
                self._keep_outside(self._objects.pop(victim))
                self._ips.pop(victim, None)
                self._job_pods.pop(victim, None)
                self._warn_finished()
                return True
            self._refused_running = True
            self._warn_full()
        else:
            self._keep_outside(meta)
            self._warn_finished()
        return False

    def _warn_full(self) -> None:
        if not self._warned_full:
            log.warning(
                "kube: more than %d running pods on node %s; ignoring the rest "
                "(raise --kube.max-pods)",
                self.max_pods,
                self.node_name,
            )
            self._warned_full = True

    def _warn_finished(self) -> None:
        if not self._warned_finished:
            log.warning(
                "kube: more than %d pods on node %s; finished (Succeeded/Failed) pods "
                "give way to running ones (raise --kube.max-pods, or give Jobs a "
                "ttlSecondsAfterFinished)",
                self.max_pods,
                self.node_name,
            )
            self._warned_finished = True

    # -- loop -----------------------------------------------------------------------

    def _run(self, stop: threading.Event) -> None:
        """List, then watch and watch again from the last resourceVersion; list again
        only when there is none to watch from: at start, after a 410, after an error.
        Ends when ``stop`` (this start's) is set."""
        backoff = self.backoff_initial_seconds
        resource_version: str | None = None
        watch_started = 0.0
        quick_gone = 0  # 410s in a row, each within a second of its watch's start
        while not stop.is_set():
            try:
                if resource_version is None:
                    resource_version = self._list(stop)
                    if stop.is_set():
                        break
                    self._set_error("")
                watch_started = time.monotonic()
                resource_version = self._watch(resource_version, self.watch_timeout_seconds, stop)
                backoff = self.backoff_initial_seconds
                quick_gone = 0
                if time.monotonic() - watch_started < 1.0:
                    # a server that ends watches at once must not make us spin
                    stop.wait(self.backoff_initial_seconds)
            except _Gone:
                resource_version = None
                quick_gone = quick_gone + 1 if time.monotonic() - watch_started < 1.0 else 0
                if quick_gone < 2:
                    log.debug("kube: watch resourceVersion expired (410); relisting")
                    continue
                # the version a relist just gave refused at once again: a server that
                # expires every watch must not make us list and watch in a tight loop
                # (client-go's reflector backs off there too)
                log.debug("kube: watch expired again at once (410); relisting in %.0fs", backoff)
                stop.wait(backoff)
                backoff = min(backoff * 2, self.backoff_max_seconds)
            except Exception as err:
                resource_version = None
                if stop.is_set():
                    break
                message = f"{type(err).__name__}: {err}"[:500]
                if self._set_error(message):
                    log.warning(
                        "kube: pod watch on %s failed (%s); serving the cache, retrying",
                        self.node_name,
                        message,
                    )
                stop.wait(backoff)
                backoff = min(backoff * 2, self.backoff_max_seconds)
            finally:
                with self._lock:
                    if not stop.is_set():  # else stop() did, and a next start may be on
                        self._connected = False

    def _set_error(self, message: str) -> bool:
        """Record the error; True when it changed (log once per state change)."""
        with self._lock:
            changed = message != self._last_error
            self._last_error = message
        if changed and not message:
            log.info("kube: pod watch on %s is back", self.node_name)
        return changed

    def _timeouts(self, read_seconds: float) -> tuple[float, float]:
        return (self.request_timeout_seconds, read_seconds)

    def _list(self, stop: threading.Event | None = None) -> str:
        """List this node's pods, ``LIST_PAGE_PODS`` a page, into the cache; the list's
        resourceVersion (to watch from). Each page is parsed into ``_Listed`` records
        and dropped before the next is asked for, so a relist holds one page of pod
        objects, not the whole list. The cache changes only once the last page is in.
        A continue token that expired (410) starts the list again from its first page,
        ``LIST_RESTARTS`` times at most: then ``CollectorError``, so that the loop's
        backoff, not this, paces the first pages sent to the API server."""
        for restart in range(LIST_RESTARTS + 1):
            if restart:
                log.debug("kube: pod list continue token expired (410); listing again")
            with contextlib.suppress(_Gone):
                listed, version = self._list_pages()
                self._replace_listed(listed, stop)
                return version
        raise CollectorError(
            f"kube: pod list continue token expired {LIST_RESTARTS + 1} times in a row "
            "(is a list slower than the API server's compaction window?)"
        )

    def _list_pages(self) -> tuple[list[_Listed], str]:
        """Every page of one list: its records and resourceVersion; ``_Gone`` when the
        continue token of a page after the first has expired."""
        listed: list[_Listed] = []
        token: str | None = None
        total = 0
        while True:
            try:
                records, metadata, size = self._list_page(token, MAX_LIST_BYTES - total)
            except _Gone:
                if token is None:  # no token to expire: not a routine 410
                    raise CollectorError(
                        "kube: list pods failed: HTTP 410 on a first page"
                    ) from None
                raise
            total += size
            listed.extend(records)
            version = _str(metadata.get("resourceVersion"), 64)
            if version is None:
                raise CollectorError("kube: pod list has no resourceVersion")
            token = _continue_token(metadata)
            if token is None:
                return listed, version

    def _list_page(
        self, token: str | None, budget: int
    ) -> tuple[list[_Listed], dict[str, Any], int]:
        """One page of the list (the first without ``token``): its pods' records, its
        list metadata and its size in bytes; ``CollectorError`` past ``budget`` bytes
        (what the list has left). The page's objects are gone when this returns."""
        from kubernetes.client.exceptions import ApiException

        page: dict[str, Any] = {"limit": LIST_PAGE_PODS}
        if token is not None:
            page["_continue"] = token
        try:
            response = self._api.list_pod_for_all_namespaces(
                field_selector=self._selector(),
                _preload_content=False,
                _request_timeout=self._timeouts(self.request_timeout_seconds * 3),
                **page,
            )
        except ApiException as err:
            # an expired continue token is routine (relist), not an error to log and back off
            if err.status == 410:
                raise _Gone() from None
            raise CollectorError(
                f"kube: list pods failed: HTTP {err.status} {err.reason}"
            ) from None
        try:
            body = response.read(budget + 1)
            if len(body) > budget:
                raise CollectorError(f"kube: pod list larger than {MAX_LIST_BYTES} bytes")
        except BaseException:
            with contextlib.suppress(Exception):
                response.close()
            raise
        finally:
            response.release_conn()
        document = json.loads(body)
        if not isinstance(document, dict) or not isinstance(document.get("items"), list):
            raise CollectorError("kube: pod list answer is not a PodList")
        metadata = document.get("metadata")
        return (
            _listed(document["items"]),
            metadata if isinstance(metadata, dict) else {},
            len(body),
        )

    def _watch(self, resource_version: str, duration_seconds: float, stop: threading.Event) -> str:
        from kubernetes.client.exceptions import ApiException

        timeout = int(max(1, duration_seconds))
        try:
            response = self._api.list_pod_for_all_namespaces(
                field_selector=self._selector(),
                watch=True,
                resource_version=resource_version,
                allow_watch_bookmarks=True,
                timeout_seconds=timeout,
                _preload_content=False,
                # the server ends the watch after `timeout`; allow it that plus slack
                _request_timeout=self._timeouts(timeout + max(30.0, self.request_timeout_seconds)),
            )
        except ApiException as err:
            if err.status == 410:
                raise _Gone() from None
            raise CollectorError(
                f"kube: watch pods failed: HTTP {err.status} {err.reason}"
            ) from None
        with self._lock:
            # registered only while not stopped: stop() closes the response it finds
            live = not stop.is_set()
            if live:
                self._response = response
                self._connected = True
        try:
            buffer = bytearray()
            for chunk in response.stream(64 * 1024, decode_content=True) if live else ():
                buffer.extend(chunk)
                while (end := buffer.find(b"\n")) >= 0:
                    line = bytes(buffer[:end])
                    del buffer[: end + 1]
                    resource_version = self._event(line, resource_version, stop)
                if len(buffer) > MAX_EVENT_BYTES:
                    raise CollectorError(f"kube: watch event larger than {MAX_EVENT_BYTES} bytes")
                if stop.is_set():
                    break
            if buffer.strip():
                resource_version = self._event(bytes(buffer), resource_version, stop)
        finally:
            with self._lock:
                if self._response is response:
                    self._response = None
            # close, not only release: a half-read stream must not go back to the pool
            with contextlib.suppress(Exception):
                response.close()
            with contextlib.suppress(Exception):
                response.release_conn()
        with self._lock:
            if not stop.is_set():
                self._last_sync = time.time()
        return resource_version

    def _event(
        self, line: bytes, resource_version: str, stop: threading.Event | None = None
    ) -> str:
        if not line.strip():
            return resource_version
        try:
            event = json.loads(line)
        except ValueError:
            raise CollectorError("kube: watch sent a line that is not JSON") from None
        if not isinstance(event, dict) or not isinstance(event.get("object"), dict):
            raise CollectorError("kube: watch sent an event without an object")
        kind, obj = event.get("type"), event["object"]
        if kind == "ERROR":
            code = obj.get("code")
            if code == 410:
                raise _Gone()
            reason = _str(obj.get("message"), 300) or _str(obj.get("reason"), 64) or "unknown"
            raise CollectorError(f"kube: watch error {code}: {reason}")
        metadata = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
        version = _str(metadata.get("resourceVersion"), 64)
        if kind in ("ADDED", "MODIFIED", "DELETED"):
            self._apply(kind, obj, stop)
        elif kind == "BOOKMARK":
            with self._lock:
                if not _stopped(stop):
                    self._last_sync = time.time()
        else:
            log.debug("kube: ignoring watch event of type %r", kind)
        return version or resource_version

    def _abort_response(self) -> None:
        """Unblock a read of the watch stream by shutting its socket down."""
        with self._lock:
            response = self._response
        if response is None:
            return
        with contextlib.suppress(Exception):
            sock = getattr(getattr(response, "connection", None), "sock", None)
            if sock is not None:
                sock.shutdown(socket.SHUT_RDWR)


def build(ctx: BuildContext) -> Any:
    """One watch on this node's pods (needs ``--node-name``), or the simulated node's
    pods; either also answers the progress listener's pod-by-IP lookups."""
    if ctx.simulated is not None:
        return ctx.simulated.pods
    cfg = ctx.cfg
    if cfg.node_name is None:
        raise StartupError(
            "the kube collector needs this node's name: set --node-name or env "
            "NODE_NAME (downward API: spec.nodeName)"
        )
    pods = KubePodSource(
        cfg.node_name,
        kubeconfig=cfg.kube_kubeconfig,
        api_url=cfg.kube_api_url,
        max_pods=cfg.kube_max_pods,
    )
    pods.start()
    ctx.closers.append(pods.stop)
    ctx.pod_by_ip = pods.by_ip
    return pods


register(
    Collector(
        "kube",
        "pod metadata from one watch on this node's pods (cached across API outages)",
        kind="pods",
        build=build,
        order=30,
    )
)
