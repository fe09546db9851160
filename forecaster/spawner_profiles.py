"""JupyterHub KubeSpawner ``profile_list`` hook: "free now" / "~14:20 UTC" on each GPU profile.

Standard library only, so it runs in the hub's image without gpu-eta's dependencies
(copy this one file next to ``jupyterhub_config.py``, or install gpu-eta there).
It reads what the forecaster publishes, ``gpu_eta_request_predicted_start_timestamp_seconds``
(when a request made now for ``gpus`` GPUs of a ``model`` would start, P50) and
``gpu_eta_request_max_gpus`` (the most a node of a type holds), with one Prometheus
query per page load, and appends the answer to each GPU profile's
``display_name``::

    from spawner_profiles import profile_list_hook      # or gpu_eta.forecaster.spawner_profiles
    c.KubeSpawner.profile_list = profile_list_hook(     # a coroutine function: KubeSpawner awaits it
        [
            {"display_name": "RTX 4080, 1 GPU", "kubespawner_override": {
                "extra_resource_limits": {"nvidia.com/gpu": "1"},
                "node_selector": {"nvidia.com/gpu.product": "NVIDIA-GeForce-RTX-4080"}}},
            {"display_name": "CPU only"},
        ],
        prometheus_url="http://prometheus-operated.monitoring:9090",
    )

A profile's request is its override merged into the spawner's own (the hub's
``c.KubeSpawner.extra_resource_limits``, ``_guarantees``, ``node_selector``,
``tolerations`` …), a ``profile_options`` choice's merged into the profile's, as
KubeSpawner merges them (a mapping entry by entry, None removing the entry below; a
list replacing the one below): the hook reads the spawner's from the spawner
KubeSpawner calls it with. Its GPU count comes from ``extra_resource_limits`` (or
``_guarantees``): its ``nvidia.com/gpu``, ``nvidia.com/gpu.shared`` or
``nvidia.com/mig-…`` entry asking for more than 0 (a MIG profile zeroing the hub's
``"nvidia.com/gpu": "1"`` asks for its slice), or one of the site's own GPU resources
given as ``gpu_resources`` (a time-slicing rename, ``nvidia.com/a100-shared``: the
forecaster's ``--pending.gpu-resource``), and the start shown is the one published
for that resource; none asking, it is CPU only. Its GPU type comes from
``node_selector`` ``nvidia.com/gpu.product`` (any type when absent: the earliest of
them). The forecaster predicts for any node of a type, so a GPU profile placed by
anything else is "no estimate": another ``node_selector`` key (a pool, GKE's
``cloud.google.com/gke-accelerator``, whose names are not mapped to GPU types), a
required node or pod (anti-)affinity, a placing ``extra_pod_config`` key, a
toleration beyond the hub's own and ``Exists`` on its GPU resource's taint, or two
GPU resources at once (``gpu_model``, ``check_placement``). What the spawner itself
sets (its node_selector keys, required affinities, placing ``extra_pod_config`` keys,
tolerations: z2jh's ``matchNodePurpose: require`` affinity) applies to every profile
alike and is taken to admit the site's GPU nodes: only what a profile or a choice
adds or changes beyond it is "no estimate". So is a ``scheduler_name`` or
``priority_class_name`` (or ``extra_pod_config`` ``schedulerName``,
``priorityClassName``, ``priority``) other than the hub's own: the forecaster predicts
a request placed by the default scheduler at priority 0 (``check_scheduling``). A
count the forecaster does not publish (3, 5...) takes the next published size up.
Profiles without GPUs are left alone, and so is one whose resources are a callable
(KubeSpawner calls an override value that is one with the spawner, at spawn time: the
hook cannot know its answer); a GPU profile whose placement is a callable is "no
estimate". Such a profile, or one the hook cannot read at all, costs its own estimate
only, logged in one line. When a ``profile_options`` choice sets the GPU count, type
or placement (its override, merged into the profile's), the estimates go after the
names of that option's choices, each for its own request, and none after the profile's
(``annotate_one``); an enabled ``unlisted_choice`` gets its own after the name the
form lists it by, ``display_name_in_choices`` ("Other..."): "no estimate" where the
value the user types sets the GPU count, type or placement (``annotate_unlisted``).
When Prometheus cannot be read, does not answer within the timeout (2 s: the query
runs in a thread, never in the hub's event loop, and gives up by then too, status line
and headers included: ``fetch_published``), answers an error status (its connection closed there
and then: ``open_answer``), or something else answers (a port speaking HTTP/2 or
another protocol, an answer cut short, JSON of another shape, a redirect, which is not
followed: it would take the URL's credentials along), the profiles come back unchanged
(the spawn page must never break, nor wait, because of a forecast) and the reason is
logged in one line. A series of another shape is skipped.

A frozen forecast is "no estimate", never "free now": a P50 ``PAST_LIMIT_SECONDS`` (the
alerts' ``pending_prediction_past_seconds``) or more in the past, and the series of a
forecaster reporting ``gpu_eta_forecaster_stale 1`` or whose last good cycle
(``gpu_eta_forecaster_last_success_timestamp_seconds``) ended more than
``FORECASTER_STALE_SECONDS`` ago, as ``gpu-eta top`` and GpuEtaForecasterStale judge
it (left out by the query itself).

A profile no node can ever hold is "never fits on this cluster", not "no estimate": it
asks for more units than the most one node of its type could give a request
(``MAX_METRIC``, read in the same query; a type or resource no node has: none), and the
hub logs one INFO line saying so (``never_fits``). While none of that series is read,
or for a type a node of unknown type may be (``largest_for``), it is not known: "no
estimate", as for every other absence of a start.

A profile without a ``slug`` gets the one KubeSpawner would make from its display_name
before the estimate is added (``kubespawner_slug``): KubeSpawner calls the hook again
when the form comes back and finds the chosen profile by its slug, so a slug made from
"… — ~14:20" would be gone by then ("No such profile", no server).
"""

from __future__ import annotations

import asyncio
import base64
import functools
import http.client
import io
import json
import logging
import math
import re
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
import zoneinfo
from collections.abc import Awaitable, Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, tzinfo
from typing import Any

log = logging.getLogger(__name__)

