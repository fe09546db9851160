"""Host (not GPU) memory per container, from its memory cgroup.

The runtime models use how close a job runs to its memory limit; the figure that
matters is the *working set* — what the kernel cannot simply drop — computed as
the kubelet/cAdvisor compute it (and as ``container_memory_working_set_bytes``
reports it): usage minus inactive file cache, floored at 0.

- cgroup v2 (``<cgroupfs>/cgroup.controllers`` exists): ``memory.current`` −
  ``inactive_file`` from ``memory.stat``; limit ``memory.max`` (``max`` = none).
- cgroup v1 (``<cgroupfs>/memory/``): ``memory.usage_in_bytes`` −
  ``total_inactive_file`` from ``memory.stat`` (hierarchical like the usage;
  ``inactive_file`` leaves out a child cgroup's pages); limit
  ``memory.limit_in_bytes``, where the kernel's "unlimited" (a huge page-rounded
  value) means none.

Finding a container's directory (relative to the v2 root or the v1 ``memory``
hierarchy), tried in this order and cached per container id:

1. systemd driver: ``kubepods.slice/[kubepods-<qos>.slice/]kubepods[-<qos>]-pod<uid_>.slice/
   <cri-containerd|crio|docker>-<id>.scope``;
2. cgroupfs driver: ``kubepods/[<qos>/]pod<uid>/<id>`` and ``.../crio-<id>``;
   with qos ``burstable``, ``besteffort`` or none (guaranteed);
3. otherwise (a kubelet nested under another slice, e.g. kind), the cgroup path
   of any process in that container, read from ``<procfs>/<pid>/cgroup`` (one scan
   of ``<procfs>`` per poll, only when some container is still unfound; on a v1 or
   hybrid node the ``memory`` line's path, not the unified ``0::`` line's, which can
   name a cgroup the memory hierarchy lacks). A container no scan finds is looked
   for again after 15 s, then ever more rarely (doubling, at most every 300 s): a
   sandboxed runtime's (Kata, gVisor) containers have no process in the node's
   ``/proc``, and a scan of every ``/proc/<pid>/cgroup`` each poll for them would
   cost the node a /proc walk per cycle for the pod's whole life.

While this collector fails or hangs, the scheduler publishes no host memory at all
rather than the last values read (the scheduler, where it sets ``keep_last``, says
why): a working set is a measurement, not state.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

from gpu_eta.exporter.collectors import CollectorError
from gpu_eta.exporter.collectors.cgroup import MAX_CGROUP_FILE_BYTES
from gpu_eta.exporter.collectors.registry import BuildContext, Collector, register
from gpu_eta.exporter.readings import HostMemory, PodMeta, pod_finished

__all__ = ["CgroupHostMemory", "parse_memory_stat", "working_set_bytes"]

log = logging.getLogger(__name__)

MAX_STAT_FILE_BYTES = 64 * 1024
# v1 reports "no limit" as PAGE_COUNTER_MAX * page size, rounded: anything this big.
UNLIMITED_V1 = 1 << 62
_QOS = ("burstable", "besteffort", "")
_SCOPE_PREFIXES = ("cri-containerd", "crio", "docker")
_MAX_PROC_SCAN = 100_000
# a container no /proc scan found is scanned for again after this, then after twice
# as long each time, up to the cap (module docstring)
FIRST_RESCAN_SECONDS = 15.0
MAX_RESCAN_SECONDS = 300.0


def parse_memory_stat(text: str) -> dict[str, int]:
    """``memory.stat`` lines ``<key> <value>`` → dict; malformed lines are skipped."""
    out: dict[str, int] = {}
    for line in text.splitlines()[:256]:
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit() and len(parts[1]) <= 20:
            out[parts[0]] = int(parts[1])
    return out


def working_set_bytes(usage_bytes: int, inactive_file_bytes: int | None) -> int:
    """cAdvisor's working set: usage minus inactive file cache, never below 0."""
    if inactive_file_bytes is None:
        return usage_bytes
    return max(usage_bytes - inactive_file_bytes, 0)


