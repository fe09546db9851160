"""Frozen records that every layer of the exporter shares.

Collectors produce them, ``attribution`` joins them, ``exposition`` renders them.
They carry no behaviour so that each layer can be tested with hand-built values and
so that a snapshot, once built, can be served to concurrent scrapes without locks.

Units follow the metric names: ``*_bytes``, ``*_ratio`` (0..1), ``*_timestamp``
(unix seconds). ``None`` means "not known", never zero.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

_EMPTY: Mapping[str, str] = MappingProxyType({})
_EMPTY_F: Mapping[str, float] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class DeviceReading:
    """One reportable GPU device: a whole GPU, or one MIG GPU instance of it.

    ``uuid`` is always the parent GPU's ``GPU-…`` UUID (DCGM's ``UUID`` label);
    under MIG ``gpu_instance_id`` is set (DCGM's ``GPU_I_ID``). NVML's MIG devices
    are compute instances, several of which may share one GPU instance: the reading
    is the GPU instance (as DCGM's series are), ``mig_uuids`` holds its compute
    instances' ``MIG-…`` ids (what the kubelet may hand out) and ``mig_slots`` the
    ``nvmlDeviceGetMigDeviceHandleByIndex`` slots NVML answers them in (the ``j`` of
    the device plugin's ``<i>:<j>`` id).
    """

    index: int
    uuid: str
    model: str
    utilization_ratio: float | None
    memory_used_bytes: int | None
    memory_total_bytes: int | None
    gpu_instance_id: int | None = None
    mig_uuids: tuple[str, ...] = ()
    mig_profile: str | None = None
    mig_slots: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class DeviceFailure:
    """A device that could not be read this cycle; the rest of the poll still counts."""

    index: int
    uuid: str | None  # None only for a device not read since NVML was initialised
    reason: str  # short, low-cardinality: "gpu_lost", "not_supported", "unknown", ...
    detail: str = ""


@dataclass(frozen=True, slots=True)
class ProcessSample:
    """One process seen on a device by NVML (or the simulator)."""

    pid: int
    device_uuid: str  # parent GPU-… UUID
    gpu_instance_id: int | None
    memory_used_bytes: int | None
    utilization_ratio: float | None  # SM share over the last sample window; None if unknown


@dataclass(frozen=True, slots=True)
class GpuPoll:
    """What a GPU backend returns from one poll."""

    devices: tuple[DeviceReading, ...]
    processes: tuple[ProcessSample, ...] = ()
    failures: tuple[DeviceFailure, ...] = ()
    driver_version: str = ""
    # parent GPU-… UUIDs of read devices whose process list NVML refused (no
    # permission, not supported): ``processes`` holds nothing of them, which must
    # not be read as "runs nothing"
    process_list_failures: tuple[str, ...] = ()


def unread_poll(
    devices: Iterable[DeviceReading],
    failures: Iterable[DeviceFailure],
    driver_version: str = "",
) -> GpuPoll:
    """A poll that could not read ``devices``: each kept as last read (index, UUID,
    model, MIG instance with its ``MIG-…`` ids and slots, memory size) with its
    utilisation and memory used unknown and its process list marked unknown
    (``process_list_failures``), beside the ``failures`` that say why.

    Kept, the devices keep their series and their holders' rows: a MIG instance's
    holder is matched by its ``MIG-…`` or ``<i>:<j>`` id, which no ``DeviceFailure``
    carries. Marked unlisted, attribution does not take "no process" for "idle".
    """
    unread = tuple(replace(d, utilization_ratio=None, memory_used_bytes=None) for d in devices)
    return GpuPoll(
        devices=unread,
        failures=tuple(failures),
        driver_version=driver_version,
        process_list_failures=tuple(sorted({d.uuid for d in unread})),
    )


@dataclass(frozen=True, slots=True)
class Allocation:
    """A device the kubelet assigned to one container (pod-resources ``List``).

    ``device_id`` is kept raw (``GPU-<uuid>``, ``3``, ``MIG-<uuid>``,
    ``GPU-<uuid>::<n>``); ``attribution`` resolves it against the devices.
    """

    namespace: str
    pod: str
    container: str
    resource_name: str
    device_id: str


@dataclass(frozen=True, slots=True)
class PodMeta:
    """What the exporter knows of a pod on its node (from the pod watch)."""

    namespace: str
    name: str
    uid: str
    ip: str | None = None
    host_network: bool = False
    phase: str = "Running"
    labels: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    annotations: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    start_timestamp: float | None = None
    owner_kind: str = ""
    owner_name: str = ""
    # container name -> runtime container id without the "containerd://" prefix
    container_ids: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    # the containers' names in the pod spec (known from the pod's creation, before any
    # runtime id): which names a progress report may give
    containers: tuple[str, ...] = ()
    # earliest of start + spec.activeDeadlineSeconds, its Job's start + the Job's, and
    # the gpu-eta.io/deadline annotation
    deadline_timestamp: float | None = None


# Pod phases after which no container of the pod runs again (restartPolicy is spent).
TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})


def pod_finished(pod: PodMeta) -> bool:
    """Whether the pod is in a terminal phase: its containers have exited for good.

    One rule for every layer that must tell a finished pod from a live one. Such a
    pod keeps its API object (a Job's pods stay until the Job is deleted or the
    terminated-pod GC runs) and, on some kubelets, its pod-resources allocations,
    but it holds no GPU, no host memory and no IP a progress sender could use.
    """
    return pod.phase in TERMINAL_PHASES


@dataclass(frozen=True, slots=True)
class ContainerRef:
    """A process' container, as read from ``/proc/<pid>/cgroup``."""

    container_id: str
    pod_uid: str | None = None
    runtime: str = ""  # "containerd", "cri-o", "docker", ""


@dataclass(frozen=True, slots=True)
class HostMemory:
    """Host (not GPU) memory of one container, from its cgroup."""

    namespace: str
    pod: str
    container: str
    working_set_bytes: int
    limit_bytes: int | None = None


@dataclass(frozen=True, slots=True)
class PodGpuRow:
    """One (device, container) pair after attribution: what the pod series show.

    ``utilization_ratio`` is the pod's own share of the device computed from its
    processes' samples (on a time-sliced GPU each pod gets its part, not a copy of
    the device value). With complete process data, an allocated container with no
    process on the device gets 0 ("holds it, uses nothing" is the point); without it
    (no cgroup resolver, hidden processes, an unread device) a sole holder gets the
    device's own figures and holders of a shared device get ``None`` — unknown, never
    0 (``gpu_eta.exporter.attribution.attribute``, docs/attribution.md).
    """

    index: int
    uuid: str
    gpu_instance_id: int | None
    namespace: str
    pod: str
    container: str
    allocated: bool
    utilization_ratio: float | None
    memory_used_bytes: int | None
    allocated_since_timestamp: float | None = None


@dataclass(frozen=True, slots=True)
class Progress:
    """Latest training progress of one run in one container."""

    namespace: str
    pod: str
    container: str
    run_id: str
    run_start_timestamp: float
    last_report_timestamp: float
    source: str  # "http" or "log"
    # the epoch ``epoch_end_timestamp`` is the end of: a report inside the same
    # 1/400 of the plan is held in ``held_epoch`` (``progress.stamps_epoch_end``)
    epoch: float | None = None
    epochs: float | None = None
    step: float | None = None
    steps: float | None = None
    batch_size: float | None = None
    epoch_end_timestamp: float | None = None  # when the latest completed epoch ended
    # when its sender said it ended (``"event": "end"``); a report without a run id
    # after it is a new run (``progress.starts_new_run``)
    ended_timestamp: float | None = None
    # the ``run_start`` its sender stated in the report that began the run (None: it
    # stated none); with ``run_id`` the run's identity (``progress.starts_new_run``).
    # Not always ``run_start_timestamp``: a run begun again after its end starts at
    # the end at the earliest, while its sender keeps stating its own start
    sender_start_timestamp: float | None = None
    # free-form numbers (loss...)
    metrics: Mapping[str, float] = field(default_factory=lambda: _EMPTY_F)
    # free-form names whose sender said they have no current value: not exported, but
    # they keep their place among the run's 16 names (``progress.merged_metrics``)
    removed_metrics: frozenset[str] = frozenset()
    # the latest epoch reported above ``epoch`` and held (inside ``epoch``'s 1/400 of
    # the plan, ``progress.stamps_epoch_end``), and when it was reported: not exported,
    # but the run's epoch for its checks, and published when the run ends
    held_epoch: float | None = None
    held_epoch_timestamp: float | None = None
    # the step the run started at (a resume from a checkpoint: its ``start``'s step;
    # None from step 0): steps carry no time on the wire, so the forecaster reads a
    # run's origin from it (``progress.start_step``), published as it is
    start_step: float | None = None
    # the epoch the run started at: its first report's epoch when that epoch ended at
    # the run's start (a resume from a checkpoint, curl's first report; None from epoch
    # 0), published as it is, so that a mean epoch counts the epochs done since
    # (``progress.advance``)
    start_epoch: float | None = None
    # a log row: the N of the ``Epoch 0/N`` bar its container counts epochs from 0 by
    # (``logformats.LogState.from_zero``), kept so that a restarted exporter reads on
    # in that count when the line cannot be read again (rotated away)
    epochs_from_zero: float | None = None
    # a log row: the end of its last epoch that the log reader holds back (the row
    # shows epoch N-1 of N, ``logformats._held_last``) and the time of its line, kept
    # so that it is applied at the pod's exit when the line cannot be read again
    # (rotated away); any later report of the row ends it (``progress.advance``)
    held_end_epoch: float | None = None
    held_end_timestamp: float | None = None


@dataclass(frozen=True, slots=True)
class CollectorStatus:
    """Self-monitoring of one collector, kept by the scheduler."""

    name: str
    success: bool
    duration_seconds: float
    last_success_timestamp: float | None
    errors_total: int
    last_error: str = ""
