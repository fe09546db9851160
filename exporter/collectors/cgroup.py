"""Process → container, from ``/proc/<pid>/cgroup``.

NVML reports GPU processes by host pid; the only link from a pid to a Kubernetes
container that needs no API call is the cgroup the kubelet put it in. Its path
encodes the pod uid and the runtime's container id, but the spelling depends on
the cgroup version (v1: one line per hierarchy, v2: one ``0::`` line), the cgroup
driver (cgroupfs: ``/kubepods/burstable/pod<uid>/<id>``; systemd:
``/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_with_underscores>.slice/
cri-containerd-<id>.scope``) and the runtime (``cri-containerd-``, ``crio-``,
``docker-`` scope prefixes). ``parse_cgroup`` is the pure parser of all of these;
``CgroupResolver`` is the thin I/O edge that reads the files.

The exporter must run with ``hostPID: true``: NVML lists only the processes of the
caller's pid namespace, so a host ``/proc`` mounted at ``--path.procfs`` without it
has no other pod's pid to resolve; with it, NVML's pids and ``/proc`` agree.

Cgroup namespaces: under cgroup v2 the runtime gives each container a private
cgroup namespace, and the kernel shows another process' cgroup *relative to the
reader's own*: from the exporter's container, a GPU pod's process reads
``0::/../../kubepods-besteffort.slice/kubepods-besteffort-pod<uid>.slice/
cri-containerd-<id>.scope`` and a sibling container of the exporter's own pod
``0::/../<id>`` (cgroupfs driver). The parser never needs the absolute path: it
reads the container id from the last components and the pod uid from any component
before it, so the leading ``..`` components are simply skipped. The one rule that
needed them is the bare-id case: a 64-hex directory after ``..`` is a sibling of the
exporter's own container (which is in a pod), so it is a container too.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

from gpu_eta.exporter.collectors.registry import BuildContext, Collector, register
from gpu_eta.exporter.readings import ContainerRef

__all__ = ["MAX_CGROUP_FILE_BYTES", "CgroupResolver", "parse_cgroup"]

log = logging.getLogger(__name__)

# A real /proc/<pid>/cgroup is a few hundred bytes (v1: ~13 lines). Anything much
# larger is not a cgroup file and is not read further.
MAX_CGROUP_FILE_BYTES = 64 * 1024
_MAX_LINES = 64

# Runtime container ids (containerd, CRI-O, Docker) are 64 lowercase hex digits.
_ID = r"[0-9a-f]{64}"
# Pod uids: a UUID, with dashes (cgroupfs) or underscores (systemd); static (mirror)
# pods use a 32-hex config hash instead.
_UID = r"[0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12}|[0-9a-f]{32}"

_SCOPE_PREFIXES = {"cri-containerd": "containerd", "crio": "cri-o", "docker": "docker"}
_SCOPE_RE = re.compile(rf"^(cri-containerd|crio|docker)-({_ID})\.scope$")
_CRIO_CGROUPFS_RE = re.compile(rf"^crio-({_ID})$")
_BARE_ID_RE = re.compile(rf"^({_ID})$")
# systemd: kubepods-pod<uid>.slice (guaranteed) or kubepods-<qos>-pod<uid>.slice; a
# kubelet nested in a slice (kind, rootless) prefixes the parents: kubelet-kubepods-...
_SYSTEMD_POD_RE = re.compile(
    rf"^(?:[a-z0-9_]+-)*kubepods(?:-(?:burstable|besteffort))?-pod({_UID})\.slice$"
)
# cgroupfs: pod<uid>
_CGROUPFS_POD_RE = re.compile(rf"^pod({_UID})$")


def _normalise_uid(raw: str) -> str:
    return raw.replace("_", "-")


def _parse_path(path: str) -> ContainerRef | None:
    """Container of one cgroup path, or None when the path names no container.

    The container component must be the last one, except that a nested cgroup
    below the scope (some runtimes create ``.../<scope>/init`` or similar) is
    tolerated by scanning from the end.
    """
    parts = [p for p in path.split("/") if p]
    container_id: str | None = None
    runtime = ""
    id_pos = -1
    for pos in range(len(parts) - 1, -1, -1):
        part = parts[pos]
        match = _SCOPE_RE.match(part)
        if match:
            runtime = _SCOPE_PREFIXES[match.group(1)]
            container_id = match.group(2)
        elif (match := _CRIO_CGROUPFS_RE.match(part)) is not None:
            runtime, container_id = "cri-o", match.group(1)
        elif (match := _BARE_ID_RE.match(part)) is not None:
            container_id = match.group(1)
        if container_id is not None:
            id_pos = pos
            break
    if container_id is None:
        return None
    pod_uid: str | None = None
    for part in parts[:id_pos]:
        match = _SYSTEMD_POD_RE.match(part) or _CGROUPFS_POD_RE.match(part)
        if match:
            pod_uid = _normalise_uid(match.group(1))
    if pod_uid is None and "kubepods" not in path and not runtime:
        # A bare 64-hex directory outside kubepods: plain Docker (/docker/<id>, or
        # /system.slice/<id> with the cgroupfs driver under that parent) is
        # still a container, and so is one right after ``..`` (a path relative to
        # the exporter's own container in a private cgroup namespace: a sibling
        # container of its pod, runtime unknown); anything else is not ours to guess.
        parent = parts[id_pos - 1] if id_pos > 0 else ""
        if parent in ("docker", "system.slice"):
            runtime = "docker"
        elif parent != "..":
            return None
    return ContainerRef(container_id=container_id, pod_uid=pod_uid, runtime=runtime)


def parse_cgroup(text: str) -> ContainerRef | None:
    """The container a process belongs to, from the text of ``/proc/<pid>/cgroup``.

    Accepts cgroup v1 (``<id>:<controllers>:<path>`` per hierarchy) and v2
    (``0::<path>``), cgroupfs and systemd naming, containerd, CRI-O and Docker ids.
    Returns ``None`` for a process that is in no container (host processes,
    malformed text). A line naming a pod wins over one that does not; otherwise the
    first line that names a container. Never raises for any input text.
    """
    best: ContainerRef | None = None
    for n, line in enumerate(text.splitlines()):
        if n >= _MAX_LINES:
            break
        fields = line.split(":", 2)
        if len(fields) != 3 or not fields[2].startswith("/"):
            continue
        ref = _parse_path(fields[2])
        if ref is None:
            continue
        if ref.pod_uid is not None:
            return ref
        if best is None:
            best = ref
    return best


class CgroupResolver:
    """Resolves pids to containers by reading ``<procfs>/<pid>/cgroup``.

    A pid whose file is missing (the process ended), unreadable, too large or
    names no container is skipped with a debug log: a vanished process is normal
    between an NVML sample and this read.
    """

    def __init__(self, procfs: str = "/proc") -> None:
        self.procfs = procfs

    def read(self, pid: int) -> ContainerRef | None:
        """The container of one pid, or None (logged at debug) when it has none."""
        path = os.path.join(self.procfs, str(pid), "cgroup")
        try:
            with open(path, "rb") as handle:
                raw = handle.read(MAX_CGROUP_FILE_BYTES + 1)
        except OSError as err:
            log.debug("skipping pid %d: cannot read %s: %s", pid, path, err)
            return None
        if len(raw) > MAX_CGROUP_FILE_BYTES:
            log.debug(
                "skipping pid %d: %s is larger than %d bytes", pid, path, MAX_CGROUP_FILE_BYTES
            )
            return None
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            log.debug("skipping pid %d: %s is not UTF-8 text", pid, path)
            return None
        ref = parse_cgroup(text)
        if ref is None:
            log.debug("skipping pid %d: %s names no container", pid, path)
        return ref

    def resolve(self, pids: Iterable[int]) -> Mapping[int, ContainerRef]:
        """pid → container for every pid that is in a container; others are left out."""
        found: dict[int, ContainerRef] = {}
        for pid in pids:
            if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
                log.debug("skipping invalid pid %r", pid)
                continue
            if pid in found:
                continue
            ref = self.read(pid)
            if ref is not None:
                found[pid] = ref
        return found


def build(ctx: BuildContext) -> Any:
    """``/proc/<pid>/cgroup`` under ``--path.procfs``, or the simulated processes."""
    if ctx.simulated is not None:
        return ctx.simulated.processes
    return CgroupResolver(procfs=ctx.cfg.procfs)


register(
    Collector(
        "cgroup",
        "process → container from /proc/<pid>/cgroup",
        kind="processes",
        build=build,
        order=40,
    )
)
