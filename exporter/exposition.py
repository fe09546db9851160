"""Snapshot → Prometheus metric families: the metric contract in code.

``render(snapshot, ...)`` is pure and total: it turns one immutable ``Snapshot`` into
fresh metric families, never raises on odd values (``None`` is left out, NaN and
infinities are skipped) and does no I/O. ``SnapshotExposition`` serves all per-pod
data: each scrape serves the snapshot the scheduler published last, so concurrent
scrapes never race and series of pods that are gone vanish with the snapshot (the
exporter guide's reason for custom collectors instead of global gauges).

Names, types and labels follow ``docs/metrics.md`` exactly; HELP says "cached"
because the values come from the background collection, whose age is
``gpu_eta_exporter_snapshot_age_seconds``. No sample carries a timestamp.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
import re
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from typing import NamedTuple

from prometheus_client.metrics_core import Metric
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

from gpu_eta.exporter.config import exported_pod_labels, pod_label_names
from gpu_eta.exporter.config import pod_label_name as pod_label_name  # re-exported
from gpu_eta.exporter.progress import MAX_METRICS
from gpu_eta.exporter.readings import CollectorStatus, DeviceReading, PodGpuRow, Progress
from gpu_eta.exporter.snapshot import (
    ALLOCATION_SKIP_REASONS,
    LOG_LINE_RESULTS,
    PROGRESS_RESULTS,
    CollectorFamilies,
    Snapshot,
    SnapshotHolder,
)

log = logging.getLogger(__name__)

CACHED = " (cached: from the last background collection)"


class _Family:
    """A metric family being filled; skips values that are not finite numbers."""

    __slots__ = ("metric", "sample_name")

    def __init__(self, name: str, doc: str, typ: str = "gauge") -> None:
        self.metric = Metric(name, doc, typ)
        self.sample_name = name + "_total" if typ == "counter" else name

    def add(self, labels: dict[str, str], value: float | int | None) -> None:
        if value is None:
            return
        try:
            val = float(value)
        except (TypeError, ValueError):
            return
        if math.isfinite(val):
            self.metric.samples.append(Sample(self.sample_name, labels, val, None, None))


def _device_labels(node: str, index: int, uuid: str | None, giid: int | None) -> dict[str, str]:
    labels = {"node": node, "gpu": str(index), "UUID": uuid or ""}
    if giid is not None:
        labels["GPU_I_ID"] = str(giid)
    return labels


def _devices(snap: Snapshot) -> Iterator[Metric]:
    node = snap.node
    info = _Family(
        "gpu_eta_gpu_info", "GPU device metadata, value 1; join on it for the model" + CACHED
    )
    util = _Family(
        "gpu_eta_gpu_utilization_ratio", "Device busy ratio over NVML's sample window" + CACHED
    )
    used = _Family(
        "gpu_eta_gpu_memory_used_bytes",
        "Device memory allocated, the driver's reserve apart" + CACHED,
    )
    total = _Family("gpu_eta_gpu_memory_total_bytes", "Device memory size" + CACHED)
    ok = _Family(
        "gpu_eta_gpu_read_success",
        "1 if the last poll read the device, 0 if NVML failed on it" + CACHED,
    )
    npods = _Family(
        "gpu_eta_gpu_pods",
        "Pods the kubelet allocated this device to (>1 on a time-sliced GPU)" + CACHED,
    )
    holders: dict[tuple[int, str, int | None], set[tuple[str, str]]] = {}
    for row in snap.pod_gpus:
        if row.allocated:
            holders.setdefault((row.index, row.uuid, row.gpu_instance_id), set()).add(
                (row.namespace, row.pod)
            )
    read: dict[tuple[int, str], float] = {}
    for dev in snap.devices:
        labels = _device_labels(node, dev.index, dev.uuid, dev.gpu_instance_id)
        info.add(_info_labels(labels, dev), 1)
        util.add(labels, dev.utilization_ratio)
        used.add(labels, dev.memory_used_bytes)
        total.add(labels, dev.memory_total_bytes)
        npods.add(labels, len(holders.get((dev.index, dev.uuid, dev.gpu_instance_id), ())))
        read[(dev.index, dev.uuid)] = 1
    for fail in snap.failures:
        read[(fail.index, fail.uuid or "")] = 0
    for (index, uuid), value in sorted(read.items()):
        ok.add(_device_labels(node, index, uuid, None), value)
    for fam in (info, util, used, total, ok, npods):
        yield fam.metric


def _info_labels(labels: dict[str, str], dev: DeviceReading) -> dict[str, str]:
    out = dict(labels)
    out["model"] = dev.model
    if dev.mig_profile:
        out["mig_profile"] = dev.mig_profile
    return out


def _pod_gpus(node: str, rows: Sequence[PodGpuRow]) -> Iterator[Metric]:
    alloc = _Family(
        "gpu_eta_pod_gpu_allocated",
        "The kubelet allocated the device to the container, value 1 (present even when idle)"
        + CACHED,
    )
    since = _Family(
        "gpu_eta_pod_gpu_allocated_since_timestamp_seconds",
        "Start of the occupancy (the pod's start time)" + CACHED,
    )
    util = _Family(
        "gpu_eta_pod_gpu_utilization_ratio",
        "The container's own share of the device from its processes' samples (0 for an idle holder)"
        + CACHED,
    )
    mem = _Family(
        "gpu_eta_pod_gpu_memory_used_bytes",
        "Device memory held by the container's processes" + CACHED,
    )
    for row in rows:
        labels = _device_labels(node, row.index, row.uuid, row.gpu_instance_id)
        labels["namespace"] = row.namespace
        labels["pod"] = row.pod
        labels["container"] = row.container
        if row.allocated:
            alloc.add(labels, 1)
            since.add(labels, row.allocated_since_timestamp)
        util.add(labels, row.utilization_ratio)
        mem.add(labels, row.memory_used_bytes)
    for fam in (alloc, since, util, mem):
        yield fam.metric


def _pods(snap: Snapshot, pod_labels: Sequence[str]) -> Iterator[Metric]:
    """Pod metadata; ``gpu_eta_pod_info`` carries the pod labels of ``pod_labels`` (the
    allow-list) and of ``ALWAYS_POD_LABELS``, which the shipped alert rules read."""
    node = snap.node
    info = _Family("gpu_eta_pod_info", "Pod metadata, value 1" + CACHED)
    start = _Family("gpu_eta_pod_start_timestamp_seconds", "Pod start time" + CACHED)
    deadline = _Family(
        "gpu_eta_pod_deadline_timestamp_seconds",
        "Earliest of pod start + activeDeadlineSeconds, the gpu-eta.io/deadline "
        "annotation and, while the pod runs, its Job start + the Job's" + CACHED,
    )
    # ValueError on two keys, one name
    label_names = pod_label_names(exported_pod_labels(pod_labels))
    for pod in snap.pods:
        base = {"node": node, "namespace": pod.namespace, "pod": pod.name}
        labels = dict(base)
        labels.update(
            uid=pod.uid,
            pod_ip=pod.ip or "",
            owner_kind=pod.owner_kind,
            owner_name=pod.owner_name,
            phase=pod.phase,
        )
        for key, name in label_names:
            if key in pod.labels:
                labels[name] = pod.labels[key]
        info.add(labels, 1)
        start.add(base, pod.start_timestamp)
        deadline.add(base, pod.deadline_timestamp)
    ws = _Family(
        "gpu_eta_pod_memory_working_set_bytes",
        "Host memory working set (usage - inactive file) from the cgroup" + CACHED,
    )
    limit = _Family("gpu_eta_pod_memory_limit_bytes", "Cgroup memory limit, when set" + CACHED)
    for hm in snap.host_memory:
        labels = {"node": node, "namespace": hm.namespace, "pod": hm.pod, "container": hm.container}
        ws.add(labels, hm.working_set_bytes)
        limit.add(labels, hm.limit_bytes)
    for fam in (info, start, deadline, ws, limit):
        yield fam.metric


_TRAINING_FIELDS = (
    ("gpu_eta_training_epoch", "Epochs completed", "epoch"),
    ("gpu_eta_training_epochs_planned", "Epochs planned", "epochs"),
    ("gpu_eta_training_step", "Steps completed in the run (global step)", "step"),
    ("gpu_eta_training_steps_planned", "Total steps planned, when known", "steps"),
    ("gpu_eta_training_batch_size", "Batch size as reported", "batch_size"),
    ("gpu_eta_training_run_start_timestamp_seconds", "When the run started", "run_start_timestamp"),
    (
        "gpu_eta_training_start_step",
        "Steps completed when the run started (resumed from a checkpoint); absent from step 0",
        "start_step",
    ),
    (
        "gpu_eta_training_start_epoch",
        "Epochs completed when the run started (resumed from a checkpoint, or counted by its"
        " first report); absent from epoch 0",
        "start_epoch",
    ),
    (
        "gpu_eta_training_epoch_end_timestamp_seconds",
        "When the latest completed epoch ended",
        "epoch_end_timestamp",
    ),
    (
        "gpu_eta_training_last_report_timestamp_seconds",
        "Last progress report of any kind (staleness)",
        "last_report_timestamp",
    ),
    (
        "gpu_eta_training_run_end_timestamp_seconds",
        "When the run ended (its sender said end, or its pod succeeded); absent while it runs",
        "ended_timestamp",
    ),
)


def _progress(node: str, runs: Sequence[Progress]) -> Iterator[Metric]:
    fams = [(_Family(name, doc + CACHED), attr) for name, doc, attr in _TRAINING_FIELDS]
    info = _Family(
        "gpu_eta_training_info", "Training run seen, value 1; source is http or log" + CACHED
    )
    values = _Family(
        "gpu_eta_training_value",
        "Free-form numbers reported with progress (loss, accuracy...)" + CACHED,
    )
    for run in runs:
        labels = {
            "node": node,
            "namespace": run.namespace,
            "pod": run.pod,
            "container": run.container,
            "run_id": run.run_id,
        }
        for fam, attr in fams:
            fam.add(labels, getattr(run, attr))
        info.add({**labels, "source": run.source}, 1)
        for name in sorted(run.metrics)[:MAX_METRICS]:
            values.add({**labels, "name": name}, run.metrics[name])
    for fam, _ in fams:
        yield fam.metric
    yield info.metric
    yield values.metric


def _age(snap: Snapshot, age_seconds: float) -> Metric:
    age = _Family(
        "gpu_eta_exporter_snapshot_age_seconds",
        "Age of the cached snapshot this scrape serves (collection runs in the background)",
    )
    age.add({"node": snap.node}, age_seconds)
    return age.metric


def _self(snap: Snapshot, version: str) -> Iterator[Metric]:
    node = snap.node
    success = _Family(
        "gpu_eta_exporter_collector_success", "1 if the collector's last run succeeded"
    )
    duration = _Family(
        "gpu_eta_exporter_collector_duration_seconds", "Duration of the collector's last run"
    )
    last = _Family(
        "gpu_eta_exporter_collector_last_success_timestamp_seconds",
        "When the collector last succeeded",
    )
    errors = _Family("gpu_eta_exporter_collector_errors", "Failed collector runs", "counter")
    for status in snap.collectors:
        labels = {"node": node, "collector": status.name}
        success.add(labels, 1 if status.success else 0)
        duration.add(labels, status.duration_seconds)
        last.add(labels, status.last_success_timestamp)
        errors.add(labels, status.errors_total)
    for fam in (success, duration, last, errors):
        yield fam.metric
    if snap.kube_watch is not None:
        yield from _kube_watch(node, *snap.kube_watch)
    if snap.unresolved_allocations is not None:
        unresolved = _Family(
            "gpu_eta_exporter_unresolved_allocations",
            "Kubelet device allocations that match no device NVML lists on this node "
            "(or a malformed id): their holders get no pod series" + CACHED,
        )
        unresolved.add({"node": node}, snap.unresolved_allocations)
        yield unresolved.metric
    names = {s.name for s in snap.collectors}
    if "podresources" in names or snap.allocations_skipped:
        skipped = _Family(
            "gpu_eta_exporter_allocations_skipped",
            "GPU device ids the last kubelet pod-resources List named that were left out, "
            "by reason (invalid: an empty or oversized name or id; over_limit: past 65536 "
            "allocations): their holders get no allocation rows" + CACHED,
        )
        for reason, count in _with_known(snap.allocations_skipped, ALLOCATION_SKIP_REASONS):
            skipped.add({"node": node, "reason": reason}, count)
        yield skipped.metric
    if "progress" in names or snap.progress_reports_total:
        reports = _Family(
            "gpu_eta_exporter_progress_reports",
            "Answers of the progress endpoint by result (too_many_connections: connections "
            "reset at accept, over the connection caps, without an answer)",
            "counter",
        )
        for result, count in _with_known(snap.progress_reports_total, PROGRESS_RESULTS):
            reports.add({"node": node, "result": result}, count)
        yield reports.metric
    if snap.progress_fields_skipped_total is not None:
        skipped = _Family(
            "gpu_eta_exporter_progress_fields_skipped",
            "Free-form fields left out of stored progress reports and log lines (over "
            "1e15, not a number, an invalid name, beyond 16 names); the rest of each was "
            "stored",
            "counter",
        )
        skipped.add({"node": node}, snap.progress_fields_skipped_total)
        yield skipped.metric
    if snap.progress_persisted is not None:
        persisted = _Family(
            "gpu_eta_exporter_progress_persisted",
            "1 while progress is on disk as promised; 0 while the state file or its "
            "journal cannot be written, or the journal is full (reports answered 503)",
        )
        persisted.add({"node": node}, 1 if snap.progress_persisted else 0)
        yield persisted.metric
    if snap.progress_journal_bytes is not None:
        journal = _Family(
            "gpu_eta_exporter_progress_journal_bytes",
            "Size of the progress journal; reports are answered 503 from 32 MiB until a "
            "save empties it",
        )
        journal.add({"node": node}, snap.progress_journal_bytes)
        yield journal.metric
    if "logs" in names or snap.log_lines_total:
        lines = _Family("gpu_eta_exporter_log_lines", "Container log lines by result", "counter")
        for result, count in _with_known(snap.log_lines_total, LOG_LINE_RESULTS):
            lines.add({"node": node, "result": result}, count)
        yield lines.metric
    build = _Family("gpu_eta_exporter_build_info", "Exporter version, value 1")
    build.add({"node": node, "version": version}, 1)
    yield build.metric


def _kube_watch(node: str, connected: bool, last_sync: float | None) -> Iterator[Metric]:
    """The pod watch's freshness: ``collector_success{collector="kube"}`` stays 1 while
    the cache is served through an API outage, so the outage needs its own series."""
    up = _Family(
        "gpu_eta_exporter_kube_watch_connected",
        "1 while the pod watch on the Kubernetes API is open, 0 while pods are served "
        "from the cache",
    )
    up.add({"node": node}, 1 if connected else 0)
    yield up.metric
    sync = _Family(
        "gpu_eta_exporter_kube_last_sync_timestamp_seconds",
        "When the pod cache last heard from the Kubernetes API (list, event, bookmark)",
    )
    sync.add({"node": node}, last_sync)
    yield sync.metric


def _with_known(counts: Mapping[str, int], known: Iterable[str]) -> list[tuple[str, int]]:
    out = dict.fromkeys(known, 0)
    for key, val in counts.items():
        if isinstance(key, str) and re.fullmatch(r"[a-z_]{1,32}", key):
            out[key] = val
    return sorted(out.items())


def render_static(
    snap: Snapshot, *, pod_labels: Sequence[str] = (), version: str = ""
) -> list[Metric]:
    """Every family that depends on the snapshot alone (all but the snapshot's age)."""
    out = _node(snap, pod_labels)
    for entry in snap.families:  # collectors with their own series
        out.extend(entry.families)
    out.extend(_self(snap, version))
    return out


def _node(snap: Snapshot, pod_labels: Sequence[str]) -> list[Metric]:
    """The families of the node's GPUs, pods and progress (``render_static``'s first)."""
    out: list[Metric] = []
    out.extend(_devices(snap))
    out.extend(_pod_gpus(snap.node, snap.pod_gpus))
    out.extend(_pods(snap, pod_labels))
    out.extend(_progress(snap.node, snap.progress))
    return out


def render(
    snap: Snapshot, *, age_seconds: float, pod_labels: Sequence[str] = (), version: str = ""
) -> list[Metric]:
    """All metric families for one snapshot, in the order of ``docs/metrics.md``."""
    return [*render_static(snap, pod_labels=pod_labels, version=version), _age(snap, age_seconds)]


# -- families of collectors of kind "families" --------------------------------------


class FamiliesError(ValueError):
    """A collector's own metric families that would break the scrape (named in the
    message: the first problem found)."""


# The metric and label names Prometheus' text format parser (2.x) accepts.
_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
# prometheus_client's family types as the text format 0.0.4 writes them (its
# ``generate_latest``, which ``encode_text`` follows): OpenMetrics' info is a gauge named
# ``<name>_info``, stateset a gauge, unknown (what its parser makes of an ``untyped``
# line) untyped, gaugehistogram a histogram (its ``_gsum``/``_gcount`` gauges of their
# own, ``_MOVED_SUFFIXES``).
TEXT_FORMAT_TYPES: Mapping[str, str] = {
    "counter": "counter",
    "gauge": "gauge",
    "histogram": "histogram",
    "summary": "summary",
    "untyped": "untyped",
    "unknown": "untyped",
    "info": "gauge",
    "stateset": "gauge",
    "gaugehistogram": "histogram",
}
# The suffix a family's name takes in the text format, by its type.
_NAME_SUFFIXES = {"counter": "_total", "info": "_info"}
# OpenMetrics samples the text format 0.0.4 has no place for in their family (a
# counter's, histogram's or summary's ``_created``): ``generate_latest`` writes each
# name as a gauge family of its own after its family, and so does ``encode_text``.
_MOVED_SUFFIXES = ("_created", "_gsum", "_gcount")
# Names the exporter's ``/metrics`` appends after the exposition: prometheus_client's
# ``ProcessCollector`` (``gpu_eta.exporter.runtime``).
RESERVED_PREFIXES = ("process_",)


def family_names(metric: Metric) -> frozenset[str]:
    """The names ``metric`` takes in the exposition: the one its HELP and TYPE lines
    carry (a counter's with ``_total``, an info's with ``_info``) and, for a counter,
    its name without: both are that family's, for Prometheus and for prometheus_client
    alike; and the names of its samples written as gauges of their own (a
    ``_created``)."""
    names = {metric.name + _NAME_SUFFIXES.get(metric.type, "")}
    if metric.type == "counter":
        names.add(metric.name)
    moved = _moved_names(metric)
    names.update(sample.name for sample in metric.samples if sample.name in moved)
    return frozenset(names)


def _moved_names(metric: Metric) -> frozenset[str]:
    """The sample names of ``metric`` written as families of their own (``_MOVED_SUFFIXES``)."""
    return frozenset(metric.name + suffix for suffix in _MOVED_SUFFIXES)


class CheckedFamilies(NamedTuple):
    """``checked_families``' answer: the families the scrape can carry, in their
    order, why each other one was skipped (one line per family), and each kept
    family's text (``encode_text``), encoded by the check: the exposition serves it."""

    families: tuple[Metric, ...]
    skipped: tuple[str, ...]
    text: tuple[bytes, ...] = ()


def checked_families(families: object, taken: Collection[str] = ()) -> CheckedFamilies:
    """A collector's ``poll()`` output as metric families the scrape can carry, each
    family that would break it skipped with its reason; ``FamiliesError`` if the output
    is no families at all. Pure.

    Why: the exposition is one text; a family that does not encode (a label value
    given as an int) failed every scrape with HTTP 500, and a family under a name
    already written (``taken``: the built-in families, another collector's, or its
    own twice) gave a second HELP line, for which Prometheus rejects the whole scrape.
    Checked per family: a ``prometheus_client`` ``Metric`` of a type the text format
    writes (``TEXT_FORMAT_TYPES``), names Prometheus parses, samples named after their
    family, none under ``taken``, ``RESERVED_PREFIXES`` or twice, and it encodes. One
    bad family is skipped, not the collector's others: they are good data.
    """
    if isinstance(families, (str, bytes, Metric)) or not isinstance(families, Iterable):
        raise FamiliesError(f"poll() returned {type(families).__name__}, not metric families")
    seen = set(taken)
    out: list[Metric] = []
    skipped: list[str] = []
    text: list[bytes] = []
    for metric in families:
        try:
            text.append(_check_family(metric, seen))
        except FamiliesError as err:
            skipped.append(str(err))
            continue
        seen |= family_names(metric)
        out.append(metric)
    return CheckedFamilies(tuple(out), tuple(skipped), tuple(text))


def _check_family(metric: object, seen: Collection[str]) -> bytes:
    """``metric``'s text (``encode_text``), or ``FamiliesError`` naming the first reason
    it would break the scrape."""
    if not isinstance(metric, Metric):
        raise FamiliesError(f"{type(metric).__name__} is not a metric family")
    name = metric.name
    if not _METRIC_NAME.fullmatch(name) or name.startswith(RESERVED_PREFIXES):
        raise FamiliesError(f"family name {name!r} is not one this exporter can export")
    if metric.type not in TEXT_FORMAT_TYPES:
        raise FamiliesError(f"family {name}: type {metric.type} is not in the text format")
    clash = family_names(metric) & seen
    if clash:
        raise FamiliesError(f"family {min(clash)} is exported already")
    for sample in metric.samples:
        if not (_METRIC_NAME.fullmatch(sample.name) and sample.name.startswith(name)):
            raise FamiliesError(f"family {name}: sample name {sample.name!r}")
        bad = [k for k in sample.labels if not _LABEL_NAME.fullmatch(str(k))]
        if bad or any(str(k).startswith("__") for k in sample.labels):
            raise FamiliesError(f"family {name}: label name {sorted(map(str, sample.labels))}")
    try:
        return encode_text([metric])
    except Exception as err:
        raise FamiliesError(f"family {name} does not encode: {type(err).__name__}: {err}") from err


@functools.cache
def builtin_family_names() -> frozenset[str]:
    """Every name the exposition's own families take (``family_names``), the optional
    ones too: read from ``render`` on a snapshot with every optional section present,
    so it follows the renderers without a list to keep."""
    statuses = tuple(
        CollectorStatus(name, True, 0.0, None, 0, "")
        for name in ("podresources", "progress", "logs")
    )
    snap = Snapshot(
        node="",
        timestamp=0.0,
        collectors=statuses,
        kube_watch=(True, None),
        unresolved_allocations=0,
        progress_fields_skipped_total=0,
        progress_persisted=True,
        progress_journal_bytes=0,
    )
    return frozenset(n for metric in render(snap, age_seconds=0.0) for n in family_names(metric))


# -- text format ----------------------------------------------------------------------


def escape_label_value(value: str) -> str:
    """A label value as the text formats write it (backslash, newline and double quote
    escaped): the one rule this exposition, the simulated kube-state-metrics and the
    demo's backfill write with."""
    if "\\" in value or '"' in value or "\n" in value:
        return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
    return value


def encode_text(families: Iterable[Metric]) -> bytes:
    """Prometheus text format 0.0.4, byte for byte what ``generate_latest`` writes.

    prometheus_client re-validates and escapes every label name of every sample
    (~15 µs per sample); our label names are fixed and valid, so this encoder only
    escapes values. ``tests/exporter/test_exposition.py`` proves the equality.
    """
    out: list[str] = []
    append = out.append
    for metric in families:
        name = metric.name + _NAME_SUFFIXES.get(metric.type, "")
        doc = metric.documentation.replace("\\", "\\\\").replace("\n", "\\n")
        kind = TEXT_FORMAT_TYPES.get(metric.type, metric.type)
        append(f"# HELP {name} {doc}\n# TYPE {name} {kind}\n")
        moved_names = _moved_names(metric)
        moved: dict[str, list[str]] = {}
        for sample in metric.samples:
            labels = sample.labels
            value = floatToGoString(sample.value)
            if sample.timestamp is not None:  # a relayed sample's own time, in ms
                value = f"{value} {int(float(sample.timestamp) * 1000):d}"
            if labels:
                pairs = ",".join(f'{k}="{escape_label_value(labels[k])}"' for k in sorted(labels))
                line = f"{sample.name}{{{pairs}}} {value}\n"
            else:
                line = f"{sample.name} {value}\n"
            if sample.name in moved_names:
                moved.setdefault(sample.name, []).append(line)
            else:
                append(line)
        for moved_name in sorted(moved):
            append(f"# HELP {moved_name} {doc}\n# TYPE {moved_name} gauge\n")
            out.extend(moved[moved_name])
    return "".join(out).encode("utf-8")


def _encoded(entry: CollectorFamilies) -> bytes:
    """A collector's families as text: the check's (``encode_text`` per family; their
    concatenation is the text of them all), else encoded now."""
    if entry.text is None:
        return encode_text(entry.families)
    return b"".join(entry.text)


class SnapshotExposition:
    """Serves the holder's current snapshot as ready text (``exposition``).

    ``exposition`` renders fresh families from the snapshot, encodes them once per
    snapshot (it is immutable, so the text cannot change) and adds the only value
    that changes between scrapes, the snapshot's age (on the holder's clock, the
    same one ``/healthz`` reads). A scrape therefore costs a
    dictionary lookup and one line, whatever the number of pods.
    """

    def __init__(
        self,
        holder: SnapshotHolder,
        *,
        pod_labels: Sequence[str] = (),
        version: str = "",
    ) -> None:
        self._holder = holder
        # refused here, not at every scrape (ValueError)
        pod_label_names(exported_pod_labels(pod_labels))
        self._pod_labels = tuple(pod_labels)
        self._version = version
        self._cache: tuple[Snapshot, bytes] | None = None

    def _static(self, snap: Snapshot) -> bytes:
        """``render_static`` encoded, the collectors' own families as the scheduler's
        check encoded them (``CollectorFamilies.text``); without those families if they
        do not encode, self-monitoring alone if the rest does not render. The scheduler
        lets only ``checked_families`` through, so the first is a net for a bug."""
        try:
            return b"".join(
                (
                    encode_text(_node(snap, self._pod_labels)),
                    *(_encoded(entry) for entry in snap.families),
                    encode_text(_self(snap, self._version)),
                )
            )
        except Exception:
            if snap.families:
                log.exception("encoding collectors' own families failed; serving without them")
                return self._static(dataclasses.replace(snap, families=()))
            log.exception("rendering the snapshot failed; serving self-monitoring only")
            return encode_text(_self(snap, self._version))

    def prepare(self, snap: Snapshot) -> None:
        """Encode ``snap`` ahead of its first scrape (the scheduler calls this before
        publishing, so scrapes never pay for rendering)."""
        self._cache = (snap, self._static(snap))

    def exposition(self) -> bytes:
        """The text format of ``render()``, encoded once per snapshot; a bug in
        rendering never fails the scrape (self-monitoring is still served)."""
        snap = self._holder.get()
        cache = self._cache
        if cache is None or cache[0] is not snap:
            cache = (snap, self._static(snap))
            self._cache = cache  # one reference assignment: concurrent scrapes are fine
        return cache[1] + encode_text([_age(snap, self._holder.age_seconds(snap))])
