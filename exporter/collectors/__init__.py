"""The exporter's collectors: one module per collector, named after it.

``gpu.py`` is the ``gpu`` collector (``--collector.gpu``, ``collector="gpu"``), and
so on: each module registers itself with ``registry.register`` (its help line, what
kind of reading it gives, how it is built), so adding a collector is adding its file
and its test. ``names()`` lists them from the file names without importing them,
for the pure config; ``registry.load()`` imports them.

Each source (NVML, kubelet pod-resources, the pod watch, cgroups, and the simulated
node) implements one of the small protocols below, so the scheduler, attribution and
exposition never know which one they talk to. A source returns its readings or
raises ``CollectorError``; it never decides what a failure means (the scheduler
turns failures into ``gpu_eta_exporter_collector_success`` and logs).
"""

from __future__ import annotations

import pkgutil
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

from gpu_eta.exporter.readings import Allocation, ContainerRef, GpuPoll, HostMemory, PodMeta


class ExporterError(Exception):
    """Base of every error the exporter raises on purpose."""


class CollectorError(ExporterError):
    """A source could not be read this cycle; the message names the source and cause."""


class NoData(ExporterError):
    """Expected absence (no such file, nothing allocated): logged at debug only."""


class StartupError(ExporterError):
    """The exporter cannot start (port taken, module missing...); one line."""


def names() -> tuple[str, ...]:
    """Every collector's name: the modules of this package (``registry`` aside),
    listed from the folder, not imported."""
    return tuple(sorted(m.name for m in pkgutil.iter_modules(__path__) if m.name != "registry"))


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


class FamilySource(Protocol):
    """A collector with its own series (kind ``families``): ready metric families
    (``prometheus_client`` ``Metric`` objects) appended to the exposition."""

    def poll(self) -> Sequence[Any]: ...
