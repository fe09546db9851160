"""What a simulated node's exporter holds at a time: its ``Snapshot``, for the backfill.

Why: the backfilled past must carry the series the live exporters publish, with the
same names and labels, or a dashboard's past is empty, or its lines break at the
demo's start. Live, each node's exporter builds its ``Snapshot`` from the scenario
file (``gpu_eta.simulation.scenarios``) and renders it with
``gpu_eta.exporter.exposition``; here the same simulated pods at a past time make the
``Snapshot`` directly (no scenario file, no collectors: thousands of instants), and
the backfill renders it with the same exposition, so every name and label comes from
the one definition the exporter uses. What the scenario and this module both derive
from a pod (its device memory, host memory, labels, owner) is defined once in
``gpu_eta.simulation.scenarios``, its reported values in ``gpu_eta.simulation.driver``.

Left out: the exporter's self-monitoring (``gpu_eta_exporter_*``): no exporter ran in
the simulated past, so there is no health of one to tell. The live readings' noise
(``scenarios.UTIL_NOISE``) is left out too: the past shows each pod's utilisation
steps.

Pure: pods in, snapshots and metric families out.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

from prometheus_client.metrics_core import Metric

from gpu_eta.exporter.exposition import render_static
from gpu_eta.exporter.readings import DeviceReading, HostMemory, PodGpuRow, PodMeta, Progress
from gpu_eta.exporter.snapshot import Snapshot
from gpu_eta.simulation.cluster import NodeSpec, Pod
from gpu_eta.simulation.driver import reported_values, steps_per_epoch
from gpu_eta.simulation.scenarios import (
    HOST_MEMORY_LIMIT_BYTES,
    device_memory_bytes,
    host_memory_bytes,
    pod_labels,
)

SELF_MONITORING = "gpu_eta_exporter_"
DEVICE_FAMILIES = "gpu_eta_gpu_"  # the devices' series (docs/metrics.md), the rest a pod's


def utilization_at(steps: Sequence[tuple[float, float]], t: float) -> float:
    """The utilisation step in force at ``t`` (the first one before any)."""
    value = steps[0][1] if steps else 0.0
    for ts, u in steps:
        if ts <= t:
            value = u
        else:
            break
    return value


def progress_at(pod: Pod, t: float) -> Progress | None:
    """The progress the exporter holds for ``pod``'s run at ``t`` (None before its run).

    As its reports made it: epochs and steps done, their totals from the start for a
    run that reports its plan and, for one that does not, its steps' total from its
    last epoch (its ``end`` made what it reached its totals:
    ``exporter.progress._reached_totals``), ended at its last epoch once it completed.
    """
    if pod.kind != "training" or pod.run_start is None or t < pod.run_start:
        return None
    spe = steps_per_epoch(pod)
    done = sum(1 for e in pod.epoch_ends if e <= t)
    last = pod.epoch_ends[done - 1] if done else pod.run_start
    finished = done >= pod.epochs
    return Progress(
        namespace=pod.namespace,
        pod=pod.name,
        container=pod.container,
        run_id=pod.run_id,
        run_start_timestamp=pod.run_start,
        last_report_timestamp=last,
        source="log" if pod.report == "log" else "http",
        epoch=float(done),
        epochs=float(pod.epochs) if pod.reports_plan else None,
        step=float(done * spe),
        steps=float(pod.epochs * spe) if pod.reports_plan or finished else None,
        batch_size=float(pod.batch_size),
        epoch_end_timestamp=last if done else None,
        ended_timestamp=last if finished else None,
        metrics=reported_values(pod, done) if done else {},
    )


def node_snapshot(
    node: NodeSpec, pods: Iterable[Pod], t: float, devices: bool = True, holders: bool = True
) -> Snapshot:
    """``node``'s exporter's snapshot at ``t`` (unix seconds), of the pods alive then.

    Devices sum their holders' utilisation (at most 1) and memory (at most the
    device's), as the simulated backend sums its processes' samples. ``devices``
    False: no device readings (a pod's own series); ``holders`` False: of the pods
    only their GPU rows (what the devices' series need). Why apart: a pod's series
    change only at its own epochs and utilisation steps, the devices' with every
    holder, so the backfill renders each part as often as it changes.
    """
    rows: list[PodGpuRow] = []
    metas: list[PodMeta] = []
    memory: list[HostMemory] = []
    runs: list[Progress] = []
    busy: dict[int, float] = {}
    held: dict[int, int] = {}
    for pod in pods:
        if pod.node != node.index or not pod.alive_at(t):
            continue
        u = utilization_at(pod.util_steps, t)
        for g, _replica in pod.gpus:
            spec = node.gpus[g]
            mem = device_memory_bytes(pod, spec)
            busy[g] = busy.get(g, 0.0) + u
            held[g] = held.get(g, 0) + mem
            rows.append(
                PodGpuRow(
                    g,
                    spec.uuid,
                    None,
                    pod.namespace,
                    pod.name,
                    pod.container,
                    True,
                    u,
                    mem,
                    pod.start,
                )
            )
        if not holders:
            continue
        kind, owner = pod.owner
        metas.append(
            PodMeta(
                pod.namespace,
                pod.name,
                pod.uid,
                ip=pod.ip,
                labels=pod_labels(pod),
                start_timestamp=pod.start,
                owner_kind=kind,
                owner_name=owner,
                containers=(pod.container,),
            )
        )
        memory.append(
            HostMemory(
                pod.namespace,
                pod.name,
                pod.container,
                host_memory_bytes(pod),
                HOST_MEMORY_LIMIT_BYTES,
            )
        )
        if (run := progress_at(pod, t)) is not None:
            runs.append(run)
    readings = tuple(
        DeviceReading(
            spec.index,
            spec.uuid,
            spec.model,
            round(min(1.0, busy.get(spec.index, 0.0)), 4),
            min(spec.memory_total_bytes, held.get(spec.index, 0)),
            spec.memory_total_bytes,
        )
        for spec in node.gpus
        if devices
    )
    return Snapshot(
        node=node.name,
        timestamp=t,
        devices=readings,
        pod_gpus=tuple(rows),
        pods=tuple(metas),
        host_memory=tuple(memory),
        progress=tuple(runs),
    )


def node_families(snapshot: Snapshot, devices: bool = True) -> Iterator[Metric]:
    """The families the exporter renders for ``snapshot``, its self-monitoring apart:
    ``devices`` True: its devices' (``DEVICE_FAMILIES``) alone, False: all but them."""
    for metric in render_static(snapshot):
        if not metric.name.startswith(SELF_MONITORING) and (
            metric.name.startswith(DEVICE_FAMILIES) == devices
        ):
            yield metric


def pod_state(pod: Pod, t: float) -> tuple[bool, int, float]:
    """What ``pod``'s own series at ``t`` follow (its run started, epochs done, its
    utilisation): between two changes of it, they are the same."""
    started = pod.run_start is not None and t >= pod.run_start
    return started, sum(1 for e in pod.epoch_ends if e <= t), utilization_at(pod.util_steps, t)