METRIC = "gpu_eta_request_predicted_start_timestamp_seconds"
# How old a forecaster's last good cycle may be before its forecasts are stale: the alert
# rules' forecaster_stale_seconds (GpuEtaForecasterStale, rules/gpu-eta.rules.yaml) and
# gpu-eta top's, copied: this file runs alone (a test holds the three equal).
FORECASTER_STALE_SECONDS = 900.0
# A forecaster whose last cycle failed serves its previous set with gpu_eta_forecaster_stale
# 1 (a CronJob's failed run pushes that too), and one whose last good cycle ended more
# than FORECASTER_STALE_SECONDS ago serves a set nobody updates (a CronJob that stopped
# running, or whose runs are killed before they push, leaves its last push in the
# Pushgateway, stale 0 included): its series are left out, target by target (job,
# instance: a push carries its group's labels on every series), so a healthy forecaster
# beside it is still read. Forecasters pushed to one Pushgateway scraped without
# honor_labels share its job and instance and differ by the pushed job, then
# ``exported_job`` (and ``exported_instance`` if one was pushed): those count too
# (absent, they match as empty on both sides).
SAME_FORECASTER = "on (job, instance, exported_job, exported_instance)"
# The most units of a resource a request could get on one node of a type (the forecaster's
# ``pending.largest_requests``): a profile asking more never starts on this cluster.
MAX_METRIC = "gpu_eta_request_max_gpus"
# a largest size past this is no forecaster's (kube_state.MAX_UNITS, copied: the forecaster
# leaves out a node with more units of a resource): skipped as a series of another shape
MAX_UNITS = 1024
NEVER_FITS = "never fits on this cluster"
# What follows a selector of a forecaster's series to keep live forecasters' only (the
# dashboards' grafana/build.py live() writes the same: tests/ops/test_dashboards.py)
LIVE_ONLY = (
    f" unless {SAME_FORECASTER} (gpu_eta_forecaster_stale == 1)"
    f" unless {SAME_FORECASTER} (time() - gpu_eta_forecaster_last_success_timestamp_seconds"
    f" > {FORECASTER_STALE_SECONDS:g})"
)
QUERY = f'({METRIC}{{quantile="0.5"}} or {MAX_METRIC})' + LIVE_ONLY
GPU_RESOURCE = "nvidia.com/gpu"
# the built-in GPU resources, as gpu_eta.common.gpu_resources has them (not imported:
# this file runs alone in a hub's image)
BUILT_IN = (GPU_RESOURCE, "nvidia.com/gpu.shared")
MIG_PREFIX = "nvidia.com/mig-"
PRODUCT_LABEL = "nvidia.com/gpu.product"
FREE_NOW_SECONDS = 60.0
# A P50 further in the past than this is no estimate: a forecaster never predicts a start
# before its cycle's now and re-predicts every cycle, so it is one nobody updates. The
# alert rules' pending_prediction_past_seconds (rules/gpu-eta.rules.yaml, docs/alerts.md),
# copied: this file runs alone (a test holds the two equal).
PAST_LIMIT_SECONDS = 900.0
MAX_RESPONSE_BYTES = 4 * 1024 * 1024
# A start this many calendar days ahead or more shows its date beside its weekday: the
# forecaster looks 7 days ahead (--pending.horizon), and on the seventh day the weekday
# alone is today's.
DATE_FROM_DAYS = 6


class ProfileError(ValueError):
    """A profile asks for a GPU count that is not a positive integer, or its
    ``kubespawner_override`` is no mapping."""


class SpawnTimeValue(ProfileError):
    """An override value the hook needs is a callable, which KubeSpawner calls with the
    spawner when the profile is chosen: its answer is not known when the page is made."""


class NotForecast(ProfileError):
    """A GPU profile whose pod is not the request the forecaster publishes: it may run
    on other nodes than any of its GPU type (a node_selector key besides
    ``PRODUCT_LABEL``, a required affinity or a toleration beyond the hub's own), is
    placed or queued by another scheduler or priority class than the hub's, asks for two
    GPU resources at once, or takes its GPU request or placement from a value the user
    types. A site's choice, not a fault: "no estimate"."""


def is_gpu_resource(name: str, own: Sequence[str] = ()) -> bool:
    """``exporter.collectors.podresources.is_gpu_resource``'s rule, copied (this file
    runs alone; tests/forecaster/test_spawner_profiles.py holds the two equal)."""
    return name in BUILT_IN or name.startswith(MIG_PREFIX) or name in own


def own_resources(gpu_resources: Sequence[str]) -> tuple[str, ...]:
    """The site's own GPU resources (``gpu_resources``) as ``is_gpu_resource``'s
    ``own``: one name given as a string is one resource, not its characters."""
    return (gpu_resources,) if isinstance(gpu_resources, str) else tuple(gpu_resources)


