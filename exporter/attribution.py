"""Join GPU readings, kubelet allocations, pods and process cgroups into per-pod rows.

Two independent facts say a container "has" a device: the kubelet allocated it
(pod-resources ``List``: true even when the container computes nothing, which is
what finds idle holders) and the container's processes run on it (NVML process
samples resolved through cgroups: true even without a device plugin). Each
(device, container) pair seen by either gets one ``PodGpuRow``. Utilisation and
memory come from the container's own processes, so the three pods sharing a
time-sliced GPU each show their own part instead of three copies of the device's.

Process data can be missing (cgroup collector off, no ``hostPID`` so NVML hides
the processes, a pid no cgroup names). Then "no process of this container" does
not mean "idle": a container that is the device's only holder gets the device's
own numbers (its use is the device's use), holders of a shared device get no
utilisation/memory at all (unknown, never 0). docs/attribution.md has the rules.

Pure functions only: no I/O, no logging. ``parse_device_id`` raises
``DeviceIdError`` for a malformed id; ``attribute`` never raises for ids it cannot
resolve (another resource, a device that vanished): it leaves them out, and
``unresolved_allocations`` says which and why; the scheduler logs them and counts
them in ``gpu_eta_exporter_unresolved_allocations``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from gpu_eta.exporter.readings import (
    Allocation,
    ContainerRef,
    DeviceReading,
    GpuPoll,
    PodGpuRow,
    PodMeta,
    ProcessSample,
    pod_finished,
)

__all__ = [
    "AttributionError",
    "DeviceId",
    "DeviceIdError",
    "attribute",
    "finished_pods",
    "kept_allocations",
    "parse_device_id",
    "unresolved_allocations",
]

MAX_DEVICE_ID_CHARS = 256

_UUID_BODY = r"[0-9A-Za-z][0-9A-Za-z-]{0,99}"  # ASCII only, bounded
_GPU_RE = re.compile(rf"(GPU-{_UUID_BODY})")
_MIG_RE = re.compile(rf"(MIG-{_UUID_BODY})")
# Pre-R470 drivers named MIG devices MIG-GPU-<parent uuid>/<gi>/<ci>.
_MIG_LEGACY_RE = re.compile(rf"MIG-(GPU-{_UUID_BODY})/([0-9]{{1,3}})/([0-9]{{1,3}})")
_INDEX_RE = re.compile(r"([0-9]{1,4})")
# NVIDIA device plugin, --device-id-strategy=index, MIG: "<gpu index>:<mig index>"
_MIG_INDEX_RE = re.compile(r"([0-9]{1,4}):([0-9]{1,3})")
_REPLICA_RE = re.compile(r"(.*)::([0-9]{1,6})", re.DOTALL)
# All patterns are applied with fullmatch: "$" would accept a trailing newline.


class AttributionError(ValueError):
    """Base of the value errors attribution raises."""


class DeviceIdError(AttributionError):
    """A pod-resources device id in none of the accepted forms."""


@dataclass(frozen=True, slots=True)
class DeviceId:
    """A parsed kubelet device id.

    ``kind`` is ``"gpu"`` (``uuid`` set), ``"index"`` (``index`` set) or ``"mig"``
    (``mig_uuid`` set; ``uuid`` + ``gpu_instance_id`` for the legacy form; ``index`` +
    ``mig_index`` for the device plugin's index form ``<gpu index>:<mig index>``).
    ``replica`` is the time-slicing replica number of ``<id>::<n>``, else None.
    """

    kind: str
    uuid: str | None = None
    index: int | None = None
    mig_uuid: str | None = None
    gpu_instance_id: int | None = None
    replica: int | None = None
    mig_index: int | None = None


def parse_device_id(text: str) -> DeviceId:
    """Parse ``GPU-<uuid>``, ``<index>``, ``MIG-<uuid>`` (or ``MIG-GPU-<uuid>/<gi>/<ci>``),
    ``<gpu index>:<mig index>``, each optionally followed by the time-slicing suffix
    ``::<n>`` (docs/attribution.md says where each form comes from).

    Raises ``DeviceIdError`` naming the value for anything else.
    """
    if not isinstance(text, str):
        raise DeviceIdError(f"device id must be a string, got {type(text).__name__}")
    if len(text) > MAX_DEVICE_ID_CHARS:
        raise DeviceIdError(f"device id longer than {MAX_DEVICE_ID_CHARS} characters")
    body, replica = text, None
    match = _REPLICA_RE.fullmatch(text)
    if match:
        body, replica = match.group(1), int(match.group(2))
    if (m := _GPU_RE.fullmatch(body)) is not None:
        return DeviceId(kind="gpu", uuid=m.group(1), replica=replica)
    if (m := _MIG_LEGACY_RE.fullmatch(body)) is not None:
        return DeviceId(
            kind="mig", uuid=m.group(1), gpu_instance_id=int(m.group(2)), replica=replica
        )
    if (m := _MIG_RE.fullmatch(body)) is not None:
        return DeviceId(kind="mig", mig_uuid=m.group(1), replica=replica)
    if (m := _INDEX_RE.fullmatch(body)) is not None:
        return DeviceId(kind="index", index=int(m.group(1)), replica=replica)
    if (m := _MIG_INDEX_RE.fullmatch(body)) is not None:
        return DeviceId(
            kind="mig", index=int(m.group(1)), mig_index=int(m.group(2)), replica=replica
        )
    raise DeviceIdError(f"unrecognised device id {text[:80]!r}")


# A device slot: (parent uuid lowercased, gpu instance id or None)
_Key = tuple[str, "int | None"]


@dataclass(frozen=True, slots=True)
class _Slot:
    index: int
    uuid: str
    gpu_instance_id: int | None


def _key(uuid: str, gpu_instance_id: int | None) -> _Key:
    return (uuid.lower(), gpu_instance_id)


@dataclass(frozen=True, slots=True)
class _Devices:
    """The poll's devices indexed by every handle a kubelet id may use."""

    by_key: Mapping[_Key, _Slot]
    readings: Mapping[_Key, DeviceReading]  # failing devices have none
    by_mig: Mapping[str, _Key]  # MIG uuid, lowercased
    by_index: Mapping[int, _Key]  # whole GPUs by NVML index
    by_mig_index: Mapping[tuple[int, int], _Key]  # (GPU index, NVML MIG slot)
    unlisted: frozenset[str]  # lowercased parent UUIDs whose process list failed


def _devices(gpu: GpuPoll) -> _Devices:
    """Index the poll's devices (and failing devices, which still have owners).

    A MIG device's ``<mig index>`` is its NVML slot (``DeviceReading.mig_slots``:
    the ``nvmlDeviceGetMigDeviceHandleByIndex`` index that answers it), the ``j``
    the NVIDIA device plugin puts in ``<i>:<j>``: go-nvlib's ``VisitMigDevices``
    passes the slot on, skipped empty slots included, so a GPU whose instances sit
    in slots 0 and 4 has ``<i>:0`` and ``<i>:4``, not ``<i>:1``.
    """
    by_key: dict[_Key, _Slot] = {}
    readings: dict[_Key, DeviceReading] = {}
    by_mig: dict[str, _Key] = {}
    by_index: dict[int, _Key] = {}
    by_mig_index: dict[tuple[int, int], _Key] = {}
    for dev in gpu.devices:
        key = _key(dev.uuid, dev.gpu_instance_id)
        by_key.setdefault(key, _Slot(dev.index, dev.uuid, dev.gpu_instance_id))
        readings.setdefault(key, dev)
        for mig_uuid in dev.mig_uuids:
            by_mig.setdefault(mig_uuid.lower(), key)
        if dev.gpu_instance_id is None:
            by_index.setdefault(dev.index, key)
        for slot in dev.mig_slots:
            by_mig_index.setdefault((dev.index, slot), key)
    for fail in gpu.failures:
        if fail.uuid is None:
            continue
        key = _key(fail.uuid, None)
        if key not in by_key:
            by_key[key] = _Slot(fail.index, fail.uuid, None)
            by_index.setdefault(fail.index, key)
    unlisted = frozenset(u.lower() for u in gpu.process_list_failures)
    return _Devices(by_key, readings, by_mig, by_index, by_mig_index, unlisted)


def _resolve(device_id: str, devices: _Devices) -> _Key:
    parsed = parse_device_id(device_id)
    key: _Key | None = None
    if parsed.kind == "gpu" and parsed.uuid is not None:
        key = _key(parsed.uuid, None)
    elif parsed.kind == "index" and parsed.index is not None:
        key = devices.by_index.get(parsed.index)
    elif parsed.mig_uuid is not None:
        key = devices.by_mig.get(parsed.mig_uuid.lower())
    elif parsed.index is not None and parsed.mig_index is not None:
        key = devices.by_mig_index.get((parsed.index, parsed.mig_index))
    elif parsed.uuid is not None:
        key = _key(parsed.uuid, parsed.gpu_instance_id)
    if key is None or key not in devices.by_key:
        raise AttributionError(f"device id {device_id[:80]!r} matches no device on this node")
    return key


def finished_pods(
    pods: Sequence[PodMeta], outside: Collection[tuple[str, str, str]] = ()
) -> frozenset[tuple[str, str]]:
    """(namespace, name) of the pods known to be finished (``pod_finished``), in
    ``pods`` or among ``outside``: (namespace, name, uid) of finished pods a capped
    pod cache does not hold (``KubePodSource.finished_outside``).

    The kubelet's pod-resources ``List`` keeps reporting a pod in a terminal phase
    until the pod is deleted (kubernetes#119423, #132020), although its devices
    have been handed to another pod. Allocations carry no pod uid, so a name that a
    live pod also has (a name reused while the old object lingers) is not finished.
    Pods absent from ``pods`` and ``outside`` (the pod list is unknown or lags) are
    not finished; a name ``pods`` shows live is live, whatever ``outside`` says.
    """
    done = {(p.namespace, p.name) for p in pods if pod_finished(p)}
    done.update(key[:2] for key in outside)
    return frozenset(done - {(p.namespace, p.name) for p in pods if not pod_finished(p)})


def kept_allocations(
    allocations: Sequence[Allocation],
    pods: Sequence[PodMeta],
    *,
    read_timestamp: float,
    listed_timestamp: float | None,
    grace_seconds: float,
) -> tuple[tuple[Allocation, ...], frozenset[tuple[str, str]]]:
    """The allocations of an earlier pod-resources read (``read_timestamp``) that still
    count while the kubelet cannot be read, and (namespace, name) of the pods among
    them the pod list cannot confirm (``attribute``'s ``unconfirmed``).

    ``listed_timestamp`` is when ``pods`` was last known complete (a connected watch:
    now), None when no pod list can be trusted. A pod the kubelet read named holds
    the same devices for its whole life (the kubelet never moves a running pod's);
    it is confirmed when the list holds it, started no later than the read. A pod
    the list does not hold, or holds started after the read (another object of that
    name, whose devices the read cannot know), is dropped once the list was
    complete ``grace_seconds`` past the read (a pod the kubelet admitted just before
    the read may not be in a list a moment older or younger); before that it is
    kept, unconfirmed, as is every pod without a start time or without a trusted
    list.
    """
    by_name = {(p.namespace, p.name): p for p in pods}
    checked = listed_timestamp is not None and listed_timestamp - read_timestamp >= grace_seconds
    kept: list[Allocation] = []
    unconfirmed: set[tuple[str, str]] = set()
    for alloc in allocations:
        name = (alloc.namespace, alloc.pod)
        pod = by_name.get(name)
        started = None if pod is None else pod.start_timestamp
        if listed_timestamp is not None and started is not None and started <= read_timestamp:
            kept.append(alloc)  # confirmed
        elif checked and (pod is None or (started is not None and started > read_timestamp)):
            continue  # gone, or a pod re-created under the name since the read
        else:
            kept.append(alloc)
            unconfirmed.add(name)
    return tuple(kept), frozenset(unconfirmed)


def unresolved_allocations(
    gpu: GpuPoll,
    allocations: Sequence[Allocation],
    finished: Collection[tuple[str, str]] = frozenset(),
) -> tuple[tuple[Allocation, str], ...]:
    """Allocations ``attribute`` leaves out, each with the reason (for logs/counters).

    Allocations of ``finished`` pods (``finished_pods``) are not listed: ``attribute``
    drops them on purpose (their device belongs to someone else now), they are not a
    device it cannot name.
    """
    devices = _devices(gpu)
    out: list[tuple[Allocation, str]] = []
    for alloc in allocations:
        if (alloc.namespace, alloc.pod) in finished:
            continue
        try:
            _resolve(alloc.device_id, devices)
        except AttributionError as err:
            out.append((alloc, str(err)))
    return tuple(out)


def _sample_key(sample: ProcessSample, by_key: Mapping[_Key, _Slot]) -> _Key | None:
    key = _key(sample.device_uuid, sample.gpu_instance_id)
    if key in by_key:
        return key
    whole = _key(sample.device_uuid, None)
    return whole if whole in by_key else None


def _finite(value: float | None) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


@dataclass
class _Acc:
    """A container's processes on one device: their summed figures, each None once
    one process lacks that figure (a sum of the others would be a lower bound read as
    the container's use: an MPS client NVML gave no sample beside a sampled process)."""

    allocated: bool = False
    utilization: float | None = 0.0
    memory: int | None = 0
    n_processes: int = 0

    def add(self, sample: ProcessSample) -> None:
        self.n_processes += 1
        util = _finite(sample.utilization_ratio)
        if util is None or self.utilization is None:
            self.utilization = None
        else:
            self.utilization += max(util, 0.0)
        mem = _bytes(sample.memory_used_bytes)
        if mem is None or self.memory is None:
            self.memory = None
        else:
            self.memory += mem


def attribute(
    gpu: GpuPoll,
    allocations: Sequence[Allocation],
    pods: Sequence[PodMeta],
    containers: Mapping[int, ContainerRef] | None,
    finished: Collection[tuple[str, str]] | None = None,
    unconfirmed: Collection[tuple[str, str]] = frozenset(),
) -> tuple[PodGpuRow, ...]:
    """Per (device, container) rows from allocations and process samples.

    - Allocations of ``finished`` pods (namespace, name; None: ``finished_pods(pods)``)
      are dropped: the kubelet may still list them, but the device is no longer
      theirs and counting them would make the real holder look shared. The caller
      decides what counts as finished (the scheduler: nothing from a stale pod list,
      and finished pods a capped pod cache let go).
    - Allocations are resolved through ``parse_device_id``; several time-slicing
      replicas of one GPU held by one container give one row; ids matching no
      device are left out (see ``unresolved_allocations``).
    - A process sample is attributed through ``containers[pid]`` to the pod whose
      ``container_ids`` holds that container id; if only the pod uid is known
      (the pod's status lags the runtime) the pod is found by uid and the
      container named after its single allocation on that device, else ``""``.
      Processes in no known container are dropped: they are not a pod's.
    - Utilisation is the sum of the container's processes' samples clamped to
      0..1, memory the sum of theirs; a container one of whose processes has no
      sample of a kind gets None for it (the others' sum is only a lower bound) —
      unless it is the device's only holder and every
      process listed on the device is its own: then that kind is the device's
      reading (a whole GPU's utilisation, any device's memory), so finding its
      process never gives it less than not finding it would.
    - An allocated container with no attributed process gets 0.0 and 0 only when
      the device's process data is complete (``_complete``): then it really holds
      the device and runs nothing on it. Otherwise the process split is unknown:
      the device's only holder gets the device's utilisation and memory (its use
      IS the device's use), holders of a shared device get None (no series: the
      forecaster's DCGM fallback and dashboards read "unknown", not "idle") unless
      the device's utilisation is exactly 0: then every holder's share is 0.0 (the
      alerts see idle sharers), and memory 0 only when the device uses none (else
      None: the split is unknown). A MIG instance has no device utilisation
      (NVML does not measure it), so its sharers stay None.
      ``containers=None`` says there is no process data at all (the cgroup
      resolver is switched off or never read).
    - Allocations of ``unconfirmed`` pods (namespace, name: kept from an earlier
      kubelet read the pod list cannot confirm, ``kept_allocations``) may be a gone
      pod's: a container of theirs with no process on the device gets None, neither
      0 nor the device's reading (the GPU may be someone's allocated since the
      read). Its rows still count as holders.
    - ``allocated`` tells whether the kubelet allocated the device to the
      container; ``allocated_since_timestamp`` is the pod's start time.
    """
    devices = _devices(gpu)
    by_key = devices.by_key
    pods_by_name = {(p.namespace, p.name): p for p in pods}
    pods_by_uid = {p.uid: p for p in pods if p.uid}
    owner_of: dict[str, tuple[PodMeta, str]] = {}
    for pod in pods:
        for cname, cid in pod.container_ids.items():
            if cid:
                owner_of.setdefault(cid, (pod, cname))

    if finished is None:
        finished = finished_pods(pods)
    rows: dict[tuple[_Key, str, str, str], _Acc] = {}
    allocated_names: dict[tuple[_Key, str, str], set[str]] = {}
    for alloc in allocations:
        if (alloc.namespace, alloc.pod) in finished:
            continue
        try:
            key = _resolve(alloc.device_id, devices)
        except AttributionError:
            continue
        rows.setdefault((key, alloc.namespace, alloc.pod, alloc.container), _Acc()).allocated = True
        allocated_names.setdefault((key, alloc.namespace, alloc.pod), set()).add(alloc.container)

    sampled: set[_Key] = set()  # devices NVML listed a process on
    unplaced: set[_Key] = set()  # devices with a process no cgroup/pod names
    for sample in gpu.processes:
        key = _sample_key(sample, by_key)
        if key is None:
            continue
        sampled.add(key)
        ref = None if containers is None else containers.get(sample.pid)
        if ref is None:
            unplaced.add(key)
            continue
        owner = owner_of.get(ref.container_id)
        if owner is not None:
            pod, cname = owner
        elif ref.pod_uid is not None and ref.pod_uid in pods_by_uid:
            pod = pods_by_uid[ref.pod_uid]
            names = allocated_names.get((key, pod.namespace, pod.name), set())
            cname = next(iter(names)) if len(names) == 1 else ""
        else:
            unplaced.add(key)
            continue
        rows.setdefault((key, pod.namespace, pod.name, cname), _Acc()).add(sample)

    holders: dict[_Key, int] = {}  # containers allocated the device or running on it
    for key, *_ in rows:
        holders[key] = holders.get(key, 0) + 1

    out: list[PodGpuRow] = []
    for (key, namespace, pod_name, cname), acc in rows.items():
        slot = by_key[key]
        utilization: float | None
        memory: int | None
        sole = holders[key] == 1 and key in devices.readings
        if acc.n_processes > 0:
            utilization = _ratio(acc.utilization)
            memory = acc.memory
            if sole and key not in unplaced:
                # every process on the device is this container's: what their samples
                # leave unknown (per-process utilisation not supported, a garbage
                # sample, no memory figure) is the device's reading, as without any
                # process data; not a MIG instance's utilisation (NVML measures none)
                reading = devices.readings[key]
                if utilization is None and reading.gpu_instance_id is None:
                    utilization = _ratio(reading.utilization_ratio)
                if memory is None:
                    memory = _bytes(reading.memory_used_bytes)
        elif (namespace, pod_name) in unconfirmed:
            utilization, memory = None, None
        elif _complete(key, containers, devices, sampled, unplaced):
            utilization, memory = 0.0, 0
        elif sole:
            reading = devices.readings[key]
            utilization = _ratio(reading.utilization_ratio)
            memory = _bytes(reading.memory_used_bytes)
        elif (
            key in devices.readings
            and devices.readings[key].gpu_instance_id is None
            and _finite(devices.readings[key].utilization_ratio) == 0.0
        ):
            # a shared whole GPU at 0 %: whatever the split, every holder's share is 0
            # (not a MIG instance: NVML measures none, a 0 there would be a driver's
            # stand-in, not a measurement)
            utilization = 0.0
            memory = 0 if devices.readings[key].memory_used_bytes == 0 else None
        else:
            utilization, memory = None, None
        meta = pods_by_name.get((namespace, pod_name))
        out.append(
            PodGpuRow(
                index=slot.index,
                uuid=slot.uuid,
                gpu_instance_id=slot.gpu_instance_id,
                namespace=namespace,
                pod=pod_name,
                container=cname,
                allocated=acc.allocated,
                utilization_ratio=utilization,
                memory_used_bytes=memory,
                allocated_since_timestamp=None if meta is None else meta.start_timestamp,
            )
        )
    out.sort(
        key=lambda r: (
            r.index,
            -1 if r.gpu_instance_id is None else r.gpu_instance_id,
            r.namespace,
            r.pod,
            r.container,
        )
    )
    return tuple(out)


def _ratio(value: float | None) -> float | None:
    """A utilisation clamped to 0..1; None when unknown or not a finite number."""
    util = _finite(value)
    return None if util is None else min(max(util, 0.0), 1.0)


def _bytes(value: int | None) -> int | None:
    """A memory figure; None when unknown or not a non-negative int."""
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
    return value if ok else None


def _complete(
    key: _Key,
    containers: Mapping[int, ContainerRef] | None,
    devices: _Devices,
    sampled: set[_Key],
    unplaced: set[_Key],
) -> bool:
    """Whether a holder with no process on this device is known to run nothing on it.

    Not when: there is no process data (``containers`` None); a process on the
    device could not be placed in a pod (a pid no cgroup names, e.g. outside the
    exporter's pid namespace, or a container of no known pod — it may be the
    holder's); the device could not be read (a failure, no reading); NVML refused
    the device's process list (``GpuPoll.process_list_failures``: no list says
    nothing about who runs what; under MIG it covers every instance); or NVML
    lists no process while the device reports work (utilisation > 0): NVML only
    lists processes in the caller's pid namespace, so without ``hostPID`` a busy
    GPU shows none. A device idle and without processes is genuinely unused.
    """
    if containers is None or key in unplaced or key[0] in devices.unlisted:
        return False
    reading = devices.readings.get(key)
    if reading is None:
        return False
    if key not in sampled:
        util = _finite(reading.utilization_ratio)
        if util is not None and util > 0.0:
            return False
    return True
