"""Simulated GPU node: every source protocol, served from a scenario file.

Chosen only with ``--simulate [SCENARIO.yaml]``, never as a fallback, so a node whose
NVML is broken can never look healthy by accident. One ``SimulatedNode`` holds the
scenario and the clock; five thin views implement ``GpuSource``,
``AllocationSource``, ``PodSource``, ``ProcessResolver`` and ``HostMemorySource``
over it, so the scheduler, attribution and exposition run exactly as on a real node.

Readings are a pure function of the scenario, its seed and the clock
(``gpu_eta.exporter.scenario.evaluate``). The scenario file is re-read when its mtime or
size changes (the demo drives nodes by rewriting files); an invalid new file is
logged once and the previous scenario stays in force.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path

from gpu_eta.exporter.readings import (
    Allocation,
    ContainerRef,
    DeviceFailure,
    DeviceReading,
    GpuPoll,
    HostMemory,
    PodMeta,
    ProcessSample,
)
from gpu_eta.exporter.scenario import (
    ContainerSpec,
    GpuSpec,
    GpuUse,
    MigInstance,
    PodSpec,
    Scenario,
    ScenarioError,
    default_scenario,
    evaluate,
    load_scenario,
    pod_present,
)

log = logging.getLogger(__name__)


class SimulatedNode:
    """A scenario plus a clock; reloads the file when it changes.

    ``path`` None uses the built-in scenario. A scenario without
    ``start_timestamp`` is anchored at the first load and keeps that anchor across
    reloads, so rewriting a file does not restart every pod's timeline.
    """

    def __init__(self, path: Path | None = None, clock: Callable[[], float] = time.time) -> None:
        self._path = path
        self._clock = clock
        self._lock = threading.Lock()
        self._stamp: tuple[int, int] | None = None
        self._reload_error = ""
        first = load_scenario(path) if path is not None else default_scenario()
        if path is not None:
            self._stamp = self._stat()
        self._anchor = first.start_timestamp if first.start_timestamp is not None else clock()
        self._scenario = first.anchored(self._anchor)
        self.gpus = SimulatedGpus(self)
        self.allocations = SimulatedAllocations(self)
        self.pods = SimulatedPods(self)
        self.processes = SimulatedProcesses(self)
        self.host_memory = SimulatedHostMemory(self)

    @property
    def node_name(self) -> str:
        """The scenario's node name (used when ``--node-name`` is not given)."""
        return self._scenario.node

    def _stat(self) -> tuple[int, int] | None:
        assert self._path is not None
        try:
            st = os.stat(self._path)
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_size)

    def scenario(self) -> Scenario:
        """The scenario in force, reloaded first if its file changed."""
        if self._path is None:
            return self._scenario
        with self._lock:
            stamp = self._stat()
            if stamp is not None and stamp != self._stamp:
                # any failure keeps the previous scenario and leaves the stamp unseen, so
                # the file is read again next time (logged once per distinct error)
                try:
                    new = load_scenario(self._path)
                except Exception as err:  # a bad file never ends the exporter
                    cause = str(err) if isinstance(err, ScenarioError) else f"{self._path}: {err!r}"
                    if cause != self._reload_error:
                        log.error("scenario reload failed, keeping the previous one: %s", cause)
                        self._reload_error = cause
                else:
                    self._stamp = stamp
                    anchor = (
                        new.start_timestamp if new.start_timestamp is not None else self._anchor
                    )
                    self._scenario = new.anchored(anchor)
                    self._reload_error = ""
                    log.info(
                        "scenario reloaded from %s: %d GPUs, %d pods",
                        self._path,
                        len(new.gpus),
                        len(new.pods),
                    )
            elif stamp is None and self._reload_error != "missing":
                log.error("scenario file %s is gone, keeping the previous one", self._path)
                self._reload_error = "missing"
            return self._scenario

    def now(self) -> tuple[Scenario, float, float]:
        """(scenario, unix time, seconds since the anchor) for one consistent reading."""
        scen = self.scenario()
        now = self._clock()
        assert scen.start_timestamp is not None
        return scen, now, now - scen.start_timestamp

    def live_pods(self) -> tuple[Scenario, float, Iterator[PodSpec]]:
        """Pods present now, with the scenario and seconds since the anchor."""
        scen, _, rel = self.now()
        return scen, rel, (p for p in scen.pods if pod_present(p, rel))


def _key(pod: PodSpec, cont: ContainerSpec, use: GpuUse, what: str) -> str:
    return f"{pod.namespace}/{pod.name}/{cont.name}/{use.gpu}/{use.device_id}/{what}"