def ksm_label(resource: str) -> str:
    """A resource name as kube-state-metrics' ``resource`` label writes it (every
    character outside ``[a-zA-Z0-9_]`` an underscore), the forecaster's ``resource``:
    ``common.k8s_names.ksm_label``, copied (held equal by a test)."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", resource)


def kubespawner_slug(display_name: str) -> str:
    """The slug KubeSpawner makes for a profile without one: python-slugify's
    ``slugify(display_name)``, the library KubeSpawner itself calls (its dependency:
    every hub that has ``profile_list`` has it), imported here so that this file still
    runs alone."""
    from slugify import slugify

    return str(slugify(display_name))


def with_slug(profile: Mapping[str, Any]) -> dict[str, Any]:
    """A shallow copy of ``profile`` holding its KubeSpawner slug (its own, if it has
    one). Shallow: the hook sets top-level keys only, and an override value may be a
    callable KubeSpawner calls at spawn time, bound to an object that cannot be copied
    (one holding a lock), which a deep copy raised on."""
    p = dict(profile)
    if "slug" not in p and "display_name" in p:
        p["slug"] = kubespawner_slug(str(p["display_name"]))
    return p


def as_given(profile: Any) -> Any:
    """``profile`` with its slug (``with_slug``), or ``profile`` itself when that cannot
    be made: what the hook returns for a profile it gives no estimate, never raising."""
    try:
        return with_slug(profile)
    except Exception:  # KubeSpawner judges the profile, not the hook
        return profile


Starts = dict[tuple[str, str, int], float]
# (resource, model) → the most units a request could get on one node of that type
# (``MAX_METRIC``; model "": the nodes of unknown type)
Largest = dict[tuple[str, str], int]


@dataclass(frozen=True)
class Published:
    """What one query reads of the forecaster's request series: the P50 starts
    (``parse_published``) and the largest request each GPU type can hold (empty when the
    forecaster publishes none: not known, not "none fits")."""

    starts: Starts
    largest: Largest


def fetch_published(
    prometheus_url: str, timeout_seconds: float = 2.0, after: float = -math.inf
) -> Published:
    """(resource, model, gpus) → P50 start timestamp and (resource, model) → the largest
    request a node holds, from one instant query (``resource`` as the forecaster
    publishes it, ``ksm_label``). Blocking (the hook runs it in a
    thread), and over within ``timeout_seconds`` whatever the server does: connect, TLS
    handshake, request, status line, headers and body share that one deadline
    (``DeadlineConnection``), so a slow server never keeps the thread past it (the
    name lookup is the resolver's alone). Raises whatever urllib and http.client
    raise (OSError, an error status too: ``open_answer``;
    ``http.client.HTTPException``...) and ValueError (``parse_published``):
    the hook, not this, decides that any of them means no estimate. ``after``:
    as ``parse_published``."""
    base, authorization = split_credentials(prometheus_url)
    url = f"{base.rstrip('/')}/api/v1/query?" + urllib.parse.urlencode({"query": QUERY})
    headers = {"Authorization": authorization} if authorization else {}
    deadline = time.monotonic() + timeout_seconds
    raw = bytearray()
    request = urllib.request.Request(url, headers=headers)
    opener = urllib.request.build_opener(
        RefuseRedirects, DeadlineHTTPHandler(deadline), DeadlineHTTPSHandler(deadline)
    )
    with open_answer(opener, request, timeout_seconds) as resp:
        while chunk := resp.read1(65536):
            raw += chunk
            if len(raw) > MAX_RESPONSE_BYTES:
                raise ValueError(f"Prometheus answer larger than {MAX_RESPONSE_BYTES} bytes")
    return parse_published(bytes(raw), after)


def open_answer(
    opener: urllib.request.OpenerDirector, request: urllib.request.Request, timeout_seconds: float
) -> Any:
    """``opener.open(request)``, an error status raised as an ``OSError`` naming it, its
    connection closed first.

    Why: urllib's ``HTTPError`` holds the answer, socket open; raised out of the
    hook's thread and ``wait_for`` it sits in a reference cycle with its traceback, so
    a Prometheus answering 503 left one socket open per page load until a garbage
    collection found it."""
    try:
        return opener.open(request, timeout=timeout_seconds)
    except urllib.error.HTTPError as err:
        err.close()
        raise OSError(f"Prometheus answered HTTP {err.code} {err.reason}") from None


def time_left(deadline: float) -> float:
    """Seconds left until ``deadline`` (monotonic), else ``TimeoutError``: what a socket
    timeout raises, so that the caller sees one kind of timeout."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("Prometheus did not answer within the timeout")
    return left


class DeadlineReads(io.RawIOBase):
    """A socket's reads, each given the time left until ``deadline`` as its timeout:
    what ``http.client`` reads the status line, the headers and the body through.

    Why: a socket timeout bounds each read, not the answer, so a Prometheus (or a proxy)
    sending a byte now and then, status line and headers included, held ``fetch_published``'s
    thread, one of the hook's 4, for as long as it went on."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        super().__init__()
        self._sock = sock
        self._raw = sock.makefile("rb", buffering=0)  # counted by the socket, as http.client's
        self._deadline = deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int | None:
        self._sock.settimeout(time_left(self._deadline))
        return self._raw.readinto(buffer)

    def fileno(self) -> int:
        return self._raw.fileno()

    def close(self) -> None:
        self._raw.close()
        super().close()


class DeadlineSocketReads:
    """What ``HTTPResponse`` takes as its socket: it only calls ``makefile("rb")``,
    which here reads by ``DeadlineReads``."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self._sock = sock
        self._deadline = deadline

    def makefile(self, mode: str) -> io.BufferedReader:
        return io.BufferedReader(DeadlineReads(self._sock, self._deadline))


class DeadlineConnection(http.client.HTTPConnection):
    """An ``HTTPConnection`` whose connect, TLS handshake (``DeadlineHTTPSConnection``),
    request and answer all end by ``deadline`` (monotonic seconds): the connect is given
    the time left as its timeout, the socket then the time left again (a TLS handshake
    and the request's ``sendall`` are each bounded by it whole) and the answer is read
    through ``DeadlineReads``. The name lookup is the resolver's and not bounded."""

    def __init__(self, *args: Any, deadline: float, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.deadline = deadline
        self._create_connection = self._connect_by_deadline

    def _connect_by_deadline(
        self, address: tuple[str, int], _timeout: object = None, source: Any = None
    ) -> socket.socket:
        sock = socket.create_connection(address, time_left(self.deadline), source)
        sock.settimeout(time_left(self.deadline))
        return sock

    def response_class(self, sock: socket.socket, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        return http.client.HTTPResponse(
            DeadlineSocketReads(sock, self.deadline),  # type: ignore[arg-type]
            *args,
            **kwargs,
        )


class DeadlineHTTPSConnection(DeadlineConnection, http.client.HTTPSConnection):
    """``DeadlineConnection`` over TLS: the handshake takes the socket's timeout, the
    time left once connected, as its bound."""


class DeadlineOpening:
    """What urllib's http and https handlers do, with ``connection_class``'s
    connections ending by ``deadline`` (monotonic seconds) in place of
    ``http.client``'s own."""

    connection_class: type[DeadlineConnection]

    def __init__(self, deadline: float, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.deadline = deadline

    def do_open(
        self, _http_class: Any, req: urllib.request.Request, **kwargs: Any
    ) -> http.client.HTTPResponse:
        connection = functools.partial(self.connection_class, deadline=self.deadline)
        return super().do_open(connection, req, **kwargs)  # type: ignore[misc]


class DeadlineHTTPHandler(DeadlineOpening, urllib.request.HTTPHandler):
    """urllib's http handler, its connections ending by a deadline."""

    connection_class = DeadlineConnection


class DeadlineHTTPSHandler(DeadlineOpening, urllib.request.HTTPSHandler):
    """The default TLS context (the system's CAs), as urllib's own handler has it."""

    connection_class = DeadlineHTTPSConnection


class RedirectRefused(Exception):
    """Prometheus' URL answered with a redirect, which the hook does not follow."""


class RefuseRedirects(urllib.request.HTTPRedirectHandler):
    """Turns every 3xx into RedirectRefused. urllib follows a redirect with the request's
    headers, ``Authorization`` included, to any host the ``Location`` names: the
    password of the Prometheus URL would go to it. The forecaster's own client does not
    follow redirects either (``promapi``)."""

    def http_error_302(
        self,
        req: urllib.request.Request,
        fp: Any,
        code: int,
        msg: str,
        headers: Mapping[str, str],
    ) -> None:
        fp.close()
        raise RedirectRefused(
            f"answered HTTP {code}, a redirect to {redirect_target(req.full_url, headers)}, "
            "not followed (it would take the credentials along): give prometheus_url "
            "the address it points to"
        )

    http_error_301 = http_error_303 = http_error_307 = http_error_308 = http_error_302


def redirect_target(request_url: str, headers: Mapping[str, str]) -> str:
    """Where a redirect points, quoted, without its credentials or query string."""
    location = (headers.get("Location") or headers.get("URI") or "").strip()
    if not location:
        return "nowhere (no Location)"
    try:
        target = urllib.parse.urlsplit(urllib.parse.urljoin(request_url, location))
    except ValueError:
        return "an unreadable Location"
    host = target.netloc.rpartition("@")[2]
    return repr(f"{target.scheme}://{host}{target.path}"[:200])


def parse_published(raw: bytes, after: float = -math.inf) -> Published:
    """An instant query's answer → (resource, model, gpus) → the earliest P50 start
    later than ``after``, and (resource, model) → the largest request a node holds
    (``MAX_METRIC`` series, by their ``__name__``; of several forecasters the largest).
    Earlier starts are dropped before the earliest is taken, so that a frozen series (a
    Pushgateway group nobody pushes to any more) cannot hide a live one of the same
    request.

    Raises ValueError when the answer is not a successful query's (not JSON, ``data`` not
    an object, ``result`` not a list). A series of another shape (not an object, labels
    not an object, no ``[time, "value"]`` pair, a ``gpus`` that is no integer, a largest
    size that is no whole number from 0 to ``MAX_UNITS``, no ``resource``) is
    skipped: one odd series, another exporter's or a hand-made push, costs its own
    estimate, not every one."""
    body = json.loads(raw)
    if not isinstance(body, dict):
        raise ValueError("Prometheus answer is not a JSON object")
    if body.get("status") != "success":
        raise ValueError(f"Prometheus answered {body.get('status')!r}: {body.get('error', '')}")
    data = body.get("data")
    result = data.get("result") if isinstance(data, dict) else None
    if not isinstance(result, list):
        raise ValueError("Prometheus answer holds no result list (data.result)")
    starts: Starts = {}
    largest: Largest = {}
    for item in result:
        labels = item.get("metric") if isinstance(item, dict) else None
        if not isinstance(labels, dict):
            continue
        try:
            value = float(item["value"][1])
            if labels.get("__name__") == MAX_METRIC:
                units = largest_units(value)
                key = (str(labels["resource"]), str(labels.get("model", "")))
                largest[key] = max(units, largest.get(key, 0))
                continue
            gpus = int(labels["gpus"])
        except (KeyError, TypeError, ValueError, IndexError):
            continue  # one bad series is skipped, not a reason to show nothing
        if math.isfinite(value) and value > after:
            key3 = (str(labels.get("resource", "")), str(labels.get("model", "")), gpus)
            starts[key3] = min(value, starts.get(key3, math.inf))
    return Published(starts, largest)


def largest_units(value: float) -> int:
    """A ``MAX_METRIC`` sample as a count of units; ValueError unless it is a whole
    number from 0 to ``MAX_UNITS`` (NaN, negative, fractional: no forecaster's)."""
    if not (0 <= value <= MAX_UNITS and value == int(value)):
        raise ValueError(f"{MAX_METRIC} {value!r} is no count of units")
    return int(value)


def gpu_request(profile: Mapping[str, Any], gpu_resources: Sequence[str] = ()) -> tuple[str, int]:
    """The profile's GPU resource and count (``merged_gpu_request`` of the profile
    alone); ``(GPU_RESOURCE, 0)`` when it asks for none."""
    return merged_gpu_request([profile], gpu_resources) or (GPU_RESOURCE, 0)


def merged(levels: Sequence[Mapping[str, Any]], key: str) -> tuple[dict[str, Any], bool]:
    """``key``'s mapping as KubeSpawner makes it from the levels' overrides (``levels``
    innermost first: the choice, the profile, the spawner): it applies each override
    onto the one below, a mapping merged entry by entry and a None entry removing the
    key (``recursive_update``), so an entry is the innermost level's that names it.
    Returns the entries left and whether a level's value is given at spawn time (a
    callable, whose answer may set any entry no level inside it names)."""
    decided: dict[str, Any] = {}
    given_later = False
    for level in levels:
        value = overrides(level).get(key) or {}
        if not isinstance(value, Mapping):
            given_later = True
            break
        for name, entry in value.items():
            decided.setdefault(str(name), entry)
    return {k: v for k, v in decided.items() if v is not None}, given_later


def gpu_count(name: str, value: object) -> int:
    """A GPU resource's count as an override writes it ("1", 1); ProfileError for
    anything but an integer >= 0."""
    try:
        n = int(str(value))
    except ValueError:
        raise ProfileError(f"{name} must be an integer, got {value!r}") from None
    if n < 0:
        raise ProfileError(f"{name} must be >= 0, got {n}")
    return n


def merged_gpu_request(
    levels: Sequence[Mapping[str, Any]], gpu_resources: Sequence[str] = ()
) -> tuple[str, int] | None:
    """The GPU resource and count the pod asks for, from ``extra_resource_limits`` and
    ``extra_resource_guarantees`` as KubeSpawner merges the levels' (``merged``; a
    resource's limit, else its guarantee: Kubernetes takes an extended resource's
    request from its limit). A GPU resource (``BUILT_IN``, a MIG slice, one of
    ``gpu_resources``) whose count is 0 is not asked for; None when none asks for more.

    Why all of them: a MIG profile under a hub giving every server a GPU takes the
    hub's back (``"nvidia.com/gpu": "0"``) and asks for a slice; read by its first GPU
    entry, the 0, it was CPU only. NotForecast when two GPU resources are asked for
    (the forecaster publishes one resource's start per request); SpawnTimeValue when
    none is and a level's value is a callable (it may ask for GPUs, or not: unknown
    until KubeSpawner calls it); ProfileError for a count that is no integer >= 0."""
    own = own_resources(gpu_resources)
    limits, limits_later = merged(levels, "extra_resource_limits")
    guarantees, guarantees_later = merged(levels, "extra_resource_guarantees")
    asked = {
        name: n
        for name, value in {**guarantees, **limits}.items()
        if is_gpu_resource(name, own) and (n := gpu_count(name, value)) > 0
    }
    if len(asked) > 1:
        raise NotForecast(f"asks for {' and '.join(asked)} at once")
    if asked:
        return next(iter(asked.items()))
    later = [
        key
        for key, given_later in (
            ("extra_resource_limits", limits_later),
            ("extra_resource_guarantees", guarantees_later),
        )
        if given_later
    ]
    if later:
        raise SpawnTimeValue(f"{' and '.join(later)} given at spawn time (not a mapping)")
    return None


def overrides(profile: Mapping[str, Any]) -> Mapping[str, Any]:
    """The profile's ``kubespawner_override`` ({} without one); ProfileError when it is
    no mapping."""
    override = profile.get("kubespawner_override") or {}
    if not isinstance(override, Mapping):
        raise ProfileError(f"kubespawner_override is a {type(override).__name__}, not a mapping")
    return override


# KubeSpawner's list values that keep a pod off nodes: a profile's replaces the hub's
REQUIRED_AFFINITIES = (
    "node_affinity_required",
    "pod_affinity_required",
    "pod_anti_affinity_required",
)
# KubeSpawner's values naming who places the pod and in which order: the forecaster
# predicts a request placed by the default scheduler at priority 0
# (forecaster/queue_replay.py, docs/pending.md step 5)
SCHEDULING = ("scheduler_name", "priority_class_name")
DEFAULT_SCHEDULER = "default-scheduler"
# extra_pod_config keys (the pod spec's) that choose or widen the nodes a pod may use, or
# name its scheduler or priority
POD_PLACEMENT = (
    "nodeName",
    "nodeSelector",
    "affinity",
    "tolerations",
    "schedulerName",
    "priorityClassName",
    "priority",
)


def gpu_model(levels: Sequence[Mapping[str, Any]], resource: str) -> str | None:
    """The GPU type the pod's node_selector names (``PRODUCT_LABEL``, as KubeSpawner
    merges the levels', ``merged``), None for any type; raises when the start published
    for that type is not this pod's (``check_placement``).

    Why: the forecaster predicts a request that may run on any node of its type. A
    node_selector naming another key (GKE's ``cloud.google.com/gke-accelerator``, a
    pool) was ignored, and the profile shown the earliest start of any type, or of its
    type in another pool: "free now" for a pod that then waited. GKE's accelerator
    names are not mapped to GPU types: the forecaster knows a node's type by its
    ``PRODUCT_LABEL`` alone, and the names differ by driver and GPU Feature Discovery
    setting (``-SHARED``, MIG suffixes)."""
    selector, given_later = merged(levels, "node_selector")
    if given_later:
        raise SpawnTimeValue("node_selector given at spawn time (not a mapping)")
    hubs, _ = merged(levels[-1:], "node_selector")
    others = [key for key in selector if key != PRODUCT_LABEL and not hubs_own(selector, hubs, key)]
    if others:
        raise NotForecast(
            f"node_selector {', '.join(others)}: starts are forecast by GPU type "
            f"({PRODUCT_LABEL}) only"
        )
    check_placement(levels, resource)
    return str(selector[PRODUCT_LABEL]) if PRODUCT_LABEL in selector else None


def innermost(levels: Sequence[Mapping[str, Any]], key: str) -> Any:
    """``key``'s value as KubeSpawner sets a value that is no mapping: the innermost
    level's that names it replaces the ones below ([] when none does)."""
    for level in levels:
        override = overrides(level)
        if key in override:
            return override[key] if override[key] is not None else []
    return []


def as_list(value: Any) -> Any:
    """A tuple as the list it stands for (a list value KubeSpawner's traits hold), anything
    else as it is: what two affinities are compared as."""
    return list(value) if isinstance(value, tuple) else value


def hubs_own(merged_values: Mapping[str, Any], hubs: Mapping[str, Any], key: str) -> bool:
    """Whether ``key``'s merged value is the hub's own (the spawner's, ``levels[-1]``):
    set by no profile or choice, or set again to what the hub has."""
    return key in hubs and merged_values.get(key) == hubs[key]


def check_placement(levels: Sequence[Mapping[str, Any]], resource: str) -> None:
    """NotForecast (SpawnTimeValue for a callable) when something besides the GPU type
    and the hub's own placement decides where the pod may run: a required node or pod
    (anti-)affinity or a placing ``extra_pod_config`` key other than the hub's, or a
    toleration other than the hub's own and the one for the GPU resource's own taint
    (``Exists`` on its name, what the forecaster's request tolerates by default). A
    toleration narrows nothing, but lets the pod onto nodes the forecast leaves out (a
    team's pool): its start is not the one published.

    Why the hub's own (the spawner's, ``levels[-1]``) is left out: it applies to every
    profile alike and is taken to admit the site's GPU nodes. z2jh's
    ``matchNodePurpose: require`` gives the spawner itself a required node affinity
    (hub.jupyter.org/node-purpose In [user]), and its tolerations every user pod;
    read as any other, every GPU profile showed "no estimate". A profile or choice
    emptying the hub's (``[]``, a None entry) widens it: still the start shown."""
    hub = overrides(levels[-1])
    for key in REQUIRED_AFFINITIES:
        value = innermost(levels, key)
        if callable(value):
            raise SpawnTimeValue(f"{key} given at spawn time")
        if value and as_list(value) != as_list(hub.get(key) or []):
            raise NotForecast(
                f"{key} set beyond the hub's own: starts are forecast for any node of the GPU type"
            )
    check_scheduling(levels)
    pod, given_later = merged(levels, "extra_pod_config")
    if given_later:
        raise SpawnTimeValue("extra_pod_config given at spawn time (not a mapping)")
    hubs_pod, _ = merged(levels[-1:], "extra_pod_config")
    placing = [key for key in POD_PLACEMENT if pod.get(key) and not hubs_own(pod, hubs_pod, key)]
    if placing:
        raise NotForecast(f"extra_pod_config {', '.join(placing)} set beyond the hub's own")
    tolerations = innermost(levels, "tolerations")
    if callable(tolerations):
        raise SpawnTimeValue("tolerations given at spawn time")
    hubs = hub.get("tolerations") or []
    for toleration in tolerations:
        if toleration not in hubs and not tolerates_own_taint(toleration, resource):
            raise NotForecast(f"tolerates {toleration!r}, beyond the hub's own tolerations")


def check_scheduling(levels: Sequence[Mapping[str, Any]]) -> None:
    """NotForecast (SpawnTimeValue for a callable) when a profile or choice names a
    ``scheduler_name`` or ``priority_class_name`` other than the hub's own (the
    spawner's, ``levels[-1]``); the default scheduler named, or either emptied, is
    what the forecast assumes.

    Why: the forecaster predicts a request made now by the default scheduler at
    priority 0, queued behind every pending pod of its priority. Another scheduler
    (Volcano, a scheduler with gangs or quotas) places the pod by rules the forecast
    does not model, and another priority class puts it before or behind pods the
    forecast has ahead of it. z2jh sets both on the spawner itself (its user
    scheduler, ``<release>-user-scheduler``, which only scores fitting nodes otherwise;
    ``<release>-default-priority``, value 0 by default): every profile has them."""
    hub = overrides(levels[-1])
    for key in SCHEDULING:
        value = innermost(levels, key)
        if callable(value):
            raise SpawnTimeValue(f"{key} given at spawn time")
        if not value or value == hub.get(key):
            continue
        if key == "scheduler_name" and value == DEFAULT_SCHEDULER:
            continue
        raise NotForecast(
            f"{key} {value!r}, not the hub's own ({hub.get(key) or 'unset'}): starts are "
            "forecast for the default scheduler at priority 0"
        )


def tolerates_own_taint(toleration: object, resource: str) -> bool:
    """Whether ``toleration`` is ``Exists`` on the taint named after ``resource``, what
    the ``ExtendedResourceToleration`` admission plugin gives a pod asking for it and
    the forecaster's request tolerates by default (docs/pending.md, step 5)."""
    if not isinstance(toleration, Mapping):
        return False
    return (
        toleration.get("key") == resource
        and toleration.get("operator") == "Exists"
        and toleration.get("effect") in (None, "", "NoSchedule")
    )


# the parts of a GPU request a choice may set: the count, the GPU type, where it may run
COUNT, TYPE, PLACE = "count", "type", "placement"


def parts_named(item: Any, gpu_resources: Sequence[str] = ()) -> frozenset[str]:
    """Which parts of a GPU request a ``profile_options`` choice's own override may set:
    ``COUNT`` (it names a GPU resource), ``TYPE`` (a ``nvidia.com/gpu.product``
    selector), ``PLACE`` (another node_selector key, a required affinity, tolerations,
    a placing ``extra_pod_config`` key: ``check_placement``). A value given at spawn
    time (a callable) may set its part, and an override that cannot be read any; a
    choice that is no mapping sets nothing."""
    if not isinstance(item, Mapping):
        return frozenset()
    try:
        override = overrides(item)
        own = own_resources(gpu_resources)
        named = set()
        for key in ("extra_resource_limits", "extra_resource_guarantees"):
            asked = override.get(key) or {}
            if not isinstance(asked, Mapping) or any(is_gpu_resource(str(n), own) for n in asked):
                named.add(COUNT)
        selector = override.get("node_selector") or {}
        if not isinstance(selector, Mapping) or PRODUCT_LABEL in selector:
            named.add(TYPE)
        if not isinstance(selector, Mapping) or any(k != PRODUCT_LABEL for k in selector):
            named.add(PLACE)
        pod = override.get("extra_pod_config") or {}
        if not isinstance(pod, Mapping) or any(k in pod for k in POD_PLACEMENT):
            named.add(PLACE)
        if any(k in override for k in (*REQUIRED_AFFINITIES, "tolerations", *SCHEDULING)):
            named.add(PLACE)
        return frozenset(named)
    except Exception:  # cannot be read: it may set any
        return frozenset((COUNT, TYPE, PLACE))


def option_parts(option: Any, gpu_resources: Sequence[str] = ()) -> frozenset[str]:
    """The parts of a GPU request (``parts_named``) some choice of one
    ``profile_options`` entry sets, its free-form ``unlisted_choice`` included when
    enabled: the parts whose value depends on what the user picks there."""
    if not isinstance(option, Mapping):
        return frozenset()
    choices = option.get("choices")
    items = list(choices.values()) if isinstance(choices, Mapping) else []
    unlisted = option.get("unlisted_choice")
    if isinstance(unlisted, Mapping) and unlisted.get("enabled"):
        try:
            items.append(unlisted_item(unlisted, gpu_resources))
        except Exception:  # the value typed sets part of the request, or it cannot be read
            return frozenset((COUNT, TYPE, PLACE))
    return frozenset().union(*(parts_named(item, gpu_resources) for item in items))


# What KubeSpawner's form shows for an enabled ``unlisted_choice`` in its option's
# drop-down when its ``display_name_in_choices`` is unset (``_get_initialized_profile_list``)
OTHER_CHOICE = "Other..."
# Two values to type that differ in every character: an override rendered with each
# differs wherever the value typed goes (``{value}``, ``{value[0]}`` ...)
TYPED = ("a" * 32, "b" * 32)


class OtherFieldsAsWritten(dict[str, str]):
    """What ``str.format_map`` reads ``{value}`` from: any other field (``{username}``)
    stays as written, as in KubeSpawner's own rendering."""

    def __missing__(self, key: str) -> str:
        return "{" + key + "}"


def with_typed(item: Any, value: str) -> Any:
    """``item`` as KubeSpawner renders an ``unlisted_choice``'s override for a typed
    ``value`` (``recursive_format``): ``{value}`` replaced in every string, keys too,
    through lists, sets and dicts; anything else (a callable) as it is. Raises what
    ``str.format_map`` raises for a string it cannot render (ValueError, IndexError)."""
    if isinstance(item, str):
        return item.format_map(OtherFieldsAsWritten(value=value))
    if isinstance(item, list):
        return [with_typed(i, value) for i in item]
    if isinstance(item, set):
        return {with_typed(i, value) for i in item}
    if isinstance(item, dict):
        return {with_typed(k, value): with_typed(v, value) for k, v in item.items()}
    return item


def typed_settings(
    one: Mapping[str, Any], other: Mapping[str, Any], gpu_resources: Sequence[str] = ()
) -> list[str]:
    """The override keys deciding the GPU request or its placement whose values differ
    between ``one`` and ``other``, one override rendered for two typed values: what the
    value typed sets. A GPU resource's count typed, a resource name typed (it may name
    a GPU resource), a placing ``extra_pod_config`` key, and any of ``node_selector``,
    the required affinities, ``tolerations``, ``SCHEDULING`` or a key named by the
    value typed."""
    own = own_resources(gpu_resources)
    placing = ("node_selector", *REQUIRED_AFFINITIES, "tolerations", *SCHEDULING)
    by_entry = ("extra_resource_limits", "extra_resource_guarantees", "extra_pod_config")
    out = []
    for key in sorted({*one, *other}, key=str):
        a, b = one.get(key), other.get(key)
        if a == b:
            continue
        if key not in one or key not in other or key in placing:
            out.append(str(key))
        elif key in by_entry:
            if not (isinstance(a, Mapping) and isinstance(b, Mapping)):
                out.append(str(key))
                continue
            deciding = (
                set(POD_PLACEMENT)
                if key == "extra_pod_config"
                else {n for n in {*a, *b} if is_gpu_resource(str(n), own)}
            )
            if any(n not in a or n not in b or (n in deciding and a[n] != b[n]) for n in {*a, *b}):
                out.append(str(key))
    return out


def unlisted_item(unlisted: Mapping[str, Any], gpu_resources: Sequence[str] = ()) -> dict[str, Any]:
    """An ``unlisted_choice`` as a choice whose request is known whatever is typed: its
    override rendered for a typed value (``with_typed``). NotForecast naming what the
    value typed sets when it sets the GPU count, type or placement (``typed_settings``):
    its start is known only once typed, never when the form is made; ProfileError when
    the override cannot be rendered (KubeSpawner's spawn fails on it too).

    Why: KubeSpawner applies the unlisted choice's override alone on the profile's, its
    strings' ``{value}`` replaced by the text typed. One typing the GPU type
    (``{"nvidia.com/gpu.product": "{value}"}``) asks for whatever is typed; one typing
    an image and fixing 2 GPUs asks for 2 GPUs of the profile's type."""
    override = dict(overrides(unlisted))
    try:
        one, other = (with_typed(override, value) for value in TYPED)
    except Exception as err:
        raise ProfileError(
            f"unlisted_choice kubespawner_override cannot take a typed value: {one_line(err)}"
        ) from None
    typed = typed_settings(one, other, gpu_resources)
    if typed:
        raise NotForecast(
            f"the value typed sets {', '.join(typed)}: its start is known only once typed"
        )
    return {"kubespawner_override": one}


def start_for(
    starts: Mapping[tuple[str, str, int], float],
    gpus: int,
    model: str = "",
    resource: str = GPU_RESOURCE,
) -> float | None:
    """P50 start for ``gpus`` units of ``resource`` (its Kubernetes name) on ``model``
    ("" = any); the next size up if needed."""
    wanted = ksm_label(resource)
    best = None
    for (r, m, size), ts in starts.items():
        if r != wanted or (model and m != model) or size < gpus:
            continue
        key = (size, ts)
        if best is None or key < best[0]:
            best = (key, ts)
    return None if best is None else best[1]


def largest_for(largest: Mapping[tuple[str, str], int], model: str, resource: str) -> int | None:
    """The most units of ``resource`` (its Kubernetes name) a request on ``model`` ("" =
    any) could get on one node, by the forecaster's ``MAX_METRIC`` (``largest``); None
    when not known: none published (a forecaster before it, the queue's prediction off,
    no GPU node read), or ``model`` a ``-SHARED`` or ``-MIG-`` spelling of a type
    published (its node may be typed from the GPU model, which offers those spellings:
    ``queue_replay.product_spellings``).

    As the forecaster places a pod (``queue_replay._offers``): a type no node of known
    type offers may be that of a node of unknown type (model ""), and only then; a
    resource or type absent while others are published is on no node: 0."""
    if not largest:
        return None
    wanted = ksm_label(resource)
    mine = {m: n for (r, m), n in largest.items() if r == wanted}
    if not model:
        return max(mine.values(), default=0)
    if model in mine:
        return mine[model]
    if any(m and model.startswith((f"{m}-SHARED", f"{m}-MIG-")) for m in mine):
        return None
    return mine.get("", 0)


def never_fits(
    largest: Mapping[tuple[str, str], int], gpus: int, model: str, resource: str
) -> str | None:
    """Why a request for ``gpus`` units of ``resource`` on ``model`` ("" = any) can never
    start on this cluster (no node holds that many: ``largest_for``), for the hub's log;
    None when some node may, or when that is not known."""
    most = largest_for(largest, model, resource)
    if most is None or gpus <= most:
        return None
    of_type = f"of type {model}" if model else "of any type"
    if most == 0:
        where = f"no {model} node" if model else "no node"
        return (
            f"asks for {gpus} {resource}: {where} a request may use has {resource} ({MAX_METRIC})"
        )
    return (
        f"asks for {gpus} {resource}: the most one node {of_type} can hold is {most} ({MAX_METRIC})"
    )


def label(start: float | None, now: float, tz: tzinfo | None = None) -> str:
    """The text shown: "free now", "~14:20 UTC" (``tz``'s time, else the hub's local
    time, with its zone; "~Mon 14:20 UTC" on another day, "~Sat 12 Dec 14:20 UTC"
    ``DATE_FROM_DAYS`` or more days ahead), or "no estimate".

    The zone is named because the hub's local time is UTC on Zero to JupyterHub (its
    pod sets no TZ) and its users may be anywhere: a bare "~14:20" reads as their time.

    A start ``PAST_LIMIT_SECONDS`` or more in the past is "no estimate", as the pending
    alert reads it: a frozen forecast (a forecaster whose cycles fail, a CronJob's last
    push) would otherwise say "free now" on a full cluster.

    A start no date can hold (past year 9999: garbage in Prometheus, a huge
    ``--pending.horizon``) is "no estimate": raised, it would break the spawn page."""
    if start is None or not math.isfinite(start) or start - now <= -PAST_LIMIT_SECONDS:
        return "no estimate"
    if start - now <= FREE_NOW_SECONDS:
        return "free now"
    try:
        when = datetime.fromtimestamp(start, tz).astimezone(tz)
        today = datetime.fromtimestamp(now, tz).astimezone(tz).date()
    except (OverflowError, OSError, ValueError):
        return "no estimate"
    days = (when.date() - today).days
    if days == 0:
        day = ""
    elif days < DATE_FROM_DAYS:
        day = f"{when:%a} "
    else:
        day = f"{when:%a} {when.day} {when:%b} "
    return f"~{day}{when:%H:%M} {when.tzname() or when.strftime('UTC%z')}"


def annotate(
    profiles: Sequence[Mapping[str, Any]],
    starts: Mapping[tuple[str, str, int], float],
    now: float,
    tz: tzinfo | None = None,
    gpu_resources: Sequence[str] = (),
    defaults: Mapping[str, Any] | None = None,
    largest: Mapping[tuple[str, str], int] | None = None,
) -> list[dict[str, Any]]:
    """Copies of ``profiles`` with " — free now" / " — ~HH:MM UTC" after the name of
    each GPU profile, or of each ``profile_options`` choice where a choice sets its GPU
    count or type (``annotate_one``), each profile with its slug (``with_slug``).
    ``defaults``: the spawner's values, which a profile naming no GPU count or type
    asks for (``spawner_defaults``). ``largest``: the most a node of each type holds
    (``Published.largest``), by which a profile no node holds is ``NEVER_FITS``. Never raises: a profile that cannot be read (a
    callable override value, an odd one) costs its own estimate only, with one log
    line, and comes back as given (``as_given``)."""
    out = []
    for profile in profiles:
        try:
            out.append(
                annotate_one(with_slug(profile), starts, now, tz, gpu_resources, defaults, largest)
            )
        except Exception as err:  # the boundary: one profile, not the page
            log_no_estimate(repr(display_name(profile)), err)
            out.append(as_given(profile))
    return out


def annotate_one(
    p: dict[str, Any],
    starts: Mapping[tuple[str, str, int], float],
    now: float,
    tz: tzinfo | None,
    gpu_resources: Sequence[str],
    defaults: Mapping[str, Any] | None = None,
    largest: Mapping[tuple[str, str], int] | None = None,
) -> dict[str, Any]:
    """``p`` (a copy: modified) with its estimate after its name when it asks for GPUs,
    or, when a ``profile_options`` choice may set its GPU count or type
    (``option_parts``), with the estimates on that option's choices instead (copied,
    the choices' keys kept: the form sends them back). A request it cannot read (a bad
    count, an override that is no mapping, GPUs given at spawn time) is logged and
    costs its own estimate.

    Why not the profile's own name then: KubeSpawner merges the chosen choice's
    override into the profile's, so the start is the choice's. "1 GPU — free now",
    the earliest of any type, read as the start of the A100 the user then picked, 3
    days away. When two options set parts of the request, each choice's start depends
    on the other option's choice (and on which is applied last): none is shown."""
    name = repr(display_name(p))
    options = p.get("profile_options")
    options = options if isinstance(options, Mapping) else {}
    setting = [key for key, option in options.items() if option_parts(option, gpu_resources)]
    if not setting:
        try:
            text = estimate(p, None, starts, now, tz, gpu_resources, name, defaults, largest)
        except ProfileError as err:  # the profile's own request
            log_no_estimate(name, err)
            text = None
        if text:
            p["display_name"] = f"{p.get('display_name', '')} — {text}"
    elif len(setting) == 1:
        (key,) = setting
        option = annotate_option(
            options[key], p, starts, now, tz, gpu_resources, name, defaults, largest
        )
        p["profile_options"] = {**options, key: option}
    else:
        log.info(
            "gpu-eta: profile %s: no estimate: options %s each set the GPU count, type or"
            " placement",
            name,
            " and ".join(repr(k) for k in setting),
        )
    return p


def annotate_option(
    option: Mapping[str, Any],
    profile: Mapping[str, Any],
    starts: Mapping[tuple[str, str, int], float],
    now: float,
    tz: tzinfo | None,
    gpu_resources: Sequence[str],
    name: str,
    defaults: Mapping[str, Any] | None = None,
    largest: Mapping[tuple[str, str], int] | None = None,
) -> Any:
    """A copy of the ``profile_options`` entry whose choices set the GPU count or type,
    each choice asking for GPUs annotated (``estimate``): KubeSpawner applies its
    override on top of the profile's, so its count and type are its own, else the
    profile's. A choice that cannot be read is left as it is, logged. An enabled
    free-form ``unlisted_choice`` is annotated too (``annotate_unlisted``)."""
    out = dict(option)

    def estimate_for(item: Mapping[str, Any], what: str) -> str | None:
        return estimate(item, profile, starts, now, tz, gpu_resources, what, defaults, largest)

    choices = option.get("choices")
    if isinstance(choices, Mapping):
        shown = {}
        for key, choice in choices.items():
            shown[key] = choice
            if not isinstance(choice, Mapping):
                continue
            what = f"{name}, choice {key!r}"
            try:
                text = estimate_for(choice, what)
            except Exception as err:  # one choice, not the profile nor the page
                log_no_estimate(what, err)
                continue
            if text:
                named = choice.get("display_name", key)
                shown[key] = {**choice, "display_name": f"{named} — {text}"}
        out["choices"] = shown
    unlisted = option.get("unlisted_choice")
    if isinstance(unlisted, Mapping) and unlisted.get("enabled"):
        out["unlisted_choice"] = annotate_unlisted(unlisted, name, estimate_for, gpu_resources)
    return out


def annotate_unlisted(
    unlisted: Mapping[str, Any],
    name: str,
    estimate_for: Callable[[Mapping[str, Any], str], str | None],
    gpu_resources: Sequence[str] = (),
) -> Any:
    """An enabled ``unlisted_choice`` with its estimate after the name the form lists it
    by in the option's drop-down, ``display_name_in_choices`` (``OTHER_CHOICE`` unset,
    as KubeSpawner's form has it): "Other... — no estimate" where the value typed sets
    the GPU count, type or placement (``unlisted_item``), else the start of its request
    (its override, the value typed put in, merged into the profile's: ``estimate_for``,
    as a choice's). Left as given when it asks for no GPU or cannot be read (logged).

    Why the drop-down entry: it is what the user picks among the annotated choices, and
    left bare it read as a choice asking for no GPU. Its ``display_name`` is the label
    of the text field shown once it is picked, and KubeSpawner reads neither name back."""
    listed_as = unlisted.get("display_name_in_choices", OTHER_CHOICE)
    what = f"{name}, unlisted choice {listed_as!r}"
    try:
        text = estimate_for(unlisted_item(unlisted, gpu_resources), what)
    except NotForecast as err:
        log_no_estimate(what, err)
        text = "no estimate"
    except Exception as err:  # one choice, not the profile nor the page
        log_no_estimate(what, err)
        return unlisted
    if not text:
        return unlisted
    return {**unlisted, "display_name_in_choices": f"{listed_as} — {text}"}


def estimate(
    item: Mapping[str, Any],
    parent: Mapping[str, Any] | None,
    starts: Mapping[tuple[str, str, int], float],
    now: float,
    tz: tzinfo | None,
    gpu_resources: Sequence[str],
    what: str,
    defaults: Mapping[str, Any] | None = None,
    largest: Mapping[tuple[str, str], int] | None = None,
) -> str | None:
    """The label for a profile, or for a choice of ``parent``'s, asking for GPUs; None
    when it asks for none; "no estimate" when its GPU type or placement is given at
    spawn time or is not one the forecaster predicts for (``NotForecast``);
    ``NEVER_FITS`` (one INFO line) when it has no start and no node holds it
    (``never_fits``, by ``largest``). Its
    request is the choice's override merged into the profile's, merged into the
    spawner's (``defaults``, ``spawner_defaults``), as KubeSpawner merges them.
    Raises ProfileError as ``merged_gpu_request``."""
    levels = [item] if parent is None else [item, parent]
    levels.append({"kubespawner_override": defaults or {}})
    try:
        request = merged_gpu_request(levels, gpu_resources)
    except NotForecast as err:  # SpawnTimeValue goes on: such a count may ask for no GPU
        log_no_estimate(what, err)
        return "no estimate"
    if request is None:
        return None
    resource, gpus = request
    try:
        model = gpu_model(levels, resource) or ""
    except (SpawnTimeValue, NotForecast) as err:
        log_no_estimate(what, err)
        return "no estimate"
    start = start_for(starts, gpus, model, resource)
    why = never_fits(largest or {}, gpus, model, resource) if start is None else None
    if why:
        log.info("gpu-eta: profile %s: %s: %s", what, NEVER_FITS, why)
        return NEVER_FITS
    return label(start, now, tz)


# The spawner's values a GPU request and its placement are read from (KubeSpawner's
# traits of those names): mappings, which a profile's override is merged into ...
SPAWNER_MAPPINGS = (
    "extra_resource_limits",
    "extra_resource_guarantees",
    "node_selector",
    "extra_pod_config",
)
# ... and lists, which it replaces
SPAWNER_LISTS = (*REQUIRED_AFFINITIES, "tolerations")


def spawner_defaults(spawner: object) -> dict[str, Any]:
    """The spawner's own ``SPAWNER_MAPPINGS``, ``SPAWNER_LISTS`` and ``SCHEDULING``
    (the hub's ``c.KubeSpawner.extra_resource_limits``, ``tolerations``,
    ``scheduler_name`` …), as an override holds them, those of their kind; {} without
    a spawner. Never raises.

    Why: KubeSpawner merges a profile's override dicts into the spawner's, so a hub
    giving every server a GPU by default, its profiles picking the type, asks for that
    GPU in each: read from the profiles alone, none had an estimate. Its placement
    (a node_selector, a required affinity, tolerations), scheduler and priority class
    are every profile's too: what a profile sets is judged against them
    (``check_placement``, ``check_scheduling``)."""
    out: dict[str, Any] = {}
    for key in (*SPAWNER_MAPPINGS, *SPAWNER_LISTS, *SCHEDULING):
        try:
            value = getattr(spawner, key, None)
            if key in SPAWNER_MAPPINGS and isinstance(value, Mapping):
                out[key] = dict(value)
            elif key in SPAWNER_LISTS and isinstance(value, (list, tuple)) and value:
                out[key] = list(value)
            elif key in SCHEDULING and isinstance(value, str) and value:
                out[key] = value
        except Exception:  # an odd spawner costs its defaults, not the page
            continue
    return out


def log_no_estimate(what: str, err: Exception) -> None:
    """One log line for a profile (or choice) given no estimate: INFO for a value given
    at spawn time or a request not forecast (a site's choice, not a fault), WARNING
    otherwise."""
    if isinstance(err, (SpawnTimeValue, NotForecast)):
        log.info("gpu-eta: profile %s: no estimate: %s", what, err)
    elif isinstance(err, ProfileError):
        log.warning("gpu-eta: profile %s: %s", what, err)
    else:
        log.warning("gpu-eta: profile %s: no estimate: %s", what, one_line(err))


def display_name(profile: object) -> object:
    """The profile's display_name for a log line (None when it has none)."""
    return profile.get("display_name") if isinstance(profile, Mapping) else None


def time_zone(tz: tzinfo | str | None) -> tzinfo | None:
    """``tz`` as ``label`` takes it: a ``tzinfo`` or None as given, a zone name
    ("Europe/Berlin") read by ``zoneinfo``. Raises ValueError for a name the time zone
    database does not hold and TypeError for anything else, so that the mistake stops
    the hub when it loads its configuration, in one message: found by ``label`` at page
    time instead, it made every GPU profile "no estimate", one WARNING each per page."""
    if tz is None or isinstance(tz, tzinfo):
        return tz
    if not isinstance(tz, str):
        raise TypeError(f"tz must be a tzinfo (zoneinfo.ZoneInfo) or a zone name, got {tz!r}")
    try:
        return zoneinfo.ZoneInfo(tz)
    except (ValueError, zoneinfo.ZoneInfoNotFoundError):
        raise ValueError(
            f"tz {tz!r}: no such time zone in this image's time zone database (a name "
            "such as 'Europe/Berlin'; an image without /usr/share/zoneinfo needs the "
            "tzdata package)"
        ) from None


def profile_list_hook(
    profiles: Sequence[Mapping[str, Any]],
    prometheus_url: str,
    timeout_seconds: float = 2.0,
    tz: tzinfo | str | None = None,
    clock: Callable[[], float] = time.time,
    gpu_resources: Sequence[str] = (),
) -> Callable[[Any], Awaitable[list[dict[str, Any]]]]:
    """A coroutine function for ``c.KubeSpawner.profile_list`` (KubeSpawner calls it with
    the spawner and awaits the answer; the spawner's own GPU values count for a profile
    naming none, ``spawner_defaults``). The query runs in a worker thread, so the hub's
    event loop, which serves every user, never waits on Prometheus; the answer comes
    within ``timeout_seconds`` whatever Prometheus does. ``gpu_resources``: the site's
    own GPU resource names, as given to the forecaster's ``--pending.gpu-resource``.
    ``tz``: the zone the times are shown in, a ``tzinfo`` or a zone name; raises
    ValueError or TypeError here, when the hub loads its configuration, for anything
    else (``time_zone``)."""
    tz = time_zone(tz)

    async def hook(spawner: Any = None) -> list[dict[str, Any]]:
        loop = asyncio.get_running_loop()
        now = clock()
        # what label() calls long past goes before the earliest per request is taken
        after = now - PAST_LIMIT_SECONDS
        query = loop.run_in_executor(
            _executor(), fetch_published, prometheus_url, timeout_seconds, after
        )
        try:
            published = await asyncio.wait_for(query, timeout_seconds)
        except asyncio.TimeoutError:  # not an OSError before Python 3.11
            cause = f"no answer within {timeout_seconds:g} s"
        except Exception as err:  # the boundary: raised here, it is an error page, no server
            cause = one_line(err)
        else:
            defaults = spawner_defaults(spawner)
            return annotate(
                profiles, published.starts, now, tz, gpu_resources, defaults, published.largest
            )
        shown = without_credentials(prometheus_url)  # the hub's log: never a password
        log.warning("gpu-eta: no start estimates from %s: %s", shown, cause)
        return [as_given(p) for p in profiles]

    return hook


def split_credentials(url: str) -> tuple[str, str]:
    """``url`` without its ``user:password@`` and the ``Authorization: Basic`` value
    they make ("" without them). ``ValueError`` naming no part of ``url`` when it
    cannot be read: urllib's own message quotes the text it took for a port, which is
    the start of a password holding a raw ``/``, ``?`` or ``#``.

    Why: urllib never sends a URL's credentials (it took ``alice:s3cret@host`` for a
    host name), so a Prometheus behind basic auth gave no estimate, and its error
    blamed DNS."""
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018 - read for its ValueError on a port that is none
    except ValueError:
        raise ValueError(
            "Prometheus URL cannot be read (a '/', '?', '#', '[' or ']' in its user or "
            "password must be percent-encoded: %2F, %3F, %23, %5B, %5D)"
        ) from None
    if parts.username is None and parts.password is None:
        return url, ""
    host = parts.netloc.rpartition("@")[2]
    user = urllib.parse.unquote(parts.username or "")
    password = urllib.parse.unquote(parts.password or "")
    token = base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
    return urllib.parse.urlunsplit(parts._replace(netloc=host)), f"Basic {token}"


def without_credentials(url: str) -> str:
    """``url`` with its ``user:password@`` shown as ``***@`` (nothing past ``//`` when a
    ``/`` comes before the last ``@``: a password holding a raw ``/``). The rule of
    ``gpu_eta.common.text.without_credentials``, written again: this file imports
    nothing of gpu-eta."""
    scheme, sep, rest = url.partition("//")
    if not sep:
        scheme, rest = "", url
    userinfo, at, host = rest.rpartition("@")
    if not at:
        return url
    return f"{scheme}{sep}***" if "/" in userinfo else f"{scheme}{sep}***@{host}"


def one_line(err: BaseException) -> str:
    """``err`` as one printable log line: its type, then its text (an HTTP/2 port's
    frame bytes in a BadStatusLine, a multi-line JSON error) with whitespace runs
    collapsed, escaped and cut at 200 characters."""
    text = ascii(" ".join(str(err).split()))[1:-1]
    return f"{type(err).__name__}: {text[:200]}" if text else type(err).__name__


@functools.cache
def _executor() -> ThreadPoolExecutor:
    """The hook's own threads (not the loop's default pool, which the hub may use),
    made on first use."""
    return ThreadPoolExecutor(max_workers=4, thread_name_prefix="gpu-eta-profiles")
