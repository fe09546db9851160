"""Simulated pods → the exporter's scenario files (format: docs/scenario.md).

Each simulated node is a real exporter process running ``--simulate FILE``; the demo
drives it by rewriting FILE (write a temporary file, then rename: the exporter
reloads on a changed mtime and never sees half a file). Only pods alive around the
current time go in, so a long demo keeps its files small.

Pure apart from ``write_scenario``.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from gpu_eta.simulation.cluster import GpuSpec, NodeSpec, Pod

UTIL_NOISE = 0.03


MAX_STEPS = 200


def _recent_steps(steps: list[tuple[float, float]], now: float) -> list[tuple[float, float]]:
    """The steps from the one in force 30 s ago on (older ones cannot matter any more)."""
    keep = [i for i, (t, _) in enumerate(steps) if t <= now - 30]
    first = keep[-1] if keep else 0
    return steps[first:][-MAX_STEPS:]


HOST_MEMORY_LIMIT_BYTES = 32 << 30  # every simulated container's cgroup memory limit


def device_memory_bytes(pod: Pod, spec: GpuSpec) -> int:
    """What ``pod``'s process holds of device ``spec``: its own size, at most 90 % of the
    device. One definition for the scenario (the live exporter's readings) and the
    backfill (``gpu_eta.simulation.exports``), so the past and the present agree."""
    return min(pod.memory_bytes, int(spec.memory_total_bytes * 0.9))


def host_memory_bytes(pod: Pod) -> int:
    """``pod``'s container's host memory working set: 80 % of what it holds on its GPU
    (at most 8 GiB of it) plus 512 MiB of its own (scenario and backfill alike)."""
    return int(min(pod.memory_bytes, 8 << 30) * 0.8) + (512 << 20)


def pod_labels(pod: Pod) -> dict[str, str]:
    """``pod``'s Kubernetes labels: ``app``, and a training pod's ``job-name`` (the Job
    controller's label: its Job's name), for the scenario and the backfill alike."""
    labels = {"app": pod.job_name or "jupyter"}
    if pod.kind == "training":
        labels["job-name"] = pod.owner[1]
    return labels


def _pod_entry(pod: Pod, node: NodeSpec, now: float) -> dict[str, Any]:
    """One pod of the scenario: identity, lifetime, its devices with profiles."""
    gpus = []
    for g, replica in pod.gpus:
        spec = node.gpus[g]
        memory = device_memory_bytes(pod, spec)
        entry: dict[str, Any] = {"gpu": g}
        if spec.replicas > 1:
            entry["replica"] = replica
        steps = [
            {"at_seconds": round(max(0.0, t - pod.start), 3), "value": round(u, 4)}
            for t, u in _recent_steps(pod.util_steps, now)
        ] or [{"at_seconds": 0, "value": 0.0}]
        # steps must increase strictly: keep the last value of equal ages
        dedup: dict[float, dict[str, Any]] = {}
        for step in steps:
            dedup[step["at_seconds"]] = step
        profile: dict[str, Any] = {"kind": "steps", "steps": list(dedup.values())}
        if pod.kind == "training":
            profile["noise"] = UTIL_NOISE
        entry["utilization"] = profile
        entry["memory"] = memory
        gpus.append(entry)
    entry_pod: dict[str, Any] = {
        "namespace": pod.namespace,
        "name": pod.name,
        "uid": pod.uid,
        "ip": pod.ip,
        "labels": pod_labels(pod),
        "start_seconds": round(pod.start, 3),
        "containers": [
            {
                "name": pod.container,
                "host_memory": host_memory_bytes(pod),
                "host_memory_limit": HOST_MEMORY_LIMIT_BYTES,
                "gpus": gpus,
            }
        ],
    }
    entry_pod["owner_kind"], entry_pod["owner_name"] = pod.owner
    if pod.end is not None:
        entry_pod["end_seconds"] = round(pod.end, 3)
    return entry_pod


def node_scenario(
    node: NodeSpec, pods: Iterable[Pod], anchor: float, now: float, seed: int = 0
) -> dict[str, Any]:
    """The scenario of ``node`` at ``now`` (seconds since ``anchor``).

    Pods that ended more than 10 s ago are left out (the exporter hides them anyway).
    """
    return {
        "version": 1,
        "node": node.name,
        "seed": seed * 1000 + node.index,
        "start_timestamp": anchor,
        "gpus": [
            {
                "index": g.index,
                "uuid": g.uuid,
                "model": g.model,
                "memory_total": g.memory_total_bytes,
                **({"time_slicing_replicas": g.replicas} if g.replicas > 1 else {}),
            }
            for g in node.gpus
        ],
        "pods": [
            _pod_entry(p, node, now)
            for p in pods
            if p.node == node.index and (p.end is None or p.end > now - 10)
        ],
    }


def write_scenario(path: Path, scenario: dict[str, Any]) -> bool:
    """Atomically replace ``path`` (tmp + rename); False when the content is unchanged."""
    text = yaml.safe_dump(scenario, sort_keys=False)
    try:
        if path.read_text() == text:
            return False
    except OSError:
        pass
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)
    return True