class SimulatedGpus:
    """``GpuSource``: devices (MIG instances as their own devices) and processes."""

    def __init__(self, node: SimulatedNode) -> None:
        self._node = node

    def poll(self) -> GpuPoll:
        """Device readings are the sums of their processes' samples, capped."""
        scen, rel, pods = self._node.live_pods()
        failing = {
            g.index: g.failure[0]
            for g in scen.gpus
            if g.failure is not None and g.failure[1] <= rel < g.failure[2]
        }
        samples: list[ProcessSample] = []
        gpu_by_index = {g.index: g for g in scen.gpus}
        for pod in pods:
            age = rel - pod.start_seconds
            for cont in pod.containers:
                for use in cont.gpus:
                    if use.pid is None or use.gpu in failing:
                        continue
                    # NVML has no per-process utilisation under MIG (the real collector
                    # reports None): a MIG process's profile feeds its memory only
                    util = (
                        None
                        if use.gpu_instance_id is not None
                        else round(
                            evaluate(use.utilization, age, scen.seed, _key(pod, cont, use, "u")),
                            4,
                        )
                    )
                    mem = evaluate(use.memory, age, scen.seed, _key(pod, cont, use, "m"))
                    samples.append(
                        ProcessSample(
                            pid=use.pid,
                            device_uuid=gpu_by_index[use.gpu].uuid,
                            gpu_instance_id=use.gpu_instance_id,
                            memory_used_bytes=int(mem),
                            utilization_ratio=util,
                        )
                    )
        devices: list[DeviceReading] = []
        failures: list[DeviceFailure] = []
        for gpu in scen.gpus:
            if gpu.index in failing:
                failures.append(DeviceFailure(gpu.index, gpu.uuid, failing[gpu.index], "simulated"))
                continue
            if gpu.mig:
                devices.extend(
                    _device_reading(gpu, samples, inst, slot) for slot, inst in enumerate(gpu.mig)
                )
                continue
            devices.append(_device_reading(gpu, samples))
        return GpuPoll(tuple(devices), tuple(samples), tuple(failures), scen.driver_version)


def _device_reading(
    gpu: GpuSpec,
    samples: Sequence[ProcessSample],
    inst: MigInstance | None = None,
    slot: int = 0,
) -> DeviceReading:
    """One device row: a whole GPU, or (``inst`` given) one MIG instance of it in NVML
    slot ``slot`` (the scenario's instances fill the slots from 0), summing the samples
    of the processes that run on exactly that device."""
    mine = [
        s
        for s in samples
        if s.device_uuid == gpu.uuid and (inst is None or s.gpu_instance_id == inst.gpu_instance_id)
    ]
    total = gpu.memory_total_bytes if inst is None else inst.memory_total_bytes
    return DeviceReading(
        index=gpu.index,
        uuid=gpu.uuid,
        model=gpu.model,
        # NVML answers NOT_SUPPORTED for a MIG instance's utilisation: None, as the real
        # collector reports it
        utilization_ratio=_sum_util(mine) if inst is None else None,
        memory_used_bytes=_sum_mem(mine, total),
        memory_total_bytes=total,
        gpu_instance_id=None if inst is None else inst.gpu_instance_id,
        mig_uuids=() if inst is None else (inst.uuid,),
        mig_profile=None if inst is None else inst.profile,
        mig_slots=() if inst is None else (slot,),
    )


def _sum_util(samples: Sequence[ProcessSample]) -> float:
    return round(min(1.0, float(sum(s.utilization_ratio or 0.0 for s in samples))), 4)


def _sum_mem(samples: Sequence[ProcessSample], total: int) -> int:
    return min(total, sum(s.memory_used_bytes or 0 for s in samples))


class SimulatedAllocations:
    """``AllocationSource``: what the kubelet's pod-resources ``List`` would return."""

    def __init__(self, node: SimulatedNode) -> None:
        self._node = node

    def poll(self) -> tuple[Allocation, ...]:
        """One allocation per (container, device id) of every present pod."""
        scen, _, pods = self._node.live_pods()
        gpu_by_index = {g.index: g for g in scen.gpus}
        out: list[Allocation] = []
        for pod in pods:
            for cont in pod.containers:
                for use in cont.gpus:
                    resource = "nvidia.com/gpu"
                    if use.gpu_instance_id is not None:
                        inst = next(
                            m
                            for m in gpu_by_index[use.gpu].mig
                            if m.gpu_instance_id == use.gpu_instance_id
                        )
                        resource = f"nvidia.com/mig-{inst.profile}"
                    out.append(
                        Allocation(pod.namespace, pod.name, cont.name, resource, use.device_id)
                    )
        return tuple(out)


