"""Sources the exporter polls, as small protocols.

Each real source (NVML, kubelet pod-resources, the pod watch, cgroups) and the
simulated backend implement the same face, so the scheduler, attribution and
exposition never know which one they talk to. A source returns its readings or
raises ``CollectorError``; it never decides what a failure means (the scheduler
turns failures into ``gpu_eta_exporter_collector_success`` and logs).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol

from gpu_eta.exporter.readings import Allocation, ContainerRef, GpuPoll, HostMemory, PodMeta


class ExporterError(Exception):
    """Base of every error the exporter raises on purpose."""


class CollectorError(ExporterError):
    """A source could not be read this cycle; the message names the source and cause."""


class NoData(ExporterError):
    """Expected absence (no such file, nothing allocated): logged at debug only."""


class GpuSource(Protocol):
    """NVML or the simulator: devices, per-process samples, per-device failures."""

    def poll(self) -> GpuPoll: ...


class AllocationSource(Protocol):
    """kubelet pod-resources ``List`` (or the simulator): device -> container."""

    def poll(self) -> tuple[Allocation, ...]: ...


class PodSource(Protocol):
    """Pods on this node with metadata, served from a cache that survives API outages."""

    def poll(self) -> tuple[PodMeta, ...]: ...


class ProcessResolver(Protocol):
    """pid -> container, from ``/proc/<pid>/cgroup`` (or the simulator)."""

    def resolve(self, pids: Iterable[int]) -> Mapping[int, ContainerRef]: ...


class HostMemorySource(Protocol):
    """Working-set host memory of each container of the given pods."""

    def poll(self, pods: Sequence[PodMeta]) -> tuple[HostMemory, ...]: ...