def _read_small(path: str, limit: int = MAX_STAT_FILE_BYTES) -> str:
    with open(path, "rb") as handle:
        raw = handle.read(limit + 1)
    if len(raw) > limit:
        raise ValueError(f"{path} is larger than {limit} bytes")
    return raw.decode("ascii")


def _read_int(path: str) -> int:
    text = _read_small(path, 64).strip()
    if not text.isdigit():
        raise ValueError(f"{path} does not hold an integer: {text[:20]!r}")
    return int(text)


class CgroupHostMemory:
    """Working set and limit of every container of the given pods."""

    def __init__(
        self,
        cgroupfs: str = "/sys/fs/cgroup",
        procfs: str = "/proc",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.cgroupfs = cgroupfs
        self.procfs = procfs
        self._clock = clock
        self._dirs: dict[str, str] = {}  # container id -> directory found
        # container id -> (when to scan /proc for it again, the wait after that)
        self._rescan: dict[str, tuple[float, float]] = {}

    def _layout(self) -> tuple[int, str]:
        if os.path.exists(os.path.join(self.cgroupfs, "cgroup.controllers")):
            return 2, self.cgroupfs
        v1 = os.path.join(self.cgroupfs, "memory")
        if os.path.isdir(v1):
            return 1, v1
        raise CollectorError(
            f"hostmemory: no cgroup v2 root or v1 memory hierarchy under {self.cgroupfs}"
        )

    @staticmethod
    def candidates(pod_uid: str, container_id: str) -> list[str]:
        """Relative directories where the two cgroup drivers put this container."""
        under = pod_uid.replace("-", "_")
        out: list[str] = []
        for qos in _QOS:
            if qos:
                pod_slice = f"kubepods.slice/kubepods-{qos}.slice/kubepods-{qos}-pod{under}.slice"
                pod_dir = f"kubepods/{qos}/pod{pod_uid}"
            else:
                pod_slice = f"kubepods.slice/kubepods-pod{under}.slice"
                pod_dir = f"kubepods/pod{pod_uid}"
            out.extend(f"{pod_slice}/{prefix}-{container_id}.scope" for prefix in _SCOPE_PREFIXES)
            out.append(f"{pod_dir}/{container_id}")
            out.append(f"{pod_dir}/crio-{container_id}")
        return out

    def _scan_proc(self, wanted: set[str]) -> dict[str, str]:
        """container id -> cgroup path, from the processes in ``procfs`` (fallback)."""
        from gpu_eta.exporter.collectors.cgroup import parse_cgroup

        found: dict[str, str] = {}
        try:
            entries = os.listdir(self.procfs)
        except OSError as err:
            log.debug("hostmemory: cannot list %s: %s", self.procfs, err)
            return found
        for n, entry in enumerate(entries):
            if n >= _MAX_PROC_SCAN or len(found) == len(wanted):
                break
            if not entry.isdigit():
                continue
            try:
                text = _read_small(
                    os.path.join(self.procfs, entry, "cgroup"), MAX_CGROUP_FILE_BYTES
                )
            except (OSError, ValueError):
                continue
            ref = parse_cgroup(text)
            if ref is None or ref.container_id not in wanted or ref.container_id in found:
                continue
            for line in text.splitlines():
                fields = line.split(":", 2)
                if (
                    len(fields) == 3
                    and ref.container_id in fields[2]
                    and (fields[0] == "0" or "memory" in fields[1].split(","))
                    # a path with ``..`` is relative to the reader's private cgroup
                    # namespace, not to ``cgroupfs``: joined to it, it would point
                    # outside the tree (or at the wrong cgroup), so it is not used
                    and ".." not in fields[2].split("/")
                ):
                    found[ref.container_id] = fields[2].lstrip("/")
                    if fields[0] != "0":
                        break
        return found

    def _scan_for(self, missing: set[str], root: str) -> None:
        """Look in ``procfs`` for the containers of ``missing`` whose next scan is due
        (each at its first poll), and set the next scan of those not found. A container
        found by its path, or gone, is forgotten: if it comes back unfound, it is
        looked for at once."""
        now = self._clock()
        for forgotten in set(self._rescan) - missing:
            del self._rescan[forgotten]
        due = {cid for cid in missing if self._rescan.get(cid, (now, 0.0))[0] <= now}
        if not due:
            return
        for cid, rel in self._scan_proc(due).items():
            path = os.path.join(root, rel)
            if os.path.isdir(path):
                self._dirs[cid] = path
        for cid in due:
            if cid in self._dirs:
                self._rescan.pop(cid, None)
                continue
            last_wait = self._rescan.get(cid, (now, FIRST_RESCAN_SECONDS / 2))[1]
            wait = min(last_wait * 2, MAX_RESCAN_SECONDS)
            self._rescan[cid] = (now + wait, wait)

    def _read(self, version: int, directory: str) -> tuple[int, int | None]:
        if version == 2:
            usage = _read_int(os.path.join(directory, "memory.current"))
            stat = parse_memory_stat(_read_small(os.path.join(directory, "memory.stat")))
            inactive = stat.get("inactive_file")
            limit_text = _read_small(os.path.join(directory, "memory.max"), 64).strip()
            limit = (
                None if limit_text == "max" else int(limit_text) if limit_text.isdigit() else None
            )
        else:
            usage = _read_int(os.path.join(directory, "memory.usage_in_bytes"))
            stat = parse_memory_stat(_read_small(os.path.join(directory, "memory.stat")))
            inactive = stat.get("total_inactive_file", stat.get("inactive_file"))
            raw_limit = _read_int(os.path.join(directory, "memory.limit_in_bytes"))
            limit = None if raw_limit >= UNLIMITED_V1 else raw_limit
        return working_set_bytes(usage, inactive), limit

    def poll(self, pods: Sequence[PodMeta]) -> tuple[HostMemory, ...]:
        """One HostMemory per container found; a container whose cgroup is missing or
        unreadable is skipped (debug log). ``CollectorError`` only when the cgroup
        root itself is unusable."""
        version, root = self._layout()
        wanted = [
            (pod, cname, cid)
            for pod in pods
            if not pod_finished(pod)
            for cname, cid in pod.container_ids.items()
            if cid and "/" not in cid and ".." not in cid
        ]
        live = {cid for _, _, cid in wanted}
        for stale in set(self._dirs) - live:
            del self._dirs[stale]
        missing: list[tuple[PodMeta, str, str]] = []
        for pod, cname, cid in wanted:
            if cid in self._dirs and os.path.isdir(self._dirs[cid]):
                continue
            self._dirs.pop(cid, None)
            for rel in self.candidates(pod.uid, cid):
                path = os.path.join(root, rel)
                if os.path.isdir(path):
                    self._dirs[cid] = path
                    break
            else:
                missing.append((pod, cname, cid))
        self._scan_for({cid for _, _, cid in missing}, root)

        out: list[HostMemory] = []
        for pod, cname, cid in wanted:
            directory = self._dirs.get(cid)
            if directory is None:
                log.debug(
                    "hostmemory: no cgroup found for %s/%s container %s",
                    pod.namespace,
                    pod.name,
                    cname,
                )
                continue
            try:
                working_set, limit = self._read(version, directory)
            except (OSError, ValueError) as err:
                log.debug(
                    "hostmemory: skipping %s/%s container %s: %s",
                    pod.namespace,
                    pod.name,
                    cname,
                    err,
                )
                continue
            out.append(HostMemory(pod.namespace, pod.name, cname, working_set, limit))
        return tuple(out)


def build(ctx: BuildContext) -> Any:
    """Cgroup memory files under ``--path.cgroupfs``, or the simulated node's."""
    if ctx.simulated is not None:
        return ctx.simulated.host_memory
    return CgroupHostMemory(cgroupfs=ctx.cfg.cgroupfs, procfs=ctx.cfg.procfs)


register(
    Collector(
        "hostmemory",
        "container host-memory working set and limit from the cgroup",
        kind="host_memory",
        build=build,
        order=50,
    )
)