def pod_meta(pod: PodSpec, anchor: float) -> PodMeta:
    """The ``PodMeta`` the pod watch would produce for a scenario pod."""
    start = anchor + pod.start_seconds
    deadline = None if pod.active_deadline_seconds is None else start + pod.active_deadline_seconds
    return PodMeta(
        namespace=pod.namespace,
        name=pod.name,
        uid=pod.uid,
        ip=pod.ip,
        host_network=pod.host_network,
        phase="Running",
        labels=pod.labels,
        annotations=pod.annotations,
        start_timestamp=start,
        owner_kind=pod.owner_kind,
        owner_name=pod.owner_name,
        container_ids={c.name: c.container_id for c in pod.containers},
        containers=tuple(c.name for c in pod.containers),
        deadline_timestamp=deadline,
    )


class _PodIndex:
    """Every pod of one scenario with its ``PodMeta``, and the non-host-network ones
    by IP, in scenario order.

    Why per scenario and not per instant: a pod's ``PodMeta`` depends only on the
    pod and the scenario's anchor, so it is built once per (re)load; what changes
    with time is only *whether* the pod is present (``start_seconds`` ..
    ``end_seconds``), which is checked at lookup. So pods appearing and leaving over
    time never need a rebuild, and an IP reused by a later pod maps to both, the
    present one winning (the first in scenario order if several overlap, as before).
    """

    __slots__ = ("by_ip", "pods", "scenario")

    def __init__(self, scen: Scenario) -> None:
        assert scen.start_timestamp is not None
        self.scenario = scen
        self.pods: tuple[tuple[PodSpec, PodMeta], ...] = tuple(
            (p, pod_meta(p, scen.start_timestamp)) for p in scen.pods
        )
        by_ip: dict[str, list[tuple[PodSpec, PodMeta]]] = {}
        for spec, meta in self.pods:
            if meta.ip and not meta.host_network:
                by_ip.setdefault(meta.ip, []).append((spec, meta))
        self.by_ip = {ip: tuple(entries) for ip, entries in by_ip.items()}


class SimulatedPods:
    """``PodSource`` plus ``by_ip`` (what the progress listener needs).

    Both read a per-scenario index (``_PodIndex``) rebuilt only when the node's
    scenario object changes (a reload), so ``by_ip`` — called by the progress
    listener for every connection — is a dict lookup plus a presence check instead
    of building every pod (≈ 1–2 ms at 256 pods).
    """

    def __init__(self, node: SimulatedNode) -> None:
        self._node = node
        self._index: _PodIndex | None = None
        self.index_builds = 0  # how often the index was (re)built; tests read it

    def _now(self) -> tuple[_PodIndex, float]:
        scen, _, rel = self._node.now()
        index = self._index  # one read: another thread may swap it concurrently
        if index is None or index.scenario is not scen:
            index = _PodIndex(scen)
            self._index = index
            self.index_builds += 1
        return index, rel

    def poll(self) -> tuple[PodMeta, ...]:
        """Metadata of every pod present now."""
        index, rel = self._now()
        return tuple(meta for spec, meta in index.pods if pod_present(spec, rel))

    def by_ip(self, ip: str) -> PodMeta | None:
        """The present, non-host-network pod with this IP, if any."""
        index, rel = self._now()
        for spec, meta in index.by_ip.get(ip, ()):
            if pod_present(spec, rel):
                return meta
        return None


class SimulatedProcesses:
    """``ProcessResolver``: pid → container, as ``/proc/<pid>/cgroup`` would tell."""

    def __init__(self, node: SimulatedNode) -> None:
        self._node = node

    def resolve(self, pids: Iterable[int]) -> Mapping[int, ContainerRef]:
        """Known pids of present pods; unknown pids are left out (not an error)."""
        wanted = set(pids)
        _, _, pods = self._node.live_pods()
        out: dict[int, ContainerRef] = {}
        for pod in pods:
            for cont in pod.containers:
                for use in cont.gpus:
                    if use.pid is not None and use.pid in wanted:
                        out[use.pid] = ContainerRef(cont.container_id, pod.uid, "containerd")
        return out


class SimulatedHostMemory:
    """``HostMemorySource``: working set per container from the scenario's profile."""

    def __init__(self, node: SimulatedNode) -> None:
        self._node = node

    def poll(self, pods: Sequence[PodMeta]) -> tuple[HostMemory, ...]:
        """Containers of the given pods that have a ``host_memory`` profile."""
        wanted = {(p.namespace, p.name) for p in pods}
        scen, rel, live = self._node.live_pods()
        out: list[HostMemory] = []
        for pod in live:
            if (pod.namespace, pod.name) not in wanted:
                continue
            for cont in pod.containers:
                if cont.host_memory is None:
                    continue
                key = f"{pod.namespace}/{pod.name}/{cont.name}/host"
                val = evaluate(cont.host_memory, rel - pod.start_seconds, scen.seed, key)
                out.append(
                    HostMemory(
                        pod.namespace, pod.name, cont.name, int(val), cont.host_memory_limit_bytes
                    )
                )
        return tuple(out)
